"""Grouped allgather and reducescatter with Horovod's API: several tensors as one atomic
operation (one negotiation, every member completes together)."""

from __future__ import annotations

import torch

from relaxlib import basics
from relaxlib.errors import InvalidArgumentError, RelaxError
from relaxlib.process_sets import global_process_set
from relaxlib_torch.compression import Compression
from relaxlib_torch.mpi_ops import (
    Average,
    _auto_name,
    _contiguous,
    _ops,
    _process_set_id,
    _register,
    _resolve_op,
    _submit,
    _wait_core,
    allgather,
    grouped_allreduce,
    synchronize,
)


def _grouped_outputs(cores: list[int]) -> list[torch.Tensor]:
    errors, outputs = [], []
    for h in cores:
        try:
            _wait_core(h)
            outputs.append(_ops.output(h))
            _ops.release(h)
        except RelaxError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
    return outputs


def grouped_allgather_async(tensors, name=None, process_set=global_process_set) -> int:
    """Starts one atomic allgather of several tensors; ``synchronize`` returns a tuple."""
    if not tensors:
        raise ValueError("grouped_allgather needs at least one tensor")
    sources = [_contiguous(t) for t in tensors]
    cores = _submit(_ops.grouped_allgather_async, sources, _auto_name("grouped_allgather", name, process_set),
                    _process_set_id(process_set))
    return _register(list(cores), lambda handles: tuple(_grouped_outputs(handles)), [sources])


class _GroupedAllgatherFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return synchronize(grouped_allgather_async(list(tensors), name, process_set))

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce([g.contiguous() for g in grads], op=basics.gather_gradient_op(),
                                    process_set=ctx.process_set)
        dims = allgather(torch.tensor([ctx.dims], dtype=torch.int64), process_set=ctx.process_set)
        offsets = dims[: ctx.process_set.rank()].sum(dim=0) if ctx.process_set.rank() > 0 else [0] * len(ctx.dims)
        return (None, None, *[g.narrow(0, int(o), d) for g, o, d in zip(reduced, offsets, ctx.dims)])


def grouped_allgather(tensors, name=None, process_set=global_process_set) -> tuple:
    """Allgathers several tensors as one atomic operation; differentiable. Returns a tuple."""
    for t in tensors:
        if t.dim() == 0:
            raise InvalidArgumentError("allgather needs tensors with at least one dimension, got a scalar")
    return _GroupedAllgatherFunction.apply(name, process_set, *tensors)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0) -> int:
    """Starts one atomic reducescatter of several tensors; ``synchronize`` returns a list."""
    op = _resolve_op(op, None, None)
    if not tensors:
        raise ValueError("grouped_reducescatter needs at least one tensor")
    sources = [_contiguous(t) for t in tensors]
    label = _auto_name("grouped_reducescatter", name, process_set)
    cores = _submit(_ops.grouped_reducescatter_async, sources, label, op,
                    float(prescale_factor), float(postscale_factor), _process_set_id(process_set))
    return _register(list(cores), _grouped_outputs, [sources])


class _GroupedReducescatterFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.process_set = op, process_set
        ctx.scale = prescale_factor * postscale_factor
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set, prescale_factor,
                                                             postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        gathered = grouped_allgather([g.contiguous() for g in grads], process_set=ctx.process_set)
        scale = ctx.scale * basics.scatter_gradient_factor(ctx.op, ctx.process_set.size())
        return (None, None, None, None, None, *[g * scale if scale != 1 else g for g in gathered])


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0) -> list[torch.Tensor]:
    """Reducescatters several tensors as one atomic operation; differentiable. Returns a list."""
    compressed = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatterFunction.apply(name, op, process_set, prescale_factor, postscale_factor,
                                               *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, compressed)]
