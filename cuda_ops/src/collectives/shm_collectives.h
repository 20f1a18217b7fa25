// Collectives through one shared-memory segment, for communicators whose ranks all run on this
// node. Each rank copies what the others need into its own slot once and reads what it needs
// straight from theirs; a message through Open MPI's shared-memory transport is copied twice
// (into a shared fragment, then out of it), so this moves about half as many bytes.
//
// Round protocol (the same on every rank, so ranks only meet at barriers): a collective is cut
// into rounds that fit a slot; in each round every rank writes its slot, meets the others at a
// barrier, and reads theirs (all-reduce: writes its reduced block back, meets them again, reads
// theirs). Slots alternate between two sets round by round, so a round's writes never race a
// peer still reading the previous round: the barrier in between guarantees it has finished.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/pieces.h"
#include "transport/liveness.h"
#include "transport/shm_segment.h"
#include "util/types.h"

namespace relax {

class ShmCollectives {
 public:
  // How a barrier waits for late peers. kCollective: peers are microseconds apart (they entered
  // the same collective), so poll, then yield the core for up to a millisecond, then sleep.
  // kRound: a negotiation round, where a peer may still be computing for a long time while this
  // rank's own framework thread needs the cores: poll briefly, then sleep with growing pauses.
  enum class Wait { kCollective, kRound };

  // Collective over `comm`. Null on every rank unless all of its ranks share this node and the
  // segment (2 x ranks x slot_bytes) could be made; `why` then says why not, and `expected` is
  // set when that is the normal case (ranks on several nodes) rather than a failure. Barrier
  // waits poll for `spin_us` microseconds before they yield the core, while `spin_gate` (if not
  // null; it must outlive this object) is positive. A barrier waits at most `timeout_s` seconds
  // for a peer (transport/liveness.h); then the operation fails naming the ranks that did not
  // arrive, and so does every later one.
  static std::unique_ptr<ShmCollectives> create(MPI_Comm comm, int64_t slot_bytes, double spin_us,
                                                const std::atomic<int>* spin_gate, double timeout_s, std::string& why,
                                                bool& expected);

  // Only create() can make this key (it sizes the segment for these arguments).
  class Key {
    friend class ShmCollectives;
    Key() {}
  };
  ShmCollectives(Key, std::unique_ptr<SharedSegment> segment, int rank, int size, int64_t slot_bytes, double spin_us,
                 const std::atomic<int>* spin_gate, double timeout_s, std::vector<int> world_ranks,
                 std::vector<int64_t> member_pids);

  // The collectives below fail only when a peer does not reach a barrier within the timeout
  // (RELAX_ERR_STALLED naming it, and `during` in the message); after that every call fails.

  // dst = reduction of every rank's src (dst may be src); `postscale` multiplies the result, each
  // block scaled once by the rank that reduced it, so every rank gets identical bits.
  Status allreduce(const void* src, void* dst, int64_t count, int32_t dtype, int32_t op, double postscale);
  // Why the segment is unusable (a peer did not answer), empty while it works.
  const std::string& broken() const { return broken_; }
  // The same all-reduce of the pieces' concatenation, read from and written to the pieces where
  // they lie (no fusion buffer to copy them into and out of): the same bits as allreduce() of
  // the concatenation.
  Status allreduce(Pieces pieces, int32_t dtype, int32_t op, double postscale);
  // `out` = this rank's block (counts[rank] elements at block_offsets(counts)[rank]) of the
  // reduction of every rank's concatenation of `inputs` (their `in` and `bytes`; each only read,
  // where it lies), scaled by `postscale`.
  Status reduce_scatter(const std::vector<Piece>& inputs, const std::vector<int64_t>& counts, int32_t dtype,
                        int32_t op, double postscale, void* out);
  // Every rank's `counts[r]` elements, in rank order, into `out`, where this rank's block is
  // already in place.
  Status allgatherv(void* out, const std::vector<int64_t>& counts, size_t element_size,
                    Wait wait = Wait::kCollective);

  // A negotiation round's exchange of one `record_bytes` record per rank (this rank's already at
  // records + rank * record_bytes) that may carry `inline_bytes` (at most inline_capacity()) of
  // this rank's data behind its record. The data stays readable until this rank's next
  // collective on the segment: reduce_inline() reads it. Waits as Wait::kRound.
  Status exchange_records(uint8_t* records, int64_t record_bytes, const void* inline_data, int64_t inline_bytes);
  // Largest payload exchange_records() carries behind records of `record_bytes`.
  int64_t inline_capacity(int64_t record_bytes) const;
  // dst = the reduction of every rank's inline data of the last exchange_records() (`count`
  // elements of `dtype`), summed in rank order and scaled by `postscale`: allreduce()'s bits.
  void reduce_inline(void* dst, int64_t count, int32_t dtype, int32_t op, double postscale) const;

 private:
  // A reduction over blocks of `counts` elements (block r reduced by rank r), cut into rounds of
  // `window` elements per block, of the concatenation of `pieces` (reduced blocks are written to
  // the pieces' `out`; a reduce-scatter's pieces have one only for this rank's block).
  struct Reduction {
    Pieces pieces;
    std::vector<int64_t> counts, offsets;
    int64_t esize = 0, window = 0;
    int32_t dtype = 0, op = 0;
    double postscale = 1.0;
  };
  Reduction reduction(Pieces pieces, std::vector<int64_t> counts, int32_t dtype, int32_t op, double postscale) const;
  // The bodies of allreduce() and allgatherv(), which may throw PeerSilence (guarded() catches it).
  void allreduce_rounds(Pieces pieces, int32_t dtype, int32_t op, double postscale);
  void allgatherv_rounds(void* out, const std::vector<int64_t>& counts, size_t element_size, Wait wait);
  // The ranks whose barrier flag has not reached `epoch`: their world ranks and process ids.
  PeerSilence late_peers(uint64_t epoch) const;
  // Round `k`: this rank's reduced block part into the pieces' `out`; with `publish` also into its slot.
  void reduce_round(const Reduction& r, int64_t k, bool publish);

  uint8_t* slot(int rank, int64_t round) const;
  uint64_t* flag(int rank) const;
  // Throws PeerSilence (transport/liveness.h) when a peer does not arrive within timeout_s_.
  void barrier(Wait wait = Wait::kCollective);
  // Runs `body` (which may throw PeerSilence from a barrier); a silence becomes the Status.
  template <class Body>
  Status guarded(const char* during, Body body);

  std::unique_ptr<SharedSegment> segment_;
  int rank_;
  int size_;
  int64_t slot_bytes_;
  double spin_us_;
  const std::atomic<int>* spin_gate_;
  double timeout_s_;
  std::vector<int> world_ranks_;  // of this segment's ranks, for naming a silent one
  std::vector<int64_t> member_pids_;  // theirs (liveness.h: an elastic job evicts a silent one)
  std::string broken_;
  int32_t broken_code_ = RELAX_ERR_STALLED;
  const size_t data_offset_;  // flags first, then the two slot sets
  uint64_t epoch_ = 0;        // barriers passed
  int64_t rounds_ = 0;        // rounds run: selects the slot set
  int64_t inline_round_ = -1;        // the round of the last exchange_records()
  int64_t inline_offset_ = 0;        // where its data sits in a slot
};

}  // namespace relax
