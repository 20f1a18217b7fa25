// A multi-rank smoke test of the core through its C ABI only (relax.h), built with AddressSanitizer
// and UndefinedBehaviorSanitizer by `make test-asan` and run on 3 ranks (run_abi_smoke.sh), with
// shared memory on and off. It submits every request kind the ABI offers and checks each result
// against values computed here, so the sanitizers watch every collective, codec and relaxation
// path without a Python interpreter (preloading ASan into Python with torch/TF is fragile).
// Exit status 0 when everything matched; otherwise every mismatch is printed with this rank.
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "relax/relax.h"

namespace {

int g_rank = 0, g_size = 1, g_failures = 0;

void fail(const std::string& what) {
  std::fprintf(stderr, "abi_smoke rank %d: FAILED %s\n", g_rank, what.c_str());
  ++g_failures;
}

// A call that must succeed; prints the core's message otherwise.
bool ok(int status, const std::string& what) {
  if (status == RELAX_OK) return true;
  fail(what + ": status " + std::to_string(status) + " (" + relax_last_error() + ")");
  return false;
}

// Element-wise comparison with a tolerance relative to the largest expected magnitude.
template <typename T>
void expect_near(const std::string& what, const T* got, const std::vector<double>& want, double tolerance) {
  double scale = 1.0;
  for (double w : want) scale = std::fmax(scale, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    if (!(std::fabs(g - want[i]) <= tolerance * scale)) {
      fail(what + ": element " + std::to_string(i) + " is " + std::to_string(g) + ", expected " +
           std::to_string(want[i]));
      return;
    }
  }
}

int64_t dtype_bytes(int32_t dtype) {
  switch (dtype) {
    case RELAX_FLOAT64: case RELAX_INT64: return 8;
    case RELAX_FLOAT32: case RELAX_INT32: return 4;
    case RELAX_FLOAT16: case RELAX_BFLOAT16: case RELAX_INT16: case RELAX_UINT16: return 2;
    default: return 1;
  }
}

// Capacities of the state buffers (ABI 14 on: every buffer travels with its size in bytes).
#if RELAX_ABI_VERSION >= 14
#define RELAX_SMOKE_CAPACITY(statement) statement
#else
#define RELAX_SMOKE_CAPACITY(statement)
#endif

// A request whose input and output hold the tensor's elements (output_bytes >= 0: that many bytes).
relax_request_t request(int32_t type, const char* name, int32_t dtype, const std::vector<int64_t>& shape,
                        const void* input, void* output, int64_t output_bytes = -1) {
  relax_request_t r;
  std::memset(&r, 0, sizeof r);
  r.type = type;
  r.name = name;
  r.dtype = dtype;
  // Callers pass shapes as temporaries; the request outlives them, so each is kept to the end.
  static std::deque<std::vector<int64_t>> shapes;
  shapes.push_back(shape);
  r.ndim = static_cast<int32_t>(shape.size());
  r.shape = shapes.back().data();
  r.input = input;
  r.output = output;
  int64_t bytes = dtype_bytes(dtype);
  for (int64_t d : shape) bytes *= d;
  RELAX_SMOKE_CAPACITY(r.input_bytes = input ? bytes : 0);
  RELAX_SMOKE_CAPACITY(r.output_bytes = !output ? 0 : output_bytes >= 0 ? output_bytes : bytes);
  (void)output_bytes;
  return r;
}

// Runs one request to completion and releases its handle.
int run(const relax_request_t& r, relax_alloc_fn alloc = nullptr, void* user = nullptr, int64_t* result = nullptr) {
  relax_handle_t handle = 0;
  const int status = relax_run(&r, alloc, user, &handle);
  if (handle > 0) {
    if (result) *result = relax_handle_result(handle);
    relax_release(handle);
  }
  return status;
}

// Enqueues (the engine thread negotiates), then waits: the other submission path.
int enqueue_and_wait(const relax_request_t& r, relax_alloc_fn alloc = nullptr, void* user = nullptr) {
  const relax_handle_t handle = relax_enqueue(&r, alloc, nullptr, user);
  if (handle <= 0) return relax_last_error_code();
  const int status = relax_wait(handle);
  relax_release(handle);
  return status;
}

// Output of unknown shape (allgather, alltoall): the engine asks for it once.
void* alloc_floats(void* user, int32_t ndim, const int64_t* shape) {
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; ++i) n *= shape[i];
  auto* out = static_cast<std::vector<float>*>(user);
  out->assign(static_cast<size_t>(n), -1.0f);
  return out->data();
}

// Whole numbers, so integer tensors hold them exactly too.
double value(int rank, size_t i) { return static_cast<double>(2 * (rank + 1)) + static_cast<double>(i % 13); }

template <typename T>
std::vector<T> rank_tensor(int rank, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(value(rank, i));
  return v;
}

// Sum over ranks of value(rank, i), as the reduction must produce it.
std::vector<double> summed(size_t n, double scale = 1.0) {
  std::vector<double> want(n, 0.0);
  for (int r = 0; r < g_size; ++r) {
    for (size_t i = 0; i < n; ++i) want[i] += value(r, i) * scale;
  }
  return want;
}

template <typename T>
void allreduce_of(int32_t dtype, const char* name, size_t n, int32_t op, double tolerance) {
  std::vector<T> in = rank_tensor<T>(g_rank, n), out(n);
  relax_request_t r = request(RELAX_REQ_ALLREDUCE, name, dtype, {static_cast<int64_t>(n)}, in.data(), out.data());
  r.args.allreduce = {op, 1.0, 1.0};
  if (!ok(run(r), name)) return;
  expect_near(name, out.data(), summed(n, op == RELAX_OP_AVERAGE ? 1.0 / g_size : 1.0), tolerance);
}

void test_allreduce() {
  allreduce_of<float>(RELAX_FLOAT32, "ar.f32.sum", 100, RELAX_OP_SUM, 1e-6);
  allreduce_of<float>(RELAX_FLOAT32, "ar.f32.avg", 7, RELAX_OP_AVERAGE, 1e-6);
  allreduce_of<double>(RELAX_FLOAT64, "ar.f64.sum", 33, RELAX_OP_SUM, 1e-12);
  allreduce_of<int32_t>(RELAX_INT32, "ar.i32.sum", 1000, RELAX_OP_SUM, 0.0);
  allreduce_of<int64_t>(RELAX_INT64, "ar.i64.sum", 5, RELAX_OP_SUM, 0.0);
  allreduce_of<uint8_t>(RELAX_UINT8, "ar.u8.sum", 9, RELAX_OP_SUM, 0.0);
  // Large enough for the ring in segments (run_abi_smoke.sh caps MPI's allreduce and the segments).
  allreduce_of<float>(RELAX_FLOAT32, "ar.f32.large", 300001, RELAX_OP_SUM, 1e-6);
  allreduce_of<float>(RELAX_FLOAT32, "ar.f32.large.avg", 65537, RELAX_OP_AVERAGE, 1e-6);

  // Min, prescale and postscale, in place.
  std::vector<float> x = rank_tensor<float>(g_rank, 10);
  relax_request_t r = request(RELAX_REQ_ALLREDUCE, "ar.min.scaled", RELAX_FLOAT32, {2, 5}, x.data(), x.data());
  r.args.allreduce = {RELAX_OP_MIN, 2.0, 0.5};
  std::vector<double> want(10);
  for (size_t i = 0; i < 10; ++i) want[i] = value(0, i);  // rank 0 holds the smallest values
  if (ok(run(r), "ar.min.scaled")) expect_near("ar.min.scaled", x.data(), want, 1e-6);

  // Small tensors enqueued together are fused into one collective.
  constexpr int kFused = 6;
  std::vector<std::vector<float>> ins, outs;
  std::vector<std::string> names;
  std::vector<relax_handle_t> handles;
  for (int t = 0; t < kFused; ++t) {
    ins.push_back(rank_tensor<float>(g_rank + t, 3 + static_cast<size_t>(t)));
    outs.emplace_back(ins.back().size());
    names.push_back("ar.fused." + std::to_string(t));
  }
  for (int t = 0; t < kFused; ++t) {
    const std::vector<int64_t> shape{static_cast<int64_t>(ins[static_cast<size_t>(t)].size())};
    relax_request_t f = request(RELAX_REQ_ALLREDUCE, names[static_cast<size_t>(t)].c_str(), RELAX_FLOAT32, shape,
                                ins[static_cast<size_t>(t)].data(), outs[static_cast<size_t>(t)].data());
    f.args.allreduce = {RELAX_OP_SUM, 1.0, 1.0};
    const relax_handle_t h = relax_enqueue(&f, nullptr, nullptr, nullptr);
    if (h <= 0) fail("ar.fused enqueue: " + std::string(relax_last_error()));
    handles.push_back(h);
  }
  for (int t = 0; t < kFused; ++t) {
    if (handles[static_cast<size_t>(t)] <= 0) continue;
    ok(relax_wait(handles[static_cast<size_t>(t)]), names[static_cast<size_t>(t)]);
    relax_release(handles[static_cast<size_t>(t)]);
    std::vector<double> w(outs[static_cast<size_t>(t)].size(), 0.0);
    for (int rr = 0; rr < g_size; ++rr) {
      for (size_t i = 0; i < w.size(); ++i) w[i] += value(rr + t, i);
    }
    expect_near(names[static_cast<size_t>(t)], outs[static_cast<size_t>(t)].data(), w, 1e-6);
  }
}

void test_grouped_allreduce() {
  std::vector<float> a = rank_tensor<float>(g_rank, 4), b = rank_tensor<float>(g_rank, 1000);
  std::vector<double> c = rank_tensor<double>(g_rank, 3);
  std::vector<float> a_out(4), b_out(1000);
  std::vector<double> c_out(3);
  const std::vector<int64_t> sa{4}, sb{10, 100}, sc{3};
  relax_request_t rs[3] = {request(RELAX_REQ_ALLREDUCE, "grp.a", RELAX_FLOAT32, sa, a.data(), a_out.data()),
                           request(RELAX_REQ_ALLREDUCE, "grp.b", RELAX_FLOAT32, sb, b.data(), b_out.data()),
                           request(RELAX_REQ_ALLREDUCE, "grp.c", RELAX_FLOAT64, sc, c.data(), c_out.data())};
  for (relax_request_t& r : rs) r.args.allreduce = {RELAX_OP_AVERAGE, 1.0, 1.0};
  relax_handle_t handles[3] = {0, 0, 0};
  if (!ok(relax_enqueue_group(rs, 3, nullptr, nullptr, nullptr, handles), "grouped allreduce")) return;
  for (relax_handle_t h : handles) {
    ok(relax_wait(h), "grouped allreduce member");
    relax_release(h);
  }
  expect_near("grp.a", a_out.data(), summed(4, 1.0 / g_size), 1e-6);
  expect_near("grp.b", b_out.data(), summed(1000, 1.0 / g_size), 1e-6);
  expect_near("grp.c", c_out.data(), summed(3, 1.0 / g_size), 1e-12);
}

void test_allgather() {
  // Rank r contributes r + 1 rows of 3: dim 0 differs per rank.
  const int64_t rows = g_rank + 1;
  std::vector<float> in(static_cast<size_t>(rows * 3));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(g_rank * 100 + static_cast<int>(i));
  std::vector<float> out;
  relax_request_t r = request(RELAX_REQ_ALLGATHER, "allgather", RELAX_FLOAT32, {rows, 3}, in.data(), nullptr);
  if (!ok(enqueue_and_wait(r, alloc_floats, &out), "allgather")) return;
  std::vector<double> want;
  for (int src = 0; src < g_size; ++src) {
    for (int i = 0; i < (src + 1) * 3; ++i) want.push_back(src * 100 + i);
  }
  if (out.size() != want.size()) return fail("allgather: " + std::to_string(out.size()) + " elements");
  expect_near("allgather", out.data(), want, 0.0);
}

void test_broadcast() {
  for (int root = 0; root < g_size; ++root) {
    std::vector<int64_t> x(257, g_rank == root ? 40 + root : -1);
    const std::string name = "broadcast." + std::to_string(root);
    relax_request_t r = request(RELAX_REQ_BROADCAST, name.c_str(), RELAX_INT64, {257}, x.data(), x.data());
    r.args.broadcast = {root};
    if (ok(run(r), name)) expect_near(name, x.data(), std::vector<double>(257, 40 + root), 0.0);
  }
}

void test_reducescatter() {
  // Even split of dim 0: 7 rows of 2 over 3 ranks gives 3, 2, 2 rows.
  std::vector<float> in = rank_tensor<float>(g_rank, 14), out(6, -1.0f);
  relax_request_t r = request(RELAX_REQ_REDUCESCATTER, "rs.even", RELAX_FLOAT32, {7, 2}, in.data(), nullptr);
  r.args.reducescatter.reduce = {RELAX_OP_SUM, 1.0, 1.0};
  if (ok(run(r, alloc_floats, &out), "rs.even")) {
    const int64_t rows[3] = {3, 2, 2}, first[3] = {0, 3, 5};
    const std::vector<double> all = summed(14);
    std::vector<double> want(all.begin() + first[g_rank] * 2, all.begin() + (first[g_rank] + rows[g_rank]) * 2);
    if (out.size() != want.size()) fail("rs.even: " + std::to_string(out.size()) + " elements");
    else expect_near("rs.even", out.data(), want, 1e-6);
  }
  // Tensors laid end to end with explicit element counts per rank, averaged.
  std::vector<float> p0 = rank_tensor<float>(g_rank, 5), p1(4), p2(11);
  for (size_t i = 0; i < 4; ++i) p1[i] = static_cast<float>(value(g_rank, i + 5));
  for (size_t i = 0; i < 11; ++i) p2[i] = static_cast<float>(value(g_rank, i + 9));
  const void* pieces[3] = {p0.data(), p1.data(), p2.data()};
  const int64_t counts[3] = {5, 4, 11}, recv_counts[3] = {6, 0, 14};
  std::vector<float> out2(static_cast<size_t>(recv_counts[g_rank]) + 1, -1.0f);
  relax_request_t q = request(RELAX_REQ_REDUCESCATTER, "rs.pieces", RELAX_FLOAT32, {20}, nullptr, out2.data(),
                              static_cast<int64_t>(out2.size() * sizeof(float)));
  q.args.reducescatter.reduce = {RELAX_OP_AVERAGE, 1.0, 1.0};
  q.args.reducescatter.ncounts = 3;
  q.args.reducescatter.recv_counts = recv_counts;
  q.args.reducescatter.inputs = {3, pieces, counts};
  if (ok(enqueue_and_wait(q), "rs.pieces")) {
    const std::vector<double> all = summed(20, 1.0 / g_size);
    const int64_t first = g_rank == 0 ? 0 : 6;
    std::vector<double> want(all.begin() + first, all.begin() + first + recv_counts[g_rank]);
    expect_near("rs.pieces", out2.data(), want, 1e-6);
    if (out2.back() != -1.0f) fail("rs.pieces wrote past its block");
  }
}

void test_alltoall() {
  // Rank r sends (d + r) % 3 rows of 2 to rank d, each row holding 1000 r + 10 d + row.
  std::vector<int64_t> splits(static_cast<size_t>(g_size));
  std::vector<float> in;
  for (int d = 0; d < g_size; ++d) {
    splits[static_cast<size_t>(d)] = (d + g_rank) % 3;
    for (int row = 0; row < splits[static_cast<size_t>(d)]; ++row) {
      for (int c = 0; c < 2; ++c) in.push_back(static_cast<float>(1000 * g_rank + 10 * d + row));
    }
  }
  std::vector<float> out;
  const int64_t rows = static_cast<int64_t>(in.size() / 2);
  relax_request_t r = request(RELAX_REQ_ALLTOALL, "alltoall", RELAX_FLOAT32, {rows, 2}, in.data(), nullptr);
  r.args.alltoall = {g_size, splits.data()};
  relax_handle_t handle = 0;
  if (!ok(relax_run(&r, alloc_floats, &out, &handle), "alltoall")) {
    if (handle > 0) relax_release(handle);
    return;
  }
  std::vector<int64_t> received(static_cast<size_t>(g_size));
  relax_handle_received_splits(handle, received.data(), g_size);
  relax_release(handle);
  std::vector<double> want;
  for (int src = 0; src < g_size; ++src) {
    const int64_t n = (g_rank + src) % 3;
    if (received[static_cast<size_t>(src)] != n) fail("alltoall: received splits differ");
    for (int row = 0; row < n; ++row) {
      for (int c = 0; c < 2; ++c) want.push_back(1000 * src + 10 * g_rank + row);
    }
  }
  if (out.size() != want.size()) return fail("alltoall: " + std::to_string(out.size()) + " elements");
  expect_near("alltoall", out.data(), want, 0.0);
}

// A compressed all-reduce with `codec`: every rank holds the same values of equal magnitude, so
// even sign's 1 bit per element is exact (tolerance: uint8's quantisation steps).
void compressed_allreduce(int32_t codec, const char* codec_name, bool feedback, int32_t process_set,
                          const std::vector<int>& members) {
  const size_t n = 10007;
  std::vector<float> in(n), out(n, 0.0f), worker(n, 0.0f), owner(n, 0.0f);
  for (size_t i = 0; i < n; ++i) in[i] = (i % 3 == 0) ? -0.75f : 0.75f;
  const std::string name = std::string("compressed.") + codec_name + (feedback ? ".ef" : "") + ".set" +
                           std::to_string(process_set);
  relax_request_t r = request(RELAX_REQ_COMPRESSED_ALLREDUCE, name.c_str(), RELAX_FLOAT32, {static_cast<int64_t>(n)},
                              in.data(), out.data());
  r.process_set = process_set;
  r.args.compressed_allreduce.reduce_op = RELAX_OP_SUM;
  r.args.compressed_allreduce.codec = codec;
  r.args.compressed_allreduce.prescale = 1.0;
  if (feedback) {
    r.args.compressed_allreduce.worker_error = worker.data();
    r.args.compressed_allreduce.owner_error = owner.data();
    RELAX_SMOKE_CAPACITY(r.args.compressed_allreduce.worker_error_bytes = static_cast<int64_t>(n * sizeof(float)));
    RELAX_SMOKE_CAPACITY(r.args.compressed_allreduce.owner_error_bytes = static_cast<int64_t>(n * sizeof(float)));
  }
  if (!ok(run(r), name)) return;
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = static_cast<double>(in[i]) * static_cast<double>(members.size());
  expect_near(name, out.data(), want, 0.02);
  for (size_t i = 0; i < n && feedback; ++i) {
    if (!std::isfinite(worker[i]) || !std::isfinite(owner[i])) return fail(name + ": error feedback not finite");
  }
  // Laid end to end, averaged: the same values in three pieces.
  const void* pieces[3] = {in.data(), in.data() + 100, in.data() + 5000};
  const int64_t counts[3] = {100, 4900, static_cast<int64_t>(n) - 5000};
  const std::string pieces_name = name + ".pieces";
  relax_request_t p = r;
  p.name = pieces_name.c_str();
  p.input = nullptr;
  p.args.compressed_allreduce.reduce_op = RELAX_OP_AVERAGE;
  p.args.compressed_allreduce.inputs = {3, pieces, counts};
  std::vector<float> in_copy = in;  // the input must stay as it was
  if (!ok(enqueue_and_wait(p), pieces_name)) return;
  std::vector<double> avg(in.begin(), in.end());
  expect_near(pieces_name, out.data(), avg, 0.02);
  if (in != in_copy) fail(pieces_name + " changed its input");
}

std::vector<relax_codec_info_t> codecs() {
  std::vector<relax_codec_info_t> out(static_cast<size_t>(relax_codec_count()));
  for (size_t i = 0; i < out.size(); ++i) ok(relax_codec_info(static_cast<int32_t>(i), &out[i]), "codec_info");
  return out;
}

void test_compressed_and_process_sets() {
  std::vector<int> world;
  for (int r = 0; r < g_size; ++r) world.push_back(r);
  for (const relax_codec_info_t& c : codecs()) {
    compressed_allreduce(c.id, c.name, false, 0, world);
    compressed_allreduce(c.id, c.name, true, 0, world);
  }
  // A process set of ranks 0 and 2 (collective over all ranks), used by its members, removed.
  const int32_t members[2] = {0, 2};
  relax_request_t add = request(RELAX_REQ_ADD_PROCESS_SET, "add_set", 0, {}, nullptr, nullptr);
  add.args.add_process_set = {2, members};
  int64_t set_id = -1;
  if (!ok(run(add, nullptr, nullptr, &set_id), "add_process_set") || set_id <= 0) {
    return fail("add_process_set gave id " + std::to_string(set_id));
  }
  if (relax_process_set_size(static_cast<int32_t>(set_id)) != 2) fail("process set size");
  if (g_rank != 1) {
    for (const relax_codec_info_t& c : codecs()) {
      compressed_allreduce(c.id, c.name, true, static_cast<int32_t>(set_id), {0, 2});
    }
  }
  relax_request_t remove = request(RELAX_REQ_REMOVE_PROCESS_SET, "remove_set", 0, {}, nullptr, nullptr);
  remove.args.remove_process_set = {static_cast<int32_t>(set_id)};
  ok(run(remove), "remove_process_set");
  relax_request_t barrier = request(RELAX_REQ_BARRIER, "barrier", 0, {}, nullptr, nullptr);
  ok(run(barrier), "barrier");
}

// The codec calls with each buffer's capacity in bytes after it (ABI 15 on), or without (before).
#if RELAX_ABI_VERSION >= 15
int codec_encode(int32_t codec, const float* in, int64_t in_bytes, int64_t n, uint8_t* out, int64_t out_bytes) {
  return relax_codec_encode(codec, in, in_bytes, n, out, out_bytes);
}
int codec_decode(int32_t codec, const uint8_t* in, int64_t in_bytes, int64_t n, float* out, int64_t out_bytes) {
  return relax_codec_decode(codec, in, in_bytes, n, out, out_bytes);
}
#else
int codec_encode(int32_t codec, const float* in, int64_t, int64_t n, uint8_t* out, int64_t) {
  return relax_codec_encode(codec, in, n, out);
}
int codec_decode(int32_t codec, const uint8_t* in, int64_t, int64_t n, float* out, int64_t) {
  return relax_codec_decode(codec, in, n, out);
}
#endif

void test_codec_functions() {
  for (const relax_codec_info_t& c : codecs()) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{1000}}) {
      std::vector<float> in(static_cast<size_t>(n)), out(static_cast<size_t>(n) + 1, 123.0f);
      for (int64_t i = 0; i < n; ++i) in[static_cast<size_t>(i)] = (i % 2 ? 2.0f : -2.0f);
      const int64_t bytes = relax_codec_encoded_bytes(c.id, n);
      if (bytes < 0) {
        fail(std::string("encoded_bytes of ") + c.name);
        continue;
      }
      std::vector<uint8_t> wire(static_cast<size_t>(bytes));
      ok(codec_encode(c.id, in.data(), n * 4, n, wire.data(), bytes), std::string("encode ") + c.name);
      ok(codec_decode(c.id, wire.data(), bytes, n, out.data(), n * 4), std::string("decode ") + c.name);
      std::vector<double> want(in.begin(), in.end());
      expect_near(std::string("codec round trip ") + c.name, out.data(), want, 0.02);
      if (out[static_cast<size_t>(n)] != 123.0f) fail(std::string("decode wrote past n: ") + c.name);
    }
  }
  if (relax_codec_encoded_bytes(-12345, 4) != -1) fail("unknown codec has a size");
  if (codec_encode(-12345, nullptr, 0, 0, nullptr, 0) == RELAX_OK) fail("unknown codec encodes");
}

// Both other ranks as neighbours, each and this rank weighted 1/3.
void set_neighbors(relax_neighbor_average_args_t& a, const int32_t* peers, const double* weights, int32_t codec,
                   double step) {
  a.npeers = 2;
  a.peers = peers;
  a.weights = weights;
  a.self_weight = 1.0 / 3;
  a.codec = codec;
  a.consensus_step = step;
}

void test_direct_lane() {
  // Neighbour averaging on the ring of 3: every rank's peers are the other two, weights 1/3.
  const size_t n = 4099;
  const int32_t peers[2] = {(g_rank + 1) % g_size, (g_rank + 2) % g_size};
  const double weights[2] = {1.0 / 3, 1.0 / 3};
  for (int step = 0; step < 3; ++step) {
    std::vector<float> x = rank_tensor<float>(g_rank, n), y(n);
    const std::string name = "neighbor." + std::to_string(step);
    relax_request_t r = request(RELAX_REQ_NEIGHBOR_AVERAGE, name.c_str(), RELAX_FLOAT32, {static_cast<int64_t>(n)},
                                x.data(), y.data());
    set_neighbors(r.args.neighbor_average, peers, weights, 0, 0.0);
    if (ok(enqueue_and_wait(r), name)) expect_near(name, y.data(), summed(n, 1.0 / g_size), 1e-5);
  }
  // CHOCO with every codec: estimates kept across steps; the result stays finite.
  for (const relax_codec_info_t& c : codecs()) {
    std::vector<float> self(n, 0.0f), others(2 * n, 0.0f);
    for (int step = 0; step < 2; ++step) {
      std::vector<float> x = rank_tensor<float>(g_rank, n), y(n);
      const std::string name = std::string("choco.") + c.name + "." + std::to_string(step);
      relax_request_t r = request(RELAX_REQ_NEIGHBOR_AVERAGE, name.c_str(), RELAX_FLOAT32,
                                  {static_cast<int64_t>(n)}, x.data(), y.data());
      set_neighbors(r.args.neighbor_average, peers, weights, c.id, c.consensus_step);
      r.args.neighbor_average.estimate_self = self.data();
      r.args.neighbor_average.estimate_peers = others.data();
      RELAX_SMOKE_CAPACITY(r.args.neighbor_average.estimate_self_bytes = static_cast<int64_t>(n * sizeof(float)));
      RELAX_SMOKE_CAPACITY(r.args.neighbor_average.estimate_peers_bytes = static_cast<int64_t>(2 * n * sizeof(float)));
      if (!ok(enqueue_and_wait(r), name)) continue;
      for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(y[i])) {
          fail(name + ": not finite");
          break;
        }
      }
    }
  }
  // Group averages: all ranks with unequal weights, then ranks 0 and 2 alone.
  {
    const int32_t members[3] = {0, 1, 2};
    const double w[3] = {0.5, 0.25, 0.25};
    std::vector<double> x = rank_tensor<double>(g_rank, n), y(n);
    relax_request_t r = request(RELAX_REQ_GROUP_AVERAGE, "group.all", RELAX_FLOAT64, {static_cast<int64_t>(n)},
                                x.data(), y.data());
    r.args.group_average = {3, members, w};
    std::vector<double> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = 0.5 * value(0, i) + 0.25 * value(1, i) + 0.25 * value(2, i);
    if (ok(enqueue_and_wait(r), "group.all")) expect_near("group.all", y.data(), want, 1e-12);
  }
  if (g_rank != 1) {
    const int32_t members[2] = {0, 2};
    const double w[2] = {0.5, 0.5};
    std::vector<float> x = rank_tensor<float>(g_rank, 33), y(33);
    relax_request_t r = request(RELAX_REQ_GROUP_AVERAGE, "group.pair", RELAX_FLOAT32, {33}, x.data(), y.data());
    r.args.group_average = {2, members, w};
    std::vector<double> want(33);
    for (size_t i = 0; i < 33; ++i) want[i] = 0.5 * (value(0, i) + value(2, i));
    if (ok(enqueue_and_wait(r), "group.pair")) expect_near("group.pair", y.data(), want, 1e-6);
  }
  // A rank's shutdown stops every rank's engine and direct lane: all finish their averages first.
  relax_request_t barrier = request(RELAX_REQ_BARRIER, "barrier.direct", 0, {}, nullptr, nullptr);
  ok(run(barrier), "barrier after the direct lane");
}

// Local rejections must come back as errors with a message, never a crash.
void test_rejections() {
  std::vector<float> x(4);
  relax_request_t bad = request(RELAX_REQ_ALLREDUCE, "bad.dtype", 99, {4}, x.data(), x.data());
  if (relax_enqueue(&bad, nullptr, nullptr, nullptr) != 0 || relax_last_error_code() != RELAX_ERR_INVALID_ARGUMENT) {
    fail("a bad dtype was accepted");
  }
  if (relax_enqueue(nullptr, nullptr, nullptr, nullptr) != 0) fail("a NULL request was accepted");
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  // The direct lane needs MPI_THREAD_MULTIPLE; relax_init finds MPI initialized and uses it.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (!ok(relax_init(), "relax_init")) return 1;
  g_rank = relax_rank();
  g_size = relax_size();
  if (g_size != 3) {
    std::fprintf(stderr, "abi_smoke expects 3 ranks, got %d\n", g_size);
    return 2;
  }
  test_codec_functions();
  test_rejections();
  test_allreduce();
  test_grouped_allreduce();
  test_allgather();
  test_broadcast();
  test_reducescatter();
  test_alltoall();
  test_compressed_and_process_sets();
  if (relax_mpi_threads_supported()) test_direct_lane();
  else fail("MPI_THREAD_MULTIPLE is not available: the direct lane was not tested");
  ok(relax_shutdown(), "relax_shutdown");
  MPI_Finalize();
  if (g_failures == 0) std::printf("abi_smoke rank %d: all checks passed\n", g_rank);
  return g_failures == 0 ? 0 : 1;
}
