// Waiting for MPI requests (point-to-point or nonblocking collectives) for at most the peer
// timeout (RELAX_OP_TIMEOUT): a peer that never answers (frozen, hung, dead) fails the wait on
// every rank that waits for it, naming it (transport/liveness.h), instead of holding it forever.
// Blocking MPI collectives (MPI_Allreduce, MPI_Bcast, ...) cannot be bounded: the data path uses
// their nonblocking forms waited through here.
#pragma once

#include <mpi.h>

#include "collectives/point_to_point.h"
#include "transport/liveness.h"
#include "util/backoff.h"
#include "util/types.h"

namespace relax {

// Polls an MPI_Test* call `test` (returns an MPI code and sets `done`) until its requests are
// done: without pause for 1 ms (200 us when `yield`, yielding the core between polls; a small
// collective completes within that spin, as fast as its blocking form), then sleeping between
// polls for 1/32 of the time waited so far, so a long transfer ends at most about 3 % late. A
// wait that spins or yields keeps a core busy or runnable for the whole transfer (with ranks
// sharing cores, taken from the compute of its peers), while the kernel keeps the sockets busy
// between polls from megabytes of buffer.
// A wait longer than `timeout_s` fails RELAX_ERR_STALLED naming the ranks of `comm` that did not
// answer (report_silence, `during` says what waited), or once a silence or a lost process is
// noted (liveness.h: the status says which); its requests stay posted (the job cannot go
// on), so their buffers must outlive the process's useful life. Fails at once, without polling,
// once a peer was found silent. An MPI error fails RELAX_ERR_MPI naming `what`.
template <class Test>
Status bounded_poll(MPI_Comm comm, double timeout_s, bool yield, Test test, const char* what, const char* during) {
  if (peer_silence_noted()) return peer_silence_status();
  bool timed_out = false, abandoned = false;
  // A silence or a lost process noted meanwhile (by another lane, or by the failure watch) ends
  // the wait too: its requests stay posted, as after a timeout.
  auto test_unless_abandoned = [&](int& done) {
    if (peer_silence_noted()) {
      abandoned = true;
      done = 1;
      return MPI_SUCCESS;
    }
    return test(done);
  };
  const int rc = poll_with_backoff(test_unless_abandoned, yield ? 200 : 1000, yield, 1.0 / 32, timeout_s, timed_out);
  if (abandoned) return peer_silence_status();
  if (timed_out) return Status::error(RELAX_ERR_STALLED, report_silence(comm, timeout_s, during));
  return mpi_status(rc, what);
}

// bounded_poll() for one request (e.g. of an MPI_Iallreduce on `comm`).
inline Status bounded_wait(MPI_Comm comm, MPI_Request& request, double timeout_s, bool yield, const char* what,
                           const char* during) {
  return bounded_poll(
      comm, timeout_s, yield, [&](int& done) { return MPI_Test(&request, &done, MPI_STATUS_IGNORE); }, what, during);
}

}  // namespace relax
