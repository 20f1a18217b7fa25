"""Sample-efficient search of one numeric knob (e.g. the fusion buffer size) by Bayesian
optimization: a Gaussian-process model of the measured cost (scikit-learn's
``GaussianProcessRegressor``) and expected improvement over a candidate grid. The caller
measures, this module proposes.

The search is deterministic: the same observations give the same proposal (the regressor's
hyper-parameter restarts use a fixed ``random_state``). Distributed callers should still decide
on one rank and broadcast the value, as DeAR does, since floating-point results may differ
between machines. scikit-learn and scipy are imported on the first model-based proposal, not at
import time (they add ~0.6 s).
"""

from __future__ import annotations

import math
import warnings

import numpy as np


class BayesianSearch:
    """Minimizes a noisy cost over [low, high] (searched on a log scale).

    Call ``propose()`` for the next value to try, ``observe(value, cost)`` with what was
    measured, and ``best()`` for the best value seen. The first ``initial`` proposals spread
    evenly over the range; later ones maximize expected improvement under a Gaussian process
    (Matern 5/2 kernel plus white noise, normalized targets) fitted with ``random_state=seed``.
    """

    def __init__(self, low: float, high: float, initial: int = 3, seed: int = 0, candidates: int = 200) -> None:
        if not 0 < low < high:
            raise ValueError("BayesianSearch needs 0 < low < high")
        self.low, self.high = low, high
        self._grid = np.geomspace(low, high, candidates)
        self._initial = [math.exp(v) for v in np.linspace(math.log(low), math.log(high), initial + 2)[1:-1]]
        self._seed = seed
        self.values: list[float] = []
        self.costs: list[float] = []

    def _x(self, values) -> np.ndarray:
        """Values mapped to [0, 1] on a log scale, as a column (the regressor's input shape)."""
        span = math.log(self.high) - math.log(self.low)
        return ((np.log(np.asarray(values, dtype=float)) - math.log(self.low)) / span).reshape(-1, 1)

    def propose(self) -> float:
        """The next value to measure (never one already observed while untried candidates remain)."""
        if len(self.values) < len(self._initial):
            return float(self._initial[len(self.values)])
        if not self.values:  # initial=0: nothing to model yet, start in the (log) middle
            return math.sqrt(self.low * self.high)
        from scipy.stats import norm

        mean, std = self._posterior(self._grid)
        best = min(self.costs)
        std = np.maximum(std, 1e-12)
        z = (best - mean) / std
        improvement = (best - mean) * norm.cdf(z) + std * norm.pdf(z)
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
        """Mean and standard deviation of the cost at ``values`` given the observations."""
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        kernel = (ConstantKernel(1.0, (1e-2, 1e2)) * Matern(length_scale=0.2, length_scale_bounds=(0.05, 2.0), nu=2.5)
                  + WhiteKernel(noise_level=1e-2, noise_level_bounds=(1e-6, 1.0)))
        model = GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=2,
                                         random_state=self._seed)
        with warnings.catch_warnings():  # hyper-parameters at a bound are expected with few points
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(self._x(self.values), np.asarray(self.costs, dtype=float))
        mean, std = model.predict(self._x(values), return_std=True)
        return mean, std
