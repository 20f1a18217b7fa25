"""Schedules of decentralized and partial all-reduce training, as pure functions: property tests
over thousands of steps (no ranks needed)."""

import numpy as np
import pytest

from relaxlib import groups, topology


@pytest.mark.parametrize("generator", ["static", "random"])
@pytest.mark.parametrize("size,group_size", [(2, 2), (3, 2), (4, 2), (4, 3), (5, 2), (7, 3), (8, 4), (16, 3)])
def test_every_rank_in_exactly_one_group_per_step(generator, size, group_size):
    sizes = set()
    for step in range(3000):
        layout = groups.deterministic_groups(generator, step, size, group_size, seed=42)
        flat = sorted(r for g in layout for r in g)
        assert flat == list(range(size)), (step, layout)
        assert all(1 <= len(g) <= group_size for g in layout)
        assert all(g == sorted(g) for g in layout)
        sizes.update(len(g) for g in layout)
        for rank in range(size):  # every rank computes the same group for itself as for others
            assert rank in groups.group_of(rank, layout)
    assert group_size in sizes


@pytest.mark.parametrize("generator", ["static", "random"])
def test_groups_mix_information_across_all_ranks(generator):
    """Products of the averaging matrices converge to the all-equal matrix: every rank's model
    reaches every other rank."""
    size = 6
    product = np.eye(size)
    for step in range(200):
        product = groups.averaging_matrix(groups.deterministic_groups(generator, step, size, 2, seed=1), size) @ product
    np.testing.assert_allclose(product, np.full((size, size), 1 / size), atol=1e-6)


def test_random_groups_depend_on_seed_and_step():
    a = [groups.random_groups(s, 8, 2, seed=1) for s in range(20)]
    assert a == [groups.random_groups(s, 8, 2, seed=1) for s in range(20)]
    assert a != [groups.random_groups(s, 8, 2, seed=2) for s in range(20)]
    assert len({str(x) for x in a}) > 10


@pytest.mark.parametrize("size", [2, 3, 4, 5, 9])
def test_random_matching_is_a_perfect_matching_with_one_left_over_when_odd(size):
    left_over = set()
    for step in range(3000):
        pairs = topology.random_matching(step, size, seed=3)
        flat = sorted(r for p in pairs for r in p)
        assert flat == list(range(size))
        singles = [p for p in pairs if len(p) == 1]
        assert len(singles) == size % 2
        left_over.update(p[0] for p in singles)
        w = topology.mixing_matrix("random", size, step, seed=3)
        np.testing.assert_allclose(w.sum(0), 1)
        np.testing.assert_allclose(w, w.T)
    if size % 2:
        assert left_over == set(range(size))  # sitting out rotates over all ranks


@pytest.mark.parametrize("size", [1, 2, 3, 4, 8])
def test_ring_is_doubly_stochastic_and_contracts(size):
    w = topology.mixing_matrix("ring", size, 0)
    np.testing.assert_allclose(w.sum(0), 1)
    np.testing.assert_allclose(w.sum(1), 1)
    if size > 1:
        second = np.sort(np.abs(np.linalg.eigvalsh(w)))[-2]
        assert second < 1  # the spread shrinks by this factor per step


def test_bad_schedule_arguments():
    with pytest.raises(ValueError, match="topology"):
        topology.neighbors("star", 0, 4, 0)
    with pytest.raises(ValueError, match="deterministic"):
        groups.deterministic_groups("smart", 0, 4, 2)
