// Keeps MPI progressing for the whole life of an elastic rank, so Open MPI's failure detector
// (mpi_ft_detector: relaxrun turns it on with eviction) hears this rank's heartbeats whatever the
// application does. The detector sends and checks heartbeats from MPI progress; a rank that makes
// none for its timeout (a long evaluation after hvd.shutdown(), before MPI_Finalize at exit) is
// declared failed by its observer and aborts itself. Only a frozen process (SIGSTOP: every thread
// stopped) then stops answering, which is what the detector is for.
#pragma once

namespace relax {

// Starts the pump once per process (later calls do nothing) where MPI is initialized with
// MPI_THREAD_MULTIPLE and fault tolerance is on (ulfm_enabled).
void start_progress_pump();
// Stops it and waits for its thread (before MPI_Finalize); does nothing where it never started.
void stop_progress_pump();

}  // namespace relax
