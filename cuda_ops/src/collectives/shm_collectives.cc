#include "collectives/shm_collectives.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>
#include <thread>

#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "transport/liveness.h"
#include "transport/setup_wait.h"
#include "util/backoff.h"

namespace relax {
namespace {

constexpr size_t kFlagStride = 64;       // one cache line per rank's barrier flag
constexpr int64_t kPage = 4096;
constexpr int64_t kReduceTile = 64 << 10;  // reduce and publish in tiles that stay in cache
constexpr int64_t kInlineAlign = 64;       // inline data starts on a cache line after its record

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// Where inline data starts in a slot behind a record of `record_bytes`.
int64_t inline_offset(int64_t record_bytes) { return (record_bytes + kInlineAlign - 1) / kInlineAlign * kInlineAlign; }

// Elements of a block of `count` that fall in round `round` of `window` elements each.
int64_t in_round(int64_t count, int64_t round, int64_t window) {
  return std::clamp<int64_t>(count - round * window, 0, window);
}

// Barrier flags, rounded up to whole pages so the slots start page-aligned.
size_t header_bytes(int size) {
  const size_t page = static_cast<size_t>(kPage);
  return (static_cast<size_t>(size) * kFlagStride + page - 1) / page * page;
}

int64_t rounds_for(const std::vector<int64_t>& counts, int64_t window) {
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  return (largest + window - 1) / window;
}

}  // namespace

std::unique_ptr<ShmCollectives> ShmCollectives::create(MPI_Comm comm, int64_t slot_bytes, double spin_us,
                                                       const std::atomic<int>* spin_gate, double timeout_s,
                                                       std::string& why, bool& expected) {
  expected = false;
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // MPI_Comm_split_type has no nonblocking form: a bounded barrier first names a rank that is
  // frozen or gone (at once if one was found silent already) instead of entering it with them.
  const Status ready = bounded_barrier(comm, timeout_s, "the shared-memory collectives' set-up");
  if (!ready.is_ok()) {
    why = ready.message;
    return nullptr;
  }
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  if (node_size != size) {  // the same answer on every rank: some rank is elsewhere for all of them
    why = "the ranks span several nodes";
    expected = true;
    return nullptr;
  }
  // Whole pages, and room for every rank's area of at least one 8-byte element.
  slot_bytes = std::max<int64_t>({kPage, slot_bytes, int64_t{8} * size});
  slot_bytes = (slot_bytes + kPage - 1) / kPage * kPage;
  const size_t header = header_bytes(size);
  const size_t bytes = header + 2 * static_cast<size_t>(size) * static_cast<size_t>(slot_bytes);
  std::unique_ptr<SharedSegment> segment = SharedSegment::create(comm, bytes, timeout_s, why);
  if (!segment) return nullptr;
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
  return std::make_unique<ShmCollectives>(Key(), std::move(segment), rank, size, slot_bytes, spin_us, spin_gate,
                                          timeout_s, world_ranks_of(comm, ranks), host_pids_of(comm, ranks));
}

ShmCollectives::ShmCollectives(Key, std::unique_ptr<SharedSegment> segment, int rank, int size, int64_t slot_bytes,
                               double spin_us, const std::atomic<int>* spin_gate, double timeout_s,
                               std::vector<int> world_ranks, std::vector<int64_t> member_pids)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      spin_us_(spin_us),
      spin_gate_(spin_gate),
      timeout_s_(timeout_s),
      world_ranks_(std::move(world_ranks)),
      member_pids_(std::move(member_pids)),
      data_offset_(header_bytes(size)) {}

template <class Body>
Status ShmCollectives::guarded(const char* during, Body body) {
  if (!broken_.empty()) return Status::error(broken_code_, broken_);
  try {
    body();
  } catch (const PeerSilence& silence) {
    // The segment's barrier counts now disagree between ranks: it can never be used again.
    if (!peer_silence_noted()) {
      note_silent_pids(silence.pids);  // before the note: a waiter told of it reads them
      note_peer_silence(peer_silence_message(silence.ranks, timeout_s_, during));
    }
    const Status noted = peer_silence_status();  // a lost process noted by the failure watch, or the silence
    broken_ = noted.message;
    broken_code_ = noted.code;
    return noted;
  }
  return Status::ok();
}

uint8_t* ShmCollectives::slot(int rank, int64_t round) const {
  const size_t set = static_cast<size_t>(round & 1);
  return segment_->data() + data_offset_ +
         (set * static_cast<size_t>(size_) + static_cast<size_t>(rank)) * static_cast<size_t>(slot_bytes_);
}

uint64_t* ShmCollectives::flag(int rank) const {
  return reinterpret_cast<uint64_t*>(segment_->data() + static_cast<size_t>(rank) * kFlagStride);
}

// Each rank publishes how many barriers it has reached and waits until every other rank has
// reached as many. Waiting polls briefly (peers are usually microseconds apart; only while a
// caller waits for a result: otherwise the framework computes on the cores the polls would
// take), then yields the core (a slow peer, a straggler or a rank sharing this core, must get
// the CPU), then sleeps:
// in a collective after a millisecond, 50 us at a time; in a round after 50 us, with pauses
// growing to 100 us.
PeerSilence ShmCollectives::late_peers(uint64_t epoch) const {
  PeerSilence late;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || __atomic_load_n(flag(r), __ATOMIC_ACQUIRE) >= epoch) continue;
    late.ranks.push_back(world_ranks_[static_cast<size_t>(r)]);
    late.pids.push_back(member_pids_[static_cast<size_t>(r)]);
  }
  return late;
}

void ShmCollectives::barrier(Wait wait) {
  using clock = std::chrono::steady_clock;
  const uint64_t epoch = ++epoch_;
  __atomic_store_n(flag(rank_), epoch, __ATOMIC_RELEASE);
  clock::time_point start;  // read once the first polls failed: most waits end before that
  bool started = false;
  double spin_us = spin_us_;
  const double yield_until_us = wait == Wait::kCollective ? 1000.0 : 50.0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const uint64_t* peer = flag(r);
    for (int64_t polls = 0; __atomic_load_n(peer, __ATOMIC_ACQUIRE) < epoch; ++polls) {
      if (polls % 64 != 63) {
        cpu_relax();
        continue;
      }
      if (!started) {
        start = clock::now();
        started = true;
        if (spin_gate_ && spin_gate_->load(std::memory_order_relaxed) <= 0) spin_us = 0;
      }
      const double waited_us = std::chrono::duration<double, std::micro>(clock::now() - start).count();
      if (waited_us >= timeout_s_ * 1e6 || peer_silence_noted()) throw late_peers(epoch);
      if (waited_us < spin_us) continue;
      if (waited_us < yield_until_us) {
        sched_yield();
      } else if (wait == Wait::kCollective) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else {
        backoff_pause(waited_us);
      }
    }
  }
}

ShmCollectives::Reduction ShmCollectives::reduction(Pieces pieces, std::vector<int64_t> counts, int32_t dtype,
                                                    int32_t op, double postscale) const {
  Reduction r{std::move(pieces), {}, {}, 0, 0, 0, 0, 1.0};
  r.esize = static_cast<int64_t>(dtype_size(dtype));
  r.window = std::max<int64_t>(1, slot_bytes_ / (size_ * r.esize));  // elements per block per round
  r.offsets = block_offsets(counts);
  r.counts = std::move(counts);
  r.dtype = dtype;
  r.op = op;
  r.postscale = postscale;
  return r;
}

// Area j of a slot holds block j's elements of the round. Stages the other ranks' blocks, waits
// for every rank, then reduces this rank's block (in cache-sized tiles, in rank order) into the
// pieces' `out`.
void ShmCollectives::reduce_round(const Reduction& r, int64_t k, bool publish) {
  const int64_t area = r.window * r.esize;
  uint8_t* mine = slot(rank_, rounds_);
  const auto round_begin = [&](int j) { return (r.offsets[static_cast<size_t>(j)] + k * r.window) * r.esize; };
  for (int j = 0; j < size_; ++j) {
    const int64_t n = in_round(r.counts[static_cast<size_t>(j)], k, r.window);
    if (j != rank_ && n > 0) {
      uint8_t* staged = mine + j * area;
      r.pieces.each_part(round_begin(j), n * r.esize, [&](const uint8_t* in, uint8_t*, int64_t bytes, int64_t done) {
        std::memcpy(staged + done, in, static_cast<size_t>(bytes));
      });
    }
  }
  barrier();
  const int64_t own_bytes = in_round(r.counts[static_cast<size_t>(rank_)], k, r.window) * r.esize;
  for (int64_t t = 0; t < own_bytes; t += kReduceTile) {
    r.pieces.each_part(round_begin(rank_) + t, std::min(kReduceTile, own_bytes - t),
                [&](const uint8_t* own, uint8_t* result, int64_t bytes, int64_t done) {
      const int64_t at = rank_ * area + t + done;  // where this part sits in each slot
      const int64_t count = bytes / r.esize;
      // Rank j's contribution (this rank's own comes straight from its input).
      const auto contribution = [&](int j) -> const uint8_t* { return j == rank_ ? own : slot(j, rounds_) + at; };
      // Summed in rank order, whichever rank owns the block: an element's result then does not
      // depend on where fusion placed it, so runs that batch tensors differently agree bitwise.
      // In place (result is the input), partial sums go to this rank's own area of its slot (free
      // until the result is published there) so the input survives until its turn.
      uint8_t* partial = result == own ? mine + at : result;
      const uint8_t* first = contribution(0);
      for (int j = 1; j < size_; ++j) {
        uint8_t* target = j == size_ - 1 ? result : partial;
        reduce_pair(target, first, contribution(j), count, r.dtype, r.op);
        first = target;
      }
      scale_buffer(result, count, r.dtype, r.postscale);
      if (publish) std::memcpy(mine + at, result, static_cast<size_t>(bytes));
    });
  }
}

Status ShmCollectives::allreduce(const void* src, void* dst, int64_t count, int32_t dtype, int32_t op,
                                 double postscale) {
  return allreduce(Pieces({Piece{src, dst, count * static_cast<int64_t>(dtype_size(dtype))}}), dtype, op, postscale);
}

Status ShmCollectives::allreduce(Pieces pieces, int32_t dtype, int32_t op, double postscale) {
  return guarded("a shared-memory all-reduce", [&] { allreduce_rounds(std::move(pieces), dtype, op, postscale); });
}

void ShmCollectives::allreduce_rounds(Pieces pieces, int32_t dtype, int32_t op, double postscale) {
  const int64_t count = pieces.bytes() / static_cast<int64_t>(dtype_size(dtype));
  const Reduction r = reduction(std::move(pieces), even_counts(count, size_), dtype, op, postscale);
  const int64_t rounds = rounds_for(r.counts, r.window);
  for (int64_t k = 0; k < rounds; ++k, ++rounds_) {
    reduce_round(r, k, true);
    barrier();
    for (int j = 0; j < size_; ++j) {
      const int64_t n = in_round(r.counts[static_cast<size_t>(j)], k, r.window);
      if (j == rank_ || n == 0) continue;
      const uint8_t* reduced = slot(j, rounds_) + j * r.window * r.esize;
      r.pieces.each_part((r.offsets[static_cast<size_t>(j)] + k * r.window) * r.esize, n * r.esize,
                  [&](const uint8_t*, uint8_t* out, int64_t part_bytes, int64_t done) {
                    std::memcpy(out, reduced + done, static_cast<size_t>(part_bytes));
                  });
    }
  }
}

Status ShmCollectives::reduce_scatter(const std::vector<Piece>& inputs, const std::vector<int64_t>& counts,
                                      int32_t dtype, int32_t op, double postscale, void* out) {
  // Only this rank's block has somewhere to go.
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const size_t me = static_cast<size_t>(rank_);
  const int64_t own_begin = block_offsets(counts)[me] * esize, own_bytes = counts[me] * esize;
  const Reduction r = reduction(Pieces(route_range(inputs, own_begin, own_bytes, out)), counts, dtype, op, postscale);
  const int64_t rounds = rounds_for(r.counts, r.window);
  return guarded("a shared-memory reduce-scatter", [&] {
    for (int64_t k = 0; k < rounds; ++k, ++rounds_) reduce_round(r, k, false);  // (rounds past the own block reduce nothing)
  });
}

Status ShmCollectives::allgatherv(void* out, const std::vector<int64_t>& counts, size_t element_size, Wait wait) {
  return guarded(wait == Wait::kRound ? "a negotiation round" : "a shared-memory all-gather",
                 [&] { allgatherv_rounds(out, counts, element_size, wait); });
}

void ShmCollectives::allgatherv_rounds(void* out, const std::vector<int64_t>& counts, size_t element_size, Wait wait) {
  const int64_t esize = static_cast<int64_t>(element_size);
  const int64_t window = std::max<int64_t>(1, slot_bytes_ / esize);
  const std::vector<int64_t> offsets = block_offsets(counts);
  auto* dst = static_cast<uint8_t*>(out);
  const size_t me = static_cast<size_t>(rank_);
  const int64_t rounds = rounds_for(counts, window);
  for (int64_t k = 0; k < rounds; ++k, ++rounds_) {
    const int64_t n_own = in_round(counts[me], k, window);
    if (n_own > 0) {
      std::memcpy(slot(rank_, rounds_), dst + (offsets[me] + k * window) * esize, static_cast<size_t>(n_own * esize));
    }
    barrier(wait);
    for (int j = 0; j < size_; ++j) {
      const int64_t n = in_round(counts[static_cast<size_t>(j)], k, window);
      if (j != rank_ && n > 0) {
        std::memcpy(dst + (offsets[static_cast<size_t>(j)] + k * window) * esize, slot(j, rounds_),
                    static_cast<size_t>(n * esize));
      }
    }
  }
}

int64_t ShmCollectives::inline_capacity(int64_t record_bytes) const {
  return std::max<int64_t>(0, slot_bytes_ - inline_offset(record_bytes));
}

Status ShmCollectives::exchange_records(uint8_t* records, int64_t record_bytes, const void* inline_data,
                                        int64_t inline_bytes) {
  if (record_bytes > slot_bytes_) {  // (a cache of millions of entries) several rounds, nothing inline
    return allgatherv(records, std::vector<int64_t>(static_cast<size_t>(size_), record_bytes), 1, Wait::kRound);
  }
  return guarded("a negotiation round", [&] {
    uint8_t* mine = slot(rank_, rounds_);
    std::memcpy(mine, records + rank_ * record_bytes, static_cast<size_t>(record_bytes));
    inline_offset_ = inline_offset(record_bytes);
    if (inline_bytes > 0) std::memcpy(mine + inline_offset_, inline_data, static_cast<size_t>(inline_bytes));
    barrier(Wait::kRound);
    for (int j = 0; j < size_; ++j) {
      if (j != rank_) std::memcpy(records + j * record_bytes, slot(j, rounds_), static_cast<size_t>(record_bytes));
    }
    inline_round_ = rounds_++;
  });
}

void ShmCollectives::reduce_inline(void* dst, int64_t count, int32_t dtype, int32_t op, double postscale) const {
  const auto data = [&](int j) { return slot(j, inline_round_) + inline_offset_; };
  reduce_pair(dst, data(0), data(1), count, dtype, op);
  for (int j = 2; j < size_; ++j) reduce_pair(dst, dst, data(j), count, dtype, op);
  scale_buffer(dst, count, dtype, postscale);
}

}  // namespace relax
