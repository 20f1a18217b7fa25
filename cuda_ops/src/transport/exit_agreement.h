// The ranks' last meeting before MPI_Finalize, where MPI's fault tolerance is on. MPI_Finalize's
// fence waits for every process of the job, and a rank that froze after the last collective
// (SIGSTOP: it lives, so the launcher never reports it) holds it forever, as does one that MPI's
// failure detector declared failed (open-mpi/ompi#11404). An agreement of our own first
// (MPIX_Comm_agree: it ends on every live rank whoever fails during it) ends when every rank
// arrived, or when MPI reports one of them failed (its detector declares a frozen rank failed
// within mpi_ft_detector_timeout): then the loss is noted, the lost processes on this host are
// ended (lost_processes.h) and the caller leaves without MPI_Finalize.
#pragma once

#include <mpi.h>

namespace relax {

// The communicator of the current world (MpiContext sets it whenever it forms one).
void set_exit_world(MPI_Comm world);

// With fault tolerance on (ulfm_enabled), waits for every rank of the exit world to arrive: true
// when all did, false when MPI reported one of them failed meanwhile (noted: peer_failure_noted;
// the lost processes on this host killed). Without fault tolerance, or without a world, true at
// once. Runs once per process: later calls return the first answer.
bool agree_on_exit();

}  // namespace relax
