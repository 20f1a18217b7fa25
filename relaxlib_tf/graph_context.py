"""An algorithm's step as TensorFlow ops: the TrainingContext for a traced Keras step.

Inside ``tf.function`` (``model.fit``) the Keras DistributedOptimizer traces the step of an
algorithm that declares itself ``traceable`` (its step only chains collectives and updates, reads
no host value, and does the same every step), instead of running it in a ``tf.py_function``.
Flat tensors are symbolic, the collectives are relaxlib's asynchronous TF ops and the update is
the wrapped optimizer's, all in the step's graph: TF's executor starts a bucket's reduce-scatter
as soon as that bucket's gradients exist, while backward still computes earlier layers, and no
gradient is copied to host memory. Collectives whose result the trace needs as a Python value
(the bucket plan) run once, eagerly, while the first step is traced.
"""

from __future__ import annotations

import tensorflow as tf

from relaxlib.algorithms.base import Algorithm, missing_capabilities
from relaxlib_tf import compressed, functions, mpi_ops
from relaxlib_tf.context import KerasBinding

NOT_IN_A_GRAPH = "is not available while a step is traced (the algorithm is not traceable)"


def runs_in_graph(algorithm: Algorithm, ctx: KerasGraphContext) -> bool:
    """Whether the Keras optimizer traces ``algorithm``'s step with ``ctx`` instead of running it
    in a ``tf.py_function``: it says it is traceable with ctx's optimizer and needs nothing ctx lacks."""
    return algorithm.traceable(ctx) and not missing_capabilities(algorithm, ctx.capabilities)


class KerasGraphContext(KerasBinding):
    """Binds an Algorithm to a Keras 3 optimizer inside a traced step (symbolic tensors)."""

    capabilities = frozenset({"reduce_scatter", "allgather", "compressed_allreduce", "error_feedback", "weights"})

    # -- tensors --

    def flatten_grads(self, indices: list[int], out=None) -> tf.Tensor:
        parts = []
        for i in indices:
            grad, var = self._grads[i], self._variables[i]
            parts.append(tf.zeros([self._refs[i].numel], var.dtype) if grad is None
                         else tf.reshape(tf.convert_to_tensor(grad), [-1]))
        return tf.concat(parts, axis=0)

    def flatten_params(self, indices: list[int], out=None) -> tf.Tensor:
        return tf.concat([tf.reshape(tf.convert_to_tensor(self._variables[i]), [-1]) for i in indices], axis=0)

    def _slices(self, indices: list[int], flat):
        sizes = [self._refs[i].numel for i in indices]
        for i, part in zip(indices, tf.split(flat, sizes)):
            yield self._variables[i], tf.reshape(part, self._variables[i].shape)

    def zeros(self, numel: int) -> tf.Variable:
        """A variable (created outside the traced function): state that outlives the trace."""
        with tf.init_scope():
            return tf.Variable(tf.zeros([numel], tf.float32), trainable=False)

    def copy_(self, tensor: tf.Variable, value) -> None:
        tensor.assign(value)

    def snapshot(self):
        """As the host context's, with the learning rate read in the step (a callback or
        schedule may change it between steps; a host value would be frozen into the trace)."""
        groups = super().snapshot()
        groups[0]["lr"] = tf.cast(tf.convert_to_tensor(self._optimizer.learning_rate), tf.float32)
        return groups

    def concat(self, tensors: list) -> tf.Tensor:
        return tensors[0] if len(tensors) == 1 else tf.concat(tensors, axis=0)

    def sum_of_squares(self, tensor) -> float:
        raise NotImplementedError(f"a host value (sum of squares) {NOT_IN_A_GRAPH}")

    def scale_(self, tensor, factor: float) -> None:
        raise NotImplementedError(f"in-place scaling {NOT_IN_A_GRAPH}")

    def add_(self, tensor, other, alpha: float = 1.0) -> None:
        raise NotImplementedError(f"in-place addition {NOT_IN_A_GRAPH}")

    # -- communication: a handle is the op's output, waiting is using it --

    def reduce_scatter_async(self, flat, name: str) -> tf.Tensor:
        return mpi_ops.reducescatter(flat, op=mpi_ops.Average, name=name)

    def allgather_async(self, shard, name: str) -> tf.Tensor:
        return mpi_ops.allgather(shard, name=name)

    def allreduce_async(self, tensor, name: str, average: bool = True, group=None) -> tf.Tensor:
        if group is not None:
            raise NotImplementedError(f"a group all-reduce {NOT_IN_A_GRAPH}")
        return mpi_ops.allreduce(tensor, op=mpi_ops.Average if average else mpi_ops.Sum, name=name)

    def broadcast_async(self, tensor, root: int, name: str, group=None) -> tf.Tensor:
        if group is not None:
            raise NotImplementedError(f"a group broadcast {NOT_IN_A_GRAPH}")
        return mpi_ops.broadcast(tensor, root, name=name)

    def wait(self, handle):
        return handle

    def allreduce_scalar(self, value: float, name: str) -> float:
        raise NotImplementedError(f"a host scalar all-reduce {NOT_IN_A_GRAPH}")

    def broadcast_object(self, obj, root: int = 0):
        """Runs eagerly while the step is traced: every rank traces its first step, so every rank
        takes part (an algorithm calls it once, e.g. for its bucket plan, not on every trace)."""
        with tf.init_scope():
            return functions.broadcast_object(obj, root_rank=root)

    def compressed_allreduce_async(self, flat, name: str, codec: str, state=None, average: bool = True,
                                   group=None) -> tf.Tensor:
        if group is not None:
            raise NotImplementedError(f"a group's compressed all-reduce {NOT_IN_A_GRAPH}")
        return compressed.compressed_allreduce(flat, codec=codec, state=state, name=name,
                                               op=mpi_ops.Average if average else mpi_ops.Sum)

    def error_feedback(self, numel: int, group=None) -> compressed.ErrorFeedback:
        """Residuals in TF variables, created outside the traced function (once, at setup)."""
        if group is not None:
            raise NotImplementedError(f"a group's error feedback {NOT_IN_A_GRAPH}")
        with tf.init_scope():
            return compressed.ErrorFeedback(numel)

    def neighbor_average_async(self, flat, name: str, peers: list[int], weights: list[float], self_weight: float,
                               codec: str | None = None, estimates=None, consensus_step: float = 1.0, out=None):
        raise NotImplementedError(f"neighbour averaging {NOT_IN_A_GRAPH}")

    def group_average_async(self, flat, name: str, members: list[int], weights: list[float], out=None):
        raise NotImplementedError(f"group averaging {NOT_IN_A_GRAPH}")

    def node_groups(self):
        raise NotImplementedError(f"node groups {NOT_IN_A_GRAPH}")
