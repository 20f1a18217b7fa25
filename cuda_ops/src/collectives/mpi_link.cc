#include "collectives/mpi_link.h"

#include <algorithm>

#include "collectives/bounded_wait.h"
#include "collectives/point_to_point.h"
#include "transport/tags.h"

namespace relax {
namespace {

constexpr const char* kTransfer = "a collective's transfer";

// The single part of a message, or null (with `bad` set) if it has several.
const iovec* single_part(const std::vector<iovec>& parts, bool& bad) {
  if (parts.size() > 1) bad = true;
  return parts.empty() ? nullptr : &parts.front();
}

}  // namespace

MpiLink::MpiLink(MPI_Comm comm, const CollectiveConfig& config) : comm_(comm), config_(config) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm_, &rank);
  MPI_Comm_size(comm_, &size);
  right_ = mod(rank + 1, size);
  left_ = mod(rank - 1, size);
}

Status MpiLink::wait_all(std::vector<MPI_Request>& requests) {
  const int n = static_cast<int>(requests.size());
  return bounded_poll(comm_, config_.peer_timeout_s, config_.yield_while_waiting,
                      [&](int& done) { return MPI_Testall(n, requests.data(), &done, MPI_STATUSES_IGNORE); },
                      "MPI_Testall", kTransfer);
}

Status MpiLink::wait_one(MPI_Request& request) {
  return bounded_poll(comm_, config_.peer_timeout_s, config_.yield_while_waiting,
                      [&](int& done) { return MPI_Test(&request, &done, MPI_STATUS_IGNORE); }, "MPI_Test", kTransfer);
}

Status MpiLink::exchange(const std::vector<iovec>& send, const std::vector<iovec>& recv) {
  bool bad = false;
  const iovec* out = single_part(send, bad);
  const iovec* in = single_part(recv, bad);
  if (bad) return Status::error(RELAX_ERR_INTERNAL, "MPI's ring steps need one contiguous buffer");
  return sendrecv(out ? static_cast<const uint8_t*>(out->iov_base) : nullptr,
                  out ? static_cast<int64_t>(out->iov_len) : 0, right_,
                  in ? static_cast<uint8_t*>(in->iov_base) : nullptr, in ? static_cast<int64_t>(in->iov_len) : 0,
                  left_);
}

Status MpiLink::sendrecv(const uint8_t* send, int64_t send_bytes, int dest, uint8_t* recv, int64_t recv_bytes,
                         int source) {
  const int64_t chunk = std::max<int64_t>(1, std::min(config_.segment_bytes, kMaxMessageBytes));
  std::vector<MPI_Request> requests;
  for (int64_t off = 0; off < recv_bytes; off += chunk) {
    requests.emplace_back();
    const int n = static_cast<int>(std::min(chunk, recv_bytes - off));
    int rc = MPI_Irecv(recv + off, n, MPI_BYTE, source, tags::kRingStep, comm_, &requests.back());
    if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Irecv");
  }
  for (int64_t off = 0; off < send_bytes; off += chunk) {
    requests.emplace_back();
    const int n = static_cast<int>(std::min(chunk, send_bytes - off));
    int rc = MPI_Isend(send + off, n, MPI_BYTE, dest, tags::kRingStep, comm_, &requests.back());
    if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Isend");
  }
  return wait_all(requests);
}

// Every segment is sent at once; `window` receives stay posted, so the transfer continues while
// a received segment is being reduced (by `arrived`).
Status MpiLink::exchange_streamed(const std::vector<iovec>& send, int64_t recv_bytes, int64_t unit,
                                  const Arrived& arrived) {
  bool bad = false;
  const iovec* out = single_part(send, bad);
  if (bad) return Status::error(RELAX_ERR_INTERNAL, "MPI's ring steps need one contiguous buffer");
  const auto* send_data = out ? static_cast<const uint8_t*>(out->iov_base) : nullptr;
  const int64_t send_bytes = out ? static_cast<int64_t>(out->iov_len) : 0;
  const int64_t seg = std::max<int64_t>(1, std::min(config_.segment_bytes, kMaxMessageBytes) / unit) * unit;  // bytes
  const int64_t nsend = (send_bytes + seg - 1) / seg;
  const int64_t nrecv = (recv_bytes + seg - 1) / seg;
  const int64_t window = std::max<int64_t>(2, config_.receive_window);
  if (scratch_.size() < static_cast<size_t>(window * seg)) scratch_.resize(static_cast<size_t>(window * seg));

  std::vector<MPI_Request> sends(static_cast<size_t>(nsend), MPI_REQUEST_NULL);
  for (int64_t k = 0; k < nsend; ++k) {
    const int64_t n = std::min(seg, send_bytes - k * seg);
    int rc = MPI_Isend(send_data + k * seg, static_cast<int>(n), MPI_BYTE, right_, tags::kRingStep, comm_,
                       &sends[static_cast<size_t>(k)]);
    if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Isend");
  }
  std::vector<MPI_Request> recvs(static_cast<size_t>(window), MPI_REQUEST_NULL);
  auto slot = [&](int64_t k) { return scratch_.data() + (k % window) * seg; };
  auto post = [&](int64_t k) {
    const int64_t n = std::min(seg, recv_bytes - k * seg);
    return MPI_Irecv(slot(k), static_cast<int>(n), MPI_BYTE, left_, tags::kRingStep, comm_,
                     &recvs[static_cast<size_t>(k % window)]);
  };
  for (int64_t k = 0; k < std::min(window, nrecv); ++k) {
    int rc = post(k);
    if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Irecv");
  }
  for (int64_t k = 0; k < nrecv; ++k) {
    Status waited = wait_one(recvs[static_cast<size_t>(k % window)]);
    if (!waited.is_ok()) return waited;
    arrived(slot(k), k * seg, std::min(seg, recv_bytes - k * seg));
    if (k + window < nrecv) {
      const int rc = post(k + window);
      if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Irecv");
    }
  }
  return wait_all(sends);
}

}  // namespace relax
