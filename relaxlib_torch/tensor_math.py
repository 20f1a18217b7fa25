"""``TensorMath`` (and the step scale's ``StepScaleMath``) on flat torch tensors."""

from __future__ import annotations

import numpy as np
import torch

from relaxlib.algorithms.context import TensorMath
from relaxlib.algorithms.step_scale import StepScaleMath, host_mean_squares


class TorchMath(TensorMath, StepScaleMath):
    """Flat torch tensors; ``zeros`` are made on ``device`` (the parameters', where algorithms
    keep state next to them, e.g. momentum)."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device

    def zeros(self, numel: int) -> torch.Tensor:
        return torch.zeros(numel, dtype=torch.float32, device=self.device)

    def concat(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(tensors)

    def copy_(self, tensor: torch.Tensor, value: torch.Tensor) -> None:
        tensor.copy_(value)

    def add_(self, tensor: torch.Tensor, other: torch.Tensor, alpha: float = 1.0) -> None:
        tensor.add_(other, alpha=alpha)

    def scale_(self, tensor: torch.Tensor, factor: float) -> None:
        tensor.mul_(factor)

    def sum_of_squares(self, tensor: torch.Tensor) -> float:
        t = tensor.detach().to(torch.float64)
        return float(torch.dot(t, t)) if t.dim() == 1 else float((t * t).sum())

    def clone(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone()

    def sqrt(self, tensor: torch.Tensor) -> torch.Tensor:
        """Correctly rounded: torch's vectorized CPU kernels are not for every float32 input, so
        a CPU tensor goes through numpy's sqrt (no copies)."""
        if tensor.device.type != "cpu" or tensor.dtype not in (torch.float32, torch.float64):
            return torch.sqrt(tensor)
        return torch.from_numpy(np.sqrt(tensor.detach().numpy()))

    def repeat(self, tensor: torch.Tensor, count: int) -> torch.Tensor:
        return tensor.repeat_interleave(count)

    def host_view(self, tensor: torch.Tensor) -> np.ndarray | None:
        if tensor.device.type != "cpu" or tensor.dtype != torch.float32 or not tensor.is_contiguous():
            return None
        return tensor.detach().numpy()

    def factor_mean_squares(self, tensor: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        """A CPU tensor goes through numpy (no copies: faster than torch's float64 conversion)."""
        if tensor.device.type == "cpu":
            return torch.from_numpy(host_mean_squares(tensor.detach().numpy(), rows, cols))
        squares = tensor.detach().to(torch.float64).reshape(rows, cols).square()
        row = squares.mean(1)
        return torch.cat([row, squares.mean(0), row.mean().reshape(1)]).float()

    def outer(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.outer(a, b).reshape(-1)

    def finite_or(self, value: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
        return torch.where(torch.isfinite(value), value, fallback)

    def from_host(self, array) -> torch.Tensor:
        return torch.from_numpy(np.array(array, np.float32).reshape(-1)).to(self.device)

    def matmul(self, a: torch.Tensor, b: torch.Tensor, rows: int, inner: int, cols: int, transpose_a: bool = False,
               transpose_b: bool = False) -> torch.Tensor:
        left = a.reshape(inner, rows).t() if transpose_a else a.reshape(rows, inner)
        right = b.reshape(cols, inner).t() if transpose_b else b.reshape(inner, cols)
        return torch.matmul(left, right).reshape(-1)

    def matmul_into(self, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, rows: int, inner: int, cols: int,
                    transpose_a: bool = False, transpose_b: bool = False) -> None:
        left = a.reshape(inner, rows).t() if transpose_a else a.reshape(rows, inner)
        right = b.reshape(cols, inner).t() if transpose_b else b.reshape(inner, cols)
        torch.matmul(left, right, out=out.view(rows, cols))

    def orthogonalize(self, tensor: torch.Tensor, rows: int, cols: int, epsilon: float = 0.0) -> torch.Tensor:
        """Modified Gram-Schmidt (each later column loses its projection as soon as a column is
        done: more stable than projecting against all earlier ones at once), in float32."""
        matrix = tensor.detach().to(torch.float32).reshape(rows, cols).clone()
        for i in range(cols):
            column = matrix[:, i]
            divisor = torch.sqrt(torch.dot(column, column)) + epsilon
            # a zero column (epsilon 0) stays zero, where 0 / 0 would be NaN (no host sync on a GPU)
            column.copy_(torch.where(divisor > 0, column / divisor, torch.zeros_like(column)))
            if i + 1 < cols:
                rest = matrix[:, i + 1:]
                rest -= torch.outer(column, column @ rest)
        return matrix.reshape(-1)
