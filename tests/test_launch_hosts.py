"""Host names from -H / --hostfile never reach ssh or mpirun as options (launch/hosts.py)."""

import os
import subprocess
import sys

import pytest

from mpi_launch import REPO
from relaxlib_launch import horovodrun_options, hosts, relaxrun
from relaxlib_launch.mpirun_command import mpirun_argv

RELAXRUN = [sys.executable, "-m", "relaxlib_launch.relaxrun"]


def fake_tools(tmp_path):
    """A PATH whose ssh and mpirun only record that they ran (in ran.log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ssh", "mpirun"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {tmp_path}/ran.log\nexit 0\n')
        script.chmod(0o755)
    return str(bin_dir) + os.pathsep + os.environ["PATH"]


def relaxrun_with(argv, path=None):
    env = dict(os.environ, PATH=path or os.environ["PATH"])
    return subprocess.run(RELAXRUN + argv, capture_output=True, text=True, timeout=60, cwd=REPO, env=env)


@pytest.mark.parametrize("how", ["hosts", "hostfile"])
def test_an_option_as_host_name_runs_nothing(tmp_path, how):
    marker = tmp_path / "pwned"
    bad = f"-oProxyCommand=touch {marker}"
    if how == "hosts":
        where = [f"--hosts={bad}"]
    else:
        hostfile = tmp_path / "hostfile"
        hostfile.write_text(f"node1 slots=2\n{bad} slots=2\n")
        where = ["--hostfile", str(hostfile)]
    # the real ssh: the file would be created if the name reached it
    out = relaxrun_with(["-np", "2", "--start-timeout", "2", *where, "true"])
    assert out.returncode == 2, out.stdout + out.stderr
    assert "-oProxyCommand=touch" in out.stderr and "not a host name" in out.stderr, out.stderr
    assert not marker.exists()
    # recording stand-ins: neither ssh nor mpirun ran at all
    out = relaxrun_with(["-np", "2", "--start-timeout", "2", *where, "true"], path=fake_tools(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert not (tmp_path / "ran.log").exists(), (tmp_path / "ran.log").read_text()


@pytest.mark.parametrize("name", ["-oProxyCommand=x", "a b", "a;b", "$(id)", "a/b", "a`b`", "a|b", "-", "",
                                  "a..b", "-host", "host-", "a" * 64, "fe80::1%$(id)", "x\ny", "node1\n",
                                  "fe80::1%eth0\n"])
def test_bad_names_are_refused_naming_them(name):
    with pytest.raises(hosts.HostError) as info:
        hosts.check_host(name, "here")
    assert repr(name) in str(info.value) and "here" in str(info.value)


@pytest.mark.parametrize("name", ["node1", "node-1.example.com", "n1.", "10.0.0.7", "::1", "fe80::1%eth0",
                                  "localhost", "A" * 63])
def test_good_names_pass(name):
    assert hosts.check_host(name, "here") == name


def test_hosts_option_and_hostfile_forms(tmp_path):
    assert hosts.hosts_option("a:2,b.example:4,10.0.0.1,[::1]:2,fe80::2") == ["a", "b.example", "10.0.0.1", "::1",
                                                                              "fe80::2"]
    with pytest.raises(hosts.HostError, match="slot count"):
        hosts.hosts_option("a:two")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=2 max_slots=4\n\nnode2  # spare\n10.1.1.1 slots=1\n")
    assert hosts.hostfile_hosts(str(hostfile)) == ["node1", "node2", "10.1.1.1"]
    hostfile.write_text("node1 slots=2 -oProxyCommand=x\n")
    with pytest.raises(hosts.HostError, match="line 1"):
        hosts.hostfile_hosts(str(hostfile))


def test_mpirun_argv_refuses_bad_hosts(tmp_path):
    with pytest.raises(ValueError, match="-oProxyCommand"):
        mpirun_argv(2, ["true"], hosts="-oProxyCommand=x:2")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("good\n-oProxyCommand=x\n")
    with pytest.raises(ValueError, match="line 2"):
        mpirun_argv(2, ["true"], hostfile=str(hostfile))


def test_ssh_check_ends_options_before_the_host_and_keeps_host_key_checking():
    args = relaxrun.parse_args(["-np", "2", "-H", "node1:2", "--start-timeout", "3", "-p", "2222", "true"])
    cmd = horovodrun_options.ssh_check_command("node1", args)
    assert cmd[-3:] == ["--", "node1", "true"]
    assert not any("StrictHostKeyChecking" in word for word in cmd), cmd
    assert "BatchMode=yes" in cmd
