"""A per-element scale, fresh every step, for steps that go through a codec with one scale per chunk.

The 1-bit codec sends every element of a chunk with the same magnitude, and a chunk of a fused
bucket holds elements whose steps differ by orders of magnitude. With inputs that are never
negative and often zero (pixels), a weight's step is its unit's error times its input: a row of
the first layer's steps has one sign and magnitudes that follow the input, which 1-bit codes as
all equal. Error feedback repairs that only over many steps: with momentum it cost accuracy on
digits (docs/compression.md has the measurements).

The remedy divides each element's step by its typical magnitude before compression and
multiplies the decoded average back, so the codec sees values of similar magnitude. The
magnitude is *factored* (Adafactor's second-moment estimate): a weight of ``rows x cols`` (a
convolution's kernel as ``out x (in * kh * kw)``) gets ``sqrt(row_i / total) * sqrt(col_j)`` from
the mean squares of its step's row ``i``, its column ``j`` and the whole weight, so the statistics
cost ``rows + cols + 1`` floats per weight; a vector, such as a bias, gets one scale, its root
mean square (one float). Every step each rank computes them from its own step, one small
all-reduce averages them (so the scale is the same on every rank and the average of the scaled
steps is the scaled average), and an exponential moving average (weight ``decay`` on the past)
smooths them. ``floor`` times the parameter's root mean square is added to every element's scale,
which keeps the division bounded where a row or column barely moves.

The error-feedback memories hold residuals in scaled units; when the scale changes they are
multiplied by old / new scale, so the residual in the step's own units is unchanged. The old
scale is computed again from the statistics before this step's smoothing, so no per-element
array of scales is kept (nor read and written every step).

Every operation is element-wise float32 (square roots correctly rounded) or a float64 reduction
rounded to float32 (the binding's ``factor_mean_squares``), so torch and Keras compute the same bits.
On host tensors (torch on the CPU, Keras's eager steps) the core does the per-element work in one
pass each for the statistics and for scaling (``relax_scale_statistics``, ``relax_scale_apply``),
the same float32 operations in the same order; elsewhere (a traced TensorFlow step, a GPU) the
context's tensor operations compose them.
"""

from __future__ import annotations

import ctypes
import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np

from relaxlib import _core, direct

if TYPE_CHECKING:
    from relaxlib.algorithms.context import TrainingContext

# Added to a parameter's mean square: a step of zeros still gets a positive scale (a float32
# normal number far below any real statistic).
TINY_MEAN_SQUARE = 1e-30
DECAY = 0.5  # weight of the past statistics (docs/compression.md: how it was chosen)


class StepScaleMath(ABC):
    """The tensor operations only the step scale needs, beside ``TensorMath``'s: a binding's
    ``ctx.math`` implements both. Each is float32 element-wise or a float64 reduction rounded
    once, so that torch and Keras compute the same bits."""

    @abstractmethod
    def host_view(self, tensor: Any) -> np.ndarray | None:
        """A numpy array sharing ``tensor``'s memory when it is a contiguous float32 tensor in
        host memory that may be written in place, else None (then the scale composes this
        piece's tensor operations instead of calling the core's host passes)."""

    @abstractmethod
    def factor_mean_squares(self, tensor: Any, rows: int, cols: int) -> Any:
        """Mean squares of a flat float32 ``tensor`` viewed as ``rows x cols`` (a parameter's
        step), as a new float32 tensor of ``rows + cols + 1``: each row's, each column's, then the
        whole tensor's. Computed in float64 and rounded once (``host_mean_squares``)."""

    @abstractmethod
    def outer(self, a: Any, b: Any) -> Any:
        """The outer product of two flat tensors, flattened row by row (``a[i] * b[j]`` at
        ``i * len(b) + j``), as a new tensor."""

    @abstractmethod
    def finite_or(self, value: Any, fallback: Any) -> Any:
        """A new tensor: ``value`` where it is finite, else ``fallback`` (same shape)."""


class ScaledCompression(ABC):
    """A communicator that runs the factored step scale inside the compressed all-reduce (host
    tensors: the core's step-scale passes), so that the statistics need no all-reduce of their own."""

    @abstractmethod
    def scaled_compressed_allreduce_async(self, flat: Any, name: str, codec: str, state: Any,
                                          step_scale: direct.StepScaleBuffers) -> Any | None:
        """``compressed_allreduce_async`` (average, all ranks) with the factored step scale run
        inside the operation, whose result is in ``flat``'s own units; None where this
        communicator cannot for this tensor, and the caller composes the scale around
        ``compressed_allreduce_async`` instead."""


def host_mean_squares(array: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``StepScaleMath.factor_mean_squares`` of a host array (float64, rounded once to float32)."""
    squares = np.square(np.asarray(array), dtype=np.float64).reshape(rows, cols)
    row = squares.mean(axis=1)
    return np.concatenate([row, squares.mean(axis=0), [row.mean()]]).astype(np.float32)


def statistics_count(rows: int, cols: int) -> int:
    """Floats of statistics a parameter factored as ``rows x cols`` sends: its rows', columns' and
    whole mean squares (a vector, 1 x 1: its whole's only)."""
    return 1 if rows == 1 else rows + cols + 1


def factor_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, cols) a parameter of ``shape`` is factored as: the first dimension against the rest;
    (1, 1) where that leaves a single row or column (vectors, scalars, ``1 x n``, ``n x 1``),
    which gets one scale, its root mean square (factors would cost a float per element)."""
    rows = shape[0] if shape else 1
    cols = math.prod(shape) // rows if rows else 0
    return (1, 1) if rows == 1 or cols == 1 else (rows, cols)


class FactoredScale:
    """The factored per-element scale of one bucket (parameters ``shapes``, in bucket order)."""

    def __init__(self, ctx: TrainingContext, shapes: list[tuple[int, ...]], floor: float,
                 decay: float = DECAY) -> None:
        # (rows, cols, elements) per parameter; parameters without elements take no part
        self.factors = [(*factor_shape(shape), math.prod(shape)) for shape in shapes if math.prod(shape)]
        self.floor = floor
        self.decay = decay
        self.stats_numel = sum(statistics_count(rows, cols) for rows, cols, _ in self.factors)
        self.numel = sum(numel for _, _, numel in self.factors)
        # context state from the start (a traced step updates it in place): the smoothed
        # statistics, zero before the first step, and those the residuals were last scaled with
        # (set by ``update``; zero before the first step too, when the memories are still empty)
        self._smoothed = ctx.math.zeros(self.stats_numel)
        self._previous = ctx.math.zeros(self.stats_numel)
        # the core's view of the factors: (rows, cols) pairs, one row for a single scale
        self._shapes = np.array([(rows, cols) if rows > 1 else (1, numel) for rows, cols, numel in self.factors],
                                np.int64).reshape(-1)

    def statistics(self, ctx: TrainingContext, step: Any) -> Any:
        """This rank's statistics of a bucket's ``step``: per parameter the mean squares of its
        rows, of its columns and of the whole (a vector's: of the whole only)."""
        host = ctx.math.host_view(step)
        out = ctx.math.zeros(self.stats_numel) if host is not None else None
        if out is not None and ctx.math.host_view(out) is not None:
            _core.check(_core.lib().relax_scale_statistics(*_buffer(host), _address(self._shapes),
                                                            len(self.factors), *_buffer(ctx.math.host_view(out))))
            return out
        parts, offset = [], 0
        for rows, cols, numel in self.factors:
            part = step[offset:offset + numel]
            if rows == 1:  # one mean square: (1 x numel)'s row's, the first of row, columns and whole
                parts.append(ctx.math.factor_mean_squares(part, 1, numel)[0:1])
            else:
                parts.append(ctx.math.factor_mean_squares(part, rows, cols))
            offset += numel
        return ctx.math.concat(parts)

    def update(self, ctx: TrainingContext, averaged_statistics: Any) -> None:
        """Smooths in the statistics averaged over the ranks (before ``scale``), keeping those it
        replaces for ``scale``'s old scale."""
        # A non-finite step on any rank makes the averaged statistics of its parameters
        # non-finite; those keep their previous values (and so their scale and residuals), and
        # the compressed all-reduce then fails on every rank naming the rank, state unchanged.
        ctx.math.copy_(self._previous, self._smoothed)
        smoothed = ctx.math.finite_or(self.decay * self._smoothed + (1.0 - self.decay) * averaged_statistics,
                                 self._smoothed)
        ctx.math.copy_(self._smoothed, smoothed)

    def scale(self, ctx: TrainingContext, step: Any, memory: Any = None) -> Any:
        """Sets the scale from the smoothed statistics, multiplies the error-feedback ``memory``'s
        residuals (if any) by old / new scale so that they stay the same in the step's own units,
        and returns ``step`` divided by the scale (on host tensors in ``step``'s own storage)."""
        views = self._host_views(ctx, step, memory)
        if views is not None:
            step_view, worker, owner = views
            owner_offset, owner_count = (memory.owner_offset, owner.size) if memory is not None else (0, 0)
            _core.check(_core.lib().relax_scale_apply(
                *_buffer(ctx.math.host_view(self._previous)), *_buffer(ctx.math.host_view(self._smoothed)),
                _address(self._shapes), len(self.factors), self.floor, *_buffer(step_view), *_buffer(step_view),
                *_buffer(worker), *_buffer(owner), owner_offset, owner_count))
            return step
        scale = self._scale_of(ctx, self._smoothed)
        if memory is not None:
            memory.rescale(self._scale_of(ctx, self._previous) / scale)
        return step / scale

    def _scale_of(self, ctx: TrainingContext, smoothed: Any) -> Any:
        """Every element's scale from the statistics ``smoothed``, composed from the context's
        tensor operations (the core's scale_apply computes the same float32 operations)."""
        parts, offset = [], 0
        for rows, cols, numel in self.factors:
            count = statistics_count(rows, cols)
            total = smoothed[offset + count - 1:offset + count] + TINY_MEAN_SQUARE
            floor = self.floor * ctx.math.sqrt(total)
            if rows == 1:
                parts.append(ctx.math.repeat(ctx.math.sqrt(total) + floor, numel))
            else:  # sqrt(row_i / total) * sqrt(col_j) estimates element (i, j)'s root mean square
                row, col = smoothed[offset:offset + rows], smoothed[offset + rows:offset + rows + cols]
                parts.append(ctx.math.outer(ctx.math.sqrt(row / total), ctx.math.sqrt(col)) + floor)
            offset += count
        return ctx.math.concat(parts)

    def start_compressed(self, ctx: TrainingContext, step: Any, name: str, codec: str, memory: Any = None) -> Any:
        """Starts the compressed all-reduce of ``step`` with all of this class's work inside the
        operation (statistics, their average, ``update``, ``scale``, the codec, ``unscale``), so
        the statistics need no all-reduce and no wait of their own before the step can leave:
        the handle's result is the averaged step in its own units. None where the context cannot
        (not host tensors, or a binding without it): then the caller composes the same steps."""
        if not isinstance(ctx.comm, ScaledCompression) or self._host_views(ctx, step, memory) is None:
            return None
        # computed here, on this rank's own time: inside the operation every rank would wait
        # for the slowest to arrive first
        statistics = ctx.math.host_view(self.statistics(ctx, step))
        smoothed = ctx.math.host_view(self._smoothed)
        buffers = direct.StepScaleBuffers(self._shapes, self.floor, self.decay, direct.Buffer.of(smoothed),
                                          direct.Buffer.of(statistics), owners=(statistics, smoothed))
        return ctx.comm.scaled_compressed_allreduce_async(step, name, codec, memory, buffers)

    def unscale(self, ctx: TrainingContext, averaged: Any) -> Any:
        """The average of the scaled steps in the step's own units (on host tensors in place)."""
        host, smoothed = ctx.math.host_view(averaged), ctx.math.host_view(self._smoothed)
        if host is None or smoothed is None:
            return averaged * self._scale_of(ctx, self._smoothed)
        _core.check(_core.lib().relax_scale_multiply(*_buffer(smoothed), _address(self._shapes), len(self.factors),
                                                     self.floor, *_buffer(host)))
        return averaged

    def _host_views(self, ctx: TrainingContext, step: Any, memory: Any) -> tuple | None:
        """Host arrays of ``step`` and the memory's residuals (None for no memory), or None if any
        of them, or this scale's state, is not a host tensor."""
        arrays = [step, self._smoothed, self._previous] + ([memory.worker, memory.owner] if memory is not None else [])
        views = [ctx.math.host_view(array) for array in arrays]
        if any(view is None for view in views):
            return None
        return (views[0], *(views[3:] if memory is not None else (None, None)))

    def value(self, ctx: TrainingContext) -> Any:
        """Every element's scale in use (after ``scale``), computed from the smoothed statistics."""
        return self._scale_of(ctx, self._smoothed)

    def state_dict(self, ctx: TrainingContext) -> dict:
        """What a checkpoint keeps: the smoothed statistics (every element's scale follows from them)."""
        return {"smoothed": ctx.math.clone(self._smoothed)}

    def load_state_dict(self, ctx: TrainingContext, state: dict) -> None:
        """Restores ``state_dict``'s values (a checkpoint's per-element ``value``, which older
        versions kept, follows from the statistics and is not needed)."""
        ctx.math.copy_(self._smoothed, state["smoothed"])


def _address(array: np.ndarray | None) -> ctypes.c_void_p:
    """The data pointer of a host array for the core (NULL for None)."""
    return ctypes.c_void_p(array.ctypes.data if array is not None else None)


def _buffer(array: np.ndarray | None) -> tuple[ctypes.c_void_p, int]:
    """A host array as the core's step-scale functions take each buffer: its data pointer and its
    capacity in bytes, which the core checks against what it reads or writes (NULL, 0 for None)."""
    return _address(array), (array.nbytes if array is not None else 0)
