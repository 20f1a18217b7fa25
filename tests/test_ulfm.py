"""Open MPI's fault-tolerant MPI (ULFM): what ``relaxrun --check-build`` says about it."""

import pytest

BUILT_5 = {"mpi": "mpirun (Open MPI) 5.0.11", "ulfm": True, "ulfm_why": ""}
BUILT_4 = {"mpi": "mpirun (Open MPI) 4.1.4", "ulfm": False,
           "ulfm_why": "MPI lacks ULFM (mpirun (Open MPI) 4.1.4 has no MPIX_Comm_revoke/shrink/agree in mpi-ext.h)"}


@pytest.mark.parametrize("info, running, environ, expected", [
    (BUILT_5, "mpirun (Open MPI) 5.0.11", {}, (True, "Open MPI 5.0.11 ULFM")),
    (BUILT_5, "mpirun (Open MPI) 5.0.11", {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_MCA_mpi_ft_enable": "1"},
     (True, "Open MPI 5.0.11 ULFM")),
    (BUILT_5, "mpirun (Open MPI) 5.0.11", {"OMPI_COMM_WORLD_SIZE": "2"},
     (False, "mpirun not started with --with-ft ulfm")),
    (BUILT_5, "mpirun (Open MPI) 4.1.4", {}, (False, "the mpirun on PATH (mpirun (Open MPI) 4.1.4) cannot start a job "
                                              "with fault tolerance (--with-ft ulfm); relaxlib was built against "
                                              "Open MPI 5.0.11")),
    (BUILT_4, "mpirun (Open MPI) 4.1.4", {}, (False, BUILT_4["ulfm_why"])),
    ({"mpi": "x", "ulfm": None, "ulfm_why": None}, "", {}, (False, "this build predates the ULFM check (rebuild: "
                                                            "`make build` or `pip install --no-build-isolation .`)")),
], ids=["built-and-run-on-5", "in-a-job-with-ft", "in-a-job-without-ft", "run-by-4.1", "built-on-4.1", "old-build"])
def test_check_build_says_whether_fault_tolerance_is_available_and_why_not(info, running, environ, expected):
    from relaxlib_launch.build_report import fault_tolerance
    assert fault_tolerance(info, running, environ) == expected
