// Set-up exchanges bounded by the peer timeout (RELAX_OP_TIMEOUT): the collectives run while
// relaxlib starts (communicators, host names, TCP ring addresses and key, shared-segment names,
// process sets) use MPI's nonblocking forms, waited for at most that long. A rank that never
// answers (frozen, hung) fails the wait on every rank that waits for it with RELAX_ERR_STALLED
// naming it (transport/liveness.h), and the process then exits without MPI_Finalize.
// Calls with no nonblocking form (MPI_Comm_split, MPI_Comm_split_type, MPI_Comm_create) are
// preceded by bounded_barrier() over the same communicator: a member frozen or absent before it
// is named there; one that stops between that barrier and the call is not (docs/security.md).
#pragma once

#include <mpi.h>

#include <string>

#include "util/types.h"

namespace relax {

// Waits for `request` (a nonblocking collective posted on `comm`) for at most `timeout_s`
// seconds (peer_timeout_seconds(): <= 0 is the default). Fails at once if a peer was already
// found silent. On a timeout the request stays posted: buffers MPI may still use must outlive
// the process's useful life (the helpers below leak theirs then).
Status setup_wait(MPI_Comm comm, MPI_Request& request, double timeout_s, const std::string& during);

// MPI_Iallgather of `bytes` bytes from every rank of `comm` into `out` (size * bytes), waited by
// setup_wait(); staged through buffers that are leaked if the wait times out.
Status bounded_allgather(MPI_Comm comm, const void* mine, int bytes, void* out, double timeout_s,
                         const std::string& during);

// MPI_Ibcast of `bytes` bytes from `root` of `comm`, waited by setup_wait() (staged as above).
Status bounded_bcast(MPI_Comm comm, void* data, int bytes, int root, double timeout_s, const std::string& during);

// MPI_Iallreduce of one int with `op` over `comm` into `out`, waited by setup_wait().
Status bounded_allreduce_int(MPI_Comm comm, int mine, MPI_Op op, int& out, double timeout_s,
                             const std::string& during);

// MPI_Ibarrier over `comm`, waited by setup_wait(): names a member frozen or absent before a
// blocking collective that has no nonblocking form.
Status bounded_barrier(MPI_Comm comm, double timeout_s, const std::string& during);

// MPI_Comm_idup of `comm` into `out`, waited by setup_wait() (`out` stays MPI_COMM_NULL on failure).
Status bounded_comm_dup(MPI_Comm comm, MPI_Comm& out, double timeout_s, const std::string& during);

}  // namespace relax
