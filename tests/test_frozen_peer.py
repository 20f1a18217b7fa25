"""A peer frozen with SIGSTOP (or hung, or swapped out) must not hold the others forever: every
wait is bounded by RELAX_OP_TIMEOUT and the error names the rank that did not answer. (The
engine's idle poll ending on stop, whatever RELAX_IDLE_SPIN_US says: cuda_ops/tests/test_engine_idle_spin.cc.)"""

import sys

import pytest
from preload_shims import build_preload_shim

from mpi_launch import REPO, run_ranks

pytestmark = pytest.mark.mpi
SCRIPTS = REPO / "tests" / "scripts"
# Every rank its own "node": all-reduces of every size take the TCP ring (transport/tcp_ring.h).
TCP_RING = {"RELAX_LOCAL_SIZE": "1", "RELAX_MPI_ALLREDUCE_MAX_BYTES": "0", "RELAX_MPI_ALLGATHER_MAX_BYTES": "0"}


@pytest.fixture(scope="module")
def freeze_shim(tmp_path_factory):
    """tests/scripts/freeze_in_allreduce.c built for LD_PRELOAD: stops a chosen rank inside an MPI all-reduce."""
    return build_preload_shim(tmp_path_factory, "freeze_in_allreduce.c")


@pytest.mark.parametrize("np,env,mode,during", [
    (2, {}, "allreduce", ""),                                # negotiation through the shared segment
    (3, {"RELAX_SHM_COLLECTIVES": "off"}, "allreduce", ""),  # negotiation through MPI's all-gather
    (3, {}, "neighbour", ""),                                # the direct lane first, then negotiation
    (3, TCP_RING, "ring", "during a TCP ring transfer"),     # stopped mid-transfer on the TCP ring
    (3, {"RELAX_SHM_COLLECTIVES": "off"}, "inside", "during an MPI all-reduce"),  # inside MPI's all-reduce
    (3, {"RELAX_FAST_PATH": "on"}, "fast-path", ""),         # inside a fast-path bucket (no negotiation)
], ids=["2-shm", "3-mpi", "3-neighbour", "3-tcp-ring", "3-inside-mpi-allreduce", "3-fast-path"])
def test_frozen_rank_is_named_on_every_other_rank(np, env, mode, during, request):
    """The last rank SIGSTOPs itself before (or during) an all-reduce; every other rank gets an
    error naming it (and, where given, the wait `during` which it went silent), later requests
    fail with the same reason, and the job ends (the launcher kills the frozen rank once the
    others exit non-zero) instead of hanging. The 60 s launch limit is only a hang guard: without
    the bound the others wait forever."""
    frozen = np - 1
    if mode == "inside":
        env = {**env, "LD_PRELOAD": str(request.getfixturevalue("freeze_shim")),
               "RELAX_TEST_FREEZE_RANK": str(frozen), "RELAX_TEST_FREEZE_COUNT": "1031"}
    run = run_ranks(np, [sys.executable, str(SCRIPTS / "frozen_peer.py"), mode], timeout=60,
                    env={"RELAX_OP_TIMEOUT": "3", **env})
    assert f"RANK {frozen} FREEZES" in run.outputs[frozen], run.report()
    for rank in range(frozen):
        assert "FROZEN-ERROR-OK" in run.outputs[rank], run.report()
        assert f"rank {frozen} did not answer within RELAX_OP_TIMEOUT=3 s {during}" in run.outputs[rank], run.report()
    assert run.returncode != 0, run.report()
