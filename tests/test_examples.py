"""The examples the README and docs point to run on real ranks and reach their stated accuracy."""

import re
import sys

import pytest

from mpi_launch import REPO, run_ranks

pytestmark = pytest.mark.mpi


def test_custom_algorithm_example_trains():
    run = run_ranks(2, [sys.executable, str(REPO / "examples" / "custom_algorithm.py")], timeout=300)
    assert run.returncode == 0, run.report()
    accuracy = float(re.search(r"after 10 epochs: ([0-9.]+)", run.outputs[0]).group(1))
    assert accuracy > 0.9, run.outputs[0]


def test_demo_trains_on_digits():
    run = run_ranks(4, [sys.executable, str(REPO / "examples" / "torch_digits.py"), "--epochs", "4"], timeout=300)
    assert run.returncode == 0, run.report()
    accuracy = float(re.search(r"final test accuracy ([0-9.]+)", run.outputs[0]).group(1))
    assert accuracy > 0.85, run.outputs[0]


@pytest.mark.parametrize("script", ["tf_keras_digits.py", "tf_custom_loop.py"])
def test_tensorflow_examples_train_on_four_ranks(script):
    run = run_ranks(4, [sys.executable, str(REPO / "examples" / script), "--epochs", "4"], timeout=300)
    assert run.returncode == 0, run.report()
    accuracy = float(re.search(r"final test accuracy ([0-9.]+)", run.outputs[0]).group(1))
    assert accuracy > 0.85, run.outputs[0]
