"""Open MPI's fault-tolerant MPI (ULFM) under the core's recovery steps (transport/ulfm.h): on 4 ranks
started with ``mpirun --with-ft ulfm``, rank 1 kills itself before an all-reduce; the 3 survivors see
the failure as an MPI error, revoke, shrink and agree, and their all-reduce on the new communicator is
exact (cuda_ops/tests/mpi/ulfm_probe.cc). Skipped, saying why, where this build has no ULFM."""

import re

import pytest
from core_probes import build_core_probe

from mpi_launch import run_ranks


def ulfm_build() -> tuple[bool, str]:
    """Whether the installed core has ULFM (setup.py's check), and why not."""
    try:
        from relaxlib import _build_info
    except ImportError:
        return False, "relaxlib is not built (make build)"
    if not getattr(_build_info, "MPI_ULFM", False):
        return False, getattr(_build_info, "MPI_ULFM_WHY", "") or "this build predates the ULFM check"
    return True, ""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """cuda_ops/tests/mpi/ulfm_probe.cc, built with the core's objects."""
    available, why = ulfm_build()
    if not available:
        pytest.skip(f"fault tolerance unavailable: {why}")
    return build_core_probe(tmp_path_factory, "ulfm_probe.cc")


@pytest.mark.mpi
def test_survivors_of_a_killed_rank_shrink_and_allreduce_exactly(probe):
    run = run_ranks(4, [str(probe)], mpi_args=["--with-ft", "ulfm"], timeout=120)
    assert not run.timed_out, run.report()
    survivors = {0: 1 + 3 + 4, 2: 1 + 3 + 4, 3: 1 + 3 + 4}
    for rank, expected_sum in survivors.items():
        line = next((line for line in run.outputs[rank].splitlines() if line.startswith("RECOVERED ")), "")
        match = re.match(r"RECOVERED rank (\d+) lost \[([\d,]*)\] size (\d+) agreed (\d+) sum (\d+) recovery_ms \S+ "
                         r"saw class (\d+)", line)
        assert match, run.report()
        assert match.groups()[:5] == (str(rank), "1", "3", "1", str(expected_sum)), run.report()
        # MPIX_ERR_PROC_FAILED (75), _PROC_FAILED_PENDING (76) or MPIX_ERR_REVOKED (77) in Open MPI 5
        assert int(match.group(6)) in (75, 76, 77), run.report()
    assert "RECOVERED" not in run.outputs[1], run.report()


BUILT_5 = {"mpi": "mpirun (Open MPI) 5.0.11", "ulfm": True, "ulfm_why": ""}
BUILT_4 = {"mpi": "mpirun (Open MPI) 4.1.4", "ulfm": False,
           "ulfm_why": "MPI lacks ULFM (mpirun (Open MPI) 4.1.4 has no MPIX_Comm_revoke/shrink/agree in mpi-ext.h)"}


@pytest.mark.parametrize("info, running, environ, expected", [
    (BUILT_5, "mpirun (Open MPI) 5.0.11", {}, (True, "Open MPI 5.0.11 ULFM")),
    (BUILT_5, "mpirun (Open MPI) 5.0.11", {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_MCA_mpi_ft_enable": "1"},
     (True, "Open MPI 5.0.11 ULFM")),
    (BUILT_5, "mpirun (Open MPI) 5.0.11", {"OMPI_COMM_WORLD_SIZE": "2"},
     (False, "mpirun not started with --with-ft ulfm")),
    (BUILT_5, "mpirun (Open MPI) 4.1.4", {}, (False, "the mpirun found (mpirun (Open MPI) 4.1.4) cannot start a job "
                                              "with fault tolerance (--with-ft ulfm); relaxlib was built against "
                                              "Open MPI 5.0.11")),
    (BUILT_4, "mpirun (Open MPI) 4.1.4", {}, (False, BUILT_4["ulfm_why"])),
    ({"mpi": "x", "ulfm": None, "ulfm_why": None}, "", {}, (False, "this build predates the ULFM check (rebuild: "
                                                            "`make build` or `pip install --no-build-isolation .`)")),
], ids=["built-and-run-on-5", "in-a-job-with-ft", "in-a-job-without-ft", "run-by-4.1", "built-on-4.1", "old-build"])
def test_check_build_says_whether_fault_tolerance_is_available_and_why_not(info, running, environ, expected):
    from relaxlib_launch.build_report import fault_tolerance
    assert fault_tolerance(info, running, environ) == expected
