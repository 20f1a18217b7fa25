// Collectives over one MPI communicator: through shared memory when every rank is on this node
// (shm_collectives.h), else our ring reduce-scatter / all-gather over a RingLink (ring_link.h:
// MPI point-to-point, pipelined in segments so reduction overlaps the transfer, or the TCP ring),
// all-reduce as the two in sequence, and MPI's own collectives where they measure faster (small
// all-reduce) or are simplest. Which of these serves a call is the TransportTable's choice
// (transport_table.h), made from transports set up once per communicator (rebind()).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "collectives/collective_config.h"
#include "collectives/mpi_link.h"
#include "collectives/ring_link.h"
#include "collectives/shm_collectives.h"
#include "collectives/transport_table.h"
#include "transport/liveness.h"
#include "transport/tcp_ring.h"
#include "util/types.h"

namespace relax {

// Splits `count` elements into `parts` contiguous blocks whose sizes differ by at most one; the
// first `count % parts` blocks take the extra element.
std::vector<int64_t> even_counts(int64_t count, int parts);
// Exclusive prefix sums of `counts` (block offsets).
std::vector<int64_t> block_offsets(const std::vector<int64_t>& counts);

// Bytes moved by this rank's collectives (read from other threads for statistics).
struct Traffic {
  std::atomic<int64_t> bytes_sent{0};
  std::atomic<int64_t> bytes_received{0};
};

// One message's bytes.
struct Message {
  uint8_t* data = nullptr;
  int64_t bytes = 0;
};

// `parts` rounds, each a scatter (a message to and from every peer) then a gather (this rank's
// message to every peer, and one from each). Round p+1's scatter is sent before round p's
// scatter is reduced and its gather assembled, so the link carries one round while this rank
// works on another. The callbacks name the buffers and do the work:
struct PipelinedScatterGather {
  int parts = 1;
  std::function<Message(int part, int peer)> scatter_send, scatter_recv, gather_recv;
  std::function<Message(int part)> gather_send;
  // Fills scatter_send(part, peer) just before it is sent (also for peer == rank, which is not sent).
  std::function<void(int part, int peer)> produce;
  // scatter_recv(part, peer) has arrived: called in rank order within a part (for peer == rank
  // after produce(part, rank), with nothing received).
  std::function<void(int part, int peer)> reduce;
  // Every reduce of `part` is done: fills gather_send(part).
  std::function<void(int part)> finish;
  // gather_recv(part, peer) has arrived (in any order; for peer == rank right after finish(part)).
  std::function<void(int part, int peer)> consume;
};

class Collectives {
 public:
  // Collective over `comm` unless config.shm_allowed is false: the ranks adopt rank 0's
  // shared-memory and TCP ring settings and, if those enable it and every rank is on this node,
  // map the shared-memory segment now (at a point every rank reaches together), or connect the
  // TCP ring.
  Collectives(MPI_Comm comm, CollectiveConfig config);

  // Sets the transports up afresh over `comm` (collective over it; the constructor's set-up, for
  // a new set of ranks): drops the old shared-memory segment and ring link, agrees rank 0's
  // settings, maps or connects anew and rebuilds the transport table; the collectives
  // themselves are unchanged. No collective may be in flight.
  void rebind(MPI_Comm comm);
  // Which transport serves each collective and size (tests and logs read it).
  const TransportTable& transports() const { return table_; }
  // The ring's link (MPI point-to-point or the TCP ring).
  const RingLink& ring_link() const { return *ring_; }

  int rank() const { return rank_; }
  int size() const { return size_; }
  CollectiveConfig& config() { return config_; }
  const Traffic& traffic() const { return traffic_; }

  // Afterwards block r of `dst` (at block_offsets(counts)[r]) holds the reduction over all ranks
  // of block r of their `src`; other blocks of `dst` hold partial results. `src` is only read
  // (each block of it passes through this rank's reduction exactly once), so src == dst
  // (in place) and src != dst (no copy of the input) both work. op: Sum (also for Average),
  // Min, Max, Product.
  Status ring_reduce_scatter(const void* src, void* dst, const std::vector<int64_t>& counts, int32_t dtype,
                             int32_t op);
  // In place: on entry each rank's own block r is valid; afterwards every block is.
  Status ring_allgather(void* buf, const std::vector<int64_t>& counts, size_t element_size);
  // All-reduce of `src` into `dst` (may be equal); `postscale` multiplies the result (applied once
  // per element, by the element's owner, so every rank gets identical bits).
  Status allreduce(const void* src, void* dst, int64_t count, int32_t dtype, int32_t op, double postscale);
  // allreduce() of tensors laid end to end, each read from and written to where it lies (no
  // fusion buffer to copy them through): the same bits as allreduce() of their concatenation.
  // Only where reduces_pieces() holds for their total size.
  Status allreduce_pieces(std::vector<Piece> pieces, int32_t dtype, int32_t op, double postscale);
  // Whether allreduce_pieces() serves `bytes` (every rank decides alike): on several ranks,
  // through shared memory or the TCP ring (not MPI's own all-reduce or point-to-point).
  bool reduces_pieces(int64_t bytes) const;
  // Reduce-scatter of `src` with per-rank element counts; `work` (the size of `src`) receives
  // partial results; the own reduced block, scaled by `postscale`, is written to `out`.
  Status reduce_scatter(const void* src, void* work, const std::vector<int64_t>& counts, int32_t dtype,
                        int32_t op, double postscale, void* out);
  // reduce_scatter() of the concatenation of `inputs` (their `in` and `bytes`), each read where it
  // lies (through shared memory or the TCP ring; MPI's point-to-point steps copy them into `work`
  // first): the same bits as reduce_scatter() of the concatenation.
  Status reduce_scatter(const std::vector<Piece>& inputs, void* work, const std::vector<int64_t>& counts,
                        int32_t dtype, int32_t op, double postscale, void* out);
  Status broadcast(void* buf, int64_t bytes, int root);
  // Concatenates each rank's `counts[r]` elements in rank order into `out`.
  Status allgatherv(const void* in, void* out, const std::vector<int64_t>& counts, size_t element_size);
  Status alltoallv(const void* in, const std::vector<int64_t>& send_counts, void* out,
                   const std::vector<int64_t>& recv_counts, size_t element_size);

  // One message to every rank and one from every rank, streamed so that local work overlaps the
  // transfers: `produce(peer)` fills `send[peer]` just before it is sent (peers in the order
  // rank+1, rank+2, ...: every rank sends to a different peer at a time), and `consume(peer)`
  // runs once `recv[peer]` has arrived: in rank order when `in_rank_order` (a reduction whose
  // bits must not depend on arrival order), else as messages arrive. The own message is
  // produced second (once the first transfer is under way), copied from send[rank] to recv[rank] if they
  // differ and consumed like the others. Each message is at most 1 GiB. Point-to-point MPI, never shared memory.
  Status streamed_exchange(const std::vector<uint8_t*>& send, const std::vector<int64_t>& send_bytes,
                           const std::vector<uint8_t*>& recv, const std::vector<int64_t>& recv_bytes,
                           const std::function<void(int)>& produce, const std::function<void(int)>& consume,
                           bool in_rank_order);
  // Runs `plan` over point-to-point MPI (never shared memory); every message at most 1 GiB.
  Status pipelined_scatter_gather(const PipelinedScatterGather& plan);
  // Whether a collective of `bytes` runs through shared memory (every rank decides alike).
  bool uses_shared_memory(int64_t bytes) const { return shared_memory(bytes) != nullptr; }
  // The shared-memory segment whenever this communicator has one, whatever RELAX_SHM_MIN_BYTES
  // says (negotiation rounds go through it): null on every rank or on none.
  ShmCollectives* shared_segment() const { return shm_.get(); }
  // A pairwise step with any two peers: over the ring's link when they are its neighbours, else
  // MPI point-to-point; every wait bounded by config.peer_timeout_s (public for Adasum's tree,
  // collectives/adasum.h).
  Status sendrecv(const uint8_t* send, int64_t send_bytes, int dest, uint8_t* recv, int64_t recv_bytes,
                  int source);
  // dst = the all-reduce of the data every rank carried in the last negotiation round through
  // the shared segment (ShmCollectives::exchange_records), with allreduce()'s bits.
  void reduce_inline(void* dst, int64_t count, int32_t dtype, int32_t op, double postscale);

 private:
  // A ring step of a reduce-scatter over `buf`: sends elements [send_begin, + send_count) of its
  // inputs (of its results when `send_reduced`) to the right neighbour while receiving
  // `recv_count` elements from the left one, which are combined with the inputs from
  // `recv_begin` into the results there as they arrive.
  Status exchange_and_reduce(const Pieces& buf, bool send_reduced, int64_t send_begin, int64_t send_count,
                             int64_t recv_begin, int64_t recv_count, int32_t dtype, int32_t op);
  // The ring collectives over a concatenation of pieces (only a link that takes_pieces() takes
  // more than one).
  Status ring_reduce_scatter(const Pieces& buf, const std::vector<int64_t>& counts, int32_t dtype, int32_t op);
  Status ring_allgather(const Pieces& buf, const std::vector<int64_t>& counts, size_t element_size);
  Status ring_allreduce(const Pieces& buf, int32_t dtype, int32_t op, double postscale);
  Status mpi_allreduce(const void* src, void* dst, int64_t count, int32_t dtype, int32_t op, double postscale);
  // MPI_Waitall / MPI_Wait / MPI_Waitany by polling: busy at first (yielding the core between
  // polls when config.yield_while_waiting), then sleeping between polls; bounded by
  // config.peer_timeout_s (bounded_wait.h: `during` names the wait in the error).
  template <class Test>
  Status poll_until_done(Test test, const char* what, const char* during);
  // A nonblocking collective's request (`what`: the MPI call, `during`: the operation), waited as above.
  Status wait_collective(MPI_Request& request, const char* what, const char* during);
  Status wait_all(std::vector<MPI_Request>& requests);
  Status wait_one(MPI_Request& request);
  Status wait_any(std::vector<MPI_Request>& requests, int& index);
  // Rank 0's settings decide: a rank configured otherwise would run other collectives and hang.
  // False when a peer did not answer (the silence is noted: every later collective fails).
  bool adopt_rank0_settings();
  void set_up_shared_memory();
  void set_up_tcp_ring();
  // The constructor's (and rebind()'s) set-up over comm_: rank 0's settings, then shared memory
  // or the TCP ring.
  void set_up_transports();
  // The shared-memory collectives for an operation of `bytes` (all ranks decide alike), or null.
  ShmCollectives* shared_memory(int64_t bytes) const;
  void count_traffic(int64_t sent, int64_t received);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  CollectiveConfig config_;
  const CollectiveConfig requested_;  // the settings as configured (rebind() starts from them again)
  Traffic traffic_;
  // MPI_Iallgatherv's counts and displacements: MPI may read them until the request completes,
  // which after a timeout is never (bounded_wait.h), so they outlive the call.
  std::vector<int> gather_counts_, gather_displs_;
  int64_t rank0_settings_[3] = {0, 0, 0};  // adopt_rank0_settings()'s broadcast buffer, for the same reason
  std::unique_ptr<ShmCollectives> shm_;
  std::unique_ptr<TcpRing> tcp_ring_;  // set_up_tcp_ring()'s connected ring, until rebind() hands it to ring_
  std::unique_ptr<MpiLink> mpi_;       // MPI point-to-point with any peer
  std::unique_ptr<RingLink> ring_;     // the ring's steps: the TCP ring, else MPI point-to-point
  TransportTable table_{config_, TransportSet{}};
};

}  // namespace relax
