"""Stalls, dead ranks, peer shutdown, mpi4py coexistence, single-rank lifecycle: each on real ranks."""

import subprocess
import sys
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


def test_killed_rank_ends_the_job_instead_of_hanging():
    start = time.monotonic()
    run = run_ranks(2, [sys.executable, str(SCRIPTS / "dead_rank.py")], timeout=90)
    elapsed = time.monotonic() - start
    assert not run.timed_out, run.report()
    assert run.returncode != 0
    assert elapsed < 60, f"job took {elapsed:.0f} s to end after a rank died"


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


@pytest.mark.parametrize("order", ["mpi4py-first", "relaxlib-first"])
def test_coexists_with_mpi4py(order):
    run = run_ranks(2, [sys.executable, str(SCRIPTS / "with_mpi4py.py"), order], timeout=120)
    assert run.returncode == 0, run.report()
    assert all("MPI4PY-OK" in out for out in run.outputs), run.report()


def test_torch_version_change_names_the_rebuild():
    code = ("import relaxlib._build_info as b; b.TORCH_VERSION = '0.0.1'\n"
            "try:\n    import relaxlib_torch\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert "built against torch 0.0.1" in out.stdout and "--no-build-isolation" in out.stdout, out.stdout + out.stderr


def test_tensorflow_version_change_names_the_rebuild():
    code = ("import relaxlib._build_info as b; b.TF_VERSION = '0.0.1'\n"
            "try:\n    import relaxlib_tf\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert "built against TensorFlow 0.0.1" in out.stdout and "--no-build-isolation" in out.stdout, \
        out.stdout + out.stderr


def test_tensorflow_ops_before_init_say_so():
    code = ("import tensorflow as tf, relaxlib_tf as hvd\n"
            "try:\n    hvd.allreduce(tf.ones([2]), name='early')\nexcept tf.errors.OpError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert "[NotInitializedError]" in out.stdout and "init()" in out.stdout, out.stdout + out.stderr
