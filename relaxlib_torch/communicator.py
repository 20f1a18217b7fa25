"""The ``Communicator`` of torch contexts: relaxlib's torch collectives on flat tensors, within
one process set (``group=`` arguments name another, e.g. one of ``node_groups``)."""

from __future__ import annotations

import torch

from relaxlib import direct, process_sets
from relaxlib.algorithms.context import Communicator
from relaxlib.algorithms.step_scale import ScaledCompression
from relaxlib_torch import compressed, functions, mpi_ops, relaxed


class TorchCommunicator(Communicator, ScaledCompression):
    """Collectives over ``process_set``; handles are the engine's (``mpi_ops``) or direct ones."""

    def __init__(self, process_set) -> None:
        self._process_set = process_set
        self._nodes = None

    def allreduce_async(self, tensor: torch.Tensor, name: str, average: bool = True, group=None):
        return mpi_ops.allreduce_async(tensor, name=name, op=mpi_ops.Average if average else mpi_ops.Sum,
                                       process_set=group or self._process_set)

    def reduce_scatter_async(self, flat: torch.Tensor, name: str):
        return mpi_ops.reducescatter_async(flat, name=name, op=mpi_ops.Average, process_set=self._process_set)

    def reduce_scatter_parts_async(self, parts: list[torch.Tensor], name: str):
        return mpi_ops.reducescatter_concatenated_async(parts, name=name, op=mpi_ops.Average,
                                                        process_set=self._process_set)

    def allgather_async(self, shard: torch.Tensor, name: str):
        return mpi_ops.allgather_async(shard, name=name, process_set=self._process_set)

    def broadcast_async(self, tensor: torch.Tensor, root: int, name: str, group=None):
        return mpi_ops.broadcast_async(tensor, root, name=name, process_set=group or self._process_set)

    def wait(self, handle):
        if isinstance(handle, direct.DirectHandle):
            return handle.wait()
        return mpi_ops.synchronize(handle)

    def compressed_allreduce_async(self, flat: torch.Tensor, name: str, codec: str, state=None, average: bool = True,
                                   group=None, prescale: float = 1.0):
        return compressed.compressed_allreduce_async(flat, codec=codec, state=state, name=name,
                                                     op=mpi_ops.Average if average else mpi_ops.Sum,
                                                     process_set=group or self._process_set, prescale_factor=prescale)

    def compressed_allreduce_parts_async(self, parts: list[torch.Tensor], name: str, codec: str, state=None,
                                         prescale: float = 1.0):
        return compressed.compressed_allreduce_concatenated_async(parts, codec=codec, state=state, name=name,
                                                                  process_set=self._process_set,
                                                                  prescale_factor=prescale)

    def scaled_compressed_allreduce_async(self, flat: torch.Tensor, name: str, codec: str, state,
                                          step_scale: direct.StepScaleBuffers):
        src = flat.detach().reshape(-1)
        if src.device.type != "cpu" or src.dtype != torch.float32 or not src.is_contiguous():
            return None
        out = torch.empty_like(src)
        worker = direct.Buffer.of(state.worker.numpy()) if state is not None else None
        owner = direct.Buffer.of(state.owner.numpy()) if state is not None else None
        return direct.flat_compressed_allreduce_async(
            direct.Buffer.of(src.numpy()), direct.Buffer.of(out.numpy()), name, codec, worker, owner,
            keepalive=(src, out, state), result=out, process_set=self._process_set.process_set_id,
            step_scale=step_scale)

    def error_feedback(self, numel: int, group=None):
        return compressed.ErrorFeedback(numel, process_set=group or self._process_set)

    def neighbor_average_async(self, flat: torch.Tensor, name: str, peers: list[int], weights: list[float],
                               self_weight: float, codec: str | None = None, estimates=None,
                               consensus_step: float = 1.0, out=None) -> direct.DirectHandle:
        return relaxed.neighbor_average_async(flat, peers, weights, self_weight, name, codec=codec,
                                              estimates=estimates, consensus_step=consensus_step, out=out)

    def group_average_async(self, flat: torch.Tensor, name: str, members: list[int], weights: list[float],
                            out=None) -> direct.DirectHandle:
        return relaxed.partial_allreduce_async(flat, members, name, weights, out=out)

    def node_groups(self):
        if self._nodes is None:
            self._nodes = process_sets.node_process_sets(functions.allgather_object)
        return self._nodes

    def allreduce_scalar(self, value: float, name: str) -> float:
        total = mpi_ops.allreduce(torch.tensor([value], dtype=torch.float64), op=mpi_ops.Sum, name=name,
                                  process_set=self._process_set)
        return float(total.item())

    def broadcast_object(self, obj, root: int = 0):
        return functions.broadcast_object(obj, root_rank=self._process_set.ranks[root] if self._process_set.ranks
                                          else root, process_set=self._process_set)
