#include "collectives/compressed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace relax {
namespace {

// Every encoded chunk travels behind a 4-byte word: -1 when fine, otherwise the rank whose input
// was not finite (the chunk's payload is then meaningless).
constexpr int64_t kMarker = 4;

int32_t read_marker(const uint8_t* chunk) {
  int32_t marker;
  std::memcpy(&marker, chunk, 4);
  return marker;
}

void write_marker(uint8_t* chunk, int32_t marker) { std::memcpy(chunk, &marker, 4); }

bool all_finite(const float* x, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= std::isfinite(x[i]);
  return ok;
}

// v = x + e, a copy of e in `saved`, and whether every v is finite, in one pass.
bool add_save_and_check(const float* x, const float* e, int64_t n, float* v, float* saved) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = x[i] + e[i];
    saved[i] = e[i];
    ok &= std::isfinite(v[i]);
  }
  return ok;
}

// The worker's error feedback is updated part by part, right after each part is encoded (its
// input is still in cache, and nothing is left to do over the whole tensor once the exchange
// ends). Unless the operation succeeds, the destructor puts the saved values back.
class WorkerResidualCommit {
 public:
  WorkerResidualCommit(float* error, const float* saved) : error_(error), saved_(saved) {}
  WorkerResidualCommit(const WorkerResidualCommit&) = delete;
  WorkerResidualCommit& operator=(const WorkerResidualCommit&) = delete;
  ~WorkerResidualCommit() {
    if (kept_) return;
    for (const auto& [at, n] : written_) std::memcpy(error_ + at, saved_ + at, static_cast<size_t>(n) * 4);
  }
  void wrote(int64_t at, int64_t n) { written_.emplace_back(at, n); }
  void keep() { kept_ = true; }

 private:
  float* error_;
  const float* saved_;
  std::vector<std::pair<int64_t, int64_t>> written_;
  bool kept_ = false;
};

// Carves `bytes` out of `scratch` at `offset` (growing it), returning the offset.
size_t reserve(std::vector<uint8_t>& scratch, size_t& offset, size_t bytes) {
  const size_t at = (offset + 63) / 64 * 64;
  offset = at + bytes;
  if (scratch.size() < offset) scratch.resize(offset);
  return at;
}

// Where each part of each chunk lives: its elements in the tensor and its bytes (marker
// included) within the chunk's encoding, which is the chunk's parts one after the other.
struct PartLayout {
  PartLayout(const Codec& codec, int64_t count, int size) : parts(compressed_parts(count, size)) {
    counts = even_counts(count, size);
    offsets = block_offsets(counts);
    chunk_bytes.assign(static_cast<size_t>(size), 0);
    for (int j = 0; j < size; ++j) {
      const std::vector<int64_t> split = even_counts(counts[static_cast<size_t>(j)], parts);
      int64_t element = offsets[static_cast<size_t>(j)];
      for (int64_t c : split) {
        elements.push_back(c);
        element_offset.push_back(element);
        bytes.push_back(kMarker + codec.encoded_bytes(c));
        byte_offset.push_back(chunk_bytes[static_cast<size_t>(j)]);
        element += c;
        chunk_bytes[static_cast<size_t>(j)] += bytes.back();
      }
    }
  }
  size_t at(int chunk, int part) const {
    return static_cast<size_t>(chunk) * static_cast<size_t>(parts) + static_cast<size_t>(part);
  }

  int parts;
  std::vector<int64_t> counts, offsets, chunk_bytes;                  // per chunk
  std::vector<int64_t> elements, element_offset, bytes, byte_offset;  // per at(chunk, part)
};

}  // namespace

int compressed_parts(int64_t count, int size) {
  const int64_t largest = (count + size - 1) / size;
  return static_cast<int>(std::max<int64_t>(1, (largest + kCompressedPartElements - 1) / kCompressedPartElements));
}

Status compressed_allreduce(Collectives& collectives, const Codec& codec, const CompressedAllreduce& op,
                            const std::vector<int>& world_ranks, std::vector<uint8_t>& scratch) {
  const int n = collectives.size();
  const int me = collectives.rank();
  const PartLayout layout(codec, op.count, n);
  const int parts = layout.parts;
  const int64_t mine = layout.counts[static_cast<size_t>(me)];
  const int64_t my_bytes = layout.chunk_bytes[static_cast<size_t>(me)];
  const int64_t my_offset = layout.offsets[static_cast<size_t>(me)];
  const std::vector<int64_t> chunk_offsets = block_offsets(layout.chunk_bytes);  // in send and in gathered
  const int64_t encoded_total = chunk_offsets.back() + layout.chunk_bytes.back();

  // Layout of the scratch buffer: saved worker error | v (one part) | encoded chunks to send |
  // received chunks | s | gathered.
  int64_t largest_part = 0;
  for (int64_t c : layout.elements) largest_part = std::max(largest_part, c);
  size_t used = 0;
  const size_t saved_at = reserve(scratch, used, op.worker_error ? static_cast<size_t>(op.count) * 4 : 0);
  const size_t v_at = reserve(scratch, used, op.worker_error ? static_cast<size_t>(largest_part) * 4 : 0);
  const size_t send_at = reserve(scratch, used, static_cast<size_t>(encoded_total));
  const size_t recv_at = reserve(scratch, used, static_cast<size_t>(my_bytes * n));
  const size_t s_at = reserve(scratch, used, static_cast<size_t>(mine) * 4 + static_cast<size_t>(my_bytes));
  const size_t gathered_at = reserve(scratch, used, static_cast<size_t>(encoded_total));
  float* saved = reinterpret_cast<float*>(scratch.data() + saved_at);
  float* v = reinterpret_cast<float*>(scratch.data() + v_at);
  uint8_t* send = scratch.data() + send_at;
  uint8_t* received = scratch.data() + recv_at;
  float* s = reinterpret_cast<float*>(scratch.data() + s_at);
  uint8_t* own_encoded = scratch.data() + s_at + static_cast<size_t>(mine) * 4;
  uint8_t* gathered = scratch.data() + gathered_at;
  auto sent_chunk = [&](int r) { return send + chunk_offsets[static_cast<size_t>(r)]; };
  auto received_chunk = [&](int r) { return received + static_cast<int64_t>(r) * my_bytes; };
  auto gathered_chunk = [&](int r) { return gathered + chunk_offsets[static_cast<size_t>(r)]; };
  // Part p of an encoding of chunk `chunk` that starts at `base` (marker first).
  auto part_of = [&](uint8_t* base, int chunk, int p) {
    const size_t k = layout.at(chunk, p);
    return Message{base + layout.byte_offset[k], layout.bytes[k]};
  };

  // 1-3. Each destination's part: v = x + e (x itself without error feedback), encoded (or
  // marked when not finite) just before it is sent to its owner, and e' = v - Q(v); the owner
  // sums what it receives in rank order (the bits do not depend on arrival order) while later
  // parts are in flight.
  WorkerResidualCommit worker_commit(op.worker_error, saved);
  const int32_t me_world = world_ranks[static_cast<size_t>(me)];
  // The residual of the part encoded last, computed once that part is on its way (at the next
  // encoding, which reuses v, or before the owner's stage): not between encoding and sending.
  const uint8_t* residual_of = nullptr;
  int64_t residual_at = 0, residual_count = 0;
  auto write_pending_residual = [&] {
    if (!residual_of) return;
    codec.residual(residual_of, residual_count, v, op.worker_error + residual_at);
    worker_commit.wrote(residual_at, residual_count);
    residual_of = nullptr;
  };
  auto encode_part = [&](int r, int p) {
    const size_t k = layout.at(r, p);
    const int64_t c = layout.elements[k], at = layout.element_offset[k];
    uint8_t* out = part_of(sent_chunk(r), r, p).data;
    if (!op.worker_error) {
      const bool finite = all_finite(op.input + at, c);
      write_marker(out, finite ? -1 : me_world);
      if (finite) codec.encode(op.input + at, c, out + kMarker);
      return;
    }
    write_pending_residual();
    const bool finite = add_save_and_check(op.input + at, op.worker_error + at, c, v, saved + at);
    write_marker(out, finite ? -1 : me_world);
    if (!finite) return;
    codec.encode(v, c, out + kMarker);
    residual_of = out + kMarker, residual_at = at, residual_count = c;
  };
  std::vector<int32_t> poisoned_by(static_cast<size_t>(parts), -1);  // per part of this rank's chunk
  std::memset(s, 0, static_cast<size_t>(mine) * 4);
  auto reduce_part = [&](uint8_t* chunk, int p) {
    write_pending_residual();  // (the last part is sent by now)
    const size_t k = layout.at(me, p);
    const uint8_t* part = part_of(chunk, me, p).data;
    const int32_t marker = read_marker(part);
    int32_t& poisoned = poisoned_by[static_cast<size_t>(p)];
    if (marker >= 0 && (poisoned < 0 || marker < poisoned)) poisoned = marker;
    if (poisoned < 0) codec.decode_add(part + kMarker, layout.elements[k], s + (layout.element_offset[k] - my_offset));
  };
  // The owner's part of the average, with its error, encoded for everyone.
  auto finish_part = [&](int p) {
    const size_t k = layout.at(me, p);
    const int64_t c = layout.elements[k];
    float* sum = s + (layout.element_offset[k] - my_offset);
    if (op.average) {
      const float inverse = 1.0f / static_cast<float>(n);
      for (int64_t i = 0; i < c; ++i) sum[i] *= inverse;
    }
    if (op.owner_error) {
      const float* f = op.owner_error + (layout.element_offset[k] - my_offset);
      for (int64_t i = 0; i < c; ++i) sum[i] += f[i];
    }
    uint8_t* out = part_of(own_encoded, me, p).data;
    const int32_t poisoned = poisoned_by[static_cast<size_t>(p)];
    write_marker(out, poisoned);
    if (poisoned < 0) codec.encode(sum, c, out + kMarker);
  };
  // 4. Every owner's encoded part, decoded by everyone. A part marked by its owner fails the
  // operation on every rank (the output may then hold some decoded parts).
  int32_t failed_by = -1;
  auto note_marker = [&](const uint8_t* part) {
    const int32_t marker = read_marker(part);
    if (marker >= 0 && (failed_by < 0 || marker < failed_by)) failed_by = marker;
  };
  auto decode_part = [&](uint8_t* chunk, int r, int p) {
    const size_t k = layout.at(r, p);
    const uint8_t* part = part_of(chunk, r, p).data;
    note_marker(part);
    if (failed_by < 0) codec.decode(part + kMarker, layout.elements[k], op.output + layout.element_offset[k]);
  };

  Status st;
  if (parts > 1 && !collectives.uses_shared_memory(encoded_total)) {
    PipelinedScatterGather plan;
    plan.parts = parts;
    plan.scatter_send = [&](int p, int r) { return part_of(sent_chunk(r), r, p); };
    plan.scatter_recv = [&](int p, int r) { return part_of(received_chunk(r), me, p); };
    plan.gather_send = [&](int p) { return part_of(own_encoded, me, p); };
    plan.gather_recv = [&](int p, int r) { return part_of(gathered_chunk(r), r, p); };
    plan.produce = [&](int p, int r) { encode_part(r, p); };
    plan.reduce = [&](int p, int r) { reduce_part(r == me ? sent_chunk(me) : received_chunk(r), p); };
    plan.finish = finish_part;
    plan.consume = [&](int p, int r) { decode_part(r == me ? own_encoded : gathered_chunk(r), r, p); };
    st = collectives.pipelined_scatter_gather(plan);
    if (!st.is_ok()) return st;
  } else {
    std::vector<uint8_t*> send_chunks(static_cast<size_t>(n)), recv_chunks(static_cast<size_t>(n));
    std::vector<int64_t> recv_counts(static_cast<size_t>(n), my_bytes);
    for (int r = 0; r < n; ++r) {
      send_chunks[static_cast<size_t>(r)] = sent_chunk(r);
      recv_chunks[static_cast<size_t>(r)] = received_chunk(r);
    }
    st = collectives.streamed_exchange(
        send_chunks, layout.chunk_bytes, recv_chunks, recv_counts,
        [&](int r) { for (int p = 0; p < parts; ++p) encode_part(r, p); },
        [&](int r) { for (int p = 0; p < parts; ++p) reduce_part(received_chunk(r), p); }, /*in_rank_order=*/true);
    if (!st.is_ok()) return st;
    for (int p = 0; p < parts; ++p) finish_part(p);
    auto decode_chunk = [&](int r) { for (int p = 0; p < parts; ++p) decode_part(gathered_chunk(r), r, p); };
    if (collectives.uses_shared_memory(encoded_total)) {
      st = collectives.allgatherv(own_encoded, gathered, layout.chunk_bytes, 1);
      if (!st.is_ok()) return st;
      for (int r = 0; r < n; ++r) {  // every marker first: the output stays untouched on failure
        for (int p = 0; p < parts; ++p) note_marker(part_of(gathered_chunk(r), r, p).data);
      }
      for (int r = 0; r < n && failed_by < 0; ++r) decode_chunk(r);
    } else {
      std::vector<uint8_t*> own_to_all(static_cast<size_t>(n), own_encoded), gathered_chunks(static_cast<size_t>(n));
      std::vector<int64_t> own_bytes(static_cast<size_t>(n), my_bytes);
      for (int r = 0; r < n; ++r) gathered_chunks[static_cast<size_t>(r)] = gathered_chunk(r);
      st = collectives.streamed_exchange(own_to_all, own_bytes, gathered_chunks, layout.chunk_bytes, [](int) {},
                                         decode_chunk, /*in_rank_order=*/false);
      if (!st.is_ok()) return st;
    }
  }
  if (failed_by >= 0) {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                         "non-finite values (NaN or Inf) in the input of rank " + std::to_string(failed_by) +
                             "; a compressed all-reduce cannot encode them (error-feedback state unchanged)");
  }
  // 5. Error feedback, now that the operation succeeded everywhere: the worker's stays as
  // written, the owner's is f' = s - Q(s).
  write_pending_residual();
  worker_commit.keep();
  if (op.owner_error) {
    const float* q = op.output + my_offset;
    for (int64_t i = 0; i < mine; ++i) op.owner_error[i] = s[i] - q[i];
  }
  return Status::ok();
}

}  // namespace relax
