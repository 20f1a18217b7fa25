// Hardening of the C ABI (issue #49): codec entry points refuse counts and pointers that would
// make them read or write outside the caller's buffers, request shapes whose element or byte
// count overflows int64 are refused, and the timeline does not follow a symbolic link.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "api/validate.h"
#include "check.h"
#include "engine/timeline.h"
#include "relax/relax.h"
#include "util/types.h"

namespace {

constexpr int64_t kHuge = INT64_MAX;

std::vector<int32_t> codec_ids() {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < relax_codec_count(); ++i) {
    relax_codec_info_t info{};
    if (relax_codec_info(i, &info) == RELAX_OK) ids.push_back(info.id);
  }
  return ids;
}

bool last_error_mentions(const std::string& text) {
  const char* e = relax_last_error();
  return e && std::string(e).find(text) != std::string::npos;
}

// A request of `type` over `shape` with every other field valid, checked as submitting would.
relax::Status check_shape(int32_t type, int32_t dtype, const std::vector<int64_t>& shape) {
  static float data[4];
  relax_request_t r{};
  r.type = type;
  r.name = "huge";
  r.dtype = dtype;
  r.ndim = static_cast<int32_t>(shape.size());
  r.shape = shape.data();
  r.input = data;
  r.output = data;
  r.args.allreduce.reduce_op = RELAX_OP_SUM;
  r.args.allreduce.prescale = 1.0;
  r.args.allreduce.postscale = 1.0;
  const std::vector<int> world = {0};
  relax::SubmitContext ctx{0, world, 0, 0, 1, /*has_alloc=*/true};
  relax::LocalRequest local;
  return relax::make_request(r, ctx, local);
}

}  // namespace

TEST(codec_encode_and_decode_refuse_negative_counts_without_writing) {
  for (int32_t id : codec_ids()) {
    // The output lies in the middle of a guarded buffer: nothing around it may change.
    std::vector<uint8_t> guarded(8192, 0xAB);
    std::vector<float> in(16, 1.0f);
    CHECK(relax_codec_encode(id, in.data(), 64, -8001, guarded.data() + 4096, 4096) != RELAX_OK);
    CHECK(last_error_mentions("element count -8001"));
    std::vector<float> floats(2048, 7.0f);
    CHECK(relax_codec_decode(id, guarded.data() + 4096, 4096, -8001, floats.data() + 1024, 4096) != RELAX_OK);
    bool untouched = true;
    for (uint8_t b : guarded) untouched = untouched && b == 0xAB;
    for (float f : floats) untouched = untouched && f == 7.0f;
    CHECK(untouched);
  }
}

TEST(codec_sizes_that_overflow_int64_are_refused) {
  for (int32_t id : codec_ids()) {
    CHECK_EQ(relax_codec_encoded_bytes(id, -1), int64_t{-1});
    CHECK_EQ(relax_codec_encoded_bytes(id, kHuge), int64_t{-1});
    CHECK_EQ(relax_codec_encoded_bytes(id, kHuge / 4 + 1), int64_t{-1});  // n * 4 bytes of float32 overflows
    CHECK(relax_codec_encoded_bytes(id, 1000) > 0);
    float in[1] = {0};
    uint8_t out[1] = {0};
    // Refused before any access: the buffers are far too small for what the count claims, even
    // when the capacities claim as much.
    CHECK(relax_codec_encode(id, in, kHuge, kHuge, out, kHuge) != RELAX_OK);
    CHECK(relax_codec_decode(id, out, kHuge, kHuge / 2, in, kHuge) != RELAX_OK);
  }
  CHECK_EQ(relax_codec_encoded_bytes(9999, 10), int64_t{-1});
  CHECK(relax_codec_encode(9999, nullptr, 0, 0, nullptr, 0) != RELAX_OK);
  CHECK(last_error_mentions("unknown codec 9999"));
}

TEST(codec_calls_refuse_null_buffers_they_would_touch) {
  for (int32_t id : codec_ids()) {
    std::vector<float> values(64, 0.5f);
    const int64_t floats = 64 * 4;
    const int64_t bytes = relax_codec_encoded_bytes(id, 64);
    std::vector<uint8_t> chunk(static_cast<size_t>(bytes));
    CHECK(relax_codec_encode(id, nullptr, floats, 64, chunk.data(), bytes) != RELAX_OK);
    CHECK(last_error_mentions("NULL input"));
    CHECK(relax_codec_encode(id, values.data(), floats, 64, nullptr, bytes) != RELAX_OK);
    CHECK(last_error_mentions("NULL output"));
    CHECK(relax_codec_decode(id, nullptr, bytes, 64, values.data(), floats) != RELAX_OK);
    CHECK(relax_codec_decode(id, chunk.data(), bytes, 64, nullptr, floats) != RELAX_OK);
    // Valid calls still work, and an empty chunk needs no values.
    CHECK_EQ(relax_codec_encode(id, values.data(), floats, 64, chunk.data(), bytes), RELAX_OK);
    CHECK_EQ(relax_codec_decode(id, chunk.data(), bytes, 64, values.data(), floats), RELAX_OK);
    std::vector<uint8_t> empty(static_cast<size_t>(relax_codec_encoded_bytes(id, 0)) + 1);
    CHECK_EQ(relax_codec_encode(id, nullptr, 0, 0, empty.data(), static_cast<int64_t>(empty.size())), RELAX_OK);
  }
}

TEST(tensor_sizes_are_checked_for_overflow_in_one_place) {
  int64_t elements = -1, bytes = -1;
  std::string why;
  CHECK(relax::checked_tensor_size({3, 4}, 4, elements, bytes, why));
  CHECK_EQ(elements, int64_t{12});
  CHECK_EQ(bytes, int64_t{48});
  CHECK(relax::checked_tensor_size({}, 8, elements, bytes, why));
  CHECK_EQ(elements, int64_t{1});
  CHECK(relax::checked_tensor_size({0, 5}, 4, elements, bytes, why));
  CHECK_EQ(bytes, int64_t{0});
  CHECK(!relax::checked_tensor_size({3, int64_t{1} << 62}, 4, elements, bytes, why));
  CHECK(why.find("[3, 4611686018427387904]") != std::string::npos);
  CHECK(!relax::checked_tensor_size({int64_t{1} << 32, int64_t{1} << 32}, 1, elements, bytes, why));
  CHECK(!relax::checked_tensor_size({int64_t{1} << 62}, 4, elements, bytes, why));  // elements fit, bytes do not
  CHECK(why.find("bytes") != std::string::npos);
  CHECK(!relax::checked_tensor_size({0, int64_t{1} << 62, int64_t{1} << 62}, 4, elements, bytes, why));
  CHECK(!relax::checked_tensor_size({2, -1}, 4, elements, bytes, why));
  CHECK(why.find("negative dimension") != std::string::npos);
}

TEST(requests_with_shapes_that_overflow_int64_are_refused) {
  const int64_t big = int64_t{1} << 62;
  const int64_t four_g = int64_t{1} << 32;
  for (int32_t type : {RELAX_REQ_ALLREDUCE, RELAX_REQ_ALLGATHER, RELAX_REQ_BROADCAST}) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{3, big}, std::vector<int64_t>{four_g, four_g}, std::vector<int64_t>{big, 4},
          std::vector<int64_t>{0, big, big}}) {
      relax::Status s = check_shape(type, RELAX_FLOAT32, shape);
      CHECK_EQ(s.code, RELAX_ERR_INVALID_ARGUMENT);
      CHECK(s.message.find("int64") != std::string::npos);
      CHECK(s.message.find("'huge'") != std::string::npos);
    }
  }
  CHECK(check_shape(RELAX_REQ_ALLREDUCE, RELAX_FLOAT32, {2, 2}).is_ok());
  CHECK(check_shape(RELAX_REQ_ALLREDUCE, RELAX_UINT8, {big}).is_ok());  // 2^62 bytes fit
  CHECK(!check_shape(RELAX_REQ_ALLREDUCE, RELAX_FLOAT64, {big}).is_ok());
}

TEST(the_timeline_does_not_follow_a_symbolic_link) {
  char dir_template[] = "/tmp/relax-timeline-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  CHECK(dir != nullptr);
  if (!dir) return;
  const std::string target = std::string(dir) + "/precious";
  const std::string link = std::string(dir) + "/timeline.json";
  { std::ofstream(target) << "keep me"; }
  CHECK_EQ(symlink(target.c_str(), link.c_str()), 0);
  relax::Timeline timeline;
  relax::Status s = timeline.start(link, false, 0);
  CHECK_EQ(s.code, RELAX_ERR_INVALID_ARGUMENT);
  CHECK(s.message.find("symbolic link") != std::string::npos);
  CHECK(!timeline.active());
  std::string kept;
  std::getline(std::ifstream(target), kept);
  CHECK_EQ(kept, std::string("keep me"));
  // A fresh regular file is created private to its owner, and writing it works.
  const std::string fresh = std::string(dir) + "/fresh.json";
  CHECK(timeline.start(fresh, false, 0).is_ok());
  timeline.stop();
  struct stat st {};
  CHECK_EQ(stat(fresh.c_str(), &st), 0);
  CHECK_EQ(static_cast<int>(st.st_mode & 0777), 0600);
  // Not a regular file: refused rather than blocking on a FIFO with no reader.
  const std::string fifo = std::string(dir) + "/fifo";
  CHECK_EQ(mkfifo(fifo.c_str(), 0600), 0);
  CHECK(!timeline.start(fifo, false, 0).is_ok());
  for (const std::string& p : {link, target, fresh, fifo}) unlink(p.c_str());
  rmdir(dir);
}

// Split counts that are each valid (non-negative) but wrap int64 when summed must not pass for the
// tensor's true total: {MAX, MAX, 3} wraps to 1 = the element count of a [1] tensor.
TEST(split_counts_whose_sum_overflows_int64_are_refused) {
  static float data[4];
  const int64_t shape[1] = {1};
  const int64_t wrapping[3] = {kHuge, kHuge, 3};
  const std::vector<int> world = {0, 1, 2};
  for (int32_t type : {static_cast<int32_t>(RELAX_REQ_REDUCESCATTER), static_cast<int32_t>(RELAX_REQ_ALLTOALL)}) {
    relax_request_t r{};
    r.type = type;
    r.name = "wrapping_counts";
    r.dtype = RELAX_FLOAT32;
    r.ndim = 1;
    r.shape = shape;
    r.input = data;
    r.output = data;
    if (type == RELAX_REQ_REDUCESCATTER) {
      r.args.reducescatter.reduce.reduce_op = RELAX_OP_SUM;
      r.args.reducescatter.reduce.prescale = 1.0;
      r.args.reducescatter.reduce.postscale = 1.0;
      r.args.reducescatter.ncounts = 3;
      r.args.reducescatter.recv_counts = wrapping;
    } else {
      r.args.alltoall.nsplits = 3;
      r.args.alltoall.splits = wrapping;
    }
    relax::SubmitContext ctx{0, world, 0, 0, 3, /*has_alloc=*/true};
    relax::LocalRequest local;
    const relax::Status s = relax::make_request(r, ctx, local);
    CHECK(!s.is_ok());
    CHECK(s.message.find("overflow") != std::string::npos);
  }
}

namespace {

// A compressed all-reduce of 16 floats on set rank 1 of 4 (a chunk of 4 floats), with the given
// residuals, checked as submitting would.
relax::Status check_residuals(float* worker, int64_t worker_bytes, float* owner, int64_t owner_bytes) {
  static float data[16];
  const int64_t shape[1] = {16};
  relax_request_t r{};
  r.type = RELAX_REQ_COMPRESSED_ALLREDUCE;
  r.name = "residuals";
  r.dtype = RELAX_FLOAT32;
  r.ndim = 1;
  r.shape = shape;
  r.input = data;
  r.output = data;
  r.input_bytes = r.output_bytes = sizeof data;
  relax_compressed_allreduce_args_t& args = r.args.compressed_allreduce;
  args.reduce_op = RELAX_OP_SUM;
  args.codec = relax_codec_count() > 0 ? codec_ids().front() : 0;
  args.prescale = 1.0;
  args.worker_error = worker;
  args.worker_error_bytes = worker_bytes;
  args.owner_error = owner;
  args.owner_error_bytes = owner_bytes;
  const std::vector<int> world = {0, 1, 2, 3};
  relax::SubmitContext ctx{0, world, 1, 1, 4, /*has_alloc=*/false};
  relax::LocalRequest local;
  return relax::make_request(r, ctx, local);
}

}  // namespace

// The reviewer's heap overflow: an owner residual without a worker residual skipped the owner's
// capacity check, yet the collective writes this rank's whole chunk into it. An owner residual
// alone means nothing (error feedback is on with the worker's), so it is refused; and whenever
// one is given its capacity is checked.
TEST(an_owner_residual_is_checked_whether_or_not_a_worker_residual_is_given) {
  float worker[16] = {};
  float owner[4] = {};
  float tiny[1] = {};
  relax::Status s = check_residuals(nullptr, 0, tiny, 0);
  CHECK_EQ(s.code, RELAX_ERR_INVALID_ARGUMENT);
  CHECK(s.message.find("'residuals'") != std::string::npos);
  CHECK(s.message.find("owner_error") != std::string::npos);
  s = check_residuals(nullptr, 0, owner, sizeof owner);  // big enough, still meaningless
  CHECK_EQ(s.code, RELAX_ERR_INVALID_ARGUMENT);
  CHECK(s.message.find("worker_error") != std::string::npos);
  s = check_residuals(worker, sizeof worker, tiny, sizeof tiny);
  CHECK_EQ(s.code, RELAX_ERR_INVALID_ARGUMENT);
  CHECK(s.message.find("holds 4 bytes but the operation needs 16 bytes") != std::string::npos);
  CHECK(check_residuals(worker, sizeof worker, owner, sizeof owner).is_ok());
  CHECK(check_residuals(nullptr, 0, nullptr, 0).is_ok());  // no error feedback
}

// The codec C ABI takes each buffer's capacity (ABI 15): a buffer one byte short of what the call
// reads or writes, or an unset (0) capacity, is refused by the buffer rule, with its message,
// and nothing around the buffers changes. Before, only the count and NULL were checked.
TEST(codec_calls_refuse_buffers_shorter_than_the_chunk_or_the_values) {
  for (int32_t id : codec_ids()) {
    const int64_t n = 100, floats = n * 4, bytes = relax_codec_encoded_bytes(id, n);
    std::vector<float> values(static_cast<size_t>(n), 0.25f);
    std::vector<uint8_t> chunk(static_cast<size_t>(bytes) + 64, 0xAB);
    std::vector<float> decoded(static_cast<size_t>(n) + 16, 7.0f);
    CHECK(relax_codec_encode(id, values.data(), floats, n, chunk.data(), bytes - 1) != RELAX_OK);
    CHECK(last_error_mentions("relax_codec_encode: the output (out) holds " + std::to_string(bytes - 1) +
                              " bytes but the operation needs " + std::to_string(bytes) + " bytes"));
    CHECK(relax_codec_encode(id, values.data(), floats - 4, n, chunk.data(), bytes) != RELAX_OK);
    CHECK(last_error_mentions("the input (in) holds " + std::to_string(floats - 4) + " bytes"));
    CHECK(relax_codec_encode(id, values.data(), 0, n, chunk.data(), bytes) != RELAX_OK);  // unset: refused
    bool untouched = true;
    for (uint8_t b : chunk) untouched = untouched && b == 0xAB;
    CHECK(untouched);
    CHECK_EQ(relax_codec_encode(id, values.data(), floats, n, chunk.data(), bytes), RELAX_OK);
    CHECK(relax_codec_decode(id, chunk.data(), bytes - 1, n, decoded.data(), floats) != RELAX_OK);
    CHECK(last_error_mentions("relax_codec_decode: the input (in) holds " + std::to_string(bytes - 1) + " bytes"));
    CHECK(relax_codec_decode(id, chunk.data(), bytes, n, decoded.data(), floats - 1) != RELAX_OK);
    CHECK(last_error_mentions("the output (out) holds " + std::to_string(floats - 1) + " bytes"));
    CHECK(last_error_mentions("a buffer must hold what the operation reads or writes in it"));
    for (float f : decoded) untouched = untouched && f == 7.0f;
    CHECK(untouched);
    CHECK_EQ(relax_codec_decode(id, chunk.data(), bytes, n, decoded.data(), floats), RELAX_OK);
  }
}

// The step scale's host passes take each buffer's capacity too (ABI 15): two parameters, 2 x 3
// (statistics: 2 rows + 3 columns + 1 whole) and a vector of 4 (1), so 10 elements and 7 statistics.
TEST(step_scale_calls_refuse_buffers_shorter_than_the_bucket_or_its_statistics) {
  const int64_t shapes[4] = {2, 3, 1, 4};
  const int64_t elements = 10 * 4, statistics = 7 * 4;
  std::vector<float> step(10, 1.0f), out(10, 0.0f), stats(7, 1.0f), previous(7, 1.0f), smoothed(7, 1.0f);
  std::vector<float> worker(10, 0.5f), owner(4, 0.5f);
  CHECK_EQ(relax_scale_statistics(step.data(), elements, shapes, 2, stats.data(), statistics), RELAX_OK);
  CHECK(relax_scale_statistics(step.data(), elements - 4, shapes, 2, stats.data(), statistics) != RELAX_OK);
  CHECK(last_error_mentions("relax_scale_statistics: the step (step) holds 36 bytes but the operation needs 40"));
  CHECK(relax_scale_statistics(step.data(), elements, shapes, 2, stats.data(), 0) != RELAX_OK);
  CHECK(last_error_mentions("the statistics (out) holds 0 bytes but the operation needs 28"));
  CHECK(relax_scale_statistics(nullptr, elements, shapes, 2, stats.data(), statistics) != RELAX_OK);
  CHECK(last_error_mentions("NULL step"));
  const auto apply = [&](int64_t previous_bytes, int64_t out_bytes, int64_t worker_bytes, int64_t owner_bytes,
                         int64_t owner_offset, int64_t owner_count) {
    return relax_scale_apply(previous.data(), previous_bytes, smoothed.data(), statistics, shapes, 2, 0.1f,
                             step.data(), elements, out.data(), out_bytes, worker.data(), worker_bytes, owner.data(),
                             owner_bytes, owner_offset, owner_count);
  };
  CHECK_EQ(apply(statistics, elements, elements, 16, 3, 4), RELAX_OK);
  CHECK(apply(statistics - 1, elements, elements, 16, 3, 4) != RELAX_OK);
  CHECK(last_error_mentions("the previous statistics (previous) holds 27 bytes"));
  CHECK(apply(statistics, 8, elements, 16, 3, 4) != RELAX_OK);
  CHECK(last_error_mentions("the output (out) holds 8 bytes"));
  CHECK(apply(statistics, elements, 0, 16, 3, 4) != RELAX_OK);
  CHECK(last_error_mentions("the worker residual (worker) holds 0 bytes"));
  CHECK(apply(statistics, elements, elements, 4, 3, 4) != RELAX_OK);
  CHECK(last_error_mentions("the owner residual (owner) holds 4 bytes but the operation needs 16"));
  CHECK(apply(statistics, elements, elements, 16, 8, 4) != RELAX_OK);  // past the bucket's end
  CHECK(last_error_mentions("not within the bucket's 10 elements"));
  CHECK(apply(statistics, elements, elements, 16, 0, kHuge) != RELAX_OK);
  CHECK_EQ(relax_scale_multiply(smoothed.data(), statistics, shapes, 2, 0.1f, out.data(), elements), RELAX_OK);
  CHECK(relax_scale_multiply(smoothed.data(), statistics, shapes, 2, 0.1f, out.data(), elements - 1) != RELAX_OK);
  CHECK(last_error_mentions("relax_scale_multiply: the data (data) holds 39 bytes"));
}
