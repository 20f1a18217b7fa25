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
from relaxlib_tf.communicator import GraphCommunicator
from relaxlib_tf.context import KerasBinding
from relaxlib_tf.tensor_math import GraphMath


def runs_in_graph(algorithm: Algorithm, ctx: KerasGraphContext) -> bool:
    """Whether the Keras optimizer traces ``algorithm``'s step with ``ctx`` instead of running it
    in a ``tf.py_function``: it says it is traceable with ctx's optimizer and needs nothing ctx lacks."""
    return algorithm.traceable(ctx) and not missing_capabilities(algorithm, ctx.capabilities)


class KerasGraphContext(KerasBinding):
    """Binds an Algorithm to a Keras 3 optimizer inside a traced step (symbolic tensors)."""

    capabilities = frozenset({"reduce_scatter", "allgather", "compressed_allreduce", "error_feedback", "weights",
                              "neighbor_average", "group_average", "group_allreduce", "async_broadcast",
                              "node_groups"})
    math = GraphMath()  # stateless: shared by every context (and usable on the class)

    def __init__(self, optimizer, variables: list, algorithm: Algorithm) -> None:
        super().__init__(optimizer, variables, algorithm)
        self.comm = GraphCommunicator(self.rank, self.size)

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

    def snapshot(self):
        """As the host context's, with the learning rate read in the step (a callback or
        schedule may change it between steps; a host value would be frozen into the trace)."""
        groups = super().snapshot()
        groups[0]["lr"] = tf.cast(tf.convert_to_tensor(self._optimizer.learning_rate), tf.float32)
        return groups

    def add_change_to_params(self, indices: list[int], after, before) -> None:
        self.add_to_params(indices, after - before)

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
        return tf.cond(started, lambda: self.comm.wait(start(chosen)), lambda: tf.identity(unchanged)), started

    def on_host(self, fn, *args) -> None:
        if tf.executing_eagerly():
            fn(*args)
            return

        def call(*values) -> list:
            fn(*values)
            return []

        tf.py_function(call, list(args), Tout=[])

    def check_not_nan(self, tensor, message: str) -> tf.Tensor:
        check = tf.debugging.Assert(tf.logical_not(tf.math.is_nan(tensor[0])), [message])
        with tf.control_dependencies([check]):
            return tf.identity(tensor)
