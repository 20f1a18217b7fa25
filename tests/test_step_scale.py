"""The step scale's host passes in the core (relax_scale_statistics, relax_scale_apply) against
the same scale composed from torch operations, bit for bit, on a bucket whose parameters' steps
differ by 1000x, with error-feedback residuals of which this rank owns a middle chunk."""

import ctypes

import numpy as np
import pytest
import torch

from relaxlib import _core
from relaxlib.algorithms.step_scale import FactoredScale
from relaxlib.errors import InvalidArgumentError
from relaxlib_torch.compressed import ErrorFeedback
from relaxlib_torch.tensor_math import TorchMath

SHAPES = [(16, 1, 3, 3), (16,), (10, 16), (1, 32), (10,), (7, 1)]
MAGNITUDES = [1e-3, 1.0, 3e-2, 0.5, 1e-1, 2.0]  # one bucket, steps 2000x apart


class HostContext:
    """A context of torch's tensor math only (what the step scale uses), on CPU tensors."""

    math = TorchMath()
    comm = None


class ComposedMath(TorchMath):
    """Torch's math without host views: the scale composes torch operations (as on a GPU or in
    a traced step)."""

    def host_view(self, tensor):
        return None


class ComposedContext(HostContext):
    """The same, composing torch operations."""

    math = ComposedMath()


class ThreeRanks:
    """Rank 1 of 3: the error-feedback memory's owner chunk is the bucket's middle third."""

    @staticmethod
    def size() -> int:
        return 3

    @staticmethod
    def rank() -> int:
        return 1


def bucket_step(generator: torch.Generator) -> torch.Tensor:
    parts = [torch.randn(torch.Size(shape).numel(), generator=generator) * magnitude
             for shape, magnitude in zip(SHAPES, MAGNITUDES)]
    parts[0][:20] = 0.0  # a row that barely moves: the floor keeps its scale positive
    return torch.cat(parts)


@pytest.mark.parametrize("floor", [0.1, 1e-3])
def test_the_core_passes_give_the_composed_scale_bit_for_bit(floor):
    generator = torch.Generator().manual_seed(0)
    runs = {}
    for label, ctx in (("host", HostContext()), ("composed", ComposedContext())):
        generator.manual_seed(0)
        scale = FactoredScale(ctx, SHAPES, floor)
        memory = ErrorFeedback(scale.numel, process_set=ThreeRanks())
        assert 0 < memory.owner_offset and memory.owner_offset + memory.owner.numel() < scale.numel
        seen = []
        for _ in range(4):
            step = bucket_step(generator)
            statistics = scale.statistics(ctx, step)
            scale.update(ctx, statistics)
            scaled = scale.scale(ctx, step.clone(), memory)
            averaged = scale.unscale(ctx, scaled.clone())
            seen.append([statistics.clone(), scaled.clone(), averaged.clone(), scale.value(ctx).clone(),
                         memory.worker.clone(), memory.owner.clone()])
            # what compression would leave behind: residuals of the scaled step's size
            memory.worker.copy_(scaled * 0.25)
            memory.owner.copy_(scaled[memory.owner_offset:memory.owner_offset + memory.owner.numel()] * -0.5)
        runs[label] = seen
    for host_step, composed_step in zip(runs["host"], runs["composed"]):
        for host, composed in zip(host_step, composed_step):
            assert torch.isfinite(host).all()
            assert torch.equal(host, composed)


def test_a_bad_shape_is_refused_naming_the_parameter():
    shapes = np.array([2, 3, 0, 4], np.int64)  # the second parameter has no rows
    step, out = np.zeros(10, np.float32), np.zeros(16, np.float32)
    with pytest.raises(InvalidArgumentError, match="parameter 1 has shape 0 x 4"):
        _core.check(_core.lib().relax_scale_statistics(ctypes.c_void_p(step.ctypes.data), step.nbytes,
                                                       ctypes.c_void_p(shapes.ctypes.data), 2,
                                                       ctypes.c_void_p(out.ctypes.data), out.nbytes))


def test_a_short_buffer_is_refused_by_the_buffer_rule():
    """The core checks each buffer's capacity (relax.h, "Buffer capacities"): statistics of a 2 x 3
    and a 1 x 4 parameter take 6 + 1 floats, 7 of them are 28 bytes, not 24."""
    shapes = np.array([2, 3, 1, 4], np.int64)
    step, out = np.zeros(10, np.float32), np.zeros(6, np.float32)
    with pytest.raises(InvalidArgumentError, match="statistics .out. holds 24 bytes but the operation needs 28"):
        _core.check(_core.lib().relax_scale_statistics(ctypes.c_void_p(step.ctypes.data), step.nbytes,
                                                       ctypes.c_void_p(shapes.ctypes.data), 2,
                                                       ctypes.c_void_p(out.ctypes.data), out.nbytes))


def test_a_checkpoint_with_the_per_element_scale_of_older_versions_still_loads():
    """Older versions kept each element's scale (``value``) beside the statistics; it follows from
    the statistics, so such a checkpoint restores the same scale."""
    ctx = HostContext()
    saved = FactoredScale(ctx, SHAPES, 0.1)
    saved.update(ctx, saved.statistics(ctx, bucket_step(torch.Generator().manual_seed(1))))
    state = {**saved.state_dict(ctx), "value": saved.value(ctx).clone()}
    assert set(saved.state_dict(ctx)) == {"smoothed"}
    restored = FactoredScale(ctx, SHAPES, 0.1)
    restored.load_state_dict(ctx, state)
    assert torch.equal(restored.value(ctx), state["value"])
