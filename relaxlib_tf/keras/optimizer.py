"""Keras 3 ``DistributedOptimizer``: averages gradients over ranks inside ``optimizer.apply``.

Built on Keras 3's public optimizer API only: ``apply(grads, trainable_variables)`` is the one
entry point of ``model.fit``, ``apply_gradients`` and custom loops, so overriding it covers all.
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
import tensorflow as tf

from relaxlib import advisor, auto, basics, telemetry
from relaxlib.algorithms.base import follow_new_world, step_or_abandon
from relaxlib.basics import Average
from relaxlib.process_sets import global_process_set
from relaxlib_tf.advise import gradient_bytes, gradient_shapes
from relaxlib_tf.compression import Compression
from relaxlib_tf.context import KerasContext
from relaxlib_tf.gradient_tape import GradientReducer, check_algorithm, runs_in_keras
from relaxlib_tf.graph_context import KerasGraphContext, runs_in_graph
from relaxlib_tf.keras.modes import Binding, FitPath


class _DistributedMixin:
    """Placed before the wrapped optimizer's class in a generated subclass."""

    _relax_reducer: GradientReducer
    _relax_passes: int
    _relax_bound: Binding | None
    _relax_in_fit: FitPath | None

    def apply(self, grads, trainable_variables=None):
        """Averages ``grads`` over ranks, then applies them (every ``backward_passes_per_step``-th
        call, with the mean of the accumulated gradients); with a relaxation ``algorithm``, hands
        the step to it."""
        grads = list(grads)
        if tf.executing_eagerly():
            self._relax_telemetry.begin_step()
            try:
                return self._relax_apply(grads, trainable_variables)
            finally:
                self._relax_end_step()
        if not self._relax_telemetry.advise_at:
            return self._relax_apply(grads, trainable_variables)
        # relaxrun --advise inside tf.function (model.fit): step marks as py_functions, which
        # tf.function runs in program order with the step's other stateful ops
        tf.py_function(self._relax_telemetry.begin_step, [], Tout=[])
        result = self._relax_apply(grads, trainable_variables)
        tf.py_function(self._relax_end_step, [], Tout=[])
        return result

    def _relax_end_step(self) -> None:
        """Records the step; with ``relaxrun --advise``, advises once enough steps were seen (and
        with ``--auto`` ends this advising run)."""
        recorder = self._relax_telemetry
        recorder.end_step()
        if recorder.advise_at and len(recorder) == recorder.advise_at - 1:
            recorder.advise_at = 0
            predictions = advisor.advise_from_telemetry(recorder.records(), gradient_bytes(self._trainable_variables),
                                                        hooks=False, shapes=gradient_shapes(self._trainable_variables))
            auto.finish_phase(predictions, runs_in_keras,
                              hard_exit=True)  # SystemExit would become an op error in a py_function

    def _relax_apply(self, grads, trainable_variables):
        if self._relax_algorithm is not None:
            return self._relax_run_algorithm(grads, trainable_variables)
        parent = super()
        if self._relax_passes == 1:
            return parent.apply(self._relax_reducer.reduce(grads, trainable_variables), trainable_variables)
        variables = list(trainable_variables) if trainable_variables is not None else self._trainable_variables
        if not self.built:
            self.build(variables)
        self._relax_accumulate(grads, variables)

        def communicate_and_apply():
            averaged = [None if g is None else acc / self._relax_passes
                        for g, acc in zip(grads, self._relax_accumulators)]
            parent.apply(self._relax_reducer.reduce(averaged, variables), variables)
            for acc in self._relax_accumulators:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        due = tf.equal(self._relax_counter % self._relax_passes, 0)
        if tf.executing_eagerly():
            if bool(due):
                communicate_and_apply()
        else:
            tf.cond(due, communicate_and_apply, lambda: tf.constant(False))

    def local_apply(self, grads, trainable_variables):
        """The wrapped optimizer's own update, without communication (what algorithms call)."""
        return super().apply(grads, trainable_variables)

    def _relax_run_algorithm(self, grads, trainable_variables):
        variables = list(trainable_variables) if trainable_variables is not None else self._trainable_variables
        if not self.built:
            self.build(variables)
        if tf.executing_eagerly():  # with the context the algorithm was set up with (its state lives there)
            self._relax_algorithm_step(grads, variables, in_graph=self._relax_bound is Binding.GRAPH)
            return
        if self._relax_bound is Binding.GRAPH or (self._relax_bound is None and runs_in_graph(
                self._relax_algorithm, self._relax_contexts(variables)[1])):  # traced as TF ops into the step
            self._relax_in_fit = FitPath.GRAPH
            self._relax_algorithm_step(grads, variables, in_graph=True)
            return
        if self._relax_algorithm.splits_around_update(self._relax_contexts(variables)[0]):
            self._relax_in_fit = FitPath.SPLIT
            self._relax_split_step(grads, variables)
            return
        self._relax_in_fit = FitPath.PY_FUNCTION
        # Other algorithms work on host arrays in Python: inside tf.function (model.fit) they run
        # as a py_function, which executes eagerly in program order with the rest of the step.
        missing = [g is None for g in grads]
        dense = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g) for g, v in zip(grads, variables)]

        def eager_step(*values):
            self._relax_algorithm_step([None if m else v for m, v in zip(missing, values)], variables)
            return []

        tf.py_function(eager_step, dense, Tout=[])

    def _relax_split_step(self, grads, variables) -> None:
        """Inside tf.function, an algorithm whose step splits around the optimizer's update
        (async averaging, or model averaging first set up on host arrays by an eager step): its
        two halves run on host arrays as py_functions, the Keras update between them stays in
        the graph (run op by op inside a py_function it costs more than the host copies)."""
        host = self._relax_context

        def before() -> int:
            if self._relax_bound is None:
                self._relax_algorithm.setup(host)
                self._relax_bound = Binding.HOST
            self._relax_algorithm.before_update(host)
            return 0

        def after(*_updated) -> int:
            self._relax_algorithm.after_update(host)
            host.step_count += 1
            return 0

        started = tf.py_function(before, [], Tout=tf.int32)
        with tf.control_dependencies([started]):  # the weights are copied before the update
            pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
            self.local_apply([g for g, _ in pairs], [v for _, v in pairs])
        # reads of the updated weights (ordered after their updates): the second half waits for them
        tf.py_function(after, [tf.convert_to_tensor(v) for v in variables], Tout=tf.int32)

    def _relax_contexts(self, variables) -> tuple[KerasContext, KerasGraphContext]:
        """The host-array and the TF-op context of ``variables`` (created on first use)."""
        if self._relax_context is None:
            self._relax_context = KerasContext(self, variables, self._relax_algorithm)
            self._relax_graph_context = KerasGraphContext(self, variables, self._relax_algorithm)
        return self._relax_context, self._relax_graph_context

    def _relax_follow_world(self) -> None:
        """Run by ``relaxlib.reset()`` / ``grow()`` (``basics.follow_world_changes``): the algorithm
        is set up again over the new world, keeping what of its state carries over
        (``relaxlib.algorithms.base.follow_new_world``). Eager (its state is TF variables or host
        arrays, not ops of a step); a step traced before must be traced again (``KerasState``
        makes ``fit`` do so)."""
        if self._relax_world == basics.world_generation():
            return
        self._relax_world = basics.world_generation()
        if self._relax_bound is None:
            return
        with tf.init_scope():
            bound, other = ((self._relax_graph_context, self._relax_context) if self._relax_bound is Binding.GRAPH
                            else (self._relax_context, self._relax_graph_context))
            other.follow_new_world()
            follow_new_world(self._relax_algorithm, bound, lambda ctx: ctx.follow_new_world())

    def _relax_algorithm_step(self, grads, variables, in_graph: bool = False) -> None:
        """One step of the algorithm on host arrays, or (``in_graph``) as TF ops: symbolic while a
        step is traced, eager otherwise. The first step sets the algorithm up with its context
        and binds it there: its state (error-feedback residuals, ...) is host arrays or TF variables."""
        host, graph = self._relax_contexts(variables)
        ctx = graph if in_graph else host
        if not in_graph:
            grads = [None if g is None else np.asarray(g) for g in grads]
        if self._relax_bound is None:
            self._relax_algorithm.setup(ctx)
            self._relax_bound = Binding.GRAPH if in_graph else Binding.HOST
        ctx.set_gradients(grads)
        step_or_abandon(self._relax_algorithm, ctx)  # (skip a bad batch)
        if not ctx.applied:  # the algorithm updated the variables itself: count the step as Keras would
            self.iterations.assign_add(1)
        ctx.step_count += 1

    def flush(self) -> None:
        """Applies every update the algorithm deferred, so the variables are current (call it
        before evaluating or saving; a no-op without an algorithm)."""
        if self._relax_algorithm is not None and self._relax_bound is not None:
            self._relax_algorithm.flush(self._relax_bound_context())

    def join(self) -> int:
        """This rank ran out of data (model-averaging algorithms): serves the peers that still
        train until every rank joined; returns the last step of any rank. Eager only."""
        if self._relax_algorithm is None or self._relax_bound is None:
            raise RuntimeError("optimizer.join() is for model-averaging algorithms after at least one step; "
                               "with all-reduce use relaxlib_tf.join()")
        return self._relax_algorithm.join(self._relax_bound_context())

    def _relax_bound_context(self):
        """The context the algorithm was set up with (its state lives there)."""
        return self._relax_graph_context if self._relax_bound is Binding.GRAPH else self._relax_context

    def _relax_accumulate(self, grads, variables) -> None:
        if getattr(self, "_relax_accumulators", None) is None:
            with tf.init_scope():
                self._relax_accumulators = [tf.Variable(tf.zeros_like(tf.convert_to_tensor(v)), trainable=False)
                                            for v in variables]
                self._relax_counter = tf.Variable(0, dtype=tf.int64, trainable=False)
        for acc, grad in zip(self._relax_accumulators, grads):
            if grad is not None:
                acc.assign_add(tf.convert_to_tensor(grad))
        self._relax_counter.assign_add(1)


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=True, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True, algorithm=None):
    """Wraps a Keras 3 optimizer so that gradients are averaged over the ranks of ``process_set``
    before every update; works with ``model.compile``/``model.fit`` and custom loops.

    ``backward_passes_per_step=k``: gradients of k calls are accumulated locally and averaged
    over ranks once (one all-reduce per k batches; the optimizer steps every k-th call).
    ``compression``, ``sparse_as_dense``, ``op``, ``gradient_predivide_factor``: as for
    ``DistributedGradientTape``. ``algorithm``: None or ``AllReduce()`` (gradients all-reduced), or
    a relaxation, which then owns the step: ``CompressedScatterReduce``,
    ``OneBitAdam``, the model-averaging ``Decentralized``, ``PartialAllReduce``,
    ``AsyncModelAverage``, ``DeAR``, or your own ``Algorithm`` using what the Keras context offers
    (the error names what an algorithm lacks). It runs once per step after backward (Keras has no
    gradient or forward hooks): eagerly in custom loops; inside ``model.fit`` traced into the
    step's graph as TF ops when it is ``traceable`` (DeAR, CompressedScatterReduce, Decentralized,
    PartialAllReduce), around the Keras update kept in the graph when it splits its step there
    (AsyncModelAverage), else through ``tf.py_function`` (docs/tensorflow.md "Traced into fit"). For model
    averaging call ``algorithm.average_now()`` at the end for identical models
    (``optimizer.join()`` when this rank's data ends early; shutdown at exit joins otherwise).
    An optimizer that has no variables yet is
    re-created from its config (as Horovod does); an already built one is converted in place,
    keeping its state."""
    if algorithm is None:
        algorithm = auto.default_algorithm()  # relaxrun --auto's pick, if any
        if algorithm is not None and not runs_in_keras(algorithm):
            warnings.warn(f"RELAX_ALGORITHM={algorithm.name} does not run in Keras; using all-reduce", stacklevel=2)
            algorithm = None
    relaxation = check_algorithm(algorithm)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"DistributedOptimizer wraps a Keras 3 optimizer (keras.optimizers.*), got "
                        f"{type(optimizer).__name__}")
    if isinstance(optimizer, _DistributedMixin):
        raise ValueError("this optimizer is already a DistributedOptimizer")
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be a positive integer, got {backward_passes_per_step!r}")
    if not average_aggregated_gradients:
        raise NotImplementedError("average_aggregated_gradients=False is not supported: accumulated gradients are "
                                  "averaged")
    base = type(optimizer)
    cls = type(base.__name__, (_DistributedMixin, base), {"__module__": base.__module__})
    if optimizer.built:
        optimizer.__class__ = cls
        wrapped = optimizer
    else:
        wrapped = cls.from_config(optimizer.get_config())
    wrapped._relax_reducer = GradientReducer(name or "DistributedOptimizer", compression, sparse_as_dense, op,
                                             gradient_predivide_factor, process_set, scale_local_gradients)
    if relaxation is not None and (backward_passes_per_step != 1 or process_set is not global_process_set):
        raise ValueError(f"algorithm={type(relaxation).__name__} runs over all ranks with backward_passes_per_step=1")
    wrapped._relax_passes = backward_passes_per_step
    wrapped._relax_accumulators = None
    wrapped._relax_algorithm = relaxation
    wrapped._relax_context = None
    wrapped._relax_graph_context = None
    wrapped._relax_bound = None  # the context the algorithm was set up with
    wrapped._relax_world = basics.world_generation()  # the world the algorithm was set up in
    basics.follow_world_changes(wrapped._relax_follow_world)
    wrapped._relax_in_fit = None  # how the last traced step runs it
    wrapped._relax_telemetry = telemetry.new_recorder()
    return wrapped
