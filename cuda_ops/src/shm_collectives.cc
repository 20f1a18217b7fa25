#include "shm_collectives.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "collectives.h"
#include "reduce.h"

namespace relax {
namespace {

constexpr size_t kFlagStride = 64;       // one cache line per rank's barrier flag
constexpr int64_t kPage = 4096;
constexpr int64_t kReduceTile = 64 << 10;  // reduce and publish in tiles that stay in cache

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

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
                                                       std::string& why, bool& expected) {
  expected = false;
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
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
  std::unique_ptr<SharedSegment> segment = SharedSegment::create(comm, bytes, why);
  if (!segment) return nullptr;
  return std::make_unique<ShmCollectives>(Key(), std::move(segment), rank, size, slot_bytes, spin_us);
}

ShmCollectives::ShmCollectives(Key, std::unique_ptr<SharedSegment> segment, int rank, int size, int64_t slot_bytes,
                               double spin_us)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      spin_us_(spin_us),
      data_offset_(header_bytes(size)) {}

uint8_t* ShmCollectives::slot(int rank, int64_t round) const {
  const size_t set = static_cast<size_t>(round & 1);
  return segment_->data() + data_offset_ +
         (set * static_cast<size_t>(size_) + static_cast<size_t>(rank)) * static_cast<size_t>(slot_bytes_);
}

uint64_t* ShmCollectives::flag(int rank) const {
  return reinterpret_cast<uint64_t*>(segment_->data() + static_cast<size_t>(rank) * kFlagStride);
}

// Each rank publishes how many barriers it has reached and waits until every other rank has
// reached as many. Waiting polls briefly (peers are usually microseconds apart), then yields the
// core, then sleeps: a slow peer (a straggler, or a rank sharing this core) must get the CPU.
void ShmCollectives::barrier() {
  using clock = std::chrono::steady_clock;
  const uint64_t epoch = ++epoch_;
  __atomic_store_n(flag(rank_), epoch, __ATOMIC_RELEASE);
  const auto start = clock::now();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const uint64_t* peer = flag(r);
    for (int64_t polls = 0; __atomic_load_n(peer, __ATOMIC_ACQUIRE) < epoch; ++polls) {
      if (polls % 64 != 63) {
        cpu_relax();
        continue;
      }
      const double waited_us = std::chrono::duration<double, std::micro>(clock::now() - start).count();
      if (waited_us < spin_us_) continue;
      if (waited_us < 1000) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
}

Status ShmCollectives::allreduce(const void* src, void* dst, int64_t count, int32_t dtype, int32_t op,
                                 double postscale) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t window = std::max<int64_t>(1, slot_bytes_ / (size_ * esize));  // elements per block per round
  const std::vector<int64_t> counts = even_counts(count, size_);
  const std::vector<int64_t> offsets = block_offsets(counts);
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const size_t me = static_cast<size_t>(rank_);
  const int64_t rounds = rounds_for(counts, window);
  for (int64_t k = 0; k < rounds; ++k, ++rounds_) {
    uint8_t* mine = slot(rank_, rounds_);
    // Area j of a slot holds block j's elements of this round.
    for (int j = 0; j < size_; ++j) {
      const int64_t n = in_round(counts[static_cast<size_t>(j)], k, window);
      if (j != rank_ && n > 0) {
        std::memcpy(mine + j * window * esize, in + (offsets[static_cast<size_t>(j)] + k * window) * esize,
                    static_cast<size_t>(n * esize));
      }
    }
    barrier();
    const int64_t own = in_round(counts[me], k, window);
    const int64_t own_start = (offsets[me] + k * window) * esize;
    for (int64_t t = 0; t < own * esize; t += kReduceTile) {
      const int64_t tile = std::min(kReduceTile, own * esize - t) / esize;
      uint8_t* result = out + own_start + t;
      const uint8_t* first = in + own_start + t;
      for (int j = 0; j < size_; ++j) {
        if (j == rank_) continue;
        reduce_pair(result, first, slot(j, rounds_) + rank_ * window * esize + t, tile, dtype, op);
        first = result;
      }
      scale_buffer(result, tile, dtype, postscale);
      std::memcpy(mine + rank_ * window * esize + t, result, static_cast<size_t>(tile * esize));
    }
    barrier();
    for (int j = 0; j < size_; ++j) {
      const int64_t n = in_round(counts[static_cast<size_t>(j)], k, window);
      if (j != rank_ && n > 0) {
        std::memcpy(out + (offsets[static_cast<size_t>(j)] + k * window) * esize, slot(j, rounds_) + j * window * esize,
                    static_cast<size_t>(n * esize));
      }
    }
  }
  return Status::ok();
}

Status ShmCollectives::reduce_scatter(const void* src, const std::vector<int64_t>& counts, int32_t dtype, int32_t op,
                                      double postscale, void* out) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t window = std::max<int64_t>(1, slot_bytes_ / (size_ * esize));
  const std::vector<int64_t> offsets = block_offsets(counts);
  const auto* in = static_cast<const uint8_t*>(src);
  auto* result_base = static_cast<uint8_t*>(out);
  const size_t me = static_cast<size_t>(rank_);
  const int64_t rounds = rounds_for(counts, window);
  for (int64_t k = 0; k < rounds; ++k, ++rounds_) {
    uint8_t* mine = slot(rank_, rounds_);
    for (int j = 0; j < size_; ++j) {
      const int64_t n = in_round(counts[static_cast<size_t>(j)], k, window);
      if (j != rank_ && n > 0) {
        std::memcpy(mine + j * window * esize, in + (offsets[static_cast<size_t>(j)] + k * window) * esize,
                    static_cast<size_t>(n * esize));
      }
    }
    barrier();
    const int64_t own = in_round(counts[me], k, window);
    if (own == 0) continue;
    uint8_t* result = result_base + k * window * esize;
    const uint8_t* first = in + (offsets[me] + k * window) * esize;
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      reduce_pair(result, first, slot(j, rounds_) + rank_ * window * esize, own, dtype, op);
      first = result;
    }
    scale_buffer(result, own, dtype, postscale);
  }
  return Status::ok();
}

Status ShmCollectives::allgatherv(const void* in, void* out, const std::vector<int64_t>& counts, size_t element_size) {
  const int64_t esize = static_cast<int64_t>(element_size);
  const int64_t window = std::max<int64_t>(1, slot_bytes_ / esize);
  const std::vector<int64_t> offsets = block_offsets(counts);
  auto* dst = static_cast<uint8_t*>(out);
  const size_t me = static_cast<size_t>(rank_);
  const auto* own = static_cast<const uint8_t*>(in);
  if (counts[me] > 0 && own != dst + offsets[me] * esize) {
    std::memcpy(dst + offsets[me] * esize, own, static_cast<size_t>(counts[me] * esize));
  }
  const int64_t rounds = rounds_for(counts, window);
  for (int64_t k = 0; k < rounds; ++k, ++rounds_) {
    const int64_t n_own = in_round(counts[me], k, window);
    if (n_own > 0) {
      std::memcpy(slot(rank_, rounds_), dst + (offsets[me] + k * window) * esize, static_cast<size_t>(n_own * esize));
    }
    barrier();
    for (int j = 0; j < size_; ++j) {
      const int64_t n = in_round(counts[static_cast<size_t>(j)], k, window);
      if (j != rank_ && n > 0) {
        std::memcpy(dst + (offsets[static_cast<size_t>(j)] + k * window) * esize, slot(j, rounds_),
                    static_cast<size_t>(n * esize));
      }
    }
  }
  return Status::ok();
}

}  // namespace relax
