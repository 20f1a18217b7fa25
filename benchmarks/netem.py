"""Shaped-link harness: N MPI ranks, each in its own network namespace, joined by a bridge, each
rank's link limited by the kernel's token-bucket filter (``tc tbf``) in both directions.

MPI runs over TCP (shared memory would bypass the shaping). mpirun stays in the root namespace
and starts each rank's daemon through a one-line "remote shell" that enters the rank's
namespace (the recipe verified in ../shared/ENVIRONMENT.md: rsh agent, ``rtc ^hwloc``,
``--bind-to none``, ``btl self,tcp`` restricted to the harness subnet).

Measured here: one-way MPI traffic reaches the shaped rate (993 Mbit/s at 1 Gbit); traffic in
both directions at once reaches 745 Mbit/s per direction through Open MPI's TCP transport (raw
TCP: 990), so ring collectives see about 3/4 of the nominal rate.

No latency axis: this kernel has no ``sch_netem``, and a userspace delay line costs CPU that the
2-core machine needs for the ranks themselves, distorting exactly the comparisons we make.

    sudo python benchmarks/netem.py --np 2 --bandwidth 1000 -- python benchmarks/train.py ...
    sudo python benchmarks/netem.py --cleanup      # remove leftovers of a killed run

Use from Python::

    with ShapedNetwork(2, bandwidth_mbit=1000) as net:
        net.run(net.mpirun_command(2) + [sys.executable, "script.py"])
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from relaxlib_launch.mpirun_command import mpirun_argv

PREFIX = "rlx"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


def require_privileges() -> None:
    """Raises RuntimeError unless we are root and ip/tc exist."""
    if os.geteuid() != 0:
        raise RuntimeError("the shaped-link harness needs root (network namespaces and tc)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"the shaped-link harness needs `{tool}` (Debian: apt-get install iproute2)")


def leftovers() -> dict[str, list[str]]:
    """Namespaces and links of this harness that exist right now (any run)."""
    namespaces = [line.split()[0] for line in _run("ip", "netns", "list", check=False).stdout.splitlines()
                  if line.startswith(PREFIX)]
    links = []
    for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX):
            links.append(name)
    return {"namespaces": namespaces, "links": links}


def cleanup_all() -> None:
    """Removes every namespace and link left by this harness."""
    found = leftovers()
    for ns in found["namespaces"]:
        _run("ip", "netns", "del", ns, check=False)
    for link in leftovers()["links"]:
        _run("ip", "link", "del", link, check=False)


def _bridge_subnets() -> dict[str, int]:
    """This harness's bridges in the host namespace and the second octet of each one's subnet."""
    found = {}
    for line in _run("ip", "-o", "-4", "addr", "show", check=False).stdout.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1].startswith(PREFIX) and fields[1].endswith("br"):
            found[fields[1]] = int(fields[3].split(".")[1])
    return found


def remove_stale() -> None:
    """Removes the namespaces and links of runs whose process is gone (a run killed with SIGKILL
    cannot remove its own); a live run's network is left alone."""
    for bridge in _bridge_subnets():
        tag = bridge[len(PREFIX):-len("br")]
        if not tag.isdigit() or Path(f"/proc/{tag}").exists():
            continue
        found = leftovers()
        for ns in found["namespaces"]:
            if ns.startswith(f"{PREFIX}{tag}n"):
                _run("ip", "netns", "del", ns, check=False)
        for link in found["links"]:
            if link.startswith(f"{PREFIX}{tag}"):
                _run("ip", "link", "del", link, check=False)


def free_subnet_octet(first: int = 77, last: int = 126) -> int:
    """The second octet of a 10.x.0.0/24 subnet that no network of this harness uses now."""
    taken = set(_bridge_subnets().values())
    for octet in range(first, last + 1):
        if octet not in taken:
            return octet
    raise RuntimeError(f"every subnet 10.{first}-{last}.0.0/24 is held by a shaped network; "
                       f"`python benchmarks/netem.py --cleanup` removes them")


class ShapedNetwork:
    """Context manager: creates the namespaces, links and shaping; always removes them."""

    def __init__(self, nranks: int, bandwidth_mbit: float | None = None, subnet_octet: int | None = None,
                 mtu: int = 9000) -> None:
        if nranks < 1 or nranks > 250:
            raise ValueError("nranks must be in 1..250")
        self.nranks = nranks
        self.bandwidth_mbit = bandwidth_mbit
        self.mtu = mtu
        self.tag = str(os.getpid() % 100000)
        if subnet_octet is None:
            # Two networks on one subnet route each other's traffic to the wrong bridge and the
            # ranks wait forever: take a subnet no other run of this harness holds.
            remove_stale()
            subnet_octet = free_subnet_octet()
        self.subnet = f"10.{subnet_octet}.0.0/24"
        self.bridge = f"{PREFIX}{self.tag}br"
        self.bridge_ip = f"10.{subnet_octet}.0.254"
        self.namespaces = [f"{PREFIX}{self.tag}n{i}" for i in range(nranks)]
        self.host_links = [f"{PREFIX}{self.tag}h{i}" for i in range(nranks)]
        self.addresses = [f"10.{subnet_octet}.0.{i + 1}" for i in range(nranks)]
        self.helper_pids: list[int] = []
        self._agent: str | None = None
        self._previous_handlers: dict = {}
        self._up = False

    # -- lifecycle --

    def __enter__(self) -> ShapedNetwork:
        require_privileges()
        atexit.register(self.down)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous_handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self._create()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def _on_signal(self, signum, frame) -> None:
        self.down()
        raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)

    def _create(self) -> None:
        self._up = True
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "mtu", str(self.mtu), "up")
        for ns, host, address in zip(self.namespaces, self.host_links, self.addresses):
            peer = host + "p"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", peer, "netns", ns)
            _run("ip", "-n", ns, "link", "set", peer, "name", "eth0")
            _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "mtu", str(self.mtu), "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "link", "set", host, "master", self.bridge, "mtu", str(self.mtu), "up")
        self.set_bandwidth(self.bandwidth_mbit)
        self._agent = self._write_agent()

    def down(self) -> None:
        """Removes everything this instance created, killing what it started; safe to call twice."""
        for pid in self.helper_pids:  # launcher process groups (mpirun and its children)
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.helper_pids = []
        if self._up:
            for ns in self.namespaces:
                # Deleting a namespace does not stop processes inside it: kill them first.
                for pid in _run("ip", "netns", "pids", ns, check=False).stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                _run("ip", "netns", "del", ns, check=False)  # removes eth0 and its veth peer
            for host in self.host_links:
                _run("ip", "link", "del", host, check=False)
            _run("ip", "link", "del", self.bridge, check=False)
            self._up = False
        if self._agent and os.path.exists(self._agent):
            os.remove(self._agent)
            self._agent = None
        if getattr(self, "_tmp_root", None):
            shutil.rmtree(self._tmp_root, ignore_errors=True)
            self._tmp_root = None
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers = {}

    # -- shaping --

    def set_bandwidth(self, mbit: float | None) -> None:
        """Limits every rank's link to ``mbit`` Mbit/s in each direction (None: unlimited)."""
        self.bandwidth_mbit = mbit
        for ns, host in zip(self.namespaces, self.host_links):
            for prefix in (["ip", "netns", "exec", ns], []):
                dev = "eth0" if prefix else host
                if mbit is None:
                    _run(*prefix, "tc", "qdisc", "del", "dev", dev, "root", check=False)
                    continue
                rate_bytes = mbit * 1e6 / 8
                burst = max(self.mtu * 8, int(rate_bytes * 0.002))  # 2 ms of traffic
                _run(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
                     "burst", str(burst), "latency", "50ms")

    def qdiscs(self) -> list[str]:
        """The root qdiscs on this network's links (for inspection)."""
        out = []
        for ns, host in zip(self.namespaces, self.host_links):
            out += _run("tc", "qdisc", "show", "dev", host, check=False).stdout.splitlines()
            out += _run("ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0",
                        check=False).stdout.splitlines()
        return out

    # -- launching --

    def _write_agent(self) -> str:
        # Each daemon gets its own TMPDIR: the namespaces share /tmp, and Open MPI's session
        # directories of daemons and mpirun collided there (1 launch failure in ~100). And its own
        # host name (a UTS namespace): Open MPI 5's runtime (PRRTE) took daemons with one host name
        # for one node, and the ranks' MPI_COMM_WORLD fell apart (each rank alone in its all-reduce).
        self._tmp_root = tempfile.mkdtemp(prefix=f"{PREFIX}{self.tag}-sessions-")
        for ns in self.namespaces:
            os.makedirs(os.path.join(self._tmp_root, ns))
        cases = "\n".join(f"  {address}) ns={ns} ;;" for address, ns in zip(self.addresses, self.namespaces))
        script = f"""#!/bin/sh
# relaxlib shaped-link harness: mpirun's remote shell, entering the namespace of host $1.
host="$1"; shift
case "$host" in
{cases}
  *) echo "unknown harness host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1"; export TMPDIR="$2"; shift 2; exec sh -c "$*"' \
  agent "$ns" "{self._tmp_root}/$ns" "$@"
"""
        fd, path = tempfile.mkstemp(prefix=f"{PREFIX}{self.tag}-agent-", suffix=".sh")
        with os.fdopen(fd, "w") as f:
            f.write(script)
        os.chmod(path, 0o755)
        return path

    def run(self, argv: list[str], timeout: float | None = None, **popen_kwargs) -> int:
        """Runs ``argv`` (typically ``mpirun_command() + [...]``) in its own process group, which
        teardown kills; returns the exit code."""
        proc = subprocess.Popen(argv, start_new_session=True, **popen_kwargs)
        self.helper_pids.append(proc.pid)
        try:
            return proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            self.helper_pids.remove(proc.pid)

    def mpirun_command(self, np_: int | None = None, export: list[str] | None = None,
                       env: Mapping[str, str] | None = None) -> list[str]:
        """mpirun arguments that place rank i in namespace i and keep MPI on the shaped links.
        The ranks get the variables named in ``export`` and every RELAX_*/PYTHON*/OMP_* one that
        is set in ``env`` (the environment mpirun will run with; default: this process's)."""
        np_ = np_ or self.nranks
        if np_ > self.nranks:
            raise ValueError(f"{np_} ranks need {np_} namespaces; this network has {self.nranks}")
        hosts = ",".join(f"{a}:1" for a in self.addresses[:np_])
        mca = {"plm_rsh_agent": self._agent, "rtc": "^hwloc", "btl": "self,tcp",
               "btl_tcp_if_include": self.subnet, "oob_tcp_if_include": self.subnet,
               # 4 MB socket buffers: simultaneous traffic both ways over a 1 Gbit tbf link measured
               # 600 Mbit/s per direction with the defaults, 745 with these (raw TCP: 990).
               "btl_tcp_sndbuf": "4194304", "btl_tcp_rcvbuf": "4194304"}
        env = os.environ if env is None else env
        names = set(export or []) | {k for k in env if k.startswith(("RELAX_", "PYTHON", "OMP_"))}
        exported = [name for name in sorted(names | {"PATH", "LD_LIBRARY_PATH"}) if name in env]
        return mpirun_argv(np_, hosts=hosts, mca=mca, export=exported)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--bandwidth", type=float, help="Mbit/s per rank link (default: unshaped veth)")
    parser.add_argument("--cleanup", action="store_true", help="remove leftovers of earlier runs and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    try:
        require_privileges()
    except RuntimeError as exc:
        print(f"netem: {exc}", file=sys.stderr)
        return 2
    if args.cleanup:
        cleanup_all()
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    with ShapedNetwork(args.np, args.bandwidth) as net:
        return net.run(net.mpirun_command() + command)


if __name__ == "__main__":
    sys.exit(main())
