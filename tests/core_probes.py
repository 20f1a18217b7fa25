"""Programs under cuda_ops/tests/mpi/*.cc, compiled and linked with the core's objects as the C++ unit
tests are: probes of the core that need several real ranks, which the single-process C++ tests cannot host."""

import shlex
import subprocess

import pytest

from mpi_launch import REPO

CORE_OBJECTS = REPO / "build" / "core"


def mpi_flags(which: str) -> list[str]:
    """mpicc's compile or link flags (``--showme:<which>``), split."""
    return shlex.split(subprocess.run(["mpicc", f"--showme:{which}"], capture_output=True, text=True,
                                      check=True).stdout)


def build_core_probe(tmp_path_factory, source: str):
    """cuda_ops/tests/mpi/<source> built against build/core/*.o (skips the test when they are missing);
    returns the binary's path."""
    objects = sorted(CORE_OBJECTS.glob("*.o"))
    if not objects:
        pytest.skip("build/core/*.o missing (make build)")
    binary = tmp_path_factory.mktemp("probe") / source.replace(".cc", "")
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'cuda_ops' / 'include'}",
                    f"-I{REPO / 'cuda_ops' / 'src'}", "-DOMPI_SKIP_MPICXX=1", *mpi_flags("compile"),
                    str(REPO / "cuda_ops" / "tests" / "mpi" / source), *map(str, objects), *mpi_flags("link"),
                    "-pthread", "-ldl", "-o", str(binary)],
                   check=True, timeout=300)
    return binary
