#!/usr/bin/env bash
# Runs the sanitized C ABI smoke test (abi_smoke.cc) on 3 ranks, once per transport: shared-memory
# collectives, then without them over the TCP ring, then over MPI point-to-point. MPI's own
# allreduce and allgather are capped so that the ring (in small segments) carries the large
# tensors. Usage: run_abi_smoke.sh path/to/abi_smoke. Each run has an outer timeout.
set -euo pipefail
binary=${1:?usage: run_abi_smoke.sh path/to/abi_smoke}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export RELAX_MPI_ALLREDUCE_MAX_BYTES=4096 RELAX_MPI_ALLGATHER_MAX_BYTES=4096 RELAX_RING_SEGMENT_BYTES=65536
export RELAX_STALL_SHUTDOWN_TIME=120
# Open MPI unloads its components at MPI_Finalize: kept loaded, their frames in leak reports have
# names that lsan.supp can match (else they show as <unknown module>). Open MPI is also built
# without frame pointers: only the slow unwinder gives the whole stacks of its allocations.
export OMPI_MCA_mca_base_component_disable_dlclose=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
run() {
  local label=$1; shift
  echo "abi_smoke ($label)"
  if ! timeout -k 10 240 env "$@" mpirun -np 3 --oversubscribe --bind-to none \
      -x ASAN_OPTIONS -x UBSAN_OPTIONS -x LSAN_OPTIONS -x OMPI_MCA_mca_base_component_disable_dlclose "$binary"; then
    echo "abi_smoke ($label) FAILED" >&2
    return 1
  fi
}
run "shared memory" RELAX_SHM_COLLECTIVES=auto RELAX_TCP_RING=off
run "TCP ring" RELAX_SHM_COLLECTIVES=off RELAX_TCP_RING=on
run "MPI point-to-point" RELAX_SHM_COLLECTIVES=off RELAX_TCP_RING=off
