"""The shaped-link harness: ranks really run in separate namespaces behind tbf-shaped links, and
nothing is left behind (also after Ctrl-C). Needs root; skipped with a reason otherwise."""

import os
import signal
import subprocess
import sys
import time

import pytest

from mpi_launch import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import netem  # noqa: E402

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(os.geteuid() != 0, reason="the shaped-link harness needs root (netns, tc)")]

# Each rank writes its address to a file of its own: ranks' stdout reaches mpirun through separate
# daemons, so lines printed at the same moment can interleave mid-line.
WRITE_ADDRESS = ("import subprocess, os, sys; "
                 "open(os.path.join(sys.argv[1], os.environ['OMPI_COMM_WORLD_RANK']), 'w').write("
                 "subprocess.run(['ip', '-o', '-4', 'addr', 'show', 'eth0'], capture_output=True, text=True)"
                 ".stdout.split()[3])")


def test_ranks_run_in_their_namespaces_behind_shaped_links_and_everything_is_removed(tmp_path):
    netem.remove_stale()  # what killed runs left (their own test is below)
    assert netem.leftovers() == {"namespaces": [], "links": []}
    with netem.ShapedNetwork(2, bandwidth_mbit=100) as net:
        shaping = net.qdiscs()
        assert sum("tbf" in line and "100Mbit" in line for line in shaping) == 4, shaping  # both ends of 2 links
        out = subprocess.run(net.mpirun_command(2) + [sys.executable, "-c", WRITE_ADDRESS, str(tmp_path)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert [(tmp_path / str(rank)).read_text() for rank in range(2)] == [f"{a}/24" for a in net.addresses[:2]]
        net.set_bandwidth(None)
        assert not any("tbf" in line for line in net.qdiscs())
    assert netem.leftovers() == {"namespaces": [], "links": []}


def test_interrupted_run_tears_down():
    netem.remove_stale()
    assert netem.leftovers() == {"namespaces": [], "links": []}
    proc = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "netem.py"), "--np", "2", "--bandwidth", "50",
                             "--", "sleep", "60"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not netem.leftovers()["namespaces"] and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    if not netem.leftovers()["namespaces"]:  # (a clean-clone run once failed here without a word)
        proc.kill()
        output, _ = proc.communicate()
        raise AssertionError(f"harness did not start (exit {proc.returncode}): {output[-3000:]}")
    while "sleep 60" not in subprocess.run(["ps", "ax"], capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline + 30, "the job never started"
        time.sleep(0.2)  # the job runs inside the namespaces
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert netem.leftovers() == {"namespaces": [], "links": []}
    time.sleep(0.5)
    assert "sleep 60" not in subprocess.run(["ps", "ax"], capture_output=True, text=True).stdout, "orphaned rank"


def test_refuses_clearly_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(RuntimeError, match="needs root"):
        netem.require_privileges()


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_killed_runs_network_is_removed_and_a_live_runs_subnet_is_not_taken(tmp_path):
    # A run killed with SIGKILL leaves its bridge on 10.77.0.0/24: a new network on the same subnet
    # would route the ranks' traffic to that dead bridge and the job would wait forever.
    stale = f"{netem.PREFIX}{_dead_pid() % 100000}br"
    subprocess.run(["ip", "link", "add", stale, "type", "bridge"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", "10.77.0.254/24", "dev", stale], check=True)
        subprocess.run(["ip", "link", "set", stale, "up"], check=True)
        live = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "netem.py"), "--np", "1", "--", "sleep",
                                 "60"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 30
            while not netem.leftovers()["namespaces"] and time.monotonic() < deadline:
                time.sleep(0.2)
            live_subnets = {octet for bridge, octet in netem._bridge_subnets().items() if bridge != stale}
            assert live_subnets, "the live run did not start"
            with netem.ShapedNetwork(2, bandwidth_mbit=100) as net:
                assert stale not in netem.leftovers()["links"]
                assert int(net.subnet.split(".")[1]) not in live_subnets, (net.subnet, live_subnets)
                out = subprocess.run(net.mpirun_command(2) + [sys.executable, "-c", WRITE_ADDRESS, str(tmp_path)],
                                     capture_output=True, text=True, timeout=120)
                assert out.returncode == 0, out.stdout + out.stderr
                assert [(tmp_path / str(r)).read_text() for r in range(2)] == [f"{a}/24" for a in net.addresses]
        finally:
            live.send_signal(signal.SIGINT)
            live.wait(timeout=60)
    finally:
        subprocess.run(["ip", "link", "del", stale], capture_output=True)
    assert netem.leftovers() == {"namespaces": [], "links": []}
