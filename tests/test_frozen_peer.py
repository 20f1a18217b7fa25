"""A peer frozen with SIGSTOP (or hung, or swapped out) must not hold the others forever: every
wait is bounded by RELAX_OP_TIMEOUT and the error names the rank that did not answer. (The
engine's idle poll ending on stop, whatever RELAX_IDLE_SPIN_US says: cuda_ops/tests/test_engine_idle_spin.cc.)"""

import sys

import pytest

from mpi_launch import REPO, run_ranks

pytestmark = pytest.mark.mpi
SCRIPTS = REPO / "tests" / "scripts"


@pytest.mark.parametrize("np,env,mode", [
    (2, {}, "allreduce"),                                # negotiation through the shared segment
    (3, {"RELAX_SHM_COLLECTIVES": "off"}, "allreduce"),  # negotiation through MPI's all-gather
    (3, {}, "neighbour"),                                # the direct lane first, then negotiation
], ids=["2-shm", "3-mpi", "3-neighbour"])
def test_frozen_rank_is_named_on_every_other_rank(np, env, mode):
    """The last rank SIGSTOPs itself before an all-reduce; every other rank gets an error naming
    it, later requests fail with the same reason, and the job ends (the launcher kills the frozen
    rank once the others exit non-zero) instead of hanging. The 60 s launch limit is only a hang
    guard: without the bound the others wait forever."""
    run = run_ranks(np, [sys.executable, str(SCRIPTS / "frozen_peer.py"), mode], timeout=60,
                    env={"RELAX_OP_TIMEOUT": "3", **env})
    frozen = np - 1
    assert f"RANK {frozen} FREEZES" in run.outputs[frozen], run.report()
    for rank in range(frozen):
        assert "FROZEN-ERROR-OK" in run.outputs[rank], run.report()
        assert f"rank {frozen} did not answer within RELAX_OP_TIMEOUT=3 s" in run.outputs[rank], run.report()
    assert run.returncode != 0, run.report()

