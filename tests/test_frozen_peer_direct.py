"""The direct lane (neighbour averages) bounded like every other wait (issue #49): a neighbour
that never takes part fails the exchange naming it, on the direct lane, and the silence stops the
whole process, so later requests fail at once with the same reason. (That the lane's limit is
never "forever" when no timeout is set, and that it posts nothing once a silence was noted:
cuda_ops/tests/test_direct_lane_silence.cc.)"""

import sys

import pytest

from mpi_launch import REPO, run_ranks

pytestmark = pytest.mark.mpi
SCRIPT = REPO / "tests" / "scripts" / "frozen_peer_direct.py"


def test_a_neighbour_that_never_takes_part_is_named_and_stops_the_job():
    """Rank 2 stays alive (its engine answers every round) but never submits its side of the
    neighbour average; ranks 0 and 1 must fail naming it within RELAX_OP_TIMEOUT, then fail a
    later all-reduce with the same reason, and the job ends. The 90 s launch limit is only a hang
    guard."""
    away = 2
    run = run_ranks(3, [sys.executable, str(SCRIPT)], timeout=90, env={"RELAX_OP_TIMEOUT": "3"})
    assert f"RANK {away} STAYS AWAY" in run.outputs[away], run.report()
    named = f"StalledError: rank {away} did not answer within RELAX_OP_TIMEOUT=3 s"
    for rank in range(away):
        assert named in run.outputs[rank], run.report()  # every other rank names it
    # The first rank to finish ends the job (mpirun aborts on its exit code), possibly before the
    # other printed its last lines: the later failure is checked where it got that far.
    assert any("DIRECT-SILENCE-OK" in run.outputs[rank] for rank in range(away)), run.report()
    assert run.returncode != 0, run.report()
