"""``DistributedGradientTape``: a ``tf.GradientTape`` whose ``gradient()`` averages over ranks."""

from __future__ import annotations

import tensorflow as tf

from relaxlib.basics import Adasum, Average, Sum
from relaxlib.process_sets import global_process_set
from relaxlib_tf import mpi_ops
from relaxlib_tf.compression import Compression


def check_algorithm(algorithm, tape: bool = False):
    """None for the all-reduce baseline (``None`` or ``AllReduce()``), else the algorithm, if this
    TensorFlow entry point runs it (NotImplementedError naming what it lacks otherwise): the
    Keras optimizer runs every algorithm whose requirements its context offers;
    ``DistributedGradientTape`` (``tape``) those that only produce gradients."""
    from relaxlib.algorithms import Algorithm, AllReduce

    if algorithm is None or type(algorithm) is AllReduce:
        return None
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a relaxlib.algorithms.Algorithm, got {type(algorithm).__name__}")
    if tape:
        from relaxlib_tf.tape_context import check_supported
    else:
        from relaxlib_tf.context import check_supported
    check_supported(algorithm)
    return algorithm


def runs_in_keras(algorithm) -> bool:
    """Whether the Keras DistributedOptimizer runs ``algorithm`` (see :func:`check_algorithm`)."""
    try:
        check_algorithm(algorithm)
    except NotImplementedError:
        return False
    return True


class GradientReducer:
    """Averages a list of gradients (None entries stay None) as one grouped all-reduce; shared by
    the tape and the Keras optimizer. Gradients of ``local_vars`` are not communicated."""

    def __init__(self, prefix: str, compression=Compression.none, sparse_as_dense: bool = False, op=Average,
                 gradient_predivide_factor: float = 1.0, process_set=global_process_set,
                 scale_local_gradients: bool = True) -> None:
        if op not in (Average, Sum, Adasum):  # Adasum: combined per tensor, not divided (as Horovod's tape)
            raise ValueError("gradients can be averaged (op=Average), summed (op=Sum) or combined by op=Adasum only")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        self.prefix = prefix
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        self.predivide = float(gradient_predivide_factor)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.local_vars: set[int] = set()

    def register_local_var(self, var) -> None:
        """Excludes ``var``'s gradient from communication (a layer each rank keeps to itself)."""
        self.local_vars.add(id(var))

    def reduce(self, grads: list, variables: list | None = None) -> list:
        """The averaged gradients, in order."""
        grads = list(grads)
        if self.process_set.size() == 1 and self.predivide == 1.0:
            return grads  # the mean (or sum) over one rank: nothing to communicate
        local = [variables is not None and id(v) in self.local_vars for v in (variables or grads)]
        dense_positions, dense = [], []
        out = list(grads)
        for i, (grad, is_local) in enumerate(zip(grads, local)):
            if grad is None:
                continue
            if is_local:
                if self.scale_local_gradients and self.op == Average:
                    out[i] = _scale(grad, 1.0 / self.process_set.size())
                continue
            if isinstance(grad, tf.IndexedSlices) and self.sparse_as_dense:
                grad = tf.convert_to_tensor(grad)
            if isinstance(grad, tf.IndexedSlices):
                out[i] = mpi_ops.allreduce(grad, op=self.op, name=f"{self.prefix}.sparse.{i}",
                                           process_set=self.process_set)
            else:
                dense_positions.append(i)
                dense.append(grad)
        if dense:
            op, prescale, postscale = self.op, 1.0, 1.0
            if self.predivide != 1.0:
                op, prescale, postscale = Sum, 1.0 / self.predivide, self.predivide / self.process_set.size()
            reduced = mpi_ops.grouped_allreduce(dense, op=op, compression=self.compression, prescale_factor=prescale,
                                                postscale_factor=postscale, process_set=self.process_set,
                                                name=f"{self.prefix}.dense")
            for i, grad in zip(dense_positions, reduced):
                out[i] = grad
        return out


def _scale(grad, factor: float):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * factor, grad.indices, grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape``; ``gradient()`` returns gradients averaged over the ranks of
    ``process_set`` (one grouped, fused all-reduce). Use it exactly like the tape it wraps::

        with hvd.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = loss_fn(model(x), y)
        grads = tape.gradient(loss, model.trainable_variables)

    ``compression``: ``Compression.fp16`` halves the bytes sent. ``sparse_as_dense``: convert
    ``tf.IndexedSlices`` to dense before reducing (else they are gathered). ``op``: Average or
    Sum. ``gradient_predivide_factor``: divide by this before the sum and by size/factor after.
    ``num_groups``/``groups`` are accepted for compatibility (all gradients form one fused group).
    ``algorithm``: None (all-reduce), or one whose step ends in averaged gradients:
    ``CompressedScatterReduce`` (compressing gradients, with error feedback across steps: pass
    the same object every step) or ``DeAR``; eagerly, and inside ``tf.function`` when it is
    traceable. It runs over all ranks with ``op=Average`` and no ``compression``. Algorithms that
    write the weights (model averaging, ``OneBitAdam``) need
    ``relaxlib_tf.keras.DistributedOptimizer``."""

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, scale_local_gradients=True, algorithm=None) -> None:
        self._algorithm = check_algorithm(algorithm, tape=True)
        defaults = (op == Average and compression is Compression.none and gradient_predivide_factor == 1.0
                    and process_set is global_process_set)
        if self._algorithm is not None and not defaults:
            raise ValueError(f"algorithm={type(algorithm).__name__} averages over all ranks itself: leave op, "
                             "compression, gradient_predivide_factor and process_set at their defaults")
        self._tape = gradtape
        self._reducer = GradientReducer("DistributedGradientTape", compression, sparse_as_dense, op,
                                        gradient_predivide_factor, process_set, scale_local_gradients)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._tape, name)

    def register_local_source(self, source) -> None:
        """Excludes ``source``'s gradient from the all-reduce (a variable this rank keeps local)."""
        self._reducer.register_local_var(source)

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        """The tape's gradients of ``target`` w.r.t. ``sources``, averaged over ranks."""
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        if self._algorithm is not None:
            from relaxlib_tf import tape_context

            reduced = tape_context.reduce(self._algorithm, flat_grads, flat_sources)
        else:
            reduced = self._reducer.reduce(flat_grads, flat_sources)
        return tf.nest.pack_sequence_as(grads, reduced)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True) -> DistributedGradientTape:
    """A ``DistributedGradientTape`` that leaves the variables of ``local_layers`` (a Keras layer
    or list of layers) out of the all-reduce; their gradients are scaled by 1/size with
    ``scale_local_gradients`` so the update matches an averaged one in magnitude."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set, scale_local_gradients)
    layers = [] if local_layers is None else (local_layers if isinstance(local_layers, (list, tuple))
                                              else [local_layers])
    for layer in layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
