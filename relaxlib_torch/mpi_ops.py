"""Collectives on torch tensors with Horovod's API (``horovod.torch.mpi_ops`` 0.28).

Every operation is submitted to the core engine by name and returns a handle; ``synchronize``
waits for it. The synchronous and autograd-aware variants are thin wrappers. Inputs may be
non-contiguous (they are copied); in-place variants write back into the caller's tensor.
"""

from __future__ import annotations

import torch

from relaxlib import basics
from relaxlib.basics import Adasum, Average, Max, Min, Product, Sum  # noqa: F401 - re-exported
from relaxlib.errors import InvalidArgumentError, RelaxError
from relaxlib.process_sets import ProcessSet, global_process_set, process_set_id
from relaxlib_torch import _extension
from relaxlib_torch._handles import DerivedHandle, poll, synchronize
from relaxlib_torch._handles import engine_output as _engine_output
from relaxlib_torch._handles import ops as _ops
from relaxlib_torch._handles import raise_submit_error as _raise_submit_error
from relaxlib_torch._handles import register as _register
from relaxlib_torch._handles import submit as _submit
from relaxlib_torch._handles import wait_core as _wait_core
from relaxlib_torch.compression import Compression

_extension.load()
_direct = _extension.direct()  # the synchronous collectives, without the dispatcher
_auto_name = basics.auto_name

# Reductions a call may name without the general argument handling (None: the default, Average).
_PLAIN_OPS = {None: Average, **{op: op for op in basics.REDUCTIONS}}


# The synchronous all-reduce binding: returns NotImplemented, doing nothing, for a non-contiguous
# tensor, which the general path copies.
_allreduce_sync_direct = _direct.allreduce_sync


def _plain_op(name, average, op, process_set) -> int | None:
    """The reduction of the common call (named, of the global set, no deprecated ``average``), or
    None when the call needs the general path. Skipping that path saves about 100 ns of a small
    synchronous all-reduce's 1.6 us."""
    if not name or average is not None or process_set is not global_process_set:
        return None
    try:
        return _PLAIN_OPS[op]
    except (KeyError, TypeError):
        return None


def _resolve_op(op, average, tensor: torch.Tensor | None) -> int:
    return basics.resolve_op(op, average)


def _process_set_id(process_set: ProcessSet) -> int:
    return process_set_id(process_set)


def _contiguous(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach() if tensor.is_contiguous() else tensor.detach().contiguous()


# ---- allreduce -------------------------------------------------------------------------------

def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set) -> int:
    source = _contiguous(tensor)
    target = output.detach() if output.is_contiguous() else torch.empty_like(source)
    core = _submit(_ops.allreduce_async, source, target, _auto_name("allreduce", name, process_set), op,
                   float(prescale_factor), float(postscale_factor), _process_set_id(process_set))

    def finish(handles):
        _wait_core(handles[0])
        _ops.release(handles[0])
        if target is not output and target.data_ptr() != output.data_ptr():
            output.detach().copy_(target)
        return output

    return _register([core], finish, [source, target])


def _needs_autograd(tensor: torch.Tensor) -> bool:
    """Whether a result must be recorded for backward (else the autograd.Function, about 4 us per
    call, is skipped)."""
    return tensor.requires_grad and torch.is_grad_enabled()


def _allreduce_sync(source, output, name, op, prescale_factor, postscale_factor, process_set) -> None:
    # One call submits, waits and releases (no handle bookkeeping in Python); while the engine is
    # idle the calling thread runs the collective itself.
    label = _auto_name("allreduce", name, process_set)
    _submit(_allreduce_sync_direct, source, output, label, op, float(prescale_factor),
            float(postscale_factor), _process_set_id(process_set))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set) -> int:
    """Starts averaging (or summing, ...) ``tensor`` over all ranks; returns a handle.

    The input is not modified; ``synchronize(handle)`` returns a new tensor with the result.
    The operation is keyed by ``name``: every rank must submit the same name with the same
    shape and dtype (unnamed operations are named by call order).
    """
    op = _resolve_op(op, average, tensor)
    return _allreduce_async(tensor, torch.empty_like(tensor, memory_format=torch.contiguous_format), name, op,
                            prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set) -> int:
    """In-place variant of :func:`allreduce_async`: ``tensor`` receives the result."""
    op = _resolve_op(op, average, tensor)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set)


def _allreduce_new(tensor, name, op, prescale_factor, postscale_factor, process_set) -> torch.Tensor:
    source = _contiguous(tensor)
    output = torch.empty_like(source)
    _allreduce_sync(source, output, name, op, prescale_factor, postscale_factor, process_set)
    return output


class _AllreduceFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale_factor, postscale_factor, process_set
        return _allreduce_new(tensor, name, op, prescale_factor, postscale_factor, process_set)

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale, postscale_factor=ctx.postscale,
                         process_set=ctx.process_set)
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set) -> torch.Tensor:
    """Averages (or sums, ...) ``tensor`` over all ranks and returns the result; differentiable."""
    plain = _plain_op(name, average, op, process_set)
    if plain is not None and compression is Compression.none and not _needs_autograd(tensor):
        output = torch.empty_like(tensor)
        try:
            if _allreduce_sync_direct(tensor, output, name, plain, prescale_factor, postscale_factor, 0) is None:
                return output
        except RuntimeError as exc:
            _raise_submit_error(exc)
    op = _resolve_op(op, average, tensor)
    compressed, ctx = compression.compress(tensor)
    run = _AllreduceFunction.apply if _needs_autograd(compressed) else _allreduce_new
    reduced = run(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set) -> torch.Tensor:
    """In-place allreduce; returns ``tensor``."""
    if name and average is None and process_set is global_process_set:  # _plain_op() written out (40 ns)
        try:
            plain = _PLAIN_OPS[op]
        except (KeyError, TypeError):
            plain = None
        if plain is not None:
            try:
                if _allreduce_sync_direct(tensor, tensor, name, plain, prescale_factor, postscale_factor, 0) is None:
                    return tensor
            except RuntimeError as exc:
                _raise_submit_error(exc)
    if not tensor.is_contiguous():
        return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))
    # The core writes the memory directly, outside autograd, so the tensor needs no detach().
    _allreduce_sync(tensor, tensor, name, _resolve_op(op, average, tensor), prescale_factor, postscale_factor,
                    process_set)
    return tensor


# ---- grouped allreduce -----------------------------------------------------------------------

def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set) -> int:
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    sources = [_contiguous(t) for t in tensors]
    targets = [o.detach() if o.is_contiguous() else torch.empty_like(s) for o, s in zip(outputs, sources)]
    label = _auto_name("grouped_allreduce", name, process_set)
    cores = _submit(_ops.grouped_allreduce_async, sources, targets, label, op,
                    float(prescale_factor), float(postscale_factor), _process_set_id(process_set))

    def finish(handles):
        errors = []
        for h in handles:
            try:
                _wait_core(h)
                _ops.release(h)
            except RelaxError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        for out, target in zip(outputs, targets):
            if target.data_ptr() != out.data_ptr():
                out.detach().copy_(target)
        return list(outputs)

    return _register(list(cores), finish, [sources, targets])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set) -> int:
    """Starts one atomic, fused allreduce of several tensors; ``synchronize`` returns a list."""
    op = _resolve_op(op, average, None)
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set) -> int:
    """In-place variant of :func:`grouped_allreduce_async`."""
    op = _resolve_op(op, average, None)
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set)


class _GroupedAllreduceFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale_factor, postscale_factor, process_set
        return tuple(synchronize(grouped_allreduce_async(list(tensors), None, name, op, prescale_factor,
                                                         postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=ctx.op, prescale_factor=ctx.prescale,
                                  postscale_factor=ctx.postscale, process_set=ctx.process_set)
        return (None, None, None, None, None, *grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set) -> list[torch.Tensor]:
    """Allreduces a list of tensors as one atomic, fused operation; differentiable."""
    op = _resolve_op(op, average, None)
    compressed = [compression.compress(t) for t in tensors]
    reduced = _GroupedAllreduceFunction.apply(name, op, prescale_factor, postscale_factor, process_set,
                                              *[c for c, _ in compressed])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set) -> list[torch.Tensor]:
    """In-place grouped allreduce; returns the tensors."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# ---- allgather -------------------------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set) -> int:
    """Starts concatenating ``tensor`` from every rank along dimension 0 (sizes may differ)."""
    source = _contiguous(tensor)
    label = _auto_name("allgather", name, process_set)
    core = _submit(_ops.allgather_async, source, label, _process_set_id(process_set))
    return _register([core], _engine_output, [source])


def _allgather_new(tensor, name, process_set) -> torch.Tensor:
    return _submit(_direct.allgather_sync, _contiguous(tensor), _auto_name("allgather", name, process_set),
                   _process_set_id(process_set))


class _AllgatherFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim0 = tensor.shape[0]
        ctx.process_set = process_set
        return _allgather_new(tensor, name, process_set)

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=basics.gather_gradient_op(), process_set=ctx.process_set)
        dims = allgather(torch.tensor([ctx.dim0], dtype=torch.int64), process_set=ctx.process_set)
        offset = int(dims[: ctx.process_set.rank()].sum())
        return grad_reduced.narrow(0, offset, ctx.dim0), None, None


def allgather(tensor, name=None, process_set=global_process_set) -> torch.Tensor:
    """Concatenates ``tensor`` from every rank along dimension 0; differentiable."""
    if tensor.dim() == 0:
        raise InvalidArgumentError("allgather needs a tensor with at least one dimension, got a scalar")
    run = _AllgatherFunction.apply if _needs_autograd(tensor) else _allgather_new
    return run(tensor, name, process_set)


# ---- broadcast -------------------------------------------------------------------------------

def _broadcast_async(tensor, output, root_rank, name, process_set) -> int:
    source = _contiguous(tensor)
    target = output.detach() if output.is_contiguous() else torch.empty_like(source)
    core = _submit(_ops.broadcast_async, source, target, int(root_rank), _auto_name("broadcast", name, process_set),
                   _process_set_id(process_set))

    def finish(handles):
        _wait_core(handles[0])
        _ops.release(handles[0])
        if target.data_ptr() != output.data_ptr():
            output.detach().copy_(target)
        return output

    return _register([core], finish, [source, target])


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """Starts sending ``tensor`` from ``root_rank`` to every rank; the input is not modified."""
    return _broadcast_async(tensor, torch.empty_like(tensor, memory_format=torch.contiguous_format), root_rank,
                            name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """In-place variant of :func:`broadcast_async`."""
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


class _BroadcastFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=basics.gather_gradient_op(), process_set=ctx.process_set)
        if basics.rank() != ctx.root_rank:  # roots are world ranks
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank; differentiable."""
    return _BroadcastFunction.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set) -> torch.Tensor:
    """In-place broadcast; returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- reducescatter ---------------------------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0) -> int:
    """Starts reducing ``tensor`` over ranks and scattering dim-0 blocks: rank i gets block i
    (blocks differ by at most one row, the first ranks taking the extra rows)."""
    op = _resolve_op(op, None, tensor)
    source = _contiguous(tensor)
    label = _auto_name("reducescatter", name, process_set)
    core = _submit(_ops.reducescatter_async, source, label, op, float(prescale_factor),
                   float(postscale_factor), _process_set_id(process_set))
    return _register([core], _engine_output, [source])


def reducescatter_concatenated_async(tensors, name=None, op=Average, process_set=global_process_set,
                                     prescale_factor=1.0, postscale_factor=1.0) -> int:
    """Starts reducing the concatenation of ``tensors`` (flattened, one dtype) over ranks and
    scattering it as a flat tensor: rank i gets block i (blocks differ by at most one element,
    the first ranks taking the extra ones). The same result as ``reducescatter_async(
    torch.cat([t.reshape(-1) for t in tensors]))``, but each tensor is read where it lies (no
    concatenated copy); they must stay unchanged until ``synchronize`` returns."""
    op = _resolve_op(op, None, tensors[0] if tensors else None)
    sources = [_contiguous(t) for t in tensors]
    label = _auto_name("reducescatter", name, process_set)
    core = _submit(_ops.reducescatter_concatenated_async, sources, label, op, float(prescale_factor),
                   float(postscale_factor), _process_set_id(process_set))
    return _register([core], _engine_output, sources)


def _reducescatter_new(tensor, name, op, process_set, prescale_factor, postscale_factor) -> torch.Tensor:
    return _submit(_direct.reducescatter_sync, _contiguous(tensor), _auto_name("reducescatter", name, process_set),
                   _resolve_op(op, None, tensor), float(prescale_factor), float(postscale_factor),
                   _process_set_id(process_set))


class _ReducescatterFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op, ctx.process_set = op, process_set
        ctx.scale = prescale_factor * postscale_factor
        return _reducescatter_new(tensor, name, op, process_set, prescale_factor, postscale_factor)

    @staticmethod
    def backward(ctx, grad_output):
        grad = allgather(grad_output.contiguous(), process_set=ctx.process_set)
        scale = ctx.scale * basics.scatter_gradient_factor(ctx.op, ctx.process_set.size())
        return grad * scale if scale != 1 else grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0) -> torch.Tensor:
    """Reduces ``tensor`` over ranks and returns this rank's dim-0 block; differentiable."""
    compressed, ctx = compression.compress(tensor)
    run = _ReducescatterFunction.apply if _needs_autograd(compressed) else _reducescatter_new
    out = run(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


# ---- sparse allreduce ------------------------------------------------------------------------

class _SparseHandle(DerivedHandle):
    """Handle of a sparse allreduce: call it (or pass it to ``synchronize``) for the result."""

    def __init__(self, values: int, indices: int, template: torch.Tensor, op: int, process_set) -> None:
        self._values, self._indices, self._template = values, indices, template
        self._op, self._process_set = op, process_set

    def __call__(self) -> torch.Tensor:
        values = synchronize(self._values)
        indices = synchronize(self._indices)
        if self._op == Average:
            values = values / self._process_set.size()
        return torch.sparse_coo_tensor(indices.t(), values, self._template.size(), check_invariants=False).coalesce()

    def poll(self) -> bool:
        return poll(self._values) and poll(self._indices)


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set) -> _SparseHandle:
    """Starts summing (op=Sum) or averaging (op=Average) a sparse COO tensor over ranks by
    allgathering its indices and values; the result is coalesced."""
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async expects a sparse tensor; use allreduce_async for dense ones")
    op = _resolve_op(op, None, tensor)
    if op not in (Average, Sum):
        raise ValueError("sparse allreduce supports op=Average and op=Sum")
    t = tensor.coalesce()
    base = _auto_name("sparse_allreduce", name, process_set)
    values = allgather_async(t._values().contiguous(), name=f"{base}.values", process_set=process_set)
    indices = allgather_async(t._indices().t().contiguous(), name=f"{base}.indices", process_set=process_set)
    return _SparseHandle(values, indices, t, op, process_set)


# ---- alltoall --------------------------------------------------------------------------------

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set) -> int:
    """Starts scattering dim-0 slices of ``tensor`` to every rank (``splits[j]`` rows to rank j;
    equal parts when None) and gathering what every rank sends here."""
    source = _contiguous(tensor)
    if torch.is_tensor(splits) and (splits.dtype.is_floating_point or splits.dtype.is_complex):
        raise ValueError(f"alltoall splits must be integers, got a {splits.dtype} tensor")  # as Horovod
    split_list = [] if splits is None else [int(s) for s in (splits.tolist() if torch.is_tensor(splits) else splits)]
    label = _auto_name("alltoall", name, process_set)
    core = _submit(_ops.alltoall_async, source, split_list, label, _process_set_id(process_set))

    def finish(handles):
        _wait_core(handles[0])
        out = _ops.output(handles[0])
        received = torch.tensor(_ops.received_splits(handles[0]), dtype=torch.int32)
        _ops.release(handles[0])
        return out, received

    return _register([core], finish, [source])


class _AlltoallFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.process_set = received, process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, grad_received):
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Exchanges dim-0 slices between all ranks; differentiable.

    Returns the received tensor, and also the rows received from each rank when ``splits``
    is given (as Horovod does).
    """
    output, received = _AlltoallFunction.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received)


# ---- control ---------------------------------------------------------------------------------

def join(device: int = -1) -> int:
    """Signals that this rank has no more data. Other ranks' allreduces proceed with this rank
    contributing zeros until every rank has joined (their allgathers and broadcasts fail, as in
    Horovod, unless RELAX_JOINED_RANKS=contribute-nothing). Returns the rank that joined last."""
    core = _submit(_ops.join_async)
    _wait_core(core)
    last = _ops.result(core)
    _ops.release(core)
    from relaxlib_torch.functions import allgather_object  # (functions imports this module)
    basics.align_auto_names(allgather_object(basics.auto_name_counts(), name="relax.join.auto_names"))
    return int(last)


def barrier(process_set=global_process_set) -> None:
    """Blocks until every rank of the process set has reached the barrier."""
    core = _submit(_ops.barrier_async, _auto_name("barrier", None, process_set), _process_set_id(process_set))
    _wait_core(core)
    _ops.release(core)


def size_op(process_set=global_process_set) -> int:
    """Number of ranks in ``process_set``."""
    return process_set.size()


def rank_op(process_set=global_process_set) -> int:
    """This rank within ``process_set``."""
    return process_set.rank()


__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum",
    "allgather", "allgather_async", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall",
    "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "join",
    "poll", "reducescatter", "reducescatter_async", "reducescatter_concatenated_async", "sparse_allreduce_async",
    "synchronize", "basics",
]

_GROUPED_OPS = ("grouped_allgather", "grouped_allgather_async", "grouped_reducescatter", "grouped_reducescatter_async")


def __getattr__(name: str):
    """Horovod's ``mpi_ops`` also holds the grouped allgather/reducescatter; here they live in
    ``grouped_ops`` (which imports this module), so they are looked up on first use."""
    if name in _GROUPED_OPS:
        from relaxlib_torch import grouped_ops

        return getattr(grouped_ops, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
