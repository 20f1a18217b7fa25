/* Test shim (LD_PRELOAD, through MPI's profiling interface): the rank RELAX_TEST_FREEZE_RANK
 * stops itself (SIGSTOP) on entering an MPI all-reduce of RELAX_TEST_FREEZE_COUNT elements, so
 * its peers wait inside that collective for a rank that never answers. Both the blocking and the
 * nonblocking form are caught, so the same test runs against either implementation. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static void freeze_if_chosen(int count) {
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  const char* chosen = getenv("RELAX_TEST_FREEZE_RANK");
  const char* chosen_count = getenv("RELAX_TEST_FREEZE_COUNT");
  if (!rank || !chosen || !chosen_count || atoi(rank) != atoi(chosen) || count != atoi(chosen_count)) return;
  printf("RANK %s FREEZES inside an MPI all-reduce\n", rank);
  fflush(stdout);
  raise(SIGSTOP);
}

int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  freeze_if_chosen(count);
  return PMPI_Allreduce(send, recv, count, type, op, comm);
}

int MPI_Iallreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request* request) {
  freeze_if_chosen(count);
  return PMPI_Iallreduce(send, recv, count, type, op, comm, request);
}
