"""Helpers built on the collectives: broadcasting model and optimizer state, and moving
arbitrary picklable Python objects between ranks."""

from __future__ import annotations

import io
from collections.abc import Iterable

import cloudpickle
import torch

from relaxlib import basics
from relaxlib.process_sets import global_process_set
from relaxlib_torch import mpi_ops


def broadcast_parameters(params, root_rank: int, prefix: str = "Parameter.", process_set=global_process_set) -> None:
    """Overwrites parameters (a ``state_dict()``, ``named_parameters()`` or list of tensors) in
    place with ``root_rank``'s values. Use it after init so every rank starts from one model."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, Iterable):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params).__name__} (expected a state_dict, "
                         "named_parameters() or a list of tensors)")
    handles = []
    for index, (name, tensor) in enumerate(items):
        if tensor is None:
            continue
        if not torch.is_tensor(tensor):
            raise TypeError(f"broadcast_parameters: entry {name or index} is a {type(tensor).__name__}, not a tensor")
        label = f"{prefix}{name if name is not None else index}"
        handles.append(mpi_ops.broadcast_async_(tensor, root_rank, name=label, process_set=process_set))
    for handle in handles:
        mpi_ops.synchronize(handle)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int, model=None,
                              process_set=global_process_set) -> None:
    """Makes every rank's optimizer state (per-parameter state and param_group options such as
    lr and momentum) equal to ``root_rank``'s (a world rank). A relaxed algorithm's own state
    (``state_dict()["relaxlib"]``: error-feedback residuals of this rank's share, ...) belongs to
    each rank and is kept. ``model`` is accepted for Horovod compatibility and not needed."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _initialize_state(optimizer)
    state = optimizer.state_dict()
    own_algorithm_state = state.pop("relaxlib", None)
    state = broadcast_object(state if basics.rank() == root_rank else None, root_rank, name="optimizer_state",
                             process_set=process_set)
    if own_algorithm_state is not None:
        state = dict(state, relaxlib=own_algorithm_state)
    optimizer.load_state_dict(state)


def _initialize_state(optimizer: torch.optim.Optimizer) -> None:
    """As Horovod does before broadcasting an optimizer that has no state yet: one local step with
    zero gradients, so every rank has the state entries (momentum buffers, step counts) that the
    root's state will fill. The zero gradients stay in place, as in Horovod."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    if hasattr(optimizer, "_relax_telemetry"):  # a DistributedOptimizer: step the wrapped class, locally
        super(type(optimizer), optimizer).step()
    else:
        optimizer.step()


def _to_bytes(obj) -> torch.Tensor:
    buffer = io.BytesIO()
    cloudpickle.dump(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _from_bytes(data: torch.Tensor):
    return cloudpickle.loads(data.numpy().tobytes())


def broadcast_object(obj=None, root_rank: int = 0, name: str | None = None, process_set=global_process_set):
    """Returns ``root_rank``'s ``obj`` (any picklable object) on every rank."""
    # Named by call order when unnamed: the object's type may differ between root and receivers.
    label = mpi_ops._auto_name("broadcast_object", f"broadcast_object.{name}" if name else None, process_set)
    if basics.rank() == root_rank:
        payload = _to_bytes(obj)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload = None
        length = torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, name=label + ".size", process_set=process_set)
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    mpi_ops.broadcast_(payload, root_rank, name=label + ".data", process_set=process_set)
    return obj if basics.rank() == root_rank else _from_bytes(payload)


def allgather_object(obj, name: str | None = None, process_set=global_process_set) -> list:
    """Returns the list of every rank's ``obj``, in rank order."""
    label = mpi_ops._auto_name("allgather_object", f"allgather_object.{name}" if name else None, process_set)
    payload = _to_bytes(obj)
    sizes = mpi_ops.allgather(torch.tensor([payload.numel()], dtype=torch.int64), name=label + ".sizes",
                              process_set=process_set)
    gathered = mpi_ops.allgather(payload, name=label + ".data", process_set=process_set)
    objects, offset = [], 0
    for length in sizes.tolist():
        objects.append(_from_bytes(gathered[offset: offset + length]))
        offset += length
    return objects
