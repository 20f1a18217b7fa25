"""Who a silence report names (transport/liveness.h, report_silence): ranks stuck in successive waits
of a ring time out up to a timeout apart, and each asks the others whether they timed out too. A live
rank that asks while another still listens must be heard by it, however near the end of the other's
grace it asks, or the other names a live rank frozen (cuda_ops/tests/mpi/silence_probe.cc: rank 2 stays
out of MPI, rank 1 reports first, rank 0 a fraction of the grace later)."""

import re

import pytest
from core_probes import build_core_probe

from mpi_launch import run_ranks

pytestmark = pytest.mark.mpi
# Fractions of the grace after which the late rank asks: at once, midway, and at the very end of the
# early rank's grace, where its question and the early rank's answer cross the grace's end.
OFFSETS = ["0", "0.6", "0.98", "0.99", "0.995"]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """cuda_ops/tests/mpi/silence_probe.cc, built with the core's objects."""
    return build_core_probe(tmp_path_factory, "silence_probe.cc")


def test_a_rank_asking_near_the_end_of_anothers_grace_is_heard_and_only_the_silent_rank_named(probe):
    run = run_ranks(3, [str(probe), *OFFSETS], timeout=120)
    assert run.returncode == 0, run.report()
    for rank in (0, 1):
        reports = re.findall(r"ROUND (\d+) offset (\S+) rank \d+ named (.*)", run.outputs[rank])
        assert [offset for _, offset, _ in reports] == OFFSETS, run.report()
        for _, offset, named in reports:
            assert named.startswith("rank 2 did not answer within RELAX_OP_TIMEOUT=1 s during a probe's wait"), \
                f"offset {offset}, rank {rank}: {named}\n{run.report()}"
