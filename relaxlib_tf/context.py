"""The TensorFlow implementations of relaxlib's TrainingContext, for Keras 3 optimizers.

``KerasContext`` hands algorithms flat numpy arrays (host memory the core reads and writes
directly; its ``math`` is ``relaxlib.algorithms.host_math.HostMath``, its ``comm``
``relaxlib_tf.communicator.HostCommunicator``); weights move between them and the Keras variables
once per step. It runs eagerly:
inside ``tf.function`` the Keras optimizer reaches it through ``tf.py_function``.
``relaxlib_tf.graph_context.KerasGraphContext`` runs an algorithm whose step can be traced
(``Algorithm.traceable``, e.g. DeAR) as TensorFlow ops inside ``tf.function`` instead. Keras has
no per-variable gradient hooks and no forward hooks: an algorithm's step starts when the
optimizer applies it; only inside a traced step can TF's dataflow start a bucket's communication
while backward still computes other layers.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from relaxlib import basics
from relaxlib.algorithms.base import Algorithm, ParamRef, TrainingContext, require_capabilities
from relaxlib.algorithms.host_math import HostMath
from relaxlib_tf.communicator import HostCommunicator

UNSUPPORTED = "is not available for TensorFlow yet"


def check_supported(algorithm: Algorithm) -> None:
    """NotImplementedError naming what ``algorithm`` needs that Keras does not offer, if anything."""
    require_capabilities(algorithm, KerasContext.capabilities,
                         "relaxlib's Keras DistributedOptimizer does not offer (it runs in PyTorch)")


class KerasBinding(TrainingContext):
    """What both Keras contexts share: the variables, their order, the optimizer's
    hyper-parameters and its update. Subclasses say how a flat tensor maps onto the variables
    and set ``math`` and ``comm``."""

    updates_whole_parameters = True  # a variable's update is one assign: reads see before or after

    def __init__(self, optimizer, variables: list, algorithm: Algorithm) -> None:
        self.applied = False  # whether this step's update went through the wrapped optimizer
        self._optimizer = optimizer  # the wrapped optimizer's own update (no communication)
        self._variables = list(variables)
        self._algorithm = algorithm
        self.rank = basics.rank()
        self.size = basics.size()
        self.step_count = 0
        self.max_grad_norm = None
        self._grads: list = [None] * len(self._variables)
        # Keras variables name their dtype as a string, tf.Variables as a tf.DType: accept both.
        dtypes = [np.dtype(tf.as_dtype(v.dtype).as_numpy_dtype) for v in self._variables]
        self._refs = [ParamRef(i, getattr(v, "path", None) or getattr(v, "name", None) or f"source{i}",
                               int(np.prod(v.shape)), dtype.itemsize, dtype.name, shape=tuple(int(d) for d in v.shape))
                      for i, (v, dtype) in enumerate(zip(self._variables, dtypes))]

    def follow_new_world(self) -> KerasBinding:
        """This context over the world ``relaxlib.reset()`` re-formed after a lost rank: its rank,
        size and a communicator over it. Returns itself (``relaxlib.algorithms.base.follow_new_world``)."""
        self.rank = basics.rank()
        self.size = basics.size()
        self.comm = type(self.comm)(self.rank, self.size)
        return self

    def set_gradients(self, grads: list) -> None:
        """This step's gradients (None where a variable has none)."""
        self._grads = list(grads)
        self.applied = False

    def parameters(self) -> list[ParamRef]:
        return list(self._refs)

    def forward_order(self) -> list[tuple[int, int]]:
        """The variables in the order given: Keras lists a model's trainable variables layer by
        layer in the order the layers were built, forward order for Sequential and functional
        models. Without forward hooks a layer need not stay in one bucket: each variable is its own unit."""
        return [(ref.index, ref.index) for ref in self._refs]

    def watch_buckets(self, buckets) -> None:
        raise NotImplementedError(f"forward hooks {UNSUPPORTED}")

    def _slices(self, indices: list[int], flat):
        """(variable, the slice of ``flat`` shaped like it) for the variables of ``indices``."""
        raise NotImplementedError

    def set_params_from_flat(self, indices: list[int], flat) -> None:
        for var, value in self._slices(indices, flat):
            var.assign(value)

    def add_to_params(self, indices: list[int], flat, alpha: float = 1.0) -> None:
        for var, value in self._slices(indices, flat):
            var.assign_add(value * alpha if alpha != 1.0 else value)

    def snapshot(self):
        """One parameter group in torch.optim's vocabulary: ``lr`` always; ``betas`` for Adam-like
        optimizers; SGD's ``momentum``, ``dampening``, ``nesterov``, ``weight_decay`` only for a
        Keras SGD whose step an algorithm may take over exactly (constant learning rate, no weight
        decay, no clipping, no EMA): Keras' SGD then equals torch's (v = m v - lr g is -lr times
        torch's buffer). Otherwise algorithms hand averaged gradients to the Keras optimizer."""
        opt = self._optimizer
        with tf.init_scope():  # host values, also while a step is traced
            group = {"lr": float(np.asarray(opt.learning_rate))}
        if hasattr(opt, "beta_1") and hasattr(opt, "beta_2"):
            group["betas"] = (float(opt.beta_1), float(opt.beta_2))
        import keras

        plain = (isinstance(opt, keras.optimizers.SGD) and not opt.weight_decay and opt.clipnorm is None
                 and opt.clipvalue is None and opt.global_clipnorm is None and not opt.use_ema
                 and not isinstance(opt._learning_rate, keras.optimizers.schedules.LearningRateSchedule))
        if plain:
            group.update(momentum=float(opt.momentum), dampening=0.0, nesterov=bool(opt.nesterov), weight_decay=0.0,
                         maximize=False)
        return [group]

    def apply_update(self, indices: list[int], snapshot, flat_grads=None) -> None:
        """The wrapped Keras optimizer's update (it reads its own hyper-parameters, so ``snapshot``
        is not needed). Keras counts an iteration per call: a second call in the same step takes
        it back first, so the step count (Adam's bias correction, schedules) stays one per step;
        global-norm clipping and moving averages still act per call, so algorithms make one."""
        variables = [self._variables[i] for i in indices]
        if flat_grads is not None:
            grads = [value for _, value in self._slices(indices, flat_grads)]
        else:
            grads = [self._grads[i] for i in indices]
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        if pairs and self.applied:
            self._optimizer.iterations.assign_sub(1)
        self.applied = self.applied or bool(pairs)
        if pairs:
            self._optimizer.local_apply([tf.convert_to_tensor(g, dtype=v.dtype) for g, v in pairs],
                                        [v for _, v in pairs])


class KerasContext(KerasBinding):
    """Binds an Algorithm to a Keras 3 optimizer and the variables it trains, on host arrays."""

    capabilities = frozenset({"compressed_allreduce", "error_feedback", "neighbor_average", "group_average",
                              "group_allreduce", "async_broadcast", "node_groups", "reduce_scatter", "allgather",
                              "weights"})
    math = HostMath()  # stateless: shared by every context (and usable on the class)

    def __init__(self, optimizer, variables: list, algorithm: Algorithm) -> None:
        check_supported(algorithm)
        super().__init__(optimizer, variables, algorithm)
        self.comm = HostCommunicator(self.rank, self.size)

    def _flatten(self, arrays, indices: list[int], out):
        total = sum(self._refs[i].numel for i in indices)
        dtype = np.dtype(self._refs[indices[0]].dtype) if indices else np.float32
        if not isinstance(out, np.ndarray) or out.size != total or out.dtype != dtype:
            out = np.empty(total, dtype)
        offset = 0
        for i in indices:
            n = self._refs[i].numel
            value = arrays(i)
            out[offset:offset + n] = 0 if value is None else np.asarray(value, dtype).reshape(-1)
            offset += n
        return out

    def flatten_grads(self, indices: list[int], out=None):
        return self._flatten(lambda i: self._grads[i], indices, out)

    def grads_where_they_lie(self, indices: list[int]) -> list[np.ndarray] | None:
        """The gradients of ``indices`` as flat host arrays of their variables' dtype, read where
        they lie (numpy views of eager tensors), or None where one is missing, sparse or would
        have to be converted."""
        arrays = []
        for i in indices:
            grad = self._grads[i]
            if grad is None or isinstance(grad, tf.IndexedSlices):
                return None
            array = np.asarray(grad)
            if array.dtype != np.dtype(self._refs[i].dtype) or not array.flags.c_contiguous:
                return None
            arrays.append(array.reshape(-1))
        return arrays

    def flatten_params(self, indices: list[int], out=None):
        return self._flatten(lambda i: self._variables[i].numpy(), indices, out)

    def _slices(self, indices: list[int], flat: np.ndarray):
        offset = 0
        for i in indices:
            n = self._refs[i].numel
            yield self._variables[i], flat[offset:offset + n].reshape(self._variables[i].shape)
            offset += n
