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

    def from_host(self, array: Any) -> np.ndarray:
        return np.array(array, np.float32).reshape(-1)

    def matmul(self, a: np.ndarray, b: np.ndarray, rows: int, inner: int, cols: int, transpose_a: bool = False,
               transpose_b: bool = False) -> np.ndarray:
        left = a.reshape(inner, rows).T if transpose_a else a.reshape(rows, inner)
        right = b.reshape(cols, inner).T if transpose_b else b.reshape(inner, cols)
        return np.matmul(left, right).reshape(-1)

    def orthogonalize(self, tensor: np.ndarray, rows: int, cols: int, epsilon: float = 0.0) -> np.ndarray:
        """Modified Gram-Schmidt (each later column loses its projection as soon as a column is
        done: more stable than projecting against all earlier ones at once), in float32."""
        matrix = np.array(tensor, np.float32).reshape(rows, cols)
        for i in range(cols):
            column = matrix[:, i]
            divisor = np.float32(np.sqrt(np.dot(column, column)) + np.float32(epsilon))
            if divisor > 0:
                column /= divisor
            else:  # a zero column (epsilon 0): nothing to normalize, and 0 / 0 would be NaN
                column[...] = 0
            if i + 1 < cols:
                rest = matrix[:, i + 1:]
                rest -= np.outer(column, column @ rest)
        return matrix.reshape(-1)
