"""Sample-efficient search of one numeric knob (e.g. the fusion buffer size) by Bayesian
optimization: a Gaussian-process model of the measured cost and expected improvement over a
candidate grid. Pure numpy; the caller measures, this module proposes."""

from __future__ import annotations

import math

import numpy as np


class BayesianSearch:
    """Minimizes a noisy cost over [low, high] (searched on a log scale).

    Call ``propose()`` for the next value to try, ``observe(value, cost)`` with what was
    measured, and ``best()`` for the best value seen. The first proposals spread over the range.
    """

    def __init__(self, low: float, high: float, initial: int = 3, seed: int = 0, candidates: int = 200) -> None:
        if not 0 < low < high:
            raise ValueError("BayesianSearch needs 0 < low < high")
        self.low, self.high = low, high
        self._grid = np.geomspace(low, high, candidates)
        self._initial = [math.exp(v) for v in np.linspace(math.log(low), math.log(high), initial + 2)[1:-1]]
        self._rng = np.random.default_rng(seed)
        self.values: list[float] = []
        self.costs: list[float] = []

    def _x(self, values) -> np.ndarray:
        span = math.log(self.high) - math.log(self.low)
        return (np.log(np.asarray(values, dtype=float)) - math.log(self.low)) / span

    def propose(self) -> float:
        """The next value to measure."""
        if len(self.values) < len(self._initial):
            return float(self._initial[len(self.values)])
        mean, std = self._posterior(self._grid)
        best = min(self.costs)
        z = (best - mean) / np.maximum(std, 1e-12)
        cdf = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
        pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        improvement = (best - mean) * cdf + std * pdf
        tried = np.isin(np.round(self._grid, 6), np.round(self.values, 6))
        improvement[tried] = -np.inf
        return float(self._grid[int(np.argmax(improvement))])

    def observe(self, value: float, cost: float) -> None:
        """Records the cost measured at ``value``."""
        self.values.append(float(value))
        self.costs.append(float(cost))

    def best(self) -> float:
        """The value with the lowest observed cost."""
        if not self.values:
            raise ValueError("no observations yet")
        return self.values[int(np.argmin(self.costs))]

    def _posterior(self, values) -> tuple[np.ndarray, np.ndarray]:
        x, y = self._x(self.values), np.asarray(self.costs, dtype=float)
        scale = y.std() or 1.0
        y_norm = (y - y.mean()) / scale
        length, noise = 0.2, 1e-2

        def kernel(a, b):
            return np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2 / length**2)

        k = kernel(x, x) + noise * np.eye(len(x))
        xs = self._x(values)
        ks = kernel(xs, x)
        solved = np.linalg.solve(k, y_norm)
        mean = ks @ solved
        var = 1.0 - np.einsum("ij,ji->i", ks, np.linalg.solve(k, ks.T))
        return y.mean() + scale * mean, scale * np.sqrt(np.maximum(var, 1e-12))
