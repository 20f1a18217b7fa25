"""``TensorMath`` (and the step scale's ``StepScaleMath``) on flat numpy arrays in host memory:
what the Keras context's eager steps hand algorithms, and what the core reads and writes directly."""

from __future__ import annotations

from typing import Any

import numpy as np

from relaxlib.algorithms.context import TensorMath
from relaxlib.algorithms.step_scale import StepScaleMath, host_mean_squares


class HostMath(TensorMath, StepScaleMath):
    """Flat numpy arrays; ``zeros`` are float32, the state algorithms keep from step to step."""

    def zeros(self, numel: int) -> np.ndarray:
        return np.zeros(numel, np.float32)

    def concat(self, tensors: list) -> np.ndarray:
        return np.concatenate(tensors)

    def copy_(self, tensor: np.ndarray, value: Any) -> None:
        tensor[...] = value

    def add_(self, tensor: np.ndarray, other: Any, alpha: float = 1.0) -> None:
        if alpha == 1.0:
            tensor += other
        else:
            tensor += alpha * other

    def scale_(self, tensor: np.ndarray, factor: float) -> None:
        tensor *= factor

    def sum_of_squares(self, tensor: np.ndarray) -> float:
        return float(np.dot(tensor.astype(np.float64), tensor.astype(np.float64)))

    def clone(self, tensor: np.ndarray) -> np.ndarray:
        return tensor.copy()

    def sqrt(self, tensor: Any) -> Any:
        """numpy's power 0.5 is its sqrt, correctly rounded."""
        return tensor ** 0.5

    def repeat(self, tensor: Any, count: int) -> np.ndarray:
        return np.repeat(tensor, count)

    def host_view(self, tensor: Any) -> np.ndarray | None:
        usable = (isinstance(tensor, np.ndarray) and tensor.dtype == np.float32 and tensor.flags.c_contiguous
                  and tensor.flags.writeable)
        return tensor if usable else None

    def factor_mean_squares(self, tensor: Any, rows: int, cols: int) -> np.ndarray:
        return host_mean_squares(tensor, rows, cols)

    def outer(self, a: Any, b: Any) -> np.ndarray:
        return np.outer(a, b).reshape(-1)

    def finite_or(self, value: Any, fallback: Any) -> np.ndarray:
        return np.where(np.isfinite(value), value, fallback)
