"""Top-K sparsification with error feedback (relaxlib.algorithms.topk): the selection, packing
and densifying pieces against a plain numpy reference, argument errors, and (3 ranks, torch) the
algorithm's results against the formula; tests/parallel/torch_topk.py holds the multi-rank checks."""

import math

import numpy as np
import pytest
from rank_groups import GROUP_PARAM, MODULE_PARAM, cases, group

from relaxlib.algorithms import topk
from relaxlib.algorithms.topk import TopK


def reference_topk(values, k):
    """The k largest magnitudes by a full sort (ties broken towards the lower index)."""
    order = sorted(range(values.size), key=lambda i: (-abs(values[i]), i))[:k]
    return np.array(sorted(order))


def test_selection_keeps_the_largest_magnitudes():
    rng = np.random.default_rng(0)
    values = rng.normal(size=1000).astype(np.float32)
    chosen, kept = topk.select(values, 0.01)
    assert chosen.tolist() == reference_topk(values, 10).tolist()
    np.testing.assert_array_equal(kept, values[chosen])


def test_density_one_keeps_everything_and_tiny_densities_keep_one():
    values = np.arange(5, dtype=np.float32) - 2
    assert topk.select(values, 1.0)[0].tolist() == [0, 1, 2, 3, 4]
    assert topk.keep_count(5, 1e-9) == 1
    assert topk.keep_count(1000, 0.01) == 10 and topk.keep_count(1001, 0.01) == 11


def test_packed_pairs_from_ranks_average_like_the_dense_formula():
    rng = np.random.default_rng(1)
    ranks, numel, density = 3, 777, 0.05
    grads = [rng.normal(size=numel).astype(np.float32) for _ in range(ranks)]
    payloads = []
    expected = np.zeros(numel, np.float64)
    for g in grads:
        chosen, kept = topk.select(g, density)
        sparse = np.zeros(numel)
        sparse[chosen] = kept
        expected += sparse / ranks
        payloads.append(topk.pack(chosen, kept))
    dense = topk.densify(np.concatenate(payloads), ranks, numel, density)
    np.testing.assert_allclose(dense, expected, rtol=1e-6, atol=1e-7)


def test_buckets_longer_than_float32_integers_are_selected_in_segments(monkeypatch):
    """Indices travel as float32: a bucket past 2^24 elements is cut into segments (shrunk here)."""
    monkeypatch.setattr(topk, "SEGMENT", 100)
    values = np.random.default_rng(2).normal(size=250).astype(np.float32)
    assert topk.segment_sizes(250) == [100, 100, 50]
    chosen, kept = topk.select(values, 0.1)
    assert len(chosen) == 10 + 10 + 5
    for start, size in ((0, 100), (100, 100), (200, 50)):
        mine = chosen[(chosen >= start) & (chosen < start + size)] - start
        assert mine.tolist() == reference_topk(values[start:start + size], math.ceil(0.1 * size)).tolist()
    dense = topk.densify(topk.pack(chosen, kept), 1, 250, 0.1)
    expected = np.zeros(250, np.float32)
    expected[chosen] = kept
    np.testing.assert_array_equal(dense, expected)


@pytest.mark.parametrize("density", [0, -0.1, 1.5, float("nan"), "0.1", True])
def test_density_outside_zero_one_is_refused(density):
    with pytest.raises(ValueError, match="density"):
        TopK(density=density)


def test_other_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="fusion_mb"):
        TopK(fusion_mb=0)
    with pytest.raises(ValueError, match="error_feedback"):
        TopK(error_feedback="yes")
    with pytest.raises(ValueError, match="compress must be 'auto', 'update' or 'gradient'"):
        TopK(compress="momentum")


NP3 = group("np3", 3)  # the same group (by value) as tests/test_torch_parallel.py's: no launch of its own


@pytest.mark.mpi
@pytest.mark.parametrize(f"{GROUP_PARAM}, {MODULE_PARAM}", cases((NP3, "torch_topk.py")))
def test_topk_on_three_torch_ranks(rank_group, rank_module, rank_groups):
    """Density 1 equals all-reduce; 10 % against the formula with error feedback over steps; every
    rank's update identical; digits training close to all-reduce; state_dict resumes bit for bit;
    NaN gradients refused on every rank."""
    rank_groups.check(rank_group, rank_module)
