"""The ``Communicator`` pieces of the TensorFlow contexts, over all ranks (``group=``: a process set).

``HostCommunicator``: Keras's eager steps on flat numpy arrays, through the core's direct lane
(``relaxlib.direct``: host buffers read and written where they lie). ``GraphCommunicator``:
relaxlib's asynchronous TF ops, for the traced Keras step and ``DistributedGradientTape``; a
handle is the op's output and waiting is using it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from relaxlib import direct
from relaxlib.algorithms.context import Communicator
from relaxlib.algorithms.step_scale import ScaledCompression
from relaxlib.compression import chunk_count
from relaxlib.direct import Buffer
from relaxlib.process_sets import global_process_set, node_process_sets, process_set_id
from relaxlib_tf import compressed, functions, mpi_ops, relaxed
from relaxlib_tf.tensor_math import NOT_IN_A_GRAPH


class _KerasCommunicator(Communicator):
    """What both TF communicators share: this rank's place and the node groups, made eagerly."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank = rank
        self._size = size
        self._nodes = None

    def node_groups(self):
        """Made once, eagerly (also while a step is traced: every rank traces it at setup)."""
        if self._nodes is None:
            with tf.init_scope():
                self._nodes = node_process_sets(functions.allgather_object)
        return self._nodes



class HostCommunicator(_KerasCommunicator, ScaledCompression):
    """Collectives on flat numpy arrays; handles are ``direct`` handles whose result is an array."""

    def allreduce_async(self, tensor, name: str, average: bool = True, group=None):
        src = np.ascontiguousarray(tensor).reshape(-1)
        out = np.empty_like(src)
        return direct.flat_allreduce_async(Buffer.of(src), Buffer.of(out), name, average, keepalive=(src, out),
                                           result=out, process_set=process_set_id(group))

    def reduce_scatter_async(self, flat, name: str):
        out = np.empty(chunk_count(flat.size, self._size, self._rank), flat.dtype)
        return direct.flat_reducescatter_async(Buffer.of(flat), Buffer.of(out), name, keepalive=(flat, out),
                                               result=out, average=True)

    def reduce_scatter_parts_async(self, parts: list[np.ndarray], name: str):
        out = np.empty(chunk_count(sum(p.size for p in parts), self._size, self._rank), parts[0].dtype)
        return direct.flat_reducescatter_async([Buffer.of(p) for p in parts], Buffer.of(out), name,
                                               keepalive=(parts, out), result=out, average=True)

    def allgather_async(self, shard, name: str):
        src = np.ascontiguousarray(shard).reshape(-1)

        def allocate(count: int) -> tuple[int, np.ndarray]:
            out = np.empty(count, src.dtype)
            return out.ctypes.data, out

        return direct.flat_allgather_async(Buffer.of(src), name, allocate, keepalive=(src,))

    def broadcast_async(self, tensor, root: int, name: str, group=None):
        src = np.ascontiguousarray(tensor).reshape(-1)
        out = np.empty_like(src)
        return direct.flat_broadcast_async(Buffer.of(src), Buffer.of(out), root, name, keepalive=(src, out), result=out,
                                           process_set=process_set_id(group))

    def wait(self, handle):
        return handle.wait()

    def compressed_allreduce_async(self, flat, name: str, codec: str, state=None, average: bool = True, group=None,
                                   prescale: float = 1.0):
        return compressed.compressed_allreduce_flat_async(flat, codec, state, name, average,
                                                          process_set=group or global_process_set, prescale=prescale)

    def compressed_allreduce_parts_async(self, parts: list[np.ndarray], name: str, codec: str, state=None,
                                         prescale: float = 1.0):
        """None unless the parts are float32 (then the caller's flattened copy is converted)."""
        if parts[0].dtype != np.float32:
            return None
        return compressed.compressed_allreduce_flat_async(parts, codec, state, name, prescale=prescale)

    def scaled_compressed_allreduce_async(self, flat, name: str, codec: str, state, step_scale):
        return compressed.compressed_allreduce_flat_async(flat, codec, state, name, step_scale=step_scale)

    def error_feedback(self, numel: int, group=None):
        return compressed.HostErrorFeedback(numel, process_set=group or global_process_set)

    def neighbor_average_async(self, flat, name: str, peers: list[int], weights: list[float], self_weight: float,
                               codec: str | None = None, estimates=None, consensus_step: float = 1.0, out=None):
        out = np.empty_like(flat) if out is None or out.shape != flat.shape or out.dtype != flat.dtype else out
        own, theirs = estimates if estimates is not None else (None, None)
        return direct.neighbor_average_async(
            Buffer.of(flat), Buffer.of(out), name, peers, weights, self_weight, codec=codec,
            estimate_self=Buffer.of(own) if own is not None else None,
            estimate_peers=Buffer.of(theirs) if theirs is not None else None, consensus_step=consensus_step,
            keepalive=(flat, out, own, theirs), result=out)

    def group_average_async(self, flat, name: str, members: list[int], weights: list[float], out=None):
        out = np.empty_like(flat) if out is None or out.shape != flat.shape or out.dtype != flat.dtype else out
        return direct.group_average_async(Buffer.of(flat), Buffer.of(out), name, members, weights,
                                          keepalive=(flat, out), result=out)

    def allreduce_scalar(self, value: float, name: str) -> float:
        return float(self.wait(self.allreduce_async(np.array([value], np.float64), name, average=False))[0])

    def broadcast_object(self, obj, root: int = 0):
        return functions.broadcast_object(obj, root_rank=root)


class GraphCommunicator(_KerasCommunicator):
    """relaxlib's TF ops; a handle is the op's output tensor."""

    def allreduce_async(self, tensor, name: str, average: bool = True, group=None) -> tf.Tensor:
        return mpi_ops.allreduce(tensor, op=mpi_ops.Average if average else mpi_ops.Sum, name=name,
                                 process_set=group or global_process_set)

    def reduce_scatter_async(self, flat, name: str) -> tf.Tensor:
        return mpi_ops.reducescatter(flat, op=mpi_ops.Average, name=name)

    def allgather_async(self, shard, name: str) -> tf.Tensor:
        return mpi_ops.allgather(shard, name=name)

    def broadcast_async(self, tensor, root: int, name: str, group=None) -> tf.Tensor:
        return mpi_ops.broadcast(tensor, root, name=name, process_set=group or global_process_set)

    def wait(self, handle):
        return handle

    def compressed_allreduce_async(self, flat, name: str, codec: str, state=None, average: bool = True,
                                   group=None, prescale: float = 1.0) -> tf.Tensor:
        if not (isinstance(prescale, float) and prescale == 1.0):  # (a traced learning rate is a tensor)
            flat = flat * prescale
        return compressed.compressed_allreduce(flat, codec=codec, state=state, name=name,
                                               op=mpi_ops.Average if average else mpi_ops.Sum,
                                               process_set=group or global_process_set)

    def compressed_allreduce_or_nan(self, flat, name: str, codec: str, state=None, group=None) -> tf.Tensor:
        """The op gives NaN itself (``nan_on_error``): traced or eager, nothing is caught on host."""
        return compressed.compressed_allreduce(flat, codec=codec, state=state, name=name,
                                               process_set=group or global_process_set, nan_on_error=True)

    def error_feedback(self, numel: int, group=None) -> compressed.ErrorFeedback:
        """Residuals in TF variables, created outside the traced function (once, at setup)."""
        with tf.init_scope():
            return compressed.ErrorFeedback(numel, process_set=group or global_process_set)

    def neighbor_average_async(self, flat, name, peers, weights, self_weight, codec: str | None = None,
                               estimates=None, consensus_step: float = 1.0, out=None) -> tf.Tensor:
        """RelaxlibNeighborAverage; ``estimates`` are variables (``zeros``), updated by the op."""
        return relaxed.neighbor_average(flat, peers, weights, self_weight, name, codec=codec, estimates=estimates,
                                        consensus_step=consensus_step)

    def group_average_async(self, flat, name, members, weights, out=None) -> tf.Tensor:
        """RelaxlibGroupAverage."""
        return relaxed.partial_allreduce(flat, members, name, weights=weights)

    def allreduce_scalar(self, value: float, name: str) -> float:
        """Eagerly only (between steps)."""
        if not tf.executing_eagerly():
            raise NotImplementedError(f"a host scalar all-reduce {NOT_IN_A_GRAPH}")
        return float(mpi_ops.allreduce(tf.constant([value], tf.float64), op=mpi_ops.Sum, name=name)[0])

    def broadcast_object(self, obj, root: int = 0):
        """Runs eagerly, also while the step is traced: every rank traces its first step, so every
        rank takes part (an algorithm calls it once, e.g. for its bucket plan, not on every trace)."""
        with tf.init_scope():
            return functions.broadcast_object(obj, root_rank=root)
