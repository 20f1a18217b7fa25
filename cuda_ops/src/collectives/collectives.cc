#include "collectives/collectives.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "collectives/bounded_wait.h"
#include "collectives/point_to_point.h"
#include "collectives/reduce.h"
#include "collectives/tcp_ring_link.h"
#include "transport/liveness.h"
#include "transport/mpi_context.h"
#include "util/backoff.h"
#include "util/logging.h"

namespace relax {
namespace {

constexpr const char* kTransfer = "a collective's transfer";

MPI_Datatype mpi_type(int32_t dtype) {
  switch (dtype) {
    case RELAX_FLOAT32: return MPI_FLOAT;
    case RELAX_FLOAT64: return MPI_DOUBLE;
    case RELAX_INT32: return MPI_INT32_T;
    case RELAX_INT64: return MPI_INT64_T;
    case RELAX_UINT8: return MPI_UINT8_T;
    case RELAX_INT8: return MPI_INT8_T;
    case RELAX_INT16: return MPI_INT16_T;
    case RELAX_UINT16: return MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;  // 16-bit floats have no MPI type: ring path
  }
}

MPI_Op mpi_op(int32_t op) {
  switch (op) {
    case RELAX_OP_SUM:
    case RELAX_OP_AVERAGE: return MPI_SUM;
    case RELAX_OP_MIN: return MPI_MIN;
    case RELAX_OP_MAX: return MPI_MAX;
    case RELAX_OP_PRODUCT: return MPI_PROD;
    default: return MPI_OP_NULL;
  }
}

// The parts of bytes [begin, begin + bytes) of `buf`: its results (`out`) or its inputs.
std::vector<iovec> iovecs(const Pieces& buf, int64_t begin, int64_t bytes, bool results) {
  std::vector<iovec> parts;
  buf.each_part(begin, bytes, [&](const uint8_t* in, uint8_t* out, int64_t n, int64_t) {
    parts.push_back(iovec{results ? out : const_cast<uint8_t*>(in), static_cast<size_t>(n)});
  });
  return parts;
}

}  // namespace

std::vector<int64_t> even_counts(int64_t count, int parts) {
  std::vector<int64_t> counts(static_cast<size_t>(parts), count / parts);
  for (int64_t i = 0; i < count % parts; ++i) ++counts[static_cast<size_t>(i)];
  return counts;
}

std::vector<int64_t> block_offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

Collectives::Collectives(MPI_Comm comm, CollectiveConfig config)
    : comm_(comm), config_(config), requested_(config) {
  rebind(comm);
}

void Collectives::rebind(MPI_Comm comm) {
  comm_ = comm;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  ring_.reset();  // (before the segment: nothing may point into it)
  mpi_.reset();
  tcp_ring_.reset();
  shm_.reset();
  config_.shm_min_bytes = requested_.shm_min_bytes;  // what the last set-up adopted or turned off
  config_.shm_slot_bytes = requested_.shm_slot_bytes;
  config_.tcp_ring = requested_.tcp_ring;
  set_up_transports();
  mpi_ = std::make_unique<MpiLink>(comm_, config_);
  if (tcp_ring_) {
    ring_ = std::make_unique<TcpRingLink>(std::move(tcp_ring_), comm_, config_);
  } else {
    ring_ = std::make_unique<MpiLink>(comm_, config_);
  }
  table_ = TransportTable(config_, TransportSet{size_, shm_ != nullptr, ring_->takes_pieces()});
}

void Collectives::set_up_transports() {
  if (!config_.shm_allowed || size_ == 1) {
    config_.tcp_ring = false;
    return;
  }
  if (!adopt_rank0_settings()) {  // a silent peer: the setup's blocking collectives would wait for it forever
    config_.tcp_ring = false;
    return;
  }
  set_up_shared_memory();
  if (config_.tcp_ring && !shm_) set_up_tcp_ring();
}

bool Collectives::adopt_rank0_settings() {
  int64_t* settings = rank0_settings_;  // (a member: MPI may still write it after a timed-out wait)
  settings[0] = config_.shm_min_bytes;
  settings[1] = config_.shm_slot_bytes;
  settings[2] = config_.tcp_ring ? 1 : 0;
  if (peer_silence_noted()) return false;
  MPI_Request request = MPI_REQUEST_NULL;
  Status st = mpi_status(MPI_Ibcast(settings, 3, MPI_INT64_T, 0, comm_, &request), "MPI_Ibcast");
  if (st.is_ok()) st = wait_collective(request, "MPI_Ibcast", "the set-up of a process set's collectives");
  if (!st.is_ok()) {
    RELAX_LOG(Error, "Collectives not set up: " << st.message);
    return false;
  }
  if (settings[0] != config_.shm_min_bytes || settings[1] != config_.shm_slot_bytes ||
      settings[2] != (config_.tcp_ring ? 1 : 0)) {
    RELAX_LOG(Warning, "RELAX_SHM_COLLECTIVES, RELAX_SHM_MIN_BYTES, RELAX_SHM_SLOT_BYTES or RELAX_TCP_RING differ "
                       "between rank 0 and this rank; using rank 0's settings.");
  }
  config_.shm_min_bytes = settings[0];
  config_.shm_slot_bytes = settings[1];
  config_.tcp_ring = settings[2] != 0;
  return true;
}

void Collectives::set_up_tcp_ring() {
  std::string why;
  tcp_ring_ = TcpRing::connect(comm_, config_.peer_timeout_s, why);
  if (tcp_ring_) {
    RELAX_LOG(Debug, "TCP ring connected: sending to rank " << tcp_ring_->right_rank() << ", receiving from rank "
                                                             << tcp_ring_->left_rank() << ".");
  } else {
    RELAX_LOG(Warning, "TCP ring unavailable (" << why << "); the ring's steps use MPI point-to-point instead.");
  }
}

void Collectives::set_up_shared_memory() {
  if (config_.shm_min_bytes < 0) return;
  std::string why;
  bool expected = false;
  shm_ = ShmCollectives::create(comm_, config_.shm_slot_bytes, config_.shm_spin_us, config_.shm_spin_gate,
                               config_.peer_timeout_s, why, expected);
  if (!shm_ && expected) {
    RELAX_LOG(Debug, "Shared-memory collectives not used (" << why << ").");
  } else if (!shm_) {
    RELAX_LOG(Warning, "Shared-memory collectives unavailable (" << why << "); collectives use MPI instead, "
                                                                           "which is slower within one node.");
  }
}

ShmCollectives* Collectives::shared_memory(int64_t bytes) const {
  // (the table's rule; a reduce-scatter has no entry ahead of shared memory)
  return table_.choose(Collective::kReduceScatter, bytes) == Route::kSharedMemory ? shm_.get() : nullptr;
}

void Collectives::reduce_inline(void* dst, int64_t count, int32_t dtype, int32_t op, double postscale) {
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  // Counted as a ring would move, like shared_memory()'s all-reduce: which of the two paths runs
  // depends on timing, and the step telemetry and performance model compare ring bytes.
  count_traffic(2 * bytes * (size_ - 1) / size_, 2 * bytes * (size_ - 1) / size_);
  shm_->reduce_inline(dst, count, dtype, op, postscale);
}

void Collectives::count_traffic(int64_t sent, int64_t received) {
  traffic_.bytes_sent += sent;
  traffic_.bytes_received += received;
}

Status Collectives::sendrecv(const uint8_t* send, int64_t send_bytes, int dest, uint8_t* recv,
                             int64_t recv_bytes, int source) {
  count_traffic(send_bytes, recv_bytes);
  if (dest == ring_->right_rank() && source == ring_->left_rank()) {
    return ring_->exchange({iovec{const_cast<uint8_t*>(send), static_cast<size_t>(send_bytes)}},
                           {iovec{recv, static_cast<size_t>(recv_bytes)}});
  }
  return mpi_->sendrecv(send, send_bytes, dest, recv, recv_bytes, source);
}

// The waits of the collectives' own transfers: bounded by config_.peer_timeout_s (bounded_wait.h).
template <class Test>
Status Collectives::poll_until_done(Test test, const char* what, const char* during) {
  return bounded_poll(comm_, config_.peer_timeout_s, config_.yield_while_waiting, test, what, during);
}

Status Collectives::wait_collective(MPI_Request& request, const char* what, const char* during) {
  return bounded_wait(comm_, request, config_.peer_timeout_s, config_.yield_while_waiting, what, during);
}

Status Collectives::wait_all(std::vector<MPI_Request>& requests) {
  const int n = static_cast<int>(requests.size());
  return poll_until_done([&](int& done) { return MPI_Testall(n, requests.data(), &done, MPI_STATUSES_IGNORE); },
                         "MPI_Testall", kTransfer);
}

Status Collectives::wait_one(MPI_Request& request) {
  return poll_until_done([&](int& done) { return MPI_Test(&request, &done, MPI_STATUS_IGNORE); }, "MPI_Test",
                         kTransfer);
}

Status Collectives::wait_any(std::vector<MPI_Request>& requests, int& index) {
  const int n = static_cast<int>(requests.size());
  // (done with index MPI_UNDEFINED: nothing was pending)
  return poll_until_done([&](int& done) { return MPI_Testany(n, requests.data(), &index, &done, MPI_STATUS_IGNORE); },
                         "MPI_Testany", kTransfer);
}

// The link streams the incoming block; each run is combined with this rank's inputs into the
// results while the rest is in flight. Blocks are sent from and reduced into the tensors where
// they lie (a link that does not take pieces gets one).
Status Collectives::exchange_and_reduce(const Pieces& buf, bool send_reduced, int64_t send_begin,
                                        int64_t send_count, int64_t recv_begin, int64_t recv_count, int32_t dtype,
                                        int32_t op) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  if (buf.size() != 1 && !ring_->takes_pieces()) {
    return Status::error(RELAX_ERR_INTERNAL, std::string(ring_->name()) + "'s ring steps need one contiguous buffer");
  }
  count_traffic(send_count * esize, recv_count * esize);
  return ring_->exchange_streamed(iovecs(buf, send_begin * esize, send_count * esize, send_reduced),
                                  recv_count * esize, esize,
                                  [&](const uint8_t* arrived, int64_t offset, int64_t bytes) {
                                    buf.each_part(recv_begin * esize + offset, bytes,
                                                  [&](const uint8_t* own, uint8_t* result, int64_t n, int64_t done) {
                                                    reduce_pair(result, own, arrived + done, n / esize, dtype, op);
                                                  });
                                  });
}

Status Collectives::ring_reduce_scatter(const void* src, void* dst, const std::vector<int64_t>& counts,
                                        int32_t dtype, int32_t op) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return ring_reduce_scatter(Pieces({Piece{src, dst, total * static_cast<int64_t>(dtype_size(dtype))}}), counts,
                             dtype, op);
}

Status Collectives::ring_reduce_scatter(const Pieces& buf, const std::vector<int64_t>& counts, int32_t dtype,
                                        int32_t op) {
  const std::vector<int64_t> offsets = block_offsets(counts);
  if (size_ == 1) {
    const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
    buf.each_part(0, counts[0] * esize, [](const uint8_t* in, uint8_t* out, int64_t bytes, int64_t) {
      if (in != out) std::memcpy(out, in, static_cast<size_t>(bytes));
    });
    return Status::ok();
  }
  // Step s sends block (r-s-1) and reduces block (r-s-2); after n-1 steps block r is complete.
  // The block sent at step 0 is still this rank's input; later ones were reduced a step before.
  for (int s = 0; s < size_ - 1; ++s) {
    const size_t send_block = static_cast<size_t>(mod(rank_ - s - 1, size_));
    const size_t recv_block = static_cast<size_t>(mod(rank_ - s - 2, size_));
    Status st = exchange_and_reduce(buf, s > 0, offsets[send_block], counts[send_block], offsets[recv_block],
                                    counts[recv_block], dtype, op);
    if (!st.is_ok()) return st;
  }
  return Status::ok();
}

Status Collectives::ring_allgather(void* buf, const std::vector<int64_t>& counts, size_t esize) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return ring_allgather(Pieces({Piece{buf, buf, total * static_cast<int64_t>(esize)}}), counts, esize);
}

Status Collectives::ring_allgather(const Pieces& buf, const std::vector<int64_t>& counts, size_t esize) {
  if (size_ == 1) return Status::ok();
  const std::vector<int64_t> offsets = block_offsets(counts);
  if (buf.size() != 1 && !ring_->takes_pieces()) {
    return Status::error(RELAX_ERR_INTERNAL, std::string(ring_->name()) + "'s ring steps need one contiguous buffer");
  }
  const auto e = static_cast<int64_t>(esize);
  // Step s forwards block (r-s) and receives block (r-s-1).
  for (int s = 0; s < size_ - 1; ++s) {
    const size_t send_block = static_cast<size_t>(mod(rank_ - s, size_));
    const size_t recv_block = static_cast<size_t>(mod(rank_ - s - 1, size_));
    const int64_t send_begin = offsets[send_block] * e, send_bytes = counts[send_block] * e;
    const int64_t recv_begin = offsets[recv_block] * e, recv_bytes = counts[recv_block] * e;
    count_traffic(send_bytes, recv_bytes);
    Status st = ring_->exchange(iovecs(buf, send_begin, send_bytes, true), iovecs(buf, recv_begin, recv_bytes, true));
    if (!st.is_ok()) return st;
  }
  return Status::ok();
}

Status Collectives::mpi_allreduce(const void* src, void* dst, int64_t count, int32_t dtype, int32_t op,
                                  double postscale) {
  // Nonblocking, so that the wait is bounded (bounded_wait.h); as fast as MPI_Allreduce for small
  // messages, which complete within the wait's first spin.
  if (peer_silence_noted()) return peer_silence_status();  // (post nothing)
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Iallreduce(src == dst ? MPI_IN_PLACE : src, dst, static_cast<int>(count), mpi_type(dtype),
                                mpi_op(op), comm_, &request);
  if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Iallreduce");
  Status waited = wait_collective(request, "MPI_Iallreduce", "an MPI all-reduce");
  if (!waited.is_ok()) return waited;
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  traffic_.bytes_sent += 2 * bytes * (size_ - 1) / size_;
  traffic_.bytes_received += 2 * bytes * (size_ - 1) / size_;
  scale_buffer(dst, count, dtype, postscale);
  return Status::ok();
}

Status Collectives::allreduce(const void* src, void* dst, int64_t count, int32_t dtype, int32_t op,
                              double postscale) {
  if (count == 0) return Status::ok();
  const size_t esize = dtype_size(dtype);
  const int64_t bytes = count * static_cast<int64_t>(esize);
  switch (table_.choose(Collective::kAllreduce, bytes, count <= INT_MAX && mpi_type(dtype) != MPI_DATATYPE_NULL)) {
    case Route::kLocal:
      if (src != dst) std::memcpy(dst, src, static_cast<size_t>(bytes));
      scale_buffer(dst, count, dtype, postscale);
      return Status::ok();
    case Route::kSharedMemory:
      count_traffic(2 * bytes * (size_ - 1) / size_, 2 * bytes * (size_ - 1) / size_);  // as a ring would move
      return shm_->allreduce(src, dst, count, dtype, op, postscale);
    case Route::kMpiCollective:
      return mpi_allreduce(src, dst, count, dtype, op, postscale);
    default:
      return ring_allreduce(Pieces({Piece{src, dst, bytes}}), dtype, op, postscale);
  }
}

Status Collectives::ring_allreduce(const Pieces& buf, int32_t dtype, int32_t op, double postscale) {
  const auto esize = static_cast<int64_t>(dtype_size(dtype));
  const std::vector<int64_t> counts = even_counts(buf.bytes() / esize, size_);
  Status st = ring_reduce_scatter(buf, counts, dtype, op);
  if (!st.is_ok()) return st;
  const size_t me = static_cast<size_t>(rank_);
  buf.each_part(block_offsets(counts)[me] * esize, counts[me] * esize,
                [&](const uint8_t*, uint8_t* out, int64_t bytes, int64_t) {
                  scale_buffer(out, bytes / esize, dtype, postscale);
                });
  return ring_allgather(buf, counts, static_cast<size_t>(esize));
}

bool Collectives::reduces_pieces(int64_t bytes) const {
  return table_.choose(Collective::kAllreducePieces, bytes) != Route::kNone;
}

Status Collectives::allreduce_pieces(std::vector<Piece> pieces, int32_t dtype, int32_t op, double postscale) {
  Pieces buf(std::move(pieces));
  const int64_t bytes = buf.bytes();
  switch (table_.choose(Collective::kAllreducePieces, bytes)) {
    case Route::kSharedMemory:
      count_traffic(2 * bytes * (size_ - 1) / size_, 2 * bytes * (size_ - 1) / size_);  // as a ring would move
      return shm_->allreduce(std::move(buf), dtype, op, postscale);
    case Route::kRing:
      return ring_allreduce(buf, dtype, op, postscale);  // (its steps count what they move)
    default:
      return Status::error(RELAX_ERR_INTERNAL,
                           "an all-reduce of tensors where they lie needs shared memory or the TCP ring");
  }
}

Status Collectives::reduce_scatter(const void* src, void* work, const std::vector<int64_t>& counts, int32_t dtype,
                                   int32_t op, double postscale, void* out) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return reduce_scatter({Piece{src, nullptr, total * static_cast<int64_t>(dtype_size(dtype))}}, work, counts, dtype,
                        op, postscale, out);
}

Status Collectives::reduce_scatter(const std::vector<Piece>& inputs, void* work, const std::vector<int64_t>& counts,
                                   int32_t dtype, int32_t op, double postscale, void* out) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const std::vector<int64_t> offsets = block_offsets(counts);
  const int64_t total_bytes = (offsets.back() + counts.back()) * esize;
  const int64_t own_offset = offsets[static_cast<size_t>(rank_)];
  const int64_t own_count = counts[static_cast<size_t>(rank_)];
  if (table_.choose(Collective::kReduceScatter, total_bytes) == Route::kSharedMemory) {
    const int64_t own_bytes = own_count * esize;
    count_traffic(total_bytes - own_bytes, own_bytes * (size_ - 1));
    return shm_->reduce_scatter(inputs, counts, dtype, op, postscale, out);
  }
  auto* partial = static_cast<uint8_t*>(work);  // the ring
  if (ring_->takes_pieces()) {
    // This rank's block is reduced at the ring's last step and never sent on: it is reduced
    // straight into `out`; the other blocks' partial results go to `work`.
    Status st = ring_reduce_scatter(Pieces(route_range(inputs, own_offset * esize, own_count * esize, out, partial)),
                                    counts, dtype, op);
    if (st.is_ok() && own_count > 0) scale_buffer(out, own_count, dtype, postscale);
    return st;
  }
  // Partial results of every block go to `work`; this rank's block is copied out at the end.
  std::vector<Piece> steps;
  if (inputs.size() == 1) {
    steps.push_back({inputs.front().in, partial, total_bytes});
  } else {  // a link that takes one contiguous buffer
    int64_t at = 0;
    for (const Piece& input : inputs) {
      if (input.bytes > 0) std::memcpy(partial + at, input.in, static_cast<size_t>(input.bytes));
      at += input.bytes;
    }
    steps.push_back({partial, partial, total_bytes});
  }
  Status st = ring_reduce_scatter(Pieces(std::move(steps)), counts, dtype, op);
  if (!st.is_ok()) return st;
  if (own_count > 0) {
    std::memmove(out, partial + own_offset * esize, static_cast<size_t>(own_count * esize));
    scale_buffer(out, own_count, dtype, postscale);
  }
  return Status::ok();
}

Status Collectives::broadcast(void* buf, int64_t bytes, int root) {
  if (peer_silence_noted()) return peer_silence_status();  // (post nothing)
  auto* p = static_cast<uint8_t*>(buf);
  for (int64_t off = 0; off < bytes; off += kMaxMessageBytes) {
    const int n = static_cast<int>(std::min(kMaxMessageBytes, bytes - off));
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = MPI_Ibcast(p + off, n, MPI_BYTE, root, comm_, &request);
    if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Ibcast");
    Status waited = wait_collective(request, "MPI_Ibcast", "a broadcast");
    if (!waited.is_ok()) return waited;
  }
  if (rank_ == root) {
    traffic_.bytes_sent += bytes;
  } else {
    traffic_.bytes_received += bytes;
  }
  return Status::ok();
}

Status Collectives::allgatherv(const void* in, void* out, const std::vector<int64_t>& counts, size_t esize) {
  const std::vector<int64_t> offsets = block_offsets(counts);
  const int64_t own = counts[static_cast<size_t>(rank_)] * static_cast<int64_t>(esize);
  if (own > 0 && in != static_cast<uint8_t*>(out) + offsets[static_cast<size_t>(rank_)] * esize) {
    std::memcpy(static_cast<uint8_t*>(out) + offsets[static_cast<size_t>(rank_)] * esize, in,
                static_cast<size_t>(own));
  }
  const int64_t total = (offsets.back() + counts.back()) * static_cast<int64_t>(esize);
  const Route route = table_.choose(Collective::kAllgather, total, total <= INT_MAX);
  if (route == Route::kSharedMemory) {
    count_traffic(own * (size_ - 1), total - own);
    return shm_->allgatherv(out, counts, esize);  // the own block is in place already
  }
  if (route == Route::kMpiCollective) {
    // A timed-out request stays posted with pointers to these: never reuse them after one.
    if (peer_silence_noted()) return peer_silence_status();
    gather_counts_.clear();
    gather_displs_.clear();
    for (size_t r = 0; r < counts.size(); ++r) {
      gather_counts_.push_back(static_cast<int>(counts[r] * static_cast<int64_t>(esize)));
      gather_displs_.push_back(static_cast<int>(offsets[r] * static_cast<int64_t>(esize)));
    }
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, out, gather_counts_.data(), gather_displs_.data(),
                                   MPI_BYTE, comm_, &request);
    if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Iallgatherv");
    Status waited = wait_collective(request, "MPI_Iallgatherv", "an MPI all-gather");
    if (!waited.is_ok()) return waited;
    traffic_.bytes_sent += own * (size_ - 1);
    traffic_.bytes_received += total - own;
    return Status::ok();
  }
  return ring_allgather(out, counts, esize);
}

Status Collectives::alltoallv(const void* in, const std::vector<int64_t>& send_counts, void* out,
                              const std::vector<int64_t>& recv_counts, size_t esize) {
  const std::vector<int64_t> send_offsets = block_offsets(send_counts);
  const std::vector<int64_t> recv_offsets = block_offsets(recv_counts);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  // Pairwise exchange: at step s send to (r+s), receive from (r-s); the own block is a copy.
  const size_t me = static_cast<size_t>(rank_);
  if (recv_counts[me] > 0) {
    std::memcpy(dst + recv_offsets[me] * esize, src + send_offsets[me] * esize,
                static_cast<size_t>(recv_counts[me]) * esize);
  }
  for (int s = 1; s < size_; ++s) {
    const int to = mod(rank_ + s, size_);
    const int from = mod(rank_ - s, size_);
    Status st = sendrecv(src + send_offsets[static_cast<size_t>(to)] * esize,
                         send_counts[static_cast<size_t>(to)] * static_cast<int64_t>(esize), to,
                         dst + recv_offsets[static_cast<size_t>(from)] * esize,
                         recv_counts[static_cast<size_t>(from)] * static_cast<int64_t>(esize), from);
    if (!st.is_ok()) return st;
  }
  return Status::ok();
}

}  // namespace relax
