// Silence-report probe (tests/test_silence_report.py runs it on 3 ranks): rank 2 stays out of MPI
// (as a frozen rank would) while ranks 0 and 1 each report a silence on the world
// (transport/liveness.h, report_silence) — rank 1 first, rank 0 a chosen fraction of the grace later,
// as ranks stuck in successive waits of a ring do. Both must name rank 2 alone: a live rank that asks
// while the other still listens is heard, however near the end of the other's grace it asks. It has
// its own main because it needs real ranks: the single-process C++ unit tests cannot host it.
//
// Arguments: the late asker's offsets, as fractions of the grace, one round each. Output, one line per
// round and reporting rank: "ROUND i offset f rank R named <the report's message>".
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "transport/liveness.h"

namespace {

constexpr double kTimeoutSeconds = 1.0;  // the grace is 1 s too (silence_grace_seconds)

void sleep_seconds(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 3) {
    if (rank == 0) std::printf("PROBE-FAILED: needs 3 ranks, got %d\n", size);
    MPI_Finalize();
    return 1;
  }
  const double grace = relax::silence_grace_seconds(kTimeoutSeconds);
  for (int round = 1; round < argc; ++round) {
    const double offset = std::atof(argv[round]);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 2) {
      sleep_seconds((offset + 1) * grace + 1.5);  // silent until both reports (and any extension) ended
    } else {
      if (rank == 0) sleep_seconds(offset * grace);
      relax::forget_peer_silence_for_tests();
      const std::string named = relax::report_silence(MPI_COMM_WORLD, kTimeoutSeconds, "a probe's wait");
      std::printf("ROUND %d offset %g rank %d named %s\n", round, offset, rank, named.c_str());
      std::fflush(stdout);
    }
  }
  relax::forget_peer_silence_for_tests();
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
