"""A rank frozen (SIGSTOP) inside a set-up exchange must not hold the others forever: relaxlib's
start, the TCP ring's and the shared-memory segment's set-up and a process set's creation are
bounded by RELAX_OP_TIMEOUT like the data path (tests/test_frozen_peer.py), and every other rank
gets an error naming the rank that did not answer (cuda_ops/src/transport/setup_wait.h)."""

import os
import signal
import sys

import pytest
from preload_shims import build_preload_shim

from mpi_launch import REPO, run_ranks

pytestmark = pytest.mark.mpi
SCRIPTS = REPO / "tests" / "scripts"
NP = 3
FROZEN = NP - 1
# Every rank its own "node", the TCP ring on (as tests/test_tcp_ring.py enables it).
TCP_RING = {"RELAX_LOCAL_SIZE": "1", "RELAX_TCP_RING": "on"}


@pytest.fixture(scope="module")
def freeze_shim(tmp_path_factory):
    """tests/scripts/freeze_in_setup.c built for LD_PRELOAD: stops a chosen rank inside a chosen MPI call."""
    return build_preload_shim(tmp_path_factory, "freeze_in_setup.c")


def kill_frozen(pidfile) -> None:
    """SIGKILLs the frozen rank if it is still there (a stopped process outlives its launcher otherwise)."""
    try:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        pass


# (mode, extra environment, the MPI calls counted (blocking and nonblocking form), which one freezes, `during`)
CASES = [
    ("init", {}, "MPI_Comm_dup,MPI_Comm_idup", 1, "relaxlib's start (communicator set-up)"),
    ("init", {}, "MPI_Allgather,MPI_Iallgather", 1, "relaxlib's start (the exchange of host names)"),
    # the first all-gather is init's host names, the second the ring's
    ("ring", TCP_RING, "MPI_Allgather,MPI_Iallgather", 2, "the TCP ring's set-up"),
    # the first two broadcasts are the engine's and the collectives' settings, the third the segment's name
    ("shm", {"RELAX_TCP_RING": "off"}, "MPI_Bcast,MPI_Ibcast", 3, "the shared-memory segment's set-up"),
    # armed right before add_process_set: the barrier ahead of MPI_Comm_create, or MPI_Comm_create itself
    ("process_set", {"RELAX_TEST_FREEZE_ARM": "manual"}, "MPI_Comm_create,MPI_Ibarrier", 1,
     f"the creation of process set [0, {FROZEN}]"),
    # armed right before start_group_service: its communicator's duplication (the engine's idle
    # negotiation rounds, which the frozen rank no longer answers either, may notice first)
    ("group_service", {"RELAX_TEST_FREEZE_ARM": "manual"}, "MPI_Comm_dup,MPI_Comm_idup", 1,
     ("the group generator's start", "a negotiation round")),
]


@pytest.mark.parametrize("mode,env,calls,nth,during", CASES,
                         ids=["init-comm-dup", "init-host-names", "tcp-ring", "shm-segment", "process-set",
                              "group-service"])
def test_rank_frozen_in_setup_is_named_on_every_other_rank(mode, env, calls, nth, during, freeze_shim, tmp_path):
    """The last rank stops on entering the `nth` of `calls`; every other rank gets an error naming
    it and the exchange it went silent in, later requests fail with the same reason, and the job
    ends (the launcher kills the frozen rank once the others exit non-zero; run_ranks SIGKILLs the
    whole job at its timeout). The 90 s limit is only a hang guard: unbounded, the others wait forever."""
    pidfile = tmp_path / "frozen.pid"
    done_dir = tmp_path / "done"
    done_dir.mkdir()
    try:
        run = run_ranks(NP, [sys.executable, str(SCRIPTS / "frozen_setup.py"), mode], timeout=90,
                        env={"RELAX_OP_TIMEOUT": "3", "LD_PRELOAD": str(freeze_shim),
                             "RELAX_TEST_FREEZE_RANK": str(FROZEN), "RELAX_TEST_FREEZE_CALLS": calls,
                             "RELAX_TEST_FREEZE_NTH": str(nth), "RELAX_TEST_FREEZE_PIDFILE": str(pidfile),
                             "RELAX_TEST_DONE_DIR": str(done_dir), "RELAX_TEST_EXPECTED": str(FROZEN), **env})
    finally:
        kill_frozen(pidfile)
    assert not run.timed_out, run.report()
    assert f"RANK {FROZEN} FREEZES" in run.outputs[FROZEN], run.report()
    for rank in range(FROZEN):
        assert "SETUP-ERROR-OK" in run.outputs[rank], run.report()
        assert any(f"rank {FROZEN} did not answer within RELAX_OP_TIMEOUT=3 s during {step}" in run.outputs[rank]
                   for step in ((during,) if isinstance(during, str) else during)), run.report()
    assert run.returncode != 0, run.report()
