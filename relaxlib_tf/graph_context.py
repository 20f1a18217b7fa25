"""An algorithm's step as TensorFlow ops: the TrainingContext for a traced Keras step.

Inside ``tf.function`` (``model.fit``) the Keras DistributedOptimizer traces the step of an
algorithm that declares itself ``traceable`` (its step only chains collectives and updates, reads
no host value, and does the same every step), instead of running it in a ``tf.py_function``.
Flat tensors are symbolic, the collectives are relaxlib's asynchronous TF ops and the update is
the wrapped optimizer's, all in the step's graph: TF's executor starts a bucket's reduce-scatter
as soon as that bucket's gradients exist, while backward still computes earlier layers, and no
gradient is copied to host memory. Collectives whose result the trace needs as a Python value
(the bucket plan) run once, eagerly, while the first step is traced. A decision the algorithm
makes on host every step (who averages with whom) runs as a small ``tf.py_function`` whose
outputs feed the step's ops (``start_planned``, ``on_host``).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from relaxlib.algorithms.averaging import AveragePlan
from relaxlib.algorithms.base import Algorithm, missing_capabilities
from relaxlib.process_sets import global_process_set
from relaxlib_tf import compressed, functions, mpi_ops, relaxed
from relaxlib_tf.context import KerasBinding

NOT_IN_A_GRAPH = "is not available while a step is traced (the algorithm is not traceable)"


def runs_in_graph(algorithm: Algorithm, ctx: KerasGraphContext) -> bool:
    """Whether the Keras optimizer traces ``algorithm``'s step with ``ctx`` instead of running it
    in a ``tf.py_function``: it says it is traceable with ctx's optimizer and needs nothing ctx lacks."""
    return algorithm.traceable(ctx) and not missing_capabilities(algorithm, ctx.capabilities)


class KerasGraphContext(KerasBinding):
    """Binds an Algorithm to a Keras 3 optimizer inside a traced step (symbolic tensors)."""

    capabilities = frozenset({"reduce_scatter", "allgather", "compressed_allreduce", "error_feedback", "weights",
                              "neighbor_average", "group_average", "group_allreduce", "async_broadcast",
                              "node_groups"})

    def runs_eagerly(self) -> bool:
        """The tape's eager steps run their ops at once; ``fit``'s traced step does not."""
        return tf.executing_eagerly()

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

    def add_change_to_params(self, indices: list[int], after, before) -> None:
        self.add_to_params(indices, after - before)

    def sqrt(self, tensor) -> tf.Tensor:
        return tf.sqrt(tensor)  # correctly rounded (tf.pow(x, 0.5) is not)

    def factor_mean_squares(self, tensor, rows: int, cols: int) -> tf.Tensor:
        squares = tf.square(tf.reshape(tf.cast(tensor, tf.float64), [rows, cols]))
        row = tf.reduce_mean(squares, axis=1)
        return tf.cast(tf.concat([row, tf.reduce_mean(squares, axis=0), [tf.reduce_mean(row)]], axis=0), tf.float32)

    def outer(self, a, b) -> tf.Tensor:
        return tf.reshape(a[:, None] * b[None, :], [-1])

    def repeat(self, tensor, count: int) -> tf.Tensor:
        return tf.repeat(tensor, count)

    def finite_or(self, value, fallback) -> tf.Tensor:
        return tf.where(tf.math.is_finite(value), value, tf.convert_to_tensor(fallback))

    def clone(self, tensor) -> tf.Tensor:
        return tf.identity(tensor)

    def sum_of_squares(self, tensor) -> float:
        """Eagerly only (e.g. ``consensus_distance()`` between steps)."""
        if not tf.executing_eagerly():
            raise NotImplementedError(f"a host value (sum of squares) {NOT_IN_A_GRAPH}")
        return float(tf.reduce_sum(tf.square(tf.cast(tensor, tf.float64))))

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
        return mpi_ops.allreduce(tensor, op=mpi_ops.Average if average else mpi_ops.Sum, name=name,
                                 process_set=group or global_process_set)

    def broadcast_async(self, tensor, root: int, name: str, group=None) -> tf.Tensor:
        return mpi_ops.broadcast(tensor, root, name=name, process_set=group or global_process_set)

    def wait(self, handle):
        return handle

    def allreduce_scalar(self, value: float, name: str) -> float:
        """Eagerly only (between steps)."""
        if not tf.executing_eagerly():
            raise NotImplementedError(f"a host scalar all-reduce {NOT_IN_A_GRAPH}")
        return float(mpi_ops.allreduce(tf.constant([value], tf.float64), op=mpi_ops.Sum, name=name)[0])

    # -- host decisions: a py_function per step, ordered with the step's other stateful ops --

    def start_planned(self, plan, start, unchanged):
        """The plan runs on host in a ``tf.py_function`` every step; the averaging op is issued
        under ``tf.cond`` on whether there is one (else the result is ``unchanged``)."""
        if tf.executing_eagerly():
            return super().start_planned(plan, start, unchanged)

        def decide():
            chosen = plan()
            if chosen is None:
                return np.zeros(0, np.int32), np.zeros(0, np.float64), np.float64(0.0), "", False
            return (np.asarray(chosen.ranks, np.int32), np.asarray(chosen.weights, np.float64),
                    np.float64(chosen.self_weight), chosen.name, True)

        ranks, weights, self_weight, name, started = tf.py_function(
            decide, [], Tout=[tf.int32, tf.float64, tf.float64, tf.string, tf.bool])
        ranks.set_shape([None])
        weights.set_shape([None])
        for scalar in (self_weight, name, started):
            scalar.set_shape([])
        chosen = AveragePlan(ranks, weights, name, self_weight)
        return tf.cond(started, lambda: self.wait(start(chosen)), lambda: tf.identity(unchanged)), started

    def on_host(self, fn, *args) -> None:
        if tf.executing_eagerly():
            fn(*args)
            return

        def call(*values) -> list:
            fn(*values)
            return []

        tf.py_function(call, list(args), Tout=[])

    def broadcast_object(self, obj, root: int = 0):
        """Runs eagerly while the step is traced: every rank traces its first step, so every rank
        takes part (an algorithm calls it once, e.g. for its bucket plan, not on every trace)."""
        with tf.init_scope():
            return functions.broadcast_object(obj, root_rank=root)

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

    def check_not_nan(self, tensor, message: str) -> tf.Tensor:
        check = tf.debugging.Assert(tf.logical_not(tf.math.is_nan(tensor[0])), [message])
        with tf.control_dependencies([check]):
            return tf.identity(tensor)

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

