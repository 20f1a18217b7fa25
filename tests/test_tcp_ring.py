"""The TCP ring (transport/tcp_ring.h): used across nodes unless switched off, with results that
match numpy and agree on every rank either way, and never where shared memory serves."""

import subprocess
import sys

import pytest

from mpi_launch import REPO, run_ranks

pytestmark = pytest.mark.mpi

SCRIPT = str(REPO / "tests" / "scripts" / "tcp_ring.py")
# every size through the ring rather than MPI's own all-reduce / all-gather
RING_ONLY = {"RELAX_MPI_ALLREDUCE_MAX_BYTES": "0", "RELAX_MPI_ALLGATHER_MAX_BYTES": "0", "RELAX_LOG_LEVEL": "debug"}


@pytest.mark.parametrize("np_, env, connected", [
    (3, {"RELAX_LOCAL_SIZE": "1"}, True),                              # three nodes: on by default
    (4, {"RELAX_LOCAL_SIZE": "2"}, True),                              # two nodes of two
    (3, {"RELAX_LOCAL_SIZE": "1", "RELAX_TCP_RING": "off"}, False),    # MPI point-to-point instead
    (2, {}, False),                                                    # one node: shared memory
    (2, {"RELAX_SHM_COLLECTIVES": "off", "RELAX_TCP_RING": "on"}, True),
], ids=["np3-three-nodes", "np4-two-nodes", "np3-off", "np2-one-node", "np2-forced-on"])
def test_ring_collectives_match_numpy_over_either_transport(np_, env, connected):
    run = run_ranks(np_, [sys.executable, SCRIPT], env={**RING_ONLY, **env}, timeout=240)
    assert run.returncode == 0, run.report()
    assert all(f"CHECKED rank {r}" in out for r, out in enumerate(run.outputs)), run.report()
    assert [("TCP ring connected" in out) for out in run.outputs] == [connected] * np_, run.report()


def test_an_invalid_setting_fails_init_naming_it(tmp_path):
    # (each rank waits for the other's report: Open MPI ends the job at the first non-zero exit)
    run = run_ranks(2, [sys.executable, SCRIPT], timeout=120, env={
        "RELAX_TCP_RING": "sometimes", "RELAX_TEST_DONE_DIR": str(tmp_path), "RELAX_TEST_EXPECTED": "2"})
    assert run.returncode != 0
    assert all("RELAX_TCP_RING=sometimes" in out for out in run.outputs), run.report()


def first_interface():
    """A non-loopback IPv4 interface of this machine and its address (``("lo", "127.0.0.1")`` if none)."""
    import fcntl
    import socket
    import struct
    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
        return name, socket.inet_ntoa(packed[20:24])
    return "lo", "127.0.0.1"


# Delays the TCP connects of the rank named by RING_TEST_SLOW_RANK by 2 s (loaded into every rank).
SLOW_CONNECT = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int connect(int fd, const struct sockaddr* to, socklen_t length) {
  int (*real)(int, const struct sockaddr*, socklen_t) = dlsym(RTLD_NEXT, "connect");
  const char* me = getenv("OMPI_COMM_WORLD_RANK");
  const char* slow = getenv("RING_TEST_SLOW_RANK");
  if (to && to->sa_family == AF_INET && me && slow && strcmp(me, slow) == 0) usleep(2000000);
  return real(fd, to, length);
}
"""


@pytest.mark.parametrize("include", [False, True], ids=["all-interfaces", "one-interface-included"])
def test_idle_connections_neither_disable_nor_hold_up_the_ring_and_it_listens_where_told(tmp_path, include):
    """Eight connections that never speak reach rank 0's ring listener before its real left
    neighbour (whose connects a preloaded shim holds back 2 s; tests/scripts/tcp_ring_setup.py,
    whose watcher checks and reports that order): the ring still connects on every rank, well
    within a generous bound. Before, each idle connection held the listener for 3 s in turn while
    the neighbour waited 15: the ring was dropped. The listener is bound to the interface MPI was
    told to use (or loopback, all ranks being on this host), never to 0.0.0.0."""
    shim = tmp_path / "slow_connect.so"
    (tmp_path / "slow_connect.c").write_text(SLOW_CONNECT)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "slow_connect.c"), "-ldl"], check=True,
                   timeout=60)
    name, address = first_interface()
    env = {**RING_ONLY, "RELAX_LOCAL_SIZE": "1", "LD_PRELOAD": str(shim), "RING_TEST_SLOW_RANK": "2"}
    if include:
        env["OMPI_MCA_btl_tcp_if_include"] = name
    run = run_ranks(3, [sys.executable, str(REPO / "tests" / "scripts" / "tcp_ring_setup.py")], env=env, timeout=180)
    assert run.returncode == 0, run.report()
    assert "IDLE 8" in run.outputs[0], run.report()
    # the order the test relies on: all idle connections open before rank 2's connect was made
    assert "IDLE-FIRST yes 0" in run.outputs[0], run.report()
    assert all(f"CHECKED rank {r}" in out for r, out in enumerate(run.outputs)), run.report()
    # connected at both inits on every rank; never "TCP ring unavailable"
    assert [out.count("TCP ring connected") for out in run.outputs] == [2, 2, 2], run.report()
    seconds = [float(line.split()[1]) for out in run.outputs for line in out.splitlines()
               if line.startswith("INIT-SECONDS ")]
    assert len(seconds) == 3 and max(seconds) < 60, run.report()  # a bound for a hang, not a timing
    listener = [line.split()[1] for line in run.outputs[0].splitlines() if line.startswith("LISTENER ")]
    assert listener, run.report()
    bound = listener[0].rsplit(":", 1)[0]
    assert bound != "0.0.0.0", run.report()
    assert bound == (address if include else "127.0.0.1"), run.report()
