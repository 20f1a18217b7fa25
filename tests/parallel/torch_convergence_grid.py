"""A slice of benchmarks/convergence_grid.py in the test suite: the same cells (data, models,
initial weights, schedule and modes), asserting the grid's targets against all-reduce (1-bit
Adam against Adam) at the same cell. Run on 4 ranks."""

import sys
from pathlib import Path

import pytest

import relaxlib_torch as hvd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import convergence_grid as grid  # noqa: E402

hvd.init()
DATA = grid.load_data()
RESULTS: dict[tuple, dict] = {}
# (model, lr, momentum): the point where 1-bit training failed (lr 0.05, momentum 0.9), a higher
# learning rate, no momentum, the conv net
CELLS = {"mlp-0.05-0.9": ("mlp", 0.05, 0.9), "mlp-0.1-0.9": ("mlp", 0.1, 0.9), "mlp-0.1-0": ("mlp", 0.1, 0.0),
         "conv-0.03-0.9": ("conv", 0.03, 0.9)}


def accuracy(mode: str, cell: str, seed: int = 0) -> float:
    """Test accuracy (%) of ``mode`` at a grid cell from initial weights ``seed`` (trained once per
    module)."""
    model, lr, momentum = CELLS[cell]
    key = (mode, cell, seed)
    if key not in RESULTS:
        RESULTS[key] = grid.run_cell(hvd, DATA, {"model": model, "mode": mode, "lr": lr, "momentum": momentum,
                                                 "seed": seed})
        assert RESULTS[key].get("ranks_agree", False), RESULTS[key]
    return RESULTS[key]["accuracy"]


def mean_accuracy(mode: str, cell: str, seeds: range) -> float:
    """Mean test accuracy (%) of ``mode`` over several initial weights."""
    return sum(accuracy(mode, cell, seed) for seed in seeds) / len(seeds)


def bound(target: str) -> float:
    return grid.TARGETS[target][0]


@pytest.mark.parametrize("mode", grid.TARGETS["exact"][1])
def test_exact_modes_match_allreduce(mode):
    cell = "mlp-0.05-0.9"
    assert abs(accuracy(mode, cell) - accuracy("allreduce", cell)) <= bound("exact")


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("mode", grid.TARGETS["compressed with error feedback"][1])
def test_compression_with_error_feedback_keeps_allreduce_accuracy(mode, cell):
    reference = accuracy("allreduce", cell)
    assert reference >= grid.CONVERGED
    assert accuracy(mode, cell) >= reference - bound("compressed with error feedback"), (mode, cell)


@pytest.mark.parametrize("cell", ["mlp-0.05-0.9", "mlp-0.1-0"])
def test_sign_error_feedback_is_never_worse_than_without(cell):
    assert accuracy("compressed-sign", cell) >= accuracy("compressed-sign-noef", cell)


def test_error_feedback_through_the_momentum_is_measurably_worse():
    """Negative control: the former scheme (1-bit gradients with error feedback, momentum after
    the average) loses clearly at lr 0.1 with momentum; the slice can tell the two apart."""
    cell = "mlp-0.1-0.9"
    assert accuracy("compressed-sign-gradient", cell) < accuracy("compressed-sign", cell) - 2.0


def test_onebit_adam_matches_adam():
    cell = "mlp-0.05-0.9"
    assert accuracy("onebit-adam", cell) >= accuracy("adam", cell) - bound("1-bit Adam")


@pytest.mark.parametrize("mode", [m for m in grid.AVERAGING if m != "async"])
def test_model_averaging_keeps_allreduce_accuracy_after_the_final_average(mode):
    cell = "mlp-0.05-0.9"
    assert accuracy(mode, cell) >= accuracy("allreduce", cell) - bound("model averaging after average_now")


def test_async_averaging_keeps_allreduce_accuracy_after_the_final_average():
    """Async averages when its thread gets a core, so its accuracy varies from run to run (4 ranks
    on 2 cores: 92.0-93.1 % in six runs of seed 0 against all-reduce's 93.8 %); one run's tail
    touches the 2-point bound. The bound holds for the mean over three initial weights, compared
    with all-reduce's mean over the same three."""
    cell, seeds = "mlp-0.05-0.9", range(3)
    reference = mean_accuracy("allreduce", cell, seeds)
    assert mean_accuracy("async", cell, seeds) >= reference - bound("model averaging after average_now"), \
        [(accuracy("async", cell, s), accuracy("allreduce", cell, s)) for s in seeds]
