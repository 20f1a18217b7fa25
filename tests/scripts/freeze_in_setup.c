/* Test shim (LD_PRELOAD, through MPI's profiling interface): the rank RELAX_TEST_FREEZE_RANK stops
 * itself (SIGSTOP) on entering the RELAX_TEST_FREEZE_NTH-th call (counted from 1) among the MPI
 * functions named in RELAX_TEST_FREEZE_CALLS (comma-separated), so its peers wait for a rank that
 * never answers in that set-up exchange. Blocking and nonblocking forms are listed together
 * (e.g. "MPI_Allgather,MPI_Iallgather"), so the same test runs against either implementation.
 * With RELAX_TEST_FREEZE_ARM=manual counting starts only once the program calls
 * relax_test_freeze_arm() (e.g. through ctypes right before the step under test). The frozen
 * rank writes its process id to RELAX_TEST_FREEZE_PIDFILE first, so a test can always SIGKILL it. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int armed_by_call = 0;
static int calls = 0;

void relax_test_freeze_arm(void) { __atomic_store_n(&armed_by_call, 1, __ATOMIC_SEQ_CST); }

static int listed(const char* name) {
  const char* list = getenv("RELAX_TEST_FREEZE_CALLS");
  if (!list) return 0;
  const size_t n = strlen(name);
  for (const char* p = list; (p = strstr(p, name)) != NULL; p += n) {
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  }
  return 0;
}

static void freeze_if_chosen(const char* name) {
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  const char* chosen = getenv("RELAX_TEST_FREEZE_RANK");
  const char* nth = getenv("RELAX_TEST_FREEZE_NTH");
  const char* arm = getenv("RELAX_TEST_FREEZE_ARM");
  if (!rank || !chosen || !nth || atoi(rank) != atoi(chosen) || !listed(name)) return;
  if (arm && strcmp(arm, "manual") == 0 && !__atomic_load_n(&armed_by_call, __ATOMIC_SEQ_CST)) return;
  if (__atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST) != atoi(nth)) return;
  const char* pidfile = getenv("RELAX_TEST_FREEZE_PIDFILE");
  FILE* f = pidfile ? fopen(pidfile, "w") : NULL;
  if (f) {
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
  }
  printf("RANK %s FREEZES inside %s\n", rank, name);
  fflush(stdout);
  raise(SIGSTOP);
}

int MPI_Allgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c) {
  freeze_if_chosen("MPI_Allgather");
  return PMPI_Allgather(s, sc, st, r, rc, rt, c);
}

int MPI_Iallgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c,
                   MPI_Request* q) {
  freeze_if_chosen("MPI_Iallgather");
  return PMPI_Iallgather(s, sc, st, r, rc, rt, c, q);
}

int MPI_Bcast(void* b, int n, MPI_Datatype t, int root, MPI_Comm c) {
  freeze_if_chosen("MPI_Bcast");
  return PMPI_Bcast(b, n, t, root, c);
}

int MPI_Ibcast(void* b, int n, MPI_Datatype t, int root, MPI_Comm c, MPI_Request* q) {
  freeze_if_chosen("MPI_Ibcast");
  return PMPI_Ibcast(b, n, t, root, c, q);
}

int MPI_Comm_dup(MPI_Comm c, MPI_Comm* out) {
  freeze_if_chosen("MPI_Comm_dup");
  return PMPI_Comm_dup(c, out);
}

int MPI_Comm_idup(MPI_Comm c, MPI_Comm* out, MPI_Request* q) {
  freeze_if_chosen("MPI_Comm_idup");
  return PMPI_Comm_idup(c, out, q);
}

int MPI_Comm_create(MPI_Comm c, MPI_Group g, MPI_Comm* out) {
  freeze_if_chosen("MPI_Comm_create");
  return PMPI_Comm_create(c, g, out);
}

int MPI_Comm_create_group(MPI_Comm c, MPI_Group g, int tag, MPI_Comm* out) {
  freeze_if_chosen("MPI_Comm_create_group");
  return PMPI_Comm_create_group(c, g, tag, out);
}

int MPI_Barrier(MPI_Comm c) {
  freeze_if_chosen("MPI_Barrier");
  return PMPI_Barrier(c);
}

int MPI_Ibarrier(MPI_Comm c, MPI_Request* q) {
  freeze_if_chosen("MPI_Ibarrier");
  return PMPI_Ibarrier(c, q);
}
