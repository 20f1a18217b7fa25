"""relaxrun: the mpirun command it builds, its options, --check-build, and a real launch."""

import os
import re
import subprocess
import sys

import pytest

from mpi_launch import REPO
from relaxlib_launch import horovodrun_options, relaxrun

RELAXRUN = [sys.executable, "-m", "relaxlib_launch.relaxrun"]


def command_for(argv, environ=None):
    args = relaxrun.parse_args(argv)
    env = dict(environ or {})
    env.update(relaxrun.relax_environment(args))
    return relaxrun.mpirun_command(args, env), env


def test_local_launch_binds_none_and_oversubscribes_beyond_cores():
    cores = os.cpu_count() or 1
    cmd, _ = command_for(["-np", str(cores + 2), "python", "train.py", "--lr", "0.1"])
    assert os.path.basename(cmd[0]) == "mpirun" and cmd[1:3] == ["-np", str(cores + 2)]
    assert "--bind-to" in cmd and cmd[cmd.index("--bind-to") + 1] == "none"
    assert "--oversubscribe" in cmd
    assert cmd[-4:] == ["python", "train.py", "--lr", "0.1"]
    if os.geteuid() == 0:
        assert "--allow-run-as-root" in cmd


def test_hosts_are_passed_through_without_oversubscribe():
    cmd, _ = command_for(["-np", "4", "-H", "a:2,b:2", "python", "t.py"])
    assert cmd[cmd.index("-H") + 1] == "a:2,b:2"
    assert "--oversubscribe" not in cmd


def test_options_become_exported_relax_variables():
    cmd, env = command_for(["-np", "2", "--topology", "ring", "--fusion-threshold-mb", "2", "--cycle-time-ms", "3",
                            "--network-interface", "10.0.0.0/24", "--mpi-args", "--mca btl tcp,self", "python", "t.py"],
                           {"RELAX_LOG_LEVEL": "debug", "HOME": "/root"})
    assert env["RELAX_TOPOLOGY"] == "ring" and env["RELAX_FUSION_THRESHOLD"] == str(2 * 1024 * 1024)
    for name in ("RELAX_TOPOLOGY", "RELAX_FUSION_THRESHOLD", "RELAX_CYCLE_TIME", "RELAX_LOG_LEVEL"):
        assert cmd[cmd.index(name) - 1] == "-x"
    assert "HOME" not in cmd
    assert "btl_tcp_if_include" in cmd and cmd[-5:-2] == ["--mca", "btl", "tcp,self"]


@pytest.mark.parametrize("argv", [[], ["python", "t.py"], ["-np", "0", "python", "t.py"],
                                  ["-np", "2", "-H", "a:1", "--hostfile", "f", "python", "t.py"]])
def test_bad_command_lines_exit_with_usage(argv):
    with pytest.raises(SystemExit) as info:
        relaxrun.parse_args(argv)
    assert info.value.code == 2


def test_check_build_reports_frameworks_and_transport():
    out = subprocess.run(RELAXRUN + ["--check-build"], capture_output=True, text=True, timeout=60).stdout
    assert "[X] PyTorch" in out and "[X] MPI" in out and "Core library: loads" in out
    # available or not (and why) by this build's MPI: tests/test_ulfm.py checks the wording
    assert re.search(r"^Fault tolerance: (available \(Open MPI \d+\.\d+\.\d+ ULFM\)|unavailable: .+)$", out,
                     re.MULTILINE), out


@pytest.mark.mpi
def test_real_launch_exports_settings_to_every_rank():
    code = ("import os, sys, relaxlib_torch as hvd; hvd.init(); "
            "sys.stdout.write(f'RANK {hvd.rank()} {hvd.size()} {os.environ[\"RELAX_CYCLE_TIME\"]}\\n')")
    out = subprocess.run(RELAXRUN + ["-np", "2", "--verbose", "--cycle-time-ms", "2", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.match(r"relaxrun: \S*mpirun -np 2 ", out.stdout), out.stdout
    assert "RANK 0 2 2.0" in out.stdout and "RANK 1 2 2.0" in out.stdout


@pytest.mark.mpi
def test_real_launch_with_horovodrun_options_writes_the_timeline(tmp_path):
    timeline = tmp_path / "timeline.json"
    code = ("import torch, relaxlib_torch as hvd; hvd.init(); hvd.allreduce(torch.ones(4), name='traced'); "
            "print(f'rank {hvd.rank()} done'); hvd.shutdown()")
    out = subprocess.run(RELAXRUN + ["-np", "2", "--timeline-filename", str(timeline), "--cache-capacity", "0",
                                     "--output-filename", str(tmp_path / "logs"), sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "traced" in timeline.read_text()
    # Each rank's stdout in a file of its own under the folder (Open MPI 4: logs/1/rank.N/stdout;
    # 5: logs/<job>/rank.N/stdout), not on relaxrun's.
    logged = {path.read_text().strip() for path in (tmp_path / "logs").rglob("stdout")}
    assert logged == {"rank 0 done", "rank 1 done"}, (logged, out.stdout)


@pytest.mark.parametrize("version_line, expected", [
    ("mpirun (Open MPI) 5.0.11", ["--output", "dir=/l"]),
    ("mpirun (Open MPI) 4.1.4", ["--output-filename", "/l"]),
    ("HYDRA build details:", ["--output-filename", "/l"]),
])
def test_output_directory_is_spelled_for_the_mpirun_found(version_line, expected):
    assert horovodrun_options.output_directory_arguments("/l", version_line) == expected


def test_horovodrun_options_map_to_relaxlib_and_mpirun_settings():
    cmd, env = command_for(["-np", "2", "--timeline-filename", "/tmp/tl.json", "--timeline-mark-cycles",
                            "--cache-capacity", "64", "--stall-check-warning-time-seconds", "9",
                            "--stall-check-shutdown-time-seconds", "30", "-p", "2222", "-i", "/k/id",
                            "--output-filename", "/tmp/logs", "--tcp", "--network-interfaces", "eth1",
                            "--log-level", "debug", "-prefix-timestamp", "--mpi", "python", "t.py", "--gloo"])
    assert env["RELAX_TIMELINE"] == "/tmp/tl.json" and env["RELAX_TIMELINE_MARK_CYCLES"] == "1"
    assert env["RELAX_CACHE_CAPACITY"] == "64" and env["RELAX_STALL_CHECK_TIME"] == "9.0"
    assert env["RELAX_STALL_SHUTDOWN_TIME"] == "30.0" and env["RELAX_LOG_LEVEL"] == "debug"
    for name in ("RELAX_TIMELINE", "RELAX_CACHE_CAPACITY", "RELAX_STALL_SHUTDOWN_TIME"):
        assert cmd[cmd.index(name) - 1] == "-x"
    assert cmd[cmd.index("plm_rsh_args") + 1] == "-p 2222 -i /k/id"
    assert " ".join(horovodrun_options.output_directory_arguments("/tmp/logs")) in " ".join(cmd)
    assert "tcp,self" in cmd and "--timestamp-output" in cmd
    assert cmd[cmd.index("btl_tcp_if_include") + 1] == "eth1"
    assert cmd[-3:] == ["python", "t.py", "--gloo"]  # the script's own options are its own
    _, env = command_for(["-np", "2", "--disable-cache", "--no-stall-check", "python", "t.py"])
    assert env["RELAX_CACHE_CAPACITY"] == "0" and env["RELAX_STALL_CHECK_TIME"] == "0"
    cmd, _ = command_for(["-np", "2", "--binding-args=--bind-to core --map-by socket", "python", "t.py"])
    assert cmd[3:7] == ["--bind-to", "core", "--map-by", "socket"] and "none" not in cmd


def test_elastic_options_launch_with_fault_tolerance_and_bound_the_resets(monkeypatch):
    monkeypatch.setattr(horovodrun_options.build_report, "mpirun_version", lambda: "mpirun (Open MPI) 5.0.11")
    cmd, env = command_for(["-np", "4", "--min-np", "2", "--max-np", "4", "--reset-limit", "3", "python", "t.py"])
    assert cmd[cmd.index("--with-ft") + 1] == "ulfm"
    assert env["RELAX_ELASTIC_MIN_NP"] == "2" and env["RELAX_ELASTIC_RESET_LIMIT"] == "3"
    assert env["RELAX_ELASTIC_MAX_NP"] == "4" and env["RELAX_ELASTIC_LAUNCH_NP"] == "4"
    assert cmd[cmd.index("RELAX_ELASTIC_MIN_NP") - 1] == "-x"
    _, discovered = command_for(["-np", "2", "--max-np", "6", "--host-discovery-script", "d.sh", "--slots-per-host",
                                 "3", "python", "t.py"])
    assert discovered["RELAX_ELASTIC_DISCOVERY"].endswith("/d.sh") and discovered["RELAX_ELASTIC_SLOTS"] == "3"
    _, waiting = command_for(["-np", "3", "--min-np", "3", "--max-np", "3", "--elastic-timeout", "2.5",
                              "python", "t.py"])
    assert waiting["RELAX_ELASTIC_TIMEOUT"] == "2.5"
    _, long_wait = command_for(["-np", "3", "--min-np", "2", "--max-np", "3", "--elastic-timeout", "1234567",
                                "python", "t.py"])
    assert float(long_wait["RELAX_ELASTIC_TIMEOUT"]) == 1234567  # every digit kept
    plain, plain_env = command_for(["-np", "4", "python", "t.py"])
    assert "--with-ft" not in plain and "RELAX_ELASTIC_MIN_NP" not in plain_env  # only elastic launches


def test_elastic_launches_turn_on_mpis_failure_detector_unless_eviction_is_off(monkeypatch):
    """A frozen rank sends no heartbeat: Open MPI's detector declares it failed (docs/elastic.md)."""
    monkeypatch.setattr(horovodrun_options.build_report, "mpirun_version", lambda: "mpirun (Open MPI) 5.0.11")
    monkeypatch.delenv("RELAX_ELASTIC_EVICT", raising=False)
    monkeypatch.delenv("OMPI_MCA_mpi_ft_detector", raising=False)
    cmd, _ = command_for(["-np", "4", "--min-np", "2", "python", "t.py"])
    assert cmd[cmd.index("mpi_ft_detector") - 1:cmd.index("mpi_ft_detector") + 2] == ["--mca", "mpi_ft_detector",
                                                                                      "true"]
    assert "mpi_ft_detector" not in command_for(["-np", "4", "python", "t.py"])[0]  # not elastic
    monkeypatch.setenv("RELAX_ELASTIC_EVICT", "0")
    assert "mpi_ft_detector" not in command_for(["-np", "4", "--min-np", "2", "python", "t.py"])[0]
    monkeypatch.setenv("RELAX_ELASTIC_EVICT", "1")
    monkeypatch.setenv("OMPI_MCA_mpi_ft_detector", "false")  # the user's own choice stands
    assert "mpi_ft_detector" not in command_for(["-np", "4", "--min-np", "2", "python", "t.py"])[0]


@pytest.mark.parametrize("argv, version, says", [
    (["--min-np", "5"], "mpirun (Open MPI) 5.0.11", "--min-np=5 must be between 1 and -np=4"),
    (["--max-np", "3"], "mpirun (Open MPI) 5.0.11", "--max-np=3 must be at least -np=4"),
    (["--min-np", "2"], "mpirun (Open MPI) 4.1.4", "needs Open MPI 5 with ULFM"),
    (["--host-discovery-script", "d.sh"], "mpirun (Open MPI) 5.0.11", "--host-discovery-script needs --max-np"),
    (["--max-np", "6", "--slots-per-host", "0"], "mpirun (Open MPI) 5.0.11", "--slots-per-host=0 must be at least 1"),
    (["--min-np", "2", "--elastic-timeout", "-1"], "mpirun (Open MPI) 5.0.11",
     "--elastic-timeout=-1 must be a number of seconds, at least 0"),
    (["--min-np", "2", "--elastic-timeout", "nan"], "mpirun (Open MPI) 5.0.11", "--elastic-timeout=nan must be"),
])
def test_elastic_options_that_cannot_hold_are_refused(argv, version, says, monkeypatch, capsys):
    monkeypatch.setattr(horovodrun_options.build_report, "mpirun_version", lambda: version)
    with pytest.raises(SystemExit):
        relaxrun.parse_args(["-np", "4"] + argv + ["python", "t.py"])
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["--gloo"], "MPI only"), (["--blacklist-cooldown-range", "1", "2"], "blacklisted"),
    (["--config-file", "c.yaml"], "RELAX_"), (["--jsrun"], "mpirun"),
    (["--gloo-timeout-seconds", "5"], "RELAX_OP_TIMEOUT"),
])
def test_horovodrun_options_without_meaning_here_are_refused_with_guidance(argv, says, capsys):
    with pytest.raises(SystemExit) as info:
        relaxrun.parse_args(["-np", "2"] + argv + ["python", "t.py"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"{argv[0]} is not supported" in err and says in err


def test_tuning_options_relaxlib_lacks_are_accepted_with_a_note(capsys):
    from relaxlib_launch import horovodrun_options
    args = relaxrun.parse_args(["-np", "2", "--hierarchical-allreduce", "--autotune", "--num-nccl-streams", "2",
                                "python", "t.py"])
    notes = horovodrun_options.notes(args)
    assert any("--hierarchical-allreduce has no effect" in n for n in notes)
    assert any("--autotune has no effect" in n for n in notes) and len(notes) == 3
    assert horovodrun_options.notes(relaxrun.parse_args(["-np", "2", "python", "t.py"])) == []


def test_elastic_timeout_without_max_np_is_noted_as_without_effect(monkeypatch):
    from relaxlib_launch import horovodrun_options
    monkeypatch.setattr(horovodrun_options.build_report, "mpirun_version", lambda: "mpirun (Open MPI) 5.0.11")
    alone = relaxrun.parse_args(["-np", "2", "--min-np", "2", "--elastic-timeout", "30", "python", "t.py"])
    assert any("--elastic-timeout has no effect without --max-np" in n for n in horovodrun_options.notes(alone))
    growing = relaxrun.parse_args(["-np", "2", "--min-np", "2", "--max-np", "3", "--elastic-timeout", "30",
                                   "python", "t.py"])
    assert horovodrun_options.notes(growing) == []
    unbounded = relaxrun.parse_args(["-np", "2", "--max-np", "3", "--elastic-timeout", "30", "python", "t.py"])
    assert any("--elastic-timeout has no effect without --min-np" in n for n in horovodrun_options.notes(unbounded))


def test_version_and_check_build_short_forms():
    assert relaxrun.parse_args(["-cb"]).check_build
    out = subprocess.run(RELAXRUN + ["-v"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("relaxlib "), out.stdout + out.stderr


def test_start_timeout_names_hosts_that_do_not_answer(capsys):
    args = relaxrun.parse_args(["-np", "2", "-H", "no-such-host.invalid:2", "--start-timeout", "2", "python", "t.py"])
    assert not relaxrun.hosts_answer(args)
    assert "no-such-host.invalid" in capsys.readouterr().err


def test_advise_option_is_exported_and_validated():
    _, env = command_for(["-np", "2", "--advise", "python", "t.py"])
    assert env["RELAX_ADVISE"] == "20"
    _, env = command_for(["-np", "2", "--advise", "--advise-steps", "7", "python", "t.py"])
    assert env["RELAX_ADVISE"] == "7"
    with pytest.raises(SystemExit):
        relaxrun.parse_args(["-np", "2", "--advise", "--advise-steps", "1", "python", "t.py"])


def registered_modes() -> tuple[str, ...]:
    """The advisor's modes (relaxlib.algorithms.modes), codec modes included (loads the core)."""
    from relaxlib.algorithms import modes
    return modes.names()


def test_advise_prints_the_table_during_real_training():
    out = subprocess.run(RELAXRUN + ["-np", "2", "--advise", "--advise-steps", "5", sys.executable,
                                     str(REPO / "examples" / "torch_digits.py"), "--epochs", "1"],
                         capture_output=True, text=True, timeout=300, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("relaxlib advisor: 2 ranks") == 1, out.stdout
    table = out.stdout[out.stdout.index("relaxlib advisor"):].splitlines()
    rows = table[2:next(i for i, line in enumerate(table) if line.startswith("fastest with"))]
    modes = [line.split()[0] for line in rows]
    assert set(modes) == set(registered_modes()), out.stdout  # every mode, once
    speedups = [float(line.split()[2].rstrip("x")) for line in rows]
    assert speedups == sorted(speedups, reverse=True) and 1.0 in speedups


def run_auto(level: str, probe: str, advise_steps: int) -> tuple[str, str]:
    """``relaxrun --auto`` on 2 ranks with a probe script; returns (picked mode, the
    algorithm the restarted run used). The advising run must end before the probe's end."""
    out = subprocess.run(RELAXRUN + ["-np", "2", "--auto", "--auto-allow", level, "--advise-steps", str(advise_steps),
                                     sys.executable, str(REPO / "tests" / "scripts" / probe)],
                         capture_output=True, text=True, timeout=300, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("relaxlib advisor: 2 ranks") == 1, out.stdout
    picked = out.stdout.split(f"relaxrun --auto {level}: picked ")[1].split()[0]
    assert f"running with RELAX_ALGORITHM={picked}" in out.stdout
    assert out.stdout.count("probe ran") == 1, out.stdout
    return picked, out.stdout.split("probe ran ")[1].split()[0]


def test_auto_restarts_with_the_advisors_pick():
    from relaxlib.auto import algorithm_for
    picked, ran = run_auto("averaging", "auto_probe.py", 5)
    assert ran == algorithm_for(picked).name, (picked, ran)
    assert picked != "async", "async is beyond the 'averaging' level"


def test_auto_option_implies_advise_and_validates_the_level():
    args = relaxrun.parse_args(["-np", "2", "--auto", "python", "t.py"])
    assert args.auto and args.auto_allow == "exact" and args.advise
    assert args.command == ["python", "t.py"]
    with pytest.raises(SystemExit):
        relaxrun.parse_args(["-np", "2", "--auto", "--auto-allow", "reckless", "python", "t.py"])


def test_auto_with_keras_fit_advises_inside_the_graph_and_restarts():
    pytest.importorskip("relaxlib_tf")
    from relaxlib.auto import algorithm_for
    from relaxlib_tf.gradient_tape import runs_in_keras
    picked, ran = run_auto("async", "auto_probe_keras.py", 4)
    assert runs_in_keras(algorithm_for(picked))
    assert ran == algorithm_for(picked).name
