"""A slice of benchmarks/convergence_grid.py in the test suite: the same cells (data, models,
initial weights, schedule and modes), asserting the grid's targets against all-reduce (1-bit
Adam against Adam) at the same cell. Run on 4 ranks."""

import grid_cells
import pytest
from grid_cells import grid

import relaxlib_torch as hvd

hvd.init()
# (model, lr, momentum): the point where 1-bit training failed (lr 0.05, momentum 0.9), a higher
# learning rate, no momentum, the conv net
CELLS = {"mlp-0.05-0.9": ("mlp", 0.05, 0.9), "mlp-0.1-0.9": ("mlp", 0.1, 0.9), "mlp-0.1-0": ("mlp", 0.1, 0.0),
         "conv-0.03-0.9": ("conv", 0.03, 0.9)}


def accuracy(mode: str, cell: str, seed: int = 0, **options) -> float:
    """Test accuracy (%) of ``mode`` at a named cell from initial weights ``seed``."""
    return grid_cells.accuracy(mode, *CELLS[cell], seed, **options)


def mean_accuracy(mode: str, cell: str, seeds: range, **options) -> float:
    """Mean test accuracy (%) of ``mode`` at a named cell over several initial weights."""
    return grid_cells.mean_accuracy(mode, *CELLS[cell], seeds, **options)


def bound(target: str) -> float:
    return grid.TARGETS[target][0]


@pytest.mark.parametrize("mode", grid.TARGETS["exact"][1])
def test_exact_modes_match_allreduce(mode):
    cell = "mlp-0.05-0.9"
    assert abs(accuracy(mode, cell) - accuracy("allreduce", cell)) <= bound("exact")


# Lossy codecs are judged on means over initial weights, as the grid does: one seed's accuracy
# moves by up to 2 points (the 1-point bound would then test the seed, not the codec).
LOSSY_SEEDS = range(3)


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("mode", grid.TARGETS["compressed with error feedback"][1])
def test_compression_with_error_feedback_keeps_allreduce_accuracy(mode, cell):
    reference = mean_accuracy("allreduce", cell, LOSSY_SEEDS)
    assert reference >= grid.CONVERGED
    assert mean_accuracy(mode, cell, LOSSY_SEEDS) >= reference - bound("compressed with error feedback"), (mode, cell)


@pytest.mark.parametrize("cell", ["mlp-0.05-0.9", "mlp-0.1-0"])
def test_sign_error_feedback_is_never_worse_than_without(cell):
    assert mean_accuracy("compressed-sign", cell, LOSSY_SEEDS) >= mean_accuracy("compressed-sign-noef", cell,
                                                                               LOSSY_SEEDS)


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


# Async averaging mixes the models when its thread gets a round in: with the digits models' 0.5 ms
# steps, on 4 ranks sharing 2 cores, it got 2-6 rounds in the 112 steps of a cell, so the plain cell
# measures local SGD and one final average, whose accuracy depends on when those few rounds fell.
# A pause for compute after each backward pass (as a larger model's step would take) gives the
# thread about one round per step.
STEP_WITH_COMPUTE = {"compute_ms": 2}


def test_async_averaging_keeps_allreduce_accuracy_after_the_final_average():
    cell, seeds = "mlp-0.05-0.9", range(3)
    reference = mean_accuracy("allreduce", cell, seeds) - bound("model averaging after average_now")
    assert mean_accuracy("async", cell, seeds, **STEP_WITH_COMPUTE) >= reference, \
        [(accuracy("async", cell, s, **STEP_WITH_COMPUTE), accuracy("allreduce", cell, s)) for s in seeds]


def test_async_averaging_mixes_the_models_while_they_train():
    """Each rank trains on a few classes only: local SGD with one final average ends near chance
    (about 21 %), all-reduce at about 94 %. Async averaging must be far above the former (about
    80 % here: one-step-stale mixing on such shards costs accuracy)."""
    cell, seeds, by_label = "mlp-0.05-0.9", range(3), {"shards": "by-label", **STEP_WITH_COMPUTE}
    local_only = mean_accuracy("local-only", cell, seeds, **by_label)
    mixed = mean_accuracy("async", cell, seeds, **by_label)
    assert mixed >= local_only + 30, (mixed, local_only, mean_accuracy("allreduce", cell, seeds, **by_label))


def test_smart_groups_keep_changing_partners_on_label_skewed_shards():
    """Ranks that averaged together arrive together again: grouping them in arrival order kept
    the same pairs in 97-100 % of the steps, and on label-skewed shards the final average of two
    pairs' models scored 20-85 % (all-reduce: 89 %). The generator's seeded partitions mix them.
    Which ranks meet still depends on timing: mixed groups scored 78.5-86.1 % over the three
    seeds (mean 83.0 against all-reduce's 89.2) on a day the machine ran at half its memory
    speed, and on the label-skewed grid smart groups lose 10.5-16.0 points in their worst cell
    over runs (docs/decentralized.md), hence 10 points of room; stuck pairs average far below."""
    cell, seeds, by_label = "mlp-0.1-0", range(3), {"shards": "by-label", **STEP_WITH_COMPUTE}
    reference = mean_accuracy("allreduce", cell, seeds, **by_label)
    smart = mean_accuracy("partial-smart", cell, seeds, **by_label)
    assert smart >= reference - 10, (smart, reference, [accuracy("partial-smart", cell, s, **by_label) for s in seeds])
