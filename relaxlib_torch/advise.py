"""``relaxlib_torch.advise``: the advisor on a PyTorch model (see relaxlib.advisor)."""

from __future__ import annotations

import statistics
import time

import torch

from relaxlib import advisor


def advise(model: torch.nn.Module, sample_batch, loss_fn=None, reps: int = 3, show: bool = True):
    """Collective: times forward and backward of ``model`` on ``sample_batch`` (this rank's batch),
    calibrates the network and codecs, and prints (rank 0) and returns every mode's predicted
    iteration, fastest first. ``loss_fn(output)`` defaults to the mean square of the output.
    Gradients are zeroed afterwards."""
    loss_fn = loss_fn or (lambda out: out.float().pow(2).mean())
    forward, backward = [], []
    for _ in range(reps + 1):  # the first pass warms up allocators and kernels
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss = loss_fn(model(sample_batch))
        middle = time.perf_counter()
        loss.backward()
        forward.append(middle - start)
        backward.append(time.perf_counter() - middle)
    model.zero_grad(set_to_none=True)
    trained = [p for p in reversed(list(model.parameters())) if p.requires_grad]
    sizes = [p.numel() * p.element_size() for p in trained]
    batch = len(sample_batch) if hasattr(sample_batch, "__len__") else 1
    return advisor.advise(statistics.median(forward[1:]), statistics.median(backward[1:]), sizes, batch, show=show,
                          shapes=[tuple(p.shape) for p in trained])
