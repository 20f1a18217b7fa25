// ULFM probe (tests/test_ulfm.py runs it on 4 ranks under `mpirun --with-ft ulfm`): rank 1 kills
// itself with SIGKILL just before an all-reduce; every survivor must see the failure as an MPI
// error (MPIX_ERR_PROC_FAILED or MPIX_ERR_REVOKED), rebuild a communicator of the 3 survivors
// with the core's recovery steps (transport/ulfm.h: revoke, shrink, agree) and get an exact
// all-reduce on it. It has its own main because it needs real ranks and one that dies: the
// single-process C++ unit tests (cuda_ops/tests/*.cc) cannot host it.
//
// Output, one line per survivor: "RECOVERED rank R lost [1] size 3 agreed 1 sum 8 recovery_ms T
// saw class C (<MPI's error text>)"; "ULFM-UNAVAILABLE <why>" (rank 0, exit 0) when this build or job cannot.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "transport/mpi_context.h"
#include "transport/ulfm.h"

namespace {

int fail(int rank, const std::string& what) {
  std::printf("PROBE-FAILED rank %d: %s\n", rank, what.c_str());
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string why;
  if (!relax::ulfm_enabled(&why)) {
    if (rank == 0) std::printf("ULFM-UNAVAILABLE %s\n", why.c_str());
    MPI_Finalize();
    return 0;
  }
  if (size != 4) return fail(rank, "run me on 4 ranks");
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  // Every pair has talked before the failure, as in a job that has been training.
  int one = 1, everyone = 0;
  int rc = MPI_Allreduce(&one, &everyone, 1, MPI_INT, MPI_SUM, comm);
  if (rc != MPI_SUCCESS || everyone != 4) return fail(rank, "warm-up all-reduce: " + relax::mpi_error_string(rc));

  if (rank == 1) {
    raise(SIGKILL);
    pause();
  }
  const long mine = rank + 1;  // world ranks 0, 2, 3 survive: 1 + 3 + 4 = 8
  long sum = 0;
  rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, comm);
  const auto seen = std::chrono::steady_clock::now();
  if (rc == MPI_SUCCESS) return fail(rank, "the all-reduce with a dead rank succeeded (sum " + std::to_string(sum) + ")");
  if (!relax::is_process_failure(rc)) return fail(rank, "not a process failure: " + relax::mpi_error_string(rc));
  int error_class = 0;
  MPI_Error_class(rc, &error_class);
  const std::string saw = "class " + std::to_string(error_class) + " (" + relax::mpi_error_string(rc) + ")";

  MPI_Comm survivors = MPI_COMM_NULL;
  std::vector<int> lost;
  relax::Status s = relax::shrink_comm(comm, &survivors, &lost);
  if (!s.is_ok()) return fail(rank, s.message);
  int flag = 1;
  s = relax::agree_comm(survivors, &flag);
  if (!s.is_ok()) return fail(rank, s.message);
  int new_size = 0;
  MPI_Comm_size(survivors, &new_size);
  sum = 0;
  rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, survivors);
  if (rc != MPI_SUCCESS) return fail(rank, "all-reduce of the survivors: " + relax::mpi_error_string(rc));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - seen).count();
  std::string lost_text;
  for (int r : lost) lost_text += (lost_text.empty() ? "" : ",") + std::to_string(r);
  std::printf("RECOVERED rank %d lost [%s] size %d agreed %d sum %ld recovery_ms %.1f saw %s\n", rank,
              lost_text.c_str(), new_size, flag, sum, ms, saw.c_str());
  std::fflush(stdout);
  MPI_Comm_free(&survivors);
  MPI_Comm_free(&comm);
  // MPI_Finalize after a failure hangs in 2 of 3 runs here (Open MPI 5.0.11: its PMIx fence waits
  // for the dead rank, open-mpi/ompi#11404), so survivors leave without it unless asked to finalize.
  if (argc > 1 && std::string(argv[1]) == "--finalize") {
    MPI_Finalize();
    return 0;
  }
  _exit(0);
}
