"""A per-element scale for SGD steps that go through a codec with one scale per chunk.

The 1-bit codec sends every element of a chunk with the same magnitude, and a chunk of a fused
bucket holds elements whose steps differ by orders of magnitude: with inputs that are never
negative and often zero (pixels), a weight's step is the unit's error times its input, so a
row of the first layer's steps has one sign and magnitudes that follow the input, which 1-bit
codes as all equal. Error feedback repairs that only over many steps; with momentum it cost up
to 6 points of accuracy on digits (docs/compression.md).

The remedy is 1-bit Adam's: for ``warmup_steps`` steps the steps are all-reduced exactly and the
mean square of each element's averaged step is recorded; from then on each rank divides its step
by that element's root mean square before compression (the values the codec sees then have
similar magnitudes) and the decoded average is multiplied back. The scale comes from all-reduced
values, so it is the same on every rank, and it is frozen, so the error-feedback memories keep
their units. ``floor`` times the bucket's root mean scale is added to every element's: an element that
barely moved during warm-up would otherwise have its later steps divided by almost zero (1-bit
Adam's frozen variance takes the same floor). Where each element's step keeps its warm-up
magnitude and the floor is small, the scaled values all have magnitude 1, which the sign codec
sends exactly.
"""

from __future__ import annotations

import math
from typing import Any

from relaxlib.algorithms.base import TrainingContext


class StepScale:
    """The per-element scale of one bucket: records the averaged steps of the warm-up
    (``observe``), then ``value`` is the frozen scale (computed once, on first use)."""

    def __init__(self, ctx: TrainingContext, numel: int, warmup_steps: int, floor: float) -> None:
        self.numel = numel
        self.warmup_steps = warmup_steps
        self.floor = floor
        self._squares = ctx.zeros(numel)
        self._observed = 0
        self._value: Any = None

    @property
    def warming_up(self) -> bool:
        """Whether the next step is still exchanged exactly (and observed)."""
        return self._observed < self.warmup_steps

    def observe(self, ctx: TrainingContext, averaged: Any) -> None:
        """Adds one warm-up step's averaged step (the same on every rank)."""
        ctx.copy_(self._squares, self._squares + averaged * averaged)
        self._observed += 1

    def value(self, ctx: TrainingContext) -> Any:
        """The frozen scale: each element's root mean square step over the warm-up plus the floor."""
        if self._value is None:
            root = ctx.sqrt(self._squares / float(self._observed))
            floor = self.floor * math.sqrt(ctx.sum_of_squares(root) / max(self.numel, 1))
            # a bucket that did not move at all during warm-up (frozen layers) is left unscaled
            self._value = root + (floor if floor > 0 else 1.0)
        return self._value

    def state_dict(self) -> dict:
        """What a checkpoint keeps: the warm-up's sum of squares and how many steps it holds."""
        return {"squares": self._squares * 1.0, "observed": self._observed}

    def load_state_dict(self, ctx: TrainingContext, state: dict) -> None:
        """Restores ``state_dict``'s values (the frozen scale is recomputed from them)."""
        ctx.copy_(self._squares, state["squares"])
        self._observed = int(state["observed"])
        self._value = None
