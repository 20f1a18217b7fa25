"""Batch normalization whose statistics are computed over the whole distributed batch (CPU)."""

from __future__ import annotations

import torch

from relaxlib.process_sets import global_process_set
from relaxlib_torch import mpi_ops


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Drop-in for ``torch.nn.BatchNorm{1,2,3}d`` that normalizes with the mean and variance of
    the batch across all ranks of ``process_set`` (as if one process saw the concatenated batch).

    Training mode all-reduces per-channel sums, counts and squared deviations; the reductions
    are differentiable, so backward sums the gradient terms across ranks too. Evaluation mode
    uses the running statistics, as BatchNorm does.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_set=global_process_set) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or self.process_set.size() == 1:
            return super().forward(input)
        channels = input.shape[1]
        reduce_dims = [0] + list(range(2, input.dim()))
        view = [1, channels] + [1] * (input.dim() - 2)
        local_count = torch.tensor([input.numel() // channels], dtype=input.dtype)
        totals = mpi_ops.allreduce(torch.cat([input.sum(reduce_dims), local_count]), op=mpi_ops.Sum,
                                   process_set=self.process_set)
        count = totals[-1]
        mean = totals[:-1] / count
        centered = input - mean.view(view)
        var = mpi_ops.allreduce((centered * centered).sum(reduce_dims), op=mpi_ops.Sum,
                                process_set=self.process_set) / count
        output = centered * torch.rsqrt(var + self.eps).view(view)
        if self.affine:
            output = output * self.weight.view(view) + self.bias.view(view)
        if self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach(), float(count.detach()))
        return output

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor, count: float) -> None:
        self.num_batches_tracked += 1
        momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        unbiased = var * (count / max(count - 1.0, 1.0))
        self.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        self.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)


__all__ = ["SyncBatchNorm"]
