"""The fusion-size search (relaxlib.algorithms.tuning) on synthetic noisy cost curves, without MPI."""

import math

import numpy as np
import pytest

from relaxlib.algorithms.tuning import BayesianSearch


def noisy_cost(best_at, seed, sigma=0.05):
    """Quadratic in log(value) with its minimum at ``best_at``, plus seeded Gaussian noise."""
    rng = np.random.default_rng(seed)
    return lambda value: (math.log(value) - math.log(best_at)) ** 2 + rng.normal(0.0, sigma)


@pytest.mark.parametrize("best_at", [3.0, 12.0, 50.0])
def test_proposals_converge_near_the_minimum_of_a_noisy_curve(best_at):
    cost = noisy_cost(best_at, seed=7)
    search = BayesianSearch(1, 100, initial=3)
    proposals = []
    for _ in range(8):
        value = search.propose()
        assert 1 <= value <= 100
        proposals.append(value)
        search.observe(value, cost(value))
    distance = [abs(math.log(value / best_at)) for value in proposals]
    assert min(distance[3:]) < 0.25  # a model-based proposal within ~28% of the minimum
    assert abs(math.log(search.best() / best_at)) < 0.3
    assert len(set(proposals)) == len(proposals)


def test_tuners_fed_the_same_observations_propose_the_same_value():
    cost = noisy_cost(20.0, seed=3)
    first, second = BayesianSearch(1, 100, initial=3), BayesianSearch(1, 100, initial=3)
    for _ in range(7):
        value = first.propose()
        assert second.propose() == value
        assert first.propose() == value  # proposing has no side effect
        measured = cost(value)
        first.observe(value, measured)
        second.observe(value, measured)
    late = BayesianSearch(1, 100, initial=3)  # e.g. another rank replaying the history
    for value, measured in zip(first.values, first.costs):
        late.observe(value, measured)
    assert late.propose() == first.propose()


def test_no_observations_and_bad_range():
    with pytest.raises(ValueError):
        BayesianSearch(10, 1)
    with pytest.raises(ValueError):
        BayesianSearch(1, 100).best()
    assert BayesianSearch(1, 100, initial=0).propose() == pytest.approx(10.0)
