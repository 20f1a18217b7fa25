// Open MPI's fault-tolerant MPI (ULFM: MPIX_Comm_revoke / _shrink / _agree from <mpi-ext.h>, in
// Open MPI 5 and later): whether this build has it, whether this job runs with it, and the steps
// that turn a communicator with a dead rank into one of the survivors. Without ULFM (Debian's
// Open MPI 4.1, MPICH) everything here compiles and says "unavailable": a lost rank stays a clean
// error on every survivor (liveness.h), as before.
//
// RELAX_HAVE_ULFM is set (1 or 0) by setup.py from a compile-and-link check against the MPI it
// builds with; builds outside setup.py (sanitizers, fuzzers) fall back to what <mpi-ext.h> declares.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "util/types.h"

namespace relax {

// Whether the core was compiled with MPIX_Comm_revoke, MPIX_Comm_shrink and MPIX_Comm_agree.
bool ulfm_compiled();

// Whether a lost rank is survivable in this process: compiled with ULFM and the job started with
// fault tolerance on (`mpirun --with-ft ulfm` sets OMPI_MCA_mpi_ft_enable=1). Otherwise false with
// the reason in `why` (if not null). Callable before MPI_Init.
bool ulfm_enabled(std::string* why);

// Whether an MPI return code reports a failed peer or a revoked communicator (the error classes
// MPIX_ERR_PROC_FAILED, MPIX_ERR_PROC_FAILED_PENDING, MPIX_ERR_REVOKED); always false without ULFM.
bool is_process_failure(int rc);

// MPIX_Comm_revoke: every pending and later operation on `comm` fails on every live rank with
// MPIX_ERR_REVOKED, so ranks blocked in it (or in a collective a dead rank never joins) return.
Status revoke_comm(MPI_Comm comm);

// Revokes `comm`, then MPIX_Comm_shrink: `*survivors` is a new communicator of the live ranks of
// `comm` (same order, MPI_ERRORS_RETURN), `lost_world_ranks` the MPI_COMM_WORLD ranks of the ranks
// of `comm` that are not in it (ascending), `lost_comm_ranks` (when not null) the same ranks as
// ranks of `comm`. Collective over the live ranks of `comm`.
Status shrink_comm(MPI_Comm comm, MPI_Comm* survivors, std::vector<int>* lost_world_ranks,
                   std::vector<int>* lost_comm_ranks = nullptr);

// One MPI_Iprobe for a tag nothing sends (tags::kProgressProbe) on `comm`: matches nothing and
// consumes nothing, but runs MPI's progress engine, where failure notices and the failure
// detector's heartbeats are handled.
void drive_mpi_progress(MPI_Comm comm);

// MPIX_Comm_get_failed after a progress poll (MPI learns of a failure only while it progresses):
// the MPI_COMM_WORLD ranks of `comm`'s members known to have failed, ascending (empty: none yet).
// RELAX_ERR_PROC_FAILED (ranks empty) when `comm` was revoked: another rank saw a failure.
// `comm_ranks`, if given, receives the same members' ranks in `comm`, ascending.
Status failed_world_ranks(MPI_Comm comm, std::vector<int>* world_ranks, std::vector<int>* comm_ranks = nullptr);

// How messages name failed_world_ranks' ranks: "rank 2 of the original world", "ranks [1, 3] of the
// original world", or "a rank" when none is known yet (a revoked communicator).
std::string lost_ranks_text(const std::vector<int>& world_ranks);

// MPIX_Comm_agree: the bitwise AND of `*flag` over the live ranks of `comm`, the same on every one
// of them even if ranks fail during the call. The status reports a failure among the ranks
// (MPIX_ERR_PROC_FAILED) that no rank had acknowledged, as ULFM defines; `*flag` is valid either way.
Status agree_comm(MPI_Comm comm, int* flag);

}  // namespace relax
