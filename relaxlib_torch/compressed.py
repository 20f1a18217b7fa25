"""Compressed all-reduce on torch tensors, with error feedback as a separate, checkpointable state."""

from __future__ import annotations

import torch

from relaxlib.compression import chunk_count, chunk_offset, codec_id, saved_owner_residual_applies
from relaxlib.process_sets import global_process_set
from relaxlib_torch import mpi_ops


class ErrorFeedback:
    """Error-feedback memory of one compressed all-reduce stream (one tensor or bucket):
    ``worker`` (the full tensor's residual of this rank's compression) and ``owner`` (the residual
    of re-compressing the chunk this rank reduces: the tensor's elements from ``owner_offset``;
    it stays zero with two ranks, which have no owner stage). Keep one per tensor and reuse it
    every step; save it with ``state_dict()`` to resume a run exactly."""

    def __init__(self, numel: int, process_set=global_process_set) -> None:
        self.numel = numel
        self.worker = torch.zeros(numel, dtype=torch.float32)
        self.owner = torch.zeros(chunk_count(numel, process_set.size(), process_set.rank()), dtype=torch.float32)
        self.owner_offset = chunk_offset(numel, process_set.size(), process_set.rank())
        self.ranks = process_set.size()

    def rescale(self, factor: torch.Tensor) -> None:
        """Multiplies the residuals element by element by ``factor`` (the tensor's size): what
        keeps them in the input's units when the input's per-element scale changes."""
        self.worker.mul_(factor)
        self.owner.mul_(factor[self.owner_offset:self.owner_offset + self.owner.numel()])

    def reset(self) -> None:
        """Forgets the accumulated residuals."""
        self.worker.zero_()
        self.owner.zero_()

    def state_dict(self) -> dict:
        """The residuals (copies), with the layout of the owner's chunk."""
        return {"worker": self.worker.clone(), "owner": self.owner.clone(), "ranks": self.ranks,
                "owner_offset": self.owner_offset}

    def load_state_dict(self, state: dict) -> None:
        """Restores residuals saved by ``state_dict`` (of the same tensor size). The owner residual
        restarts at zero where its chunk is laid out otherwise now (another number of ranks, e.g.
        after a lost rank; relaxlib.compression.saved_owner_residual_applies)."""
        if state["worker"].shape != self.worker.shape:
            raise ValueError(f"error-feedback state holds {state['worker'].numel()} elements, this tensor "
                             f"{self.numel}")
        self.worker.copy_(state["worker"])
        if saved_owner_residual_applies(state, self.ranks, self.owner_offset, self.owner.numel()):
            self.owner.copy_(state["owner"])
        else:
            self.owner.zero_()


def _check_arguments(dtypes, numel: int, state: ErrorFeedback | None, op, prescale_factor: float) -> None:
    """The binding's checks of a compressed all-reduce of ``numel`` elements of these dtypes."""
    odd = [dtype for dtype in dtypes if dtype != torch.float32]
    if odd:
        raise ValueError(f"compressed_allreduce supports float32 tensors, got {odd[0]}")
    if op not in (mpi_ops.Average, mpi_ops.Sum):
        raise ValueError("compressed_allreduce supports op=Average and op=Sum")
    if state is not None and state.numel != numel:
        raise ValueError(f"error-feedback state holds {state.numel} elements, the tensor has {numel}")
    if not torch.isfinite(torch.tensor(prescale_factor, dtype=torch.float32)):
        raise ValueError(f"prescale_factor must be finite in float32, not {prescale_factor!r}")


def compressed_allreduce_async(tensor: torch.Tensor, codec: str = "uint8", state: ErrorFeedback | None = None,
                               name: str | None = None, op=mpi_ops.Average, process_set=global_process_set,
                               prescale_factor: float = 1.0) -> int:
    """Starts a compressed all-reduce (compress, scatter chunks to their owners, reduce,
    re-compress, all-gather) of a float32 tensor; ``state`` enables error feedback.
    ``prescale_factor`` multiplies the tensor first (in float32, as ``tensor * prescale_factor``
    would, without that copy), and the residuals are in those units."""
    _check_arguments([tensor.dtype], tensor.numel(), state, op, prescale_factor)
    source = tensor.detach().contiguous().reshape(-1)
    core = mpi_ops._submit(mpi_ops._ops.compressed_allreduce_async, source, None,
                           state.worker if state is not None else None, state.owner if state is not None else None,
                           mpi_ops._auto_name("compressed_allreduce", name, process_set), codec_id(codec), op,
                           mpi_ops._process_set_id(process_set), float(prescale_factor))
    return mpi_ops._register([core], lambda handles: mpi_ops._engine_output(handles).view(tensor.shape),
                             [source, state])


def compressed_allreduce_concatenated_async(tensors, codec: str = "uint8", state: ErrorFeedback | None = None,
                                            name: str | None = None, op=mpi_ops.Average,
                                            process_set=global_process_set, prescale_factor: float = 1.0) -> int:
    """Starts the compressed all-reduce of the concatenation of float32 ``tensors`` (flattened),
    each read where it lies: the same result, bit for bit, as ``compressed_allreduce_async(
    torch.cat([t.reshape(-1) for t in tensors]), ...)`` without that copy, as one flat tensor.
    The tensors must stay unchanged until ``synchronize`` returns."""
    tensors = list(tensors)
    _check_arguments([t.dtype for t in tensors], sum(t.numel() for t in tensors), state, op, prescale_factor)
    sources = [t.detach().contiguous() for t in tensors]
    core = mpi_ops._submit(mpi_ops._ops.compressed_allreduce_concatenated_async, sources,
                           state.worker if state is not None else None, state.owner if state is not None else None,
                           mpi_ops._auto_name("compressed_allreduce", name, process_set), codec_id(codec), op,
                           mpi_ops._process_set_id(process_set), float(prescale_factor))
    return mpi_ops._register([core], mpi_ops._engine_output, [sources, state])


def compressed_allreduce(tensor: torch.Tensor, codec: str = "uint8", state: ErrorFeedback | None = None,
                         name: str | None = None, op=mpi_ops.Average, process_set=global_process_set,
                         prescale_factor: float = 1.0) -> torch.Tensor:
    """Compressed all-reduce of a float32 tensor (see ``compressed_allreduce_async``)."""
    return mpi_ops.synchronize(compressed_allreduce_async(tensor, codec, state, name, op, process_set,
                                                          prescale_factor))
