#include "collectives/tcp_ring_link.h"

#include <string>
#include <utility>

#include "transport/liveness.h"

namespace relax {

TcpRingLink::TcpRingLink(std::unique_ptr<TcpRing> ring, MPI_Comm comm, const CollectiveConfig& config)
    : ring_(std::move(ring)), comm_(comm), config_(config) {}

Status TcpRingLink::verdict(Status status) {
  if (status.code != RELAX_ERR_STALLED) return status;
  // The neighbour this rank waited for may itself wait for the silent rank further round the
  // ring: the liveness check names the one that does not answer at all.
  const std::string prefix = "TCP ring: ";
  std::string waited = status.message;
  if (waited.compare(0, prefix.size(), prefix) == 0) waited.erase(0, prefix.size());
  return Status::error(RELAX_ERR_STALLED,
                       report_silence(comm_, config_.peer_timeout_s, "a TCP ring transfer (" + waited + ")"));
}

Status TcpRingLink::exchange(const std::vector<iovec>& send, const std::vector<iovec>& recv) {
  return verdict(ring_->exchange(send, recv, [](int64_t) {}));
}

Status TcpRingLink::exchange_streamed(const std::vector<iovec>& send, int64_t recv_bytes, int64_t unit,
                                      const Arrived& arrived) {
  if (scratch_.size() < static_cast<size_t>(recv_bytes)) scratch_.resize(static_cast<size_t>(recv_bytes));
  int64_t handed = 0;  // bytes
  auto on_received = [&](int64_t received_bytes) {
    const int64_t complete = received_bytes / unit * unit;
    if (complete - handed < kReducePiece && complete < recv_bytes) return;
    if (complete > handed) arrived(scratch_.data() + handed, handed, complete - handed);
    handed = complete;
  };
  return verdict(ring_->exchange(send, {iovec{scratch_.data(), static_cast<size_t>(recv_bytes)}}, on_received));
}

}  // namespace relax
