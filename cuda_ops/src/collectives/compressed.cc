#include "collectives/compressed.h"

#include <cmath>
#include <cstring>

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

// v = x + e and whether every v is finite, in one pass.
bool add_and_check(const float* x, const float* e, int64_t n, float* v) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = x[i] + e[i];
    ok &= std::isfinite(v[i]);
  }
  return ok;
}

// Carves `bytes` out of `scratch` at `offset` (growing it), returning the offset.
size_t reserve(std::vector<uint8_t>& scratch, size_t& offset, size_t bytes) {
  const size_t at = (offset + 63) / 64 * 64;
  offset = at + bytes;
  if (scratch.size() < offset) scratch.resize(offset);
  return at;
}

}  // namespace

Status compressed_allreduce(Collectives& collectives, const Codec& codec, const CompressedAllreduce& op,
                            const std::vector<int>& world_ranks, std::vector<uint8_t>& scratch) {
  const int n = collectives.size();
  const int me = collectives.rank();
  const std::vector<int64_t> counts = even_counts(op.count, n);
  const std::vector<int64_t> offsets = block_offsets(counts);
  std::vector<int64_t> chunk_bytes(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) chunk_bytes[static_cast<size_t>(r)] = kMarker + codec.encoded_bytes(counts[static_cast<size_t>(r)]);
  const int64_t mine = counts[static_cast<size_t>(me)];
  const int64_t my_bytes = chunk_bytes[static_cast<size_t>(me)];

  // Layout of the scratch buffer: v | encoded chunks to send | received chunks | s | gathered.
  size_t used = 0;
  int64_t send_total = 0, gathered_total = 0;
  for (int64_t b : chunk_bytes) send_total += b, gathered_total += b;
  const size_t v_at = reserve(scratch, used, static_cast<size_t>(op.count) * 4);
  const size_t send_at = reserve(scratch, used, static_cast<size_t>(send_total));
  const size_t recv_at = reserve(scratch, used, static_cast<size_t>(my_bytes * n));
  const size_t s_at = reserve(scratch, used, static_cast<size_t>(mine) * 4 + static_cast<size_t>(my_bytes));
  const size_t gathered_at = reserve(scratch, used, static_cast<size_t>(gathered_total));
  float* v = reinterpret_cast<float*>(scratch.data() + v_at);
  uint8_t* send = scratch.data() + send_at;
  uint8_t* received = scratch.data() + recv_at;
  float* s = reinterpret_cast<float*>(scratch.data() + s_at);
  uint8_t* own_encoded = scratch.data() + s_at + static_cast<size_t>(mine) * 4;
  uint8_t* gathered = scratch.data() + gathered_at;

  // 1-3. Each destination's chunk: v = x + e (x itself without error feedback), encoded (or
  // marked when not finite) just before it is sent to its owner; the owner sums what it receives
  // in rank order (the bits do not depend on arrival order) while later chunks are in flight.
  if (!op.worker_error) v = const_cast<float*>(op.input);  // only read from here on
  std::vector<int64_t> send_offsets = block_offsets(chunk_bytes);
  std::vector<uint8_t*> send_chunks(static_cast<size_t>(n)), recv_chunks(static_cast<size_t>(n));
  std::vector<int64_t> recv_counts(static_cast<size_t>(n), my_bytes);
  for (int r = 0; r < n; ++r) {
    const size_t j = static_cast<size_t>(r);
    send_chunks[j] = send + send_offsets[j];
    recv_chunks[j] = received + static_cast<int64_t>(r) * my_bytes;
  }
  const int32_t me_world = world_ranks[static_cast<size_t>(me)];
  auto encode_chunk = [&](int r) {
    const size_t j = static_cast<size_t>(r);
    float* chunk = v + offsets[j];
    const bool finite = op.worker_error ? add_and_check(op.input + offsets[j], op.worker_error + offsets[j], counts[j], chunk)
                                        : all_finite(chunk, counts[j]);
    write_marker(send_chunks[j], finite ? -1 : me_world);
    if (finite) codec.encode(chunk, counts[j], send_chunks[j] + kMarker);
  };
  int32_t poisoned_by = -1;
  std::memset(s, 0, static_cast<size_t>(mine) * 4);
  auto reduce_chunk = [&](int r) {
    const uint8_t* chunk = recv_chunks[static_cast<size_t>(r)];
    const int32_t marker = read_marker(chunk);
    if (marker >= 0) {
      if (poisoned_by < 0 || marker < poisoned_by) poisoned_by = marker;
      return;
    }
    if (poisoned_by < 0) codec.decode_add(chunk + kMarker, mine, s);
  };
  Status st = collectives.streamed_exchange(send_chunks, chunk_bytes, recv_chunks, recv_counts, encode_chunk,
                                            reduce_chunk, /*in_rank_order=*/true);
  if (!st.is_ok()) return st;
  if (op.average) {
    const float inverse = 1.0f / static_cast<float>(n);
    for (int64_t i = 0; i < mine; ++i) s[i] *= inverse;
  }
  if (op.owner_error) {
    for (int64_t i = 0; i < mine; ++i) s[i] += op.owner_error[i];
  }
  write_marker(own_encoded, poisoned_by);
  if (poisoned_by < 0) codec.encode(s, mine, own_encoded + kMarker);
  // 4. Everyone gets every owner's encoded chunk and decodes it: through shared memory in one
  // collective, otherwise each chunk as soon as it arrives. A chunk marked by its owner fails the
  // operation on every rank (the output may then hold some decoded chunks).
  const std::vector<int64_t> gathered_offsets = block_offsets(chunk_bytes);
  int32_t failed_by = -1;
  auto decode_chunk = [&](int r) {
    const size_t j = static_cast<size_t>(r);
    const uint8_t* chunk = gathered + gathered_offsets[j];
    const int32_t marker = read_marker(chunk);
    if (marker >= 0 && (failed_by < 0 || marker < failed_by)) failed_by = marker;
    if (failed_by < 0) codec.decode(chunk + kMarker, counts[j], op.output + offsets[j]);
  };
  if (collectives.uses_shared_memory(gathered_total)) {
    st = collectives.allgatherv(own_encoded, gathered, chunk_bytes, 1);
    if (!st.is_ok()) return st;
    for (int r = 0; r < n; ++r) {  // every marker first: the output stays untouched on failure
      const int32_t marker = read_marker(gathered + gathered_offsets[static_cast<size_t>(r)]);
      if (marker >= 0 && (failed_by < 0 || marker < failed_by)) failed_by = marker;
    }
    for (int r = 0; r < n && failed_by < 0; ++r) decode_chunk(r);
  } else {
    std::vector<uint8_t*> own_to_all(static_cast<size_t>(n), own_encoded), gathered_chunks(static_cast<size_t>(n));
    std::vector<int64_t> own_bytes(static_cast<size_t>(n), my_bytes);
    for (int r = 0; r < n; ++r) gathered_chunks[static_cast<size_t>(r)] = gathered + gathered_offsets[static_cast<size_t>(r)];
    st = collectives.streamed_exchange(own_to_all, own_bytes, gathered_chunks, chunk_bytes, [](int) {}, decode_chunk,
                                       /*in_rank_order=*/false);
    if (!st.is_ok()) return st;
  }
  if (failed_by >= 0) {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                         "non-finite values (NaN or Inf) in the input of rank " + std::to_string(failed_by) +
                             "; a compressed all-reduce cannot encode them (error-feedback state unchanged)");
  }
  // 5. Error feedback, now that the operation succeeded everywhere.
  if (op.worker_error) {
    for (int r = 0; r < n; ++r) {
      const size_t j = static_cast<size_t>(r);
      codec.residual(send + send_offsets[j] + kMarker, counts[j], v + offsets[j], op.worker_error + offsets[j]);
    }
  }
  if (op.owner_error) {
    const float* q = op.output + offsets[static_cast<size_t>(me)];
    for (int64_t i = 0; i < mine; ++i) op.owner_error[i] = s[i] - q[i];
  }
  return Status::ok();
}

}  // namespace relax
