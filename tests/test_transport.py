"""Open MPI's shared-memory and TCP transports as relaxlib sets them up before initializing MPI."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mpi_launch import REPO, run_ranks

SCRIPT = str(REPO / "tests" / "scripts" / "mpi_transport.py")
# the same rule the core applies (x86 guests report the flag); the decision itself is unit-tested in C++
VIRTUAL_MACHINE = any(line.startswith("flags") and " hypervisor" in line
                      for line in Path("/proc/cpuinfo").read_text().splitlines())
_MPI_VERSION = re.search(r"Open MPI\)? (\d+)\.", subprocess.run(["mpirun", "--version"], capture_output=True,
                                                              text=True).stdout)
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(not _MPI_VERSION, reason="relaxlib sets Open MPI's transports only")]
# Open MPI 5 renamed vader to sm and moved single copy into the smsc framework: relaxlib leaves
# that to Open MPI there (transport/shm_transport.cc). The TCP settings are the same in 4 and 5.
shared_memory_choice = pytest.mark.skipif(
    not _MPI_VERSION or int(_MPI_VERSION.group(1)) >= 5,
    reason="relaxlib chooses the shared-memory transport on Open MPI up to 4.x only")


def setting_on_every_rank(env: dict[str, str], *args: str, label: str = "MECHANISM") -> list[str]:
    run = run_ranks(2, [sys.executable, SCRIPT, *args], env=env, timeout=120)
    assert run.returncode == 0, run.report()
    seen = [next((line for line in out.splitlines() if line.startswith((f"{label}=", "INIT-ERROR"))), "")
            for out in run.outputs]
    assert all(seen), run.report()
    return seen


def mechanism_on_every_rank(env: dict[str, str], *args: str) -> list[str]:
    return setting_on_every_rank(env, *args)


@shared_memory_choice
@pytest.mark.parametrize("setting, preset, expected", [
    ("", "", "none" if VIRTUAL_MACHINE else "default"),  # auto: copy-in/copy-out on a virtual machine
    ("off", "", "none"),
    ("on", "", "default"),
    ("", "cma", "cma"),     # the user's own choice (mpirun --mca ...) is kept
    ("off", "cma", "cma"),
])
def test_shared_memory_copy_mode(setting, preset, expected):
    env = {"RELAX_SHM_SINGLE_COPY": setting, "OMPI_MCA_btl_vader_single_copy_mechanism": preset}
    assert mechanism_on_every_rank(env) == [f"MECHANISM={expected}"] * 2


@shared_memory_choice
def test_a_choice_in_an_open_mpi_parameter_file_is_kept(tmp_path):
    params = tmp_path / "mca-params.conf"
    params.write_text("# the user's tuning\n btl_vader_single_copy_mechanism = emulated\n")
    env = {"RELAX_SHM_SINGLE_COPY": "off", "OMPI_MCA_btl_vader_single_copy_mechanism": "",
           "OMPI_MCA_mca_base_param_files": str(params)}
    assert mechanism_on_every_rank(env) == ["MECHANISM=default"] * 2  # not overridden from the environment


@shared_memory_choice
def test_applied_when_relaxlib_is_loaded_before_the_application_initializes_mpi():
    env = {"RELAX_SHM_SINGLE_COPY": "", "OMPI_MCA_btl_vader_single_copy_mechanism": ""}
    expected = "none" if VIRTUAL_MACHINE else "default"
    assert mechanism_on_every_rank(env, "loaded-then-mpi4py") == [f"MECHANISM={expected}"] * 2


@shared_memory_choice
def test_a_setting_changed_between_import_and_init_takes_effect():
    env = {"RELAX_SHM_SINGLE_COPY": "off", "OMPI_MCA_btl_vader_single_copy_mechanism": ""}
    assert mechanism_on_every_rank(env, "changed-to-on") == ["MECHANISM=default"] * 2


@shared_memory_choice
def test_mpi_initialized_by_the_application_is_left_as_it_is():
    env = {"RELAX_SHM_SINGLE_COPY": "off", "OMPI_MCA_btl_vader_single_copy_mechanism": ""}
    assert mechanism_on_every_rank(env, "mpi4py-first") == ["MECHANISM=default"] * 2


def test_invalid_setting_fails_init_on_every_rank_naming_it():
    seen = mechanism_on_every_rank({"RELAX_SHM_SINGLE_COPY": "sometimes"})
    assert all("RELAX_SHM_SINGLE_COPY=sometimes is not one of auto, on, off" in line for line in seen), seen


# Ring segments across nodes are 16 MiB; each must fit in one eager message (tcp_transport.h).
SEGMENT_PLUS_HEADER = str((16 << 20) + (64 << 10))


@pytest.mark.parametrize("setting, segment, preset, expected", [
    ("", "", "", SEGMENT_PLUS_HEADER),
    ("auto", "4194304", "", str((4 << 20) + (64 << 10))),  # follows RELAX_RING_SEGMENT_BYTES
    ("2000000", "", "", "2000000"),
    ("off", "", "", "default"),
    ("", "", "131072", "131072"),  # the user's own choice (mpirun --mca ...) is kept
])
def test_tcp_eager_limit(setting, segment, preset, expected):
    env = {"RELAX_TCP_EAGER_LIMIT": setting, "RELAX_RING_SEGMENT_BYTES": segment}
    if preset:  # (Open MPI reads an empty variable as 0)
        env["OMPI_MCA_btl_tcp_eager_limit"] = preset
    assert setting_on_every_rank(env, label="TCP_EAGER") == [f"TCP_EAGER={expected}"] * 2


def test_a_tcp_send_size_in_a_parameter_file_is_kept(tmp_path):
    params = tmp_path / "mca-params.conf"
    params.write_text("btl_tcp_max_send_size = 262144\n")
    env = {"OMPI_MCA_mca_base_param_files": str(params)}
    assert setting_on_every_rank(env, label="TCP_EAGER") == ["TCP_EAGER=default"] * 2


def test_invalid_tcp_eager_limit_fails_init_on_every_rank_naming_it():
    seen = setting_on_every_rank({"RELAX_TCP_EAGER_LIMIT": "huge"}, label="TCP_EAGER")
    assert all("RELAX_TCP_EAGER_LIMIT=huge is not a whole number in [4096, 1073741824]" in line for line in seen), seen
