// Collectives' all-to-all exchanges on MPI point-to-point (the compressed all-reduce's transport):
// every rank sends a message to and receives one from every peer, with local work overlapped.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/point_to_point.h"
#include "transport/tags.h"

namespace relax {
namespace {

constexpr int kExchangeTag = tags::kStreamedExchange;
constexpr int kPipelineTag = tags::kPipelineFirst;  // round p: scatter kPipelineTag + 2p, gather kPipelineTag + 2p + 1

}  // namespace

Status Collectives::streamed_exchange(const std::vector<uint8_t*>& send, const std::vector<int64_t>& send_bytes,
                                      const std::vector<uint8_t*>& recv, const std::vector<int64_t>& recv_bytes,
                                      const std::function<void(int)>& produce,
                                      const std::function<void(int)>& consume, bool in_rank_order) {
  const size_t me = static_cast<size_t>(rank_);
  for (int r = 0; r < size_; ++r) {
    const size_t j = static_cast<size_t>(r);
    if (send_bytes[j] > kMaxMessageBytes || recv_bytes[j] > kMaxMessageBytes) {
      return Status::error(RELAX_ERR_INVALID_ARGUMENT, "streamed_exchange: a message above 1 GiB");
    }
  }
  std::vector<MPI_Request> receives(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  std::vector<bool> consumed(static_cast<size_t>(size_), false);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    int rc = MPI_Irecv(recv[static_cast<size_t>(r)], static_cast<int>(recv_bytes[static_cast<size_t>(r)]), MPI_BYTE,
                       r, kExchangeTag, comm_, &receives[static_cast<size_t>(r)]);
    if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Irecv");
  }
  // The own message is produced once the first transfer is under way: that one overlaps it.
  bool own_ready = false;
  auto produce_own = [&] {
    produce(rank_);
    if (send[me] != recv[me] && send_bytes[me] > 0) std::memcpy(recv[me], send[me], static_cast<size_t>(send_bytes[me]));
    own_ready = true;
  };
  int next = 0;  // in rank order: the next message to consume
  // Consumes what has arrived (in rank order: up to the first message still missing), after
  // blocking for one message when `wait`.
  auto drain = [&](bool wait) -> Status {
    if (in_rank_order) {
      while (next < size_) {
        if (next == rank_ && !own_ready) break;
        MPI_Request& request = receives[static_cast<size_t>(next)];
        int done = 1;
        if (request != MPI_REQUEST_NULL) {
          Status st = wait ? wait_one(request) : mpi_status(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
          if (!st.is_ok()) return st;
        }
        if (!done) break;
        consume(next++);
        wait = false;  // one blocking wait per call; then whatever else is already there
      }
      return Status::ok();
    }
    if (own_ready && !consumed[me]) {
      consumed[me] = true;
      consume(rank_);
    }
    for (;;) {
      int index = MPI_UNDEFINED, done = 0;
      Status st = wait ? wait_any(receives, index)
                       : mpi_status(MPI_Testany(size_, receives.data(), &index, &done, MPI_STATUS_IGNORE), "MPI_Testany");
      if (!st.is_ok()) return st;
      if (index == MPI_UNDEFINED) return Status::ok();  // nothing pending, or nothing arrived yet
      consumed[static_cast<size_t>(index)] = true;
      consume(index);
      wait = false;
    }
  };
  for (int s = 1; s < size_; ++s) {
    const int to = mod(rank_ + s, size_);
    const size_t j = static_cast<size_t>(to);
    produce(to);
    int rc = MPI_Isend(send[j], static_cast<int>(send_bytes[j]), MPI_BYTE, to, kExchangeTag, comm_, &sends[j]);
    if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Isend");
    if (s == 1) produce_own();
    Status st = drain(false);  // also lets MPI progress the transfers under way
    if (!st.is_ok()) return st;
  }
  if (!own_ready) produce_own();  // (a single rank)
  for (;;) {
    const bool left = in_rank_order ? next < size_
                                    : std::any_of(receives.begin(), receives.end(),
                                                  [](MPI_Request r) { return r != MPI_REQUEST_NULL; }) ||
                                          !consumed[me];
    if (!left) break;
    Status st = drain(true);
    if (!st.is_ok()) return st;
  }
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    sent += send_bytes[static_cast<size_t>(r)];
    received += recv_bytes[static_cast<size_t>(r)];
  }
  count_traffic(sent, received);
  return wait_all(sends);
}

Status Collectives::pipelined_scatter_gather(const PipelinedScatterGather& plan) {
  const int n = size_;
  const int parts = plan.parts;
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  if (parts < 1 || (has_tag_ub && kPipelineTag + 2ll * parts > *tag_ub)) {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                         "pipelined_scatter_gather: " + std::to_string(parts) + " rounds (MPI tags run out)");
  }
  const size_t slots = static_cast<size_t>(parts) * static_cast<size_t>(n);
  auto slot = [n](int part, int peer) {
    return static_cast<size_t>(part) * static_cast<size_t>(n) + static_cast<size_t>(peer);
  };
  auto too_large = [] {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT, "pipelined_scatter_gather: a message above 1 GiB");
  };
  std::vector<MPI_Request> scatter_recvs(slots, MPI_REQUEST_NULL), gather_recvs(slots, MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends;
  sends.reserve(2 * slots);
  int64_t sent = 0, received = 0;
  auto post_receive = [&](const Message& m, int peer, int tag, MPI_Request& request) -> Status {
    if (m.bytes > kMaxMessageBytes) return too_large();
    received += m.bytes;
    return mpi_status(MPI_Irecv(m.data, static_cast<int>(m.bytes), MPI_BYTE, peer, tag, comm_, &request), "MPI_Irecv");
  };
  auto send = [&](const Message& m, int peer, int tag) -> Status {
    if (m.bytes > kMaxMessageBytes) return too_large();
    sent += m.bytes;
    sends.emplace_back();
    return mpi_status(MPI_Isend(m.data, static_cast<int>(m.bytes), MPI_BYTE, peer, tag, comm_, &sends.back()),
                      "MPI_Isend");
  };
  for (int p = 0; p < parts; ++p) {
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      Status st = post_receive(plan.scatter_recv(p, r), r, kPipelineTag + 2 * p, scatter_recvs[slot(p, r)]);
      if (st.is_ok()) st = post_receive(plan.gather_recv(p, r), r, kPipelineTag + 2 * p + 1, gather_recvs[slot(p, r)]);
      if (!st.is_ok()) return st;
    }
  }
  // Round p's scatter: peers in the order rank+1, rank+2, ... (every rank sends to a different
  // peer at a time); the own message once the first transfer is under way.
  auto send_scatter = [&](int p) -> Status {
    for (int s = 1; s < n; ++s) {
      const int to = mod(rank_ + s, n);
      plan.produce(p, to);
      Status st = send(plan.scatter_send(p, to), to, kPipelineTag + 2 * p);
      if (!st.is_ok()) return st;
      if (s == 1) plan.produce(p, rank_);
    }
    if (n == 1) plan.produce(p, rank_);
    return Status::ok();
  };
  int gathers_left = (n - 1) * parts;
  // Consumes the gather messages that have arrived; blocks for one first when `wait`.
  auto drain_gathers = [&](bool wait) -> Status {
    while (gathers_left > 0) {
      int index = MPI_UNDEFINED, done = 0;
      Status st = wait ? wait_any(gather_recvs, index)
                       : mpi_status(MPI_Testany(static_cast<int>(slots), gather_recvs.data(), &index, &done,
                                                MPI_STATUS_IGNORE), "MPI_Testany");
      if (!st.is_ok()) return st;
      if (index == MPI_UNDEFINED) return Status::ok();
      --gathers_left;
      plan.consume(index / n, index % n);
      wait = false;
    }
    return Status::ok();
  };
  Status st = send_scatter(0);
  for (int p = 0; p < parts && st.is_ok(); ++p) {
    if (p + 1 < parts) st = send_scatter(p + 1);
    for (int r = 0; r < n && st.is_ok(); ++r) {  // in rank order: the sum's bits do not depend on arrival
      if (r != rank_) {
        st = drain_gathers(false);
        if (st.is_ok()) st = wait_one(scatter_recvs[slot(p, r)]);
      }
      if (st.is_ok()) plan.reduce(p, r);
    }
    if (!st.is_ok()) break;
    plan.finish(p);
    plan.consume(p, rank_);
    for (int s = 1; s < n && st.is_ok(); ++s) {
      st = send(plan.gather_send(p), mod(rank_ + s, n), kPipelineTag + 2 * p + 1);
    }
    if (st.is_ok()) st = drain_gathers(false);
  }
  while (st.is_ok() && gathers_left > 0) st = drain_gathers(true);
  if (!st.is_ok()) return st;
  count_traffic(sent, received);
  return wait_all(sends);
}

}  // namespace relax
