// The ring's steps, and pairwise exchanges with any peer, on MPI point-to-point (tag
// tags::kRingStep): messages in ring segments (config.segment_bytes), a window of
// config.receive_window segments received ahead of the reduction, every wait bounded by
// config.peer_timeout_s (bounded_wait.h). One contiguous part each way (takes_pieces() is false):
// two ranks must cut a message into the same segments, which their own part boundaries would not.
#pragma once

#include <mpi.h>

#include <vector>

#include "collectives/collective_config.h"
#include "collectives/ring_link.h"

namespace relax {

class MpiLink final : public RingLink {
 public:
  // Over `comm`, reading `config` (owned by the collectives, which may retune it) at each call.
  MpiLink(MPI_Comm comm, const CollectiveConfig& config);

  const char* name() const override { return "MPI point-to-point"; }
  int right_rank() const override { return right_; }
  int left_rank() const override { return left_; }
  bool takes_pieces() const override { return false; }
  Status exchange(const std::vector<iovec>& send, const std::vector<iovec>& recv) override;
  Status exchange_streamed(const std::vector<iovec>& send, int64_t recv_bytes, int64_t unit,
                           const Arrived& arrived) override;

  // Sends `send_bytes` to `dest` while receiving `recv_bytes` from `source` (any two peers: a
  // pairwise all-to-all step), in ring segments: a larger message would exceed the TCP eager
  // limit that follows the segment size, and its rendezvous acknowledgement would wait behind
  // the peer's own outgoing data.
  Status sendrecv(const uint8_t* send, int64_t send_bytes, int dest, uint8_t* recv, int64_t recv_bytes, int source);

 private:
  Status wait_all(std::vector<MPI_Request>& requests);
  Status wait_one(MPI_Request& request);

  MPI_Comm comm_;
  const CollectiveConfig& config_;
  int right_ = 0;
  int left_ = 0;
  std::vector<uint8_t> scratch_;  // the receive window's segments
};

}  // namespace relax
