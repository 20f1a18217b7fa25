"""Stalls, dead ranks, peer shutdown, mpi4py coexistence, single-rank lifecycle: each on real ranks."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from mpi_launch import REPO, run_pytest_on_ranks, run_ranks

pytestmark = pytest.mark.mpi
SCRIPTS = REPO / "tests" / "scripts"


def test_single_rank_lifecycle():
    run = run_pytest_on_ranks(1, "torch_single_rank.py")
    assert run.returncode == 0, run.report()


def test_stall_warns_then_fails_every_waiting_rank():
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "stall.py")], timeout=120,
                    env={"RELAX_STALL_CHECK_TIME": "1", "RELAX_STALL_SHUTDOWN_TIME": "3"})
    assert run.returncode == 0, run.report()
    assert "STALL-ERROR-OK" in run.outputs[0] and "STALL-ERROR-OK" in run.outputs[2], run.report()
    assert all("AFTER-STALL-OK" in out for out in run.outputs), run.report()
    assert "Stall: request 'lonely'" in run.outputs[0] and "ranks [1] have not submitted" in run.outputs[0]


def test_op_timeout_fails_a_missing_submission_on_every_rank():
    """RELAX_OP_TIMEOUT alone (no stall settings) turns the missing submission into StalledError
    naming the tensor and the rank, on every rank that waits."""
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "stall.py")], timeout=120,
                    env={"RELAX_OP_TIMEOUT": "3", "RELAX_STALL_CHECK_TIME": "0"})
    assert run.returncode == 0, run.report()
    assert "STALL-ERROR-OK" in run.outputs[0] and "STALL-ERROR-OK" in run.outputs[2], run.report()
    assert all("AFTER-STALL-OK" in out for out in run.outputs), run.report()


@pytest.mark.parametrize("mode", ["order", "tf-order"])
def test_ranks_waiting_for_each_others_operations_fail_as_a_deadlock_on_every_rank(mode):
    """No timeout configured: every rank blocked on an operation another rank never submits is a
    deadlock the engine can see (nothing can complete), so every rank gets StalledError naming who
    submitted what, and collectives work afterwards (torch, and TensorFlow ops run eagerly)."""
    if mode.startswith("tf-"):
        pytest.importorskip("relaxlib_tf")
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "deadlock.py"), mode], timeout=120,
                    env={"RELAX_DEADLOCK_TIME": "2", "RELAX_STALL_CHECK_TIME": "0"})
    assert run.returncode == 0, run.report()
    assert all("DEADLOCK-ERROR-OK" in out and "AFTER-OK" in out for out in run.outputs), run.report()


def test_reinitializing_waits_for_a_late_rank_and_gives_up_on_a_finished_one():
    """init() after shutdown creates communicators with every rank: it must wait for a rank that
    re-initializes late, and fail (RELAX_INIT_TIMEOUT) instead of blocking in MPI forever when a
    rank has finished."""
    again = run_ranks(2, [sys.executable, str(SCRIPTS / "reinit.py"), "again"], timeout=120)
    assert again.returncode == 0 and all("REINIT-OK" in out for out in again.outputs), again.report()
    gone = run_ranks(2, [sys.executable, str(SCRIPTS / "reinit.py"), "peer-gone"], timeout=120,
                     env={"RELAX_INIT_TIMEOUT": "3"})
    assert gone.returncode == 0, gone.report()
    assert "REINIT-TIMEOUT-OK" in gone.outputs[0] and "RANK-1-DONE" in gone.outputs[1], gone.report()


@pytest.mark.parametrize("mode", ["decentralized-ring", "partial-static"])
def test_a_collective_waiting_only_for_a_rank_that_finished_fails_instead_of_hanging(mode):
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "finished_rank_collective.py"), mode], timeout=120)
    assert not run.timed_out and run.returncode == 0, run.report()
    assert "RANK-1-FINISHED" in run.outputs[1], run.report()
    assert all("FINISHED-RANK-ERROR-OK" in run.outputs[r] for r in (0, 2)), run.report()


def test_a_rank_slow_to_submit_is_not_taken_for_a_deadlock():
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "deadlock.py"), "slow"], timeout=120,
                    env={"RELAX_DEADLOCK_TIME": "2", "RELAX_STALL_CHECK_TIME": "0"})
    assert run.returncode == 0, run.report()
    assert all("NO-FALSE-DEADLOCK-OK" in out and "AFTER-OK" in out for out in run.outputs), run.report()


@pytest.mark.parametrize("mode", ["allreduce", "allgather", "async", "neighbour", "reinit", "tf-eager", "tf-function"])
def test_ctrl_c_during_a_blocked_wait_raises_keyboard_interrupt(mode, tmp_path):
    """Rank 0 waits on an operation rank 1 has not submitted (sync collectives, a handle from an
    async one, a point-to-point neighbour average, a TensorFlow op eagerly and in a tf.function);
    SIGINT must raise KeyboardInterrupt there within a second, not when the peer finally submits,
    and the peer then gets an error."""
    if mode.startswith("tf-"):
        pytest.importorskip("relaxlib_tf")
    sent = tmp_path / "sent"

    def interrupt_rank_0():
        deadline = time.monotonic() + 60
        while not sent.with_suffix(".pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # rank 0 is now inside the wait
        pid = int(sent.with_suffix(".pid").read_text())
        sent.with_suffix(".tmp").write_text(repr(time.time()))
        sent.with_suffix(".tmp").rename(sent)
        os.kill(pid, signal.SIGINT)

    sender = threading.Thread(target=interrupt_rank_0)
    sender.start()
    run = run_ranks(2, [sys.executable, str(SCRIPTS / "interrupt.py"), mode, str(sent)], timeout=90)
    sender.join()
    assert not run.timed_out, run.report()
    latency = re.search(r"KEYBOARD-INTERRUPT after ([0-9.]+) s", run.outputs[0])
    assert latency and float(latency.group(1)) < 1.0, run.report()
    assert "PEER-ERROR ShutdownError" in run.outputs[1], run.report()


@pytest.mark.parametrize("mode,env", [("training", {}), ("compressed-parts", {"RELAX_SHM_COLLECTIVES": "off"}),
                                      ("ring-allreduce", {"RELAX_LOCAL_SIZE": "1"}),
                                      ("ring-grouped", {"RELAX_LOCAL_SIZE": "1"}),
                                      ("scaled-sign", {"RELAX_LOCAL_SIZE": "1"}),
                                      ("uint8-in-place", {"RELAX_LOCAL_SIZE": "1"}),
                                      ("dear", {"RELAX_LOCAL_SIZE": "1"}),
                                      ("fast-path", {"RELAX_FAST_PATH": "on"}),  # forced on shared memory
                                      ("fast-path", {"RELAX_LOCAL_SIZE": "1"})])     # on by default across nodes
def test_killed_rank_ends_the_job_instead_of_hanging(mode, env):
    start = time.monotonic()
    run = run_ranks(2, [sys.executable, str(SCRIPTS / "dead_rank.py"), mode], env=env, timeout=90)
    elapsed = time.monotonic() - start
    assert not run.timed_out, run.report()
    assert run.returncode != 0
    assert elapsed < 60, f"job took {elapsed:.0f} s to end after a rank died"
    if mode == "fast-path":
        assert "FAST PATH ON" in run.outputs[1], run.report()


def test_peer_shutdown_fails_pending_ops_with_shutdown_error():
    run = run_ranks(2, [sys.executable, str(SCRIPTS / "peer_shutdown.py")], timeout=120)
    assert run.returncode == 0, run.report()
    assert "PEER-SHUTDOWN-OK" in run.outputs[1], run.report()


@pytest.mark.parametrize("mode", ["async", "partial-smart", "decentralized-ring"])
def test_averaging_rank_that_exits_first_serves_the_others(mode):
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "averaging_early_exit.py"), mode], timeout=120)
    assert run.returncode == 0, run.report()
    assert "RANK 1 TRAINED 5" in run.outputs[1], run.report()
    assert "RANK 0 TRAINED 40" in run.outputs[0] and "RANK 2 TRAINED 40" in run.outputs[2], run.report()


def test_averaging_rank_that_crashes_ends_the_job_instead_of_waiting():
    start = time.monotonic()
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "averaging_early_exit.py"), "partial-static", "crash"],
                    timeout=90)
    assert not run.timed_out and run.returncode != 0, run.report()
    assert "rank 1 fails" in run.outputs[1], run.report()
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("mode", ["decentralized-random", "partial-static", "async"])
def test_ranks_that_catch_a_peers_crash_end_without_serving_it(mode):
    """The others catch the error rank 1's crash gives them and exit normally: shutdown at exit
    must not wait to serve averaging steps of a rank that is gone."""
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "averaging_early_exit.py"), mode, "crash-caught"], timeout=90)
    assert not run.timed_out, run.report()
    assert "rank 1 fails" in run.outputs[1], run.report()
    assert all(f"RANK {r} CAUGHT" in run.outputs[r] for r in (0, 2)), run.report()


@pytest.mark.parametrize("algorithm,mode", [("dear", "eager"), ("dear", "traced"), ("compressed-fp16", "traced"),
                                            ("partial-static", "traced"), ("decentralized-ring", "traced"),
                                            ("async", "traced")])
def test_keras_algorithm_rank_that_fails_never_hangs_the_others(algorithm, mode):
    """DeAR and compressed scatter-reduce in Keras (custom loop, and model.fit with the step
    traced as TF ops): the ranks waiting in a collective for a rank that raised get an error
    naming it instead of hanging. Model averaging in fit (group and neighbour averages traced as
    TF ops; async on host): the failed rank's exit joins and serves the others' remaining
    averages, so they finish."""
    pytest.importorskip("relaxlib_tf")
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "keras_rank_error.py"), algorithm, mode], timeout=120)
    assert not run.timed_out, run.report()
    assert "RANK 1 ERROR RuntimeError: rank 1 fails" in run.outputs[1], run.report()
    for rank in (0, 2):
        if algorithm in ("partial-static", "decentralized-ring", "async"):
            assert f"RANK {rank} FINISHED WITHOUT AN ERROR" in run.outputs[rank], run.report()
            continue
        assert f"RANK {rank} ERROR" in run.outputs[rank], run.report()
        assert "ShutdownError" in run.outputs[rank] and "rank 1 shut down" in run.outputs[rank], run.report()


@pytest.mark.parametrize("order", ["mpi4py-first", "relaxlib-first"])
def test_coexists_with_mpi4py(order):
    run = run_ranks(2, [sys.executable, str(SCRIPTS / "with_mpi4py.py"), order], timeout=120)
    assert run.returncode == 0, run.report()
    assert all("MPI4PY-OK" in out for out in run.outputs), run.report()


# The three checks of a single process share one: importing TensorFlow takes seconds. Each part prints its
# message between tags; the version checks come first and are undone (relaxlib_tf checks the version before it
# loads anything), so the last part imports relaxlib_tf as a user would.
SINGLE_PROCESS_CHECKS = """
import sys
import relaxlib._build_info as b
torch_version, tf_version = b.TORCH_VERSION, b.TF_VERSION
b.TORCH_VERSION = '0.0.1'
try:
    import relaxlib_torch
    print('TORCH-IMPORTED')
except ImportError as e:
    print('<TORCH-VERSION>', e, '</TORCH-VERSION>')
b.TORCH_VERSION = torch_version
b.TF_VERSION = '0.0.1'
try:
    import relaxlib_tf
    print('TF-IMPORTED')
except ImportError as e:
    print('<TF-VERSION>', e, '</TF-VERSION>')
b.TF_VERSION = tf_version
for name in [m for m in sys.modules if m == 'relaxlib_tf' or m.startswith('relaxlib_tf.')]:
    del sys.modules[name]
import tensorflow as tf, relaxlib_tf as hvd
try:
    hvd.allreduce(tf.ones([2]), name='early')
except tf.errors.OpError as e:
    print('<TF-BEFORE-INIT>', e, '</TF-BEFORE-INIT>')
"""


@pytest.fixture(scope="module")
def single_process_checks() -> str:
    """Output of SINGLE_PROCESS_CHECKS (stdout, then stderr) in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", SINGLE_PROCESS_CHECKS], capture_output=True, text=True, cwd=REPO,
                         timeout=180)
    return out.stdout + out.stderr


def _part(output: str, tag: str) -> str:
    """What one part printed between ``<tag>`` and ``</tag>`` ("" if it printed nothing there)."""
    found = re.search(f"<{tag}>(.*?)</{tag}>", output, re.DOTALL)
    return found.group(1) if found else ""


def test_torch_version_change_names_the_rebuild(single_process_checks):
    line = _part(single_process_checks, "TORCH-VERSION")
    assert "built against torch 0.0.1" in line and "--no-build-isolation" in line, single_process_checks


def test_tensorflow_version_change_names_the_rebuild(single_process_checks):
    line = _part(single_process_checks, "TF-VERSION")
    assert "built against TensorFlow 0.0.1" in line and "--no-build-isolation" in line, single_process_checks


def test_tensorflow_ops_before_init_say_so(single_process_checks):
    line = _part(single_process_checks, "TF-BEFORE-INIT")
    assert "[NotInitializedError]" in line and "init()" in line, single_process_checks
