"""Cells of benchmarks/convergence_grid.py trained on the ranks of a test module, each once per
module (tests compare several modes at the same cells)."""

import sys
from pathlib import Path

import relaxlib_torch as hvd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import convergence_grid as grid  # noqa: E402

_DATA = None
_RESULTS: dict[tuple, dict] = {}


def accuracy(mode: str, model: str, lr: float, momentum: float, seed: int = 0, **options) -> float:
    """Test accuracy (%) of ``mode`` at a grid cell from initial weights ``seed``, with
    ``run_cell``'s optional keys; every rank must end with the same model."""
    global _DATA
    if _DATA is None:
        _DATA = grid.load_data()
    key = (mode, model, lr, momentum, seed, tuple(sorted(options.items())))
    if key not in _RESULTS:
        _RESULTS[key] = grid.run_cell(hvd, _DATA, {"model": model, "mode": mode, "lr": lr, "momentum": momentum,
                                                   "seed": seed, **options})
        assert _RESULTS[key].get("ranks_agree", False), _RESULTS[key]
    return _RESULTS[key]["accuracy"]


def mean_accuracy(mode: str, model: str, lr: float, momentum: float, seeds: range, **options) -> float:
    """Mean test accuracy (%) of ``mode`` at a grid cell over several initial weights."""
    return sum(accuracy(mode, model, lr, momentum, seed, **options) for seed in seeds) / len(seeds)
