"""MPI interposers under tests/scripts/*.c, built for LD_PRELOAD: they freeze a chosen rank inside a
chosen MPI call, so tests can check that every other rank's wait ends with an error naming it."""

import shutil
import subprocess

import pytest

from mpi_launch import REPO


def build_preload_shim(tmp_path_factory, source: str):
    """tests/scripts/<source> compiled with mpicc into a shared object for LD_PRELOAD (skips the
    test when there is no mpicc); returns its path."""
    if shutil.which("mpicc") is None:
        pytest.skip("mpicc is needed to build the freezing shim")
    shim = tmp_path_factory.mktemp("shim") / source.replace(".c", ".so")
    subprocess.run(["mpicc", "-shared", "-fPIC", "-O1", "-o", str(shim), str(REPO / "tests" / "scripts" / source)],
                   check=True, timeout=120)
    return shim
