#include "transport/setup_wait.h"

#include <cstring>
#include <memory>
#include <vector>

#include "transport/liveness.h"
#include "transport/mpi_context.h"
#include "util/backoff.h"

namespace relax {
namespace {

Status posted(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::ok();
  return mpi_call_failed(rc, what);
}

// Waits for a request whose buffers are `keep`: released (leaked) if the wait times out, since
// MPI may still write them (set-up exchanges are small, and the job cannot go on).
template <class Buffers>
Status wait_keeping(MPI_Comm comm, MPI_Request& request, std::unique_ptr<Buffers>& keep, double timeout_s,
                    const std::string& during) {
  Status s = setup_wait(comm, request, timeout_s, during);
  if (request != MPI_REQUEST_NULL) keep.release();  // NOLINT: deliberately leaked, see above
  return s;
}

struct Staged {
  std::vector<char> send, receive;
};

}  // namespace

Status setup_wait(MPI_Comm comm, MPI_Request& request, double timeout_s, const std::string& during) {
  if (peer_silence_noted()) return peer_silence_status();
  bool timed_out = false;
  // A set-up exchange is over within microseconds when every rank is there: spin 1 ms, then
  // back off so a rank waiting for a slow starter leaves the cores to it.
  const int rc = poll_with_backoff([&](int& done) { return MPI_Test(&request, &done, MPI_STATUS_IGNORE); }, 1000,
                                   /*yield=*/false, 1.0 / 32, peer_timeout_seconds(timeout_s), timed_out);
  if (timed_out) {
    return Status::error(RELAX_ERR_STALLED, report_silence(comm, peer_timeout_seconds(timeout_s), during));
  }
  return posted(rc, "MPI_Test");
}

Status bounded_allgather(MPI_Comm comm, const void* mine, int bytes, void* out, double timeout_s,
                         const std::string& during) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  auto staged = std::make_unique<Staged>();
  staged->send.assign(static_cast<const char*>(mine), static_cast<const char*>(mine) + bytes);
  staged->receive.assign(static_cast<size_t>(bytes) * static_cast<size_t>(size), '\0');
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = posted(MPI_Iallgather(staged->send.data(), bytes, MPI_BYTE, staged->receive.data(), bytes, MPI_BYTE,
                                   comm, &request),
                    "MPI_Iallgather");
  if (s.is_ok()) s = wait_keeping(comm, request, staged, timeout_s, during);
  if (s.is_ok()) std::memcpy(out, staged->receive.data(), staged->receive.size());
  return s;
}

Status bounded_bcast(MPI_Comm comm, void* data, int bytes, int root, double timeout_s, const std::string& during) {
  auto staged = std::make_unique<Staged>();
  staged->send.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = posted(MPI_Ibcast(staged->send.data(), bytes, MPI_BYTE, root, comm, &request), "MPI_Ibcast");
  if (s.is_ok()) s = wait_keeping(comm, request, staged, timeout_s, during);
  if (s.is_ok()) std::memcpy(data, staged->send.data(), staged->send.size());
  return s;
}

Status bounded_allreduce_int(MPI_Comm comm, int mine, MPI_Op op, int& out, double timeout_s,
                             const std::string& during) {
  auto values = std::make_unique<int[]>(2);
  values[0] = mine;
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = posted(MPI_Iallreduce(&values[0], &values[1], 1, MPI_INT, op, comm, &request), "MPI_Iallreduce");
  if (s.is_ok()) s = wait_keeping(comm, request, values, timeout_s, during);
  if (s.is_ok()) out = values[1];
  return s;
}

Status bounded_barrier(MPI_Comm comm, double timeout_s, const std::string& during) {
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = posted(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
  return s.is_ok() ? setup_wait(comm, request, timeout_s, during) : s;
}

Status bounded_comm_dup(MPI_Comm comm, MPI_Comm& out, double timeout_s, const std::string& during) {
  out = MPI_COMM_NULL;
  auto made = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request request = MPI_REQUEST_NULL;
  Status s = posted(MPI_Comm_idup(comm, made.get(), &request), "MPI_Comm_idup");
  if (s.is_ok()) s = wait_keeping(comm, request, made, timeout_s, during);
  if (s.is_ok()) out = *made;
  return s;
}

}  // namespace relax
