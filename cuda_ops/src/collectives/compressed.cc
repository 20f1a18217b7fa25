#include "collectives/compressed.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "util/cpu.h"

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

// Keeps in `first` the lowest rank that reported a non-finite input (-1: none so far).
void keep_lowest_rank(int32_t& first, int32_t rank) {
  if (rank >= 0 && (first < 0 || rank < first)) first = rank;
}

bool all_finite(const float* x, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= std::isfinite(x[i]);
  return ok;
}

// v = x * scale + e, a copy of e in `saved`, and whether every v is finite, in one pass. (A
// scale of 1 changes no bits: x * 1 is x.)
bool add_save_and_check_portable(const float* x, float scale, const float* e, int64_t n, float* v, float* saved) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = x[i] * scale;
    v[i] = scaled + e[i];
    saved[i] = e[i];
    ok &= std::isfinite(v[i]);
  }
  return ok;
}

// v = x * scale and whether every v is finite (no error feedback).
bool scale_and_check(const float* x, float scale, int64_t n, float* v) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = x[i] * scale;
    ok &= std::isfinite(v[i]);
  }
  return ok;
}

#if defined(__x86_64__)
// The same, 8 elements per instruction: |v| <= FLT_MAX is false exactly for NaN and +-Inf. The
// copy of e is only read if the operation fails, so it bypasses the cache (streaming stores,
// from the first element whose copy is 32-byte aligned).
__attribute__((target("avx"))) bool add_save_and_check_avx(const float* x, float scale, const float* e, int64_t n,
                                                           float* v, float* saved) {
  const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(saved) % 32 / 4);
  const int64_t head = std::min(n, misaligned == 0 ? 0 : 8 - misaligned);
  bool ok = add_save_and_check_portable(x, scale, e, head, v, saved);
  const __m256 scale8 = _mm256_set1_ps(scale);
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 largest = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  const int64_t end = head + (n - head) / 8 * 8;
  for (int64_t i = head; i < end; i += 8) {
    const __m256 error = _mm256_loadu_ps(e + i);
    const __m256 sum = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), scale8), error);
    _mm256_storeu_ps(v + i, sum);
    _mm256_stream_ps(saved + i, error);
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(_mm256_and_ps(sum, magnitude), largest, _CMP_LE_OQ));
  }
  _mm_sfence();
  ok &= _mm256_movemask_ps(finite) == 0xff;
  return add_save_and_check_portable(x + end, scale, e + end, n - end, v + end, saved + end) && ok;
}
#endif

bool add_save_and_check(const float* x, float scale, const float* e, int64_t n, float* v, float* saved) {
#if defined(__x86_64__)
  if (cpu_has_avx()) return add_save_and_check_avx(x, scale, e, n, v, saved);
#endif
  return add_save_and_check_portable(x, scale, e, n, v, saved);
}

// Whether the input is one buffer read as it is (no pieces, no prescale).
bool reads_input_as_is(const CompressedAllreduce& op) { return op.pieces.empty() && op.prescale == 1.0f; }

// The operation's input as laid out in memory: its pieces, or the one buffer.
Pieces input_pieces(const CompressedAllreduce& op) {
  if (!op.pieces.empty()) return Pieces(op.pieces);
  return Pieces({Piece{op.input, nullptr, op.count * 4}});
}

// Calls part(x, n, done) for each share of elements [at, at + count) of the input, where `x` is
// `n` elements read where they lie and `done` the elements of the range before them.
template <typename Part>
void each_input_share(const Pieces& input, int64_t at, int64_t count, Part&& part) {
  input.each_part(at * 4, count * 4, [&](const uint8_t* in, uint8_t*, int64_t bytes, int64_t done) {
    part(reinterpret_cast<const float*>(in), bytes / 4, done / 4);
  });
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

// One compressed all-reduce: the scratch buffer's regions and the steps of each part, driven
// by a pipelined or a streamed exchange.
class CompressedRun {
 public:
  CompressedRun(Collectives& collectives, const Codec& codec, const CompressedAllreduce& op,
                const std::vector<int>& world_ranks, std::vector<uint8_t>& scratch)
      : collectives_(collectives),
        codec_(codec),
        op_(op),
        n_(collectives.size()),
        me_(collectives.rank()),
        me_world_(world_ranks[static_cast<size_t>(collectives.rank())]),
        layout_(codec, op.count, collectives.size()),
        mine_(layout_.counts[static_cast<size_t>(me_)]),
        my_bytes_(layout_.chunk_bytes[static_cast<size_t>(me_)]),
        my_offset_(layout_.offsets[static_cast<size_t>(me_)]),
        chunk_offsets_(block_offsets(layout_.chunk_bytes)),
        encoded_total_(chunk_offsets_.back() + layout_.chunk_bytes.back()),
        forwards_encodings_(n_ == 2),
        input_(input_pieces(op)),
        poisoned_by_(static_cast<size_t>(layout_.parts), -1) {
    // Scratch: saved worker error | v (one part) | encoded chunks to send | received chunks |
    // s | this rank's encoded chunk | gathered.
    int64_t largest_part = 0;
    for (int64_t c : layout_.elements) largest_part = std::max(largest_part, c);
    const bool feedback = op.worker_error != nullptr;
    size_t used = 0;
    const size_t saved_at = reserve(scratch, used, feedback ? static_cast<size_t>(op.count) * 4 : 0);
    const bool staged = feedback || !reads_input_as_is(op);  // each part built in v before encoding
    const size_t v_at = reserve(scratch, used, staged ? static_cast<size_t>(largest_part) * 4 : 0);
    const size_t send_at = reserve(scratch, used, static_cast<size_t>(encoded_total_));
    const size_t recv_at = reserve(scratch, used, static_cast<size_t>(my_bytes_ * n_));
    const size_t s_at = reserve(scratch, used, static_cast<size_t>(mine_) * 4);
    const size_t own_at = reserve(scratch, used, static_cast<size_t>(my_bytes_));
    const size_t gathered_at = reserve(scratch, used, static_cast<size_t>(encoded_total_));
    saved_ = reinterpret_cast<float*>(scratch.data() + saved_at);
    v_ = reinterpret_cast<float*>(scratch.data() + v_at);
    send_ = scratch.data() + send_at;
    received_ = scratch.data() + recv_at;
    s_ = reinterpret_cast<float*>(scratch.data() + s_at);
    own_encoded_ = scratch.data() + own_at;
    gathered_ = scratch.data() + gathered_at;
    if (!forwards_encodings_) std::memset(s_, 0, static_cast<size_t>(mine_) * 4);  // (forwarding: written)
  }

  Status run() {
    WorkerResidualCommit worker_commit(op_.worker_error, saved_);
    commit_ = &worker_commit;
    Status st = layout_.parts > 1 && !collectives_.uses_shared_memory(encoded_total_) ? exchange_pipelined()
                                                                                      : exchange_streamed();
    if (!st.is_ok()) return st;
    if (failed_by_ >= 0) {
      return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                           "non-finite values (NaN or Inf) in the input of rank " + std::to_string(failed_by_) +
                               "; a compressed all-reduce cannot encode them (error-feedback state unchanged)");
    }
    // 5. Error feedback, now that the operation succeeded everywhere: the worker's stays as
    // written, the owner's is f' = s - Q(s), computed part by part into s.
    worker_commit.keep();
    if (op_.owner_error && !forwards_encodings_) {
      std::memcpy(op_.owner_error, s_, static_cast<size_t>(mine_) * 4);  // (s now holds f')
    }
    return Status::ok();
  }

 private:
  uint8_t* sent_chunk(int r) const { return send_ + chunk_offsets_[static_cast<size_t>(r)]; }
  uint8_t* received_chunk(int r) const { return received_ + static_cast<int64_t>(r) * my_bytes_; }
  uint8_t* gathered_chunk(int r) const { return gathered_ + chunk_offsets_[static_cast<size_t>(r)]; }
  // Part p of an encoding of chunk `chunk` that starts at `base` (marker first).
  Message part_of(uint8_t* base, int chunk, int p) const {
    const size_t k = layout_.at(chunk, p);
    return Message{base + layout_.byte_offset[k], layout_.bytes[k]};
  }

  // 1-3. Each destination's part: v = prescale * x + e (without error feedback x itself, or
  // prescale * x), encoded (or marked when not finite) just before it is sent to its owner, with
  // e' = v - Q(v) written in the encoding's pass; the owner sums what it receives in rank order
  // (the bits do not depend on arrival order) while later parts are in flight.
  void encode_part(int r, int p) {
    const size_t k = layout_.at(r, p);
    const int64_t c = layout_.elements[k], at = layout_.element_offset[k];
    uint8_t* out = part_of(sent_chunk(r), r, p).data;
    if (!op_.worker_error) {
      bool finite = true;
      const float* x = op_.input + at;
      if (!reads_input_as_is(op_)) {
        each_input_share(input_, at, c, [&](const float* in, int64_t n, int64_t done) {
          finite &= scale_and_check(in, op_.prescale, n, v_ + done);
        });
        x = v_;
      } else {
        finite = all_finite(x, c);
      }
      write_marker(out, finite ? -1 : me_world_);
      if (finite) codec_.encode(x, c, out + kMarker);
      return;
    }
    bool finite = true;
    each_input_share(input_, at, c, [&](const float* in, int64_t n, int64_t done) {
      finite &= add_save_and_check(in, op_.prescale, op_.worker_error + at + done, n, v_ + done, saved_ + at + done);
    });
    write_marker(out, finite ? -1 : me_world_);
    if (!finite) return;
    codec_.encode_with_residual(v_, c, out + kMarker, op_.worker_error + at);  // e' = v - Q(v)
    commit_->wrote(at, c);
  }

  // Rank r's encoding of this rank's chunk, part p, added to s (called in rank order).
  void reduce_part(const uint8_t* chunk_encoding, int r, int p) {
    const size_t k = layout_.at(me_, p);
    const uint8_t* part = chunk_encoding + layout_.byte_offset[k];
    int32_t& poisoned = poisoned_by_[static_cast<size_t>(p)];
    keep_lowest_rank(poisoned, read_marker(part));
    if (poisoned >= 0) return;
    float* sum = s_ + (layout_.element_offset[k] - my_offset_);
    if (forwards_encodings_ && r == 0) {  // the first of two: written, as the peer's combine_part does
      codec_.decode(part + kMarker, layout_.elements[k], sum);
    } else {
      codec_.decode_add(part + kMarker, layout_.elements[k], sum);
    }
  }

  // The owner's part of the average, with its error, encoded for everyone. Forwarding (two
  // ranks), the sum of the two decoded encodings is already the result.
  void finish_part(int p) {
    const size_t k = layout_.at(me_, p);
    const int64_t c = layout_.elements[k];
    float* sum = s_ + (layout_.element_offset[k] - my_offset_);
    if (op_.average) average(sum, c);
    if (forwards_encodings_) {  // (decode_part copies it to the output)
      keep_lowest_rank(failed_by_, poisoned_by_[static_cast<size_t>(p)]);
      return;
    }
    if (op_.owner_error) {
      const float* f = op_.owner_error + (layout_.element_offset[k] - my_offset_);
      for (int64_t i = 0; i < c; ++i) sum[i] += f[i];
    }
    uint8_t* out = part_of(own_encoded_, me_, p).data;
    const int32_t poisoned = poisoned_by_[static_cast<size_t>(p)];
    write_marker(out, poisoned);
    if (poisoned >= 0) return;
    if (op_.owner_error) {
      codec_.encode_with_residual(sum, c, out + kMarker, sum);
    } else {
      codec_.encode(sum, c, out + kMarker);
    }
  }

  // 4. Every owner's encoded part, decoded by everyone. A part marked by its owner fails the
  // operation on every rank (the output may then hold some decoded parts).
  void note_marker(const uint8_t* part) {
    keep_lowest_rank(failed_by_, read_marker(part));
  }

  void decode_part(uint8_t* chunk_encoding, int r, int p) {
    if (forwards_encodings_) {
      if (r != me_) {
        combine_part(chunk_encoding, r, p);
      } else if (failed_by_ < 0) {  // this rank's chunk: the sum finish_part averaged
        const size_t k = layout_.at(me_, p);
        std::memcpy(op_.output + layout_.element_offset[k], s_ + (layout_.element_offset[k] - my_offset_),
                    static_cast<size_t>(layout_.elements[k]) * 4);
      }
      return;
    }
    const size_t k = layout_.at(r, p);
    const uint8_t* part = part_of(chunk_encoding, r, p).data;
    note_marker(part);
    if (failed_by_ < 0) codec_.decode(part + kMarker, layout_.elements[k], op_.output + layout_.element_offset[k]);
  }

  // Forwarding (two ranks): the peer's chunk r is the sum of both ranks' encodings of it, this
  // rank's (sent to the peer in the scatter) and the peer's own (`forwarded`), the first decoded,
  // the second added, as the peer's reduce_part did, so both ranks hold the same bits.
  void combine_part(uint8_t* forwarded, int r, int p) {
    const size_t k = layout_.at(r, p);
    const uint8_t* mine = part_of(sent_chunk(r), r, p).data;
    const uint8_t* theirs = part_of(forwarded, r, p).data;
    note_marker(mine);
    note_marker(theirs);
    if (failed_by_ >= 0) return;
    const int64_t c = layout_.elements[k];
    float* out = op_.output + layout_.element_offset[k];
    codec_.decode((me_ < r ? mine : theirs) + kMarker, c, out);
    codec_.decode_add((me_ < r ? theirs : mine) + kMarker, c, out);
    if (op_.average) average(out, c);
  }

  void average(float* sum, int64_t c) const {
    const float inverse = 1.0f / static_cast<float>(n_);
    for (int64_t i = 0; i < c; ++i) sum[i] *= inverse;
  }

  // What an owner all-gathers: its re-encoded part of the result, or, forwarding, its own
  // encoding of its chunk.
  uint8_t* gathered_source() const { return forwards_encodings_ ? sent_chunk(me_) : own_encoded_; }

  // Between nodes, chunks in several parts: one part's transfer overlaps the work on another.
  Status exchange_pipelined() {
    PipelinedScatterGather plan;
    plan.parts = layout_.parts;
    plan.scatter_send = [this](int p, int r) { return part_of(sent_chunk(r), r, p); };
    plan.scatter_recv = [this](int p, int r) { return part_of(received_chunk(r), me_, p); };
    plan.gather_send = [this](int p) { return part_of(gathered_source(), me_, p); };
    plan.gather_recv = [this](int p, int r) { return part_of(gathered_chunk(r), r, p); };
    plan.produce = [this](int p, int r) { encode_part(r, p); };
    plan.reduce = [this](int p, int r) { reduce_part(r == me_ ? sent_chunk(me_) : received_chunk(r), r, p); };
    plan.finish = [this](int p) { finish_part(p); };
    plan.consume = [this](int p, int r) { decode_part(r == me_ ? own_encoded_ : gathered_chunk(r), r, p); };
    return collectives_.pipelined_scatter_gather(plan);
  }

  // Whole chunks: streamed point to point, the all-gather through shared memory on one node.
  Status exchange_streamed() {
    const int parts = layout_.parts;
    std::vector<uint8_t*> send_chunks(static_cast<size_t>(n_)), recv_chunks(static_cast<size_t>(n_));
    std::vector<int64_t> recv_counts(static_cast<size_t>(n_), my_bytes_);
    for (int r = 0; r < n_; ++r) {
      send_chunks[static_cast<size_t>(r)] = sent_chunk(r);
      recv_chunks[static_cast<size_t>(r)] = received_chunk(r);
    }
    Status st = collectives_.streamed_exchange(
        send_chunks, layout_.chunk_bytes, recv_chunks, recv_counts,
        [&](int r) { for (int p = 0; p < parts; ++p) encode_part(r, p); },
        [&](int r) { for (int p = 0; p < parts; ++p) reduce_part(received_chunk(r), r, p); }, /*in_rank_order=*/true);
    if (!st.is_ok()) return st;
    for (int p = 0; p < parts; ++p) finish_part(p);
    auto decode_chunk = [&](int r) { for (int p = 0; p < parts; ++p) decode_part(gathered_chunk(r), r, p); };
    if (collectives_.uses_shared_memory(encoded_total_)) {
      st = collectives_.allgatherv(gathered_source(), gathered_, layout_.chunk_bytes, 1);
      if (!st.is_ok()) return st;
      for (int r = 0; r < n_; ++r) {  // every marker first: the output stays untouched on failure
        for (int p = 0; p < parts; ++p) {
          note_marker(part_of(gathered_chunk(r), r, p).data);
          if (forwards_encodings_) note_marker(part_of(sent_chunk(r), r, p).data);
        }
      }
      for (int r = 0; r < n_ && failed_by_ < 0; ++r) decode_chunk(r);
      return Status::ok();
    }
    std::vector<uint8_t*> own_to_all(static_cast<size_t>(n_), gathered_source()),
        gathered_chunks(static_cast<size_t>(n_));
    std::vector<int64_t> own_bytes(static_cast<size_t>(n_), my_bytes_);
    for (int r = 0; r < n_; ++r) gathered_chunks[static_cast<size_t>(r)] = gathered_chunk(r);
    return collectives_.streamed_exchange(own_to_all, own_bytes, gathered_chunks, layout_.chunk_bytes, [](int) {},
                                          decode_chunk, /*in_rank_order=*/false);
  }


  Collectives& collectives_;
  const Codec& codec_;
  const CompressedAllreduce& op_;
  const int n_, me_;
  const int32_t me_world_;
  const PartLayout layout_;
  const int64_t mine_, my_bytes_, my_offset_;
  const std::vector<int64_t> chunk_offsets_;  // of each chunk's encoding in send_ and gathered_
  const int64_t encoded_total_;
  // Two ranks: no owner stage. Each owner all-gathers its own encoding of its chunk instead of
  // re-encoding the sum (the same bytes), so the result is the exact average of what was encoded
  // and the owner's error memory is not used.
  const bool forwards_encodings_;
  const Pieces input_;
  float* saved_ = nullptr;
  float* v_ = nullptr;
  uint8_t* send_ = nullptr;
  uint8_t* received_ = nullptr;
  float* s_ = nullptr;
  uint8_t* own_encoded_ = nullptr;
  uint8_t* gathered_ = nullptr;
  std::vector<int32_t> poisoned_by_;  // per part of this rank's chunk
  int32_t failed_by_ = -1;
  WorkerResidualCommit* commit_ = nullptr;
};

}  // namespace

int compressed_parts(int64_t count, int size) {
  const int64_t largest = (count + size - 1) / size;
  return static_cast<int>(std::max<int64_t>(1, (largest + kCompressedPartElements - 1) / kCompressedPartElements));
}

Status compressed_allreduce(Collectives& collectives, const Codec& codec, const CompressedAllreduce& op,
                            const std::vector<int>& world_ranks, std::vector<uint8_t>& scratch) {
  return CompressedRun(collectives, codec, op, world_ranks, scratch).run();
}

}  // namespace relax
