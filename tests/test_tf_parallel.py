"""Runs the TensorFlow / Keras parallel modules on real ranks and fails with every rank's output."""

import pytest

from mpi_launch import run_pytest_on_ranks

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("np_", [2, 3])
def test_tf_collectives(np_):
    run = run_pytest_on_ranks(np_, "tf_collectives.py")
    assert run.returncode == 0, run.report()


def test_keras_optimizer_callbacks_and_shared_engine():
    run = run_pytest_on_ranks(2, "tf_keras.py", per_test_timeout=300)
    assert run.returncode == 0, run.report()


def test_keras_model_averaging_algorithms():
    run = run_pytest_on_ranks(3, "tf_decentralized.py", per_test_timeout=300)
    assert run.returncode == 0, run.report()


def test_keras_compression_algorithms():
    run = run_pytest_on_ranks(2, "tf_compression.py", per_test_timeout=300)
    assert run.returncode == 0, run.report()


def test_keras_dear():
    run = run_pytest_on_ranks(3, "tf_dear.py", per_test_timeout=300)  # 3 ranks: uneven reduce-scatter chunks
    assert run.returncode == 0, run.report()


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_torch_and_keras_conformance(np_):
    # 4 ranks as two emulated nodes of 2: the hierarchical case then compresses between leaders
    env = {"RELAX_LOCAL_SIZE": "2"} if np_ == 4 else None
    run = run_pytest_on_ranks(np_, "conformance.py", env=env, per_test_timeout=300)
    assert run.returncode == 0, run.report()
