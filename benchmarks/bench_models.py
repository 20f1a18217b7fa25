"""Models for training benchmarks.

``sleep``: layers whose forward and backward *sleep* for a set time instead of computing, with a
parameter of a set size. Compute time and communication volume are then independent knobs,
and sleeping leaves the 2 cores to communication, so overlap is measured, not CPU contention.
``mlp``: real fully connected layers (compute competes with communication for the cores).
"""

from __future__ import annotations

import time

import torch


class _SleepOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, forward_s, backward_s):
        ctx.backward_s = backward_s
        ctx.weight_shape = weight.shape
        time.sleep(forward_s)
        return x + 0 * weight.reshape(-1)[0]

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.backward_s)
        return grad, torch.full(ctx.weight_shape, 1e-3), None, None


class SleepLayer(torch.nn.Module):
    """A layer with ``params`` parameters that takes ``forward_s`` / ``backward_s`` seconds."""

    def __init__(self, params: int, forward_s: float, backward_s: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(params))
        self.forward_s, self.backward_s = forward_s, backward_s
        self.slowdown = 1.0

    def forward(self, x):
        return _SleepOp.apply(x, self.weight, self.forward_s * self.slowdown, self.backward_s * self.slowdown)


class SleepNet(torch.nn.Module):
    """``layers`` SleepLayers; the whole model has ``layers * params_per_layer`` parameters."""

    def __init__(self, layers: int, params_per_layer: int, forward_s: float, backward_s: float) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            SleepLayer(params_per_layer, forward_s / layers, backward_s / layers) for _ in range(layers))

    def set_slowdown(self, factor: float) -> None:
        """Makes every layer ``factor`` times slower (stragglers)."""
        for layer in self.layers:
            layer.slowdown = factor

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def make_model(name: str, layers: int, width: int, forward_ms: float, backward_ms: float) -> torch.nn.Module:
    """``sleep``: SleepNet with ``width`` parameters per layer; ``mlp``: Linear(width, width) layers."""
    if name == "sleep":
        return SleepNet(layers, width, forward_ms / 1000, backward_ms / 1000)
    if name == "mlp":
        blocks = []
        for _ in range(layers):
            blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        return torch.nn.Sequential(*blocks)
    raise ValueError(f"unknown model {name!r} (sleep, mlp)")
