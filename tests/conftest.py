"""Shared pytest configuration: makes tests/ importable for the launch helpers."""

import os
import resource
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rank_results import RESULTS_DIR_VARIABLE, RankResultsPlugin  # noqa: E402 - needs the path above

from relaxlib_launch.mpirun_command import remove_session_directories  # noqa: E402

_exit_status = None

# Open MPI 5's libfabric BTL sleeps one second in MPI_Init when it closes itself on a host with no
# fabric it can use (btl/ofi, found with gdb on 5.0.11), in every rank and spawned worker. Such a
# host is what the suite runs on, where the component is never selected, so leaving it out changes
# no transport a test runs over; a test or user that names its BTLs still decides.
os.environ.setdefault("OMPI_MCA_btl", "^ofi")
# Processes started from here skip the teardown's collection pass (tests/rank_site/sitecustomize.py)
# and can import the suite's helpers for rank scripts (tests/rank_site/rank_reports.py).
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(Path(__file__).resolve().parent / "rank_site"), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.fixture(scope="session")
def rank_groups(request):
    """Shared launches of tests/parallel modules (tests/rank_groups.py): each group starts once."""
    from rank_groups import RankGroupRuns

    return RankGroupRuns(request.session)


def pytest_configure(config):
    """Under run_pytest_on_ranks, each rank records its test results for the launching test to name."""
    if os.environ.get(RESULTS_DIR_VARIABLE):
        config.pluginmanager.register(RankResultsPlugin(os.environ[RESULTS_DIR_VARIABLE]), "relax-rank-results")


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of every child it has waited for (their ranks too)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """With $RELAX_TEST_CPU_LOG set, appends each test's wall and CPU seconds to that file: a test whose
    CPU is far below twice its wall mostly waits (timeouts, frozen peers), where the suite's 2 cores idle."""
    log = os.environ.get("RELAX_TEST_CPU_LOG")
    if not log or "OMPI_COMM_WORLD_SIZE" in os.environ:  # the launching test counts its ranks' CPU
        yield
        return
    wall, cpu = time.monotonic(), _cpu_seconds()
    yield
    wall, cpu = time.monotonic() - wall, _cpu_seconds() - cpu
    with open(log, "a") as out:
        out.write(f"{wall:7.1f} {cpu:7.1f} {item.nodeid}\n")


def pytest_sessionfinish(session, exitstatus):
    """Remembers the session's exit status for pytest_unconfigure."""
    global _exit_status
    _exit_status = int(exitstatus)


def pytest_unconfigure(config):
    """Ends the top-level pytest process once its summary is printed, skipping interpreter teardown.

    A clean-clone run of 2026-12-01 had the pytest process die with SIGSEGV after printing its summary
    (cause not found yet: torch, TensorFlow and the core are all loaded in this process by then), which
    turns a finished run's verdict into a crash. The verdict is what the run decided, so it is returned
    as it is. Not under mpirun: there, ranks must run their exit hooks (MPI_Finalize).
    """
    if _exit_status is None or "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_RANK" in os.environ:
        return
    remove_session_directories()  # an atexit hook, which os._exit skips
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)
