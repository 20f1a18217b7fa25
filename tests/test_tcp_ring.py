"""The TCP ring (transport/tcp_ring.h): used across nodes unless switched off, with results that
match numpy and agree on every rank either way, and never where shared memory serves."""

import sys

import pytest

from mpi_launch import REPO, run_ranks

pytestmark = pytest.mark.mpi

SCRIPT = str(REPO / "tests" / "scripts" / "tcp_ring.py")
# every size through the ring rather than MPI's own all-reduce / all-gather
RING_ONLY = {"RELAX_MPI_ALLREDUCE_MAX_BYTES": "0", "RELAX_MPI_ALLGATHER_MAX_BYTES": "0", "RELAX_LOG_LEVEL": "debug"}


@pytest.mark.parametrize("np_, env, connected", [
    (3, {"RELAX_LOCAL_SIZE": "1"}, True),                              # three nodes: on by default
    (4, {"RELAX_LOCAL_SIZE": "2"}, True),                              # two nodes of two
    (3, {"RELAX_LOCAL_SIZE": "1", "RELAX_TCP_RING": "off"}, False),    # MPI point-to-point instead
    (2, {}, False),                                                    # one node: shared memory
    (2, {"RELAX_SHM_COLLECTIVES": "off", "RELAX_TCP_RING": "on"}, True),
], ids=["np3-three-nodes", "np4-two-nodes", "np3-off", "np2-one-node", "np2-forced-on"])
def test_ring_collectives_match_numpy_over_either_transport(np_, env, connected):
    run = run_ranks(np_, [sys.executable, SCRIPT], env={**RING_ONLY, **env}, timeout=240)
    assert run.returncode == 0, run.report()
    assert all(f"CHECKED rank {r}" in out for r, out in enumerate(run.outputs)), run.report()
    assert [("TCP ring connected" in out) for out in run.outputs] == [connected] * np_, run.report()


def test_an_invalid_setting_fails_init_naming_it():
    run = run_ranks(2, [sys.executable, SCRIPT], env={"RELAX_TCP_RING": "sometimes"}, timeout=120)
    assert run.returncode != 0
    assert all("RELAX_TCP_RING=sometimes" in out for out in run.outputs), run.report()
