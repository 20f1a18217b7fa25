"""Collectives on TensorFlow tensors with Horovod's API (``horovod.tensorflow`` 0.28).

Each collective is one TensorFlow op (an asynchronous kernel that hands the tensor to relaxlib's
core engine and completes when the engine is done), so it works eagerly and inside
``tf.function``, where independent collectives run concurrently and are fused by the engine.
Operations are keyed by name: every rank must issue the same names with the same shapes and
dtypes; unnamed operations are named by call order (in ``tf.function``: by tracing order).
"""

from __future__ import annotations

import re

import tensorflow as tf

from relaxlib import _core, basics
from relaxlib.basics import Adasum, Average, Max, Min, Product, Sum  # noqa: F401 - re-exported
from relaxlib.errors import InvalidArgumentError
from relaxlib.process_sets import ProcessSet, global_process_set, process_set_id
from relaxlib_tf._loader import library
from relaxlib_tf.compression import Compression

_auto_name = basics.auto_name


class _AnnouncingOps:
    """The op library, except that a collective op this rank cannot even build (TensorFlow
    refuses its dtype when the op is constructed, before any kernel runs) is announced to the
    other ranks, which then fail instead of waiting for it. Errors raised by the kernels or the
    core name a relaxlib class in brackets and were announced where they arose."""

    # op -> (request type, position of its name argument)
    _COLLECTIVES = {
        "relaxlib_allreduce": (_core.REQ_ALLREDUCE, 1), "relaxlib_grouped_allreduce": (_core.REQ_ALLREDUCE, 1),
        "relaxlib_allgather": (_core.REQ_ALLGATHER, 1), "relaxlib_grouped_allgather": (_core.REQ_ALLGATHER, 1),
        "relaxlib_broadcast": (_core.REQ_BROADCAST, 1), "relaxlib_reducescatter": (_core.REQ_REDUCESCATTER, 1),
        "relaxlib_grouped_reducescatter": (_core.REQ_REDUCESCATTER, 1), "relaxlib_alltoall": (_core.REQ_ALLTOALL, 2),
        "relaxlib_compressed_allreduce": (_core.REQ_COMPRESSED_ALLREDUCE, 3),
    }
    _ANNOUNCED = re.compile(r"\[\w+Error\]")

    def __init__(self, ops):
        self._ops = ops

    def __getattr__(self, attr: str):
        op = getattr(self._ops, attr)
        if attr not in self._COLLECTIVES:
            return op
        request_type, name_position = self._COLLECTIVES[attr]

        def build(*args, **kwargs):
            try:
                if tf.executing_eagerly():  # this thread waits until the op completed
                    with _core.blocked_waiting():
                        return op(*args, **kwargs)
                return op(*args, **kwargs)
            except (TypeError, ValueError, tf.errors.InvalidArgumentError) as exc:
                if not self._ANNOUNCED.search(str(exc)) and len(args) > name_position:
                    labels = tf.get_static_value(args[name_position])
                    if labels is not None:
                        labels = [labels] if getattr(labels, "ndim", 0) == 0 else list(labels)
                        _core.reject(request_type, [label.decode() for label in labels],
                                     int(kwargs.get("process_set", 0)), str(exc).splitlines()[0])
                raise

        setattr(self, attr, build)  # built once: later calls do not come through __getattr__
        return build


_ops = _AnnouncingOps(library())


def _name(kind: str, name: str | None, process_set: object = 0) -> tf.Tensor:
    """The request name as a scalar string tensor (a tensor, so eager calls share one kernel)."""
    return tf.constant(_auto_name(kind, name, process_set), dtype=tf.string)


def _names(kind: str, name: str | None, count: int, process_set: object = 0) -> tf.Tensor:
    """Names of a grouped request's members, by the core's rule (as every binding names them)."""
    base = _auto_name(kind, name, process_set)
    return tf.constant([_core.member_name(base, i, count) for i in range(count)], dtype=tf.string)


def _set_id(process_set: ProcessSet) -> int:
    return process_set_id(process_set)


# ---- allreduce -------------------------------------------------------------------------------

def _allreduce(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set) -> tf.Tensor:
    return _ops.relaxlib_allreduce(tensor, _name("allreduce", name, process_set), reduce_op=op,
                                   prescale=float(prescale_factor), postscale=float(postscale_factor),
                                   process_set=_set_id(process_set))


def _sparse_allreduce(slices: tf.IndexedSlices, name, op, process_set, scaled: bool) -> tf.IndexedSlices:
    """Horovod's treatment of IndexedSlices: gather every rank's values and indices (Average
    divides the values by the number of ranks). Pre/postscale factors are refused after the
    gathers, where Horovod refuses them, so a rank passing them alone fails without stranding the
    others."""
    if op not in (Average, Sum):
        raise NotImplementedError("only Average and Sum are supported for tf.IndexedSlices (Adasum: pass "
                                  "sparse_as_dense=True to the optimizer)")
    values = allgather(slices.values, name=f"{name}.values" if name else None, process_set=process_set)
    indices = allgather(slices.indices, name=f"{name}.indices" if name else None, process_set=process_set)
    if scaled:
        raise NotImplementedError("prescale_factor and postscale_factor are not supported with tf.IndexedSlices")
    if op == Average:
        values = values / tf.cast(process_set.size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Averages (or sums, min, max, product) ``tensor`` over the ranks of ``process_set``;
    differentiable. ``tf.IndexedSlices`` are gathered instead (Average divides by the size).
    Integer Average truncates, as in Horovod. ``device_*`` and ``ignore_name_scope`` are accepted
    for compatibility (CPU only)."""
    op = basics.resolve_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, name, op, process_set, prescale_factor != 1.0 or postscale_factor != 1.0)
    tensor = tf.convert_to_tensor(tensor)
    compressed, ctx = compression.compress(tensor)
    reduced = _allreduce(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      name=None, ignore_name_scope=False):
    """Allreduces a list of tensors as one atomic, fused operation; differentiable."""
    op = basics.resolve_op(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        return [allreduce(t, op=op, compression=compression, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, process_set=process_set,
                          name=f"{name}.{i}" if name else None) for i, t in enumerate(tensors)]
    compressed = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    names = _names("grouped_allreduce", name, len(tensors), process_set)
    reduced = _ops.relaxlib_grouped_allreduce([c for c, _ in compressed], names,
                                              reduce_op=op, prescale=float(prescale_factor),
                                              postscale=float(postscale_factor), process_set=_set_id(process_set))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


@tf.RegisterGradient("RelaxlibAllreduce")
def _allreduce_grad(op, grad):
    """The gradient of an allreduce is the same allreduce of the gradient."""
    reduced = _ops.relaxlib_allreduce(grad, _name("allreduce.grad", None, op.get_attr("process_set")),
                                      reduce_op=op.get_attr("reduce_op"),
                                      prescale=op.get_attr("prescale"), postscale=op.get_attr("postscale"),
                                      process_set=op.get_attr("process_set"))
    return [reduced, None]


@tf.RegisterGradient("RelaxlibGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    grads = [tf.zeros_like(t) if g is None else tf.convert_to_tensor(g) for g, t in zip(grads, op.inputs)]
    names = _names("grouped_allreduce.grad", None, len(grads), op.get_attr("process_set"))
    reduced = _ops.relaxlib_grouped_allreduce(grads, names,
                                              reduce_op=op.get_attr("reduce_op"), prescale=op.get_attr("prescale"),
                                              postscale=op.get_attr("postscale"),
                                              process_set=op.get_attr("process_set"))
    return list(reduced) + [None]


# ---- allgather -------------------------------------------------------------------------------

def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates ``tensor`` from every rank of ``process_set`` along dimension 0 (which may
    differ per rank); differentiable."""
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise InvalidArgumentError("allgather needs a tensor with at least one dimension, got a scalar")
    return _ops.relaxlib_allgather(tensor, _name("allgather", name, process_set), process_set=_set_id(process_set))


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Allgathers several tensors as one atomic operation; differentiable."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    if any(t.shape.rank == 0 for t in tensors):
        raise InvalidArgumentError("allgather needs tensors with at least one dimension, got a scalar")
    return list(_ops.relaxlib_grouped_allgather(tensors, _names("grouped_allgather", name, len(tensors), process_set),
                                                process_set=_set_id(process_set)))


def _my_rows(grad, rows, process_set_id_value: int):
    """This rank's block (the rows it contributed) of a gathered gradient reduced over ranks."""
    ps_rank = _ops.relaxlib_rank(process_set=process_set_id_value)
    counts = _ops.relaxlib_allgather(tf.reshape(tf.cast(rows, tf.int64), [1]),
                                     _name("allgather.grad.rows", None, process_set_id_value),
                                     process_set=process_set_id_value)
    offset = tf.reduce_sum(counts[:ps_rank])
    return tf.slice(grad, tf.concat([[offset], tf.zeros([tf.rank(grad) - 1], tf.int64)], 0),
                    tf.concat([[tf.cast(rows, tf.int64)], tf.fill([tf.rank(grad) - 1], tf.constant(-1, tf.int64))],
                              0))


@tf.RegisterGradient("RelaxlibAllgather")
def _allgather_grad(op, grad):
    """The gathered gradient averaged over ranks (Horovod; summed with RELAX_COLLECTIVE_GRADIENTS
    =exact); each rank keeps the rows it contributed."""
    set_id = op.get_attr("process_set")
    reduced = _ops.relaxlib_allreduce(grad, _name("allgather.grad", None, set_id),
                                      reduce_op=basics.gather_gradient_op(),
                                      prescale=1.0, postscale=1.0, process_set=set_id)
    return [_my_rows(reduced, tf.shape(op.inputs[0], out_type=tf.int64)[0], set_id), None]


@tf.RegisterGradient("RelaxlibGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    """Each tensor's gradient as for allgather, reduced in one grouped operation."""
    set_id = op.get_attr("process_set")
    grads = [tf.zeros_like(t) if g is None else tf.convert_to_tensor(g) for g, t in zip(grads, op.outputs)]
    reduced = _ops.relaxlib_grouped_allreduce(grads, _names("grouped_allgather.grad", None, len(grads), set_id),
                                              reduce_op=basics.gather_gradient_op(), prescale=1.0, postscale=1.0,
                                              process_set=set_id)
    return [_my_rows(r, tf.shape(t, out_type=tf.int64)[0], set_id) for r, t in zip(reduced, op.inputs)] + [None]


# ---- broadcast -------------------------------------------------------------------------------

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """``root_rank``'s ``tensor`` (a world rank, member of ``process_set``) on every rank;
    differentiable (the root receives the sum of every rank's gradient)."""
    return _ops.relaxlib_broadcast(tf.convert_to_tensor(tensor), _name("broadcast", name, process_set),
                                   root_rank=int(root_rank), process_set=_set_id(process_set))


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Broadcasts variables from ``root_rank`` in place. Eagerly it returns the variables; in a
    TF1 graph the assigned values, whose evaluation runs the broadcast (as Horovod)."""
    single = not isinstance(variables, (list, tuple))
    variables = [variables] if single else list(variables)
    assigned = [var.assign(broadcast(var, root_rank, name=f"{name}.{i}" if name else None, process_set=process_set))
                for i, var in enumerate(variables)]
    results = variables if tf.executing_eagerly() else assigned
    return results[0] if single else results


@tf.RegisterGradient("RelaxlibBroadcast")
def _broadcast_grad(op, grad):
    reduced = _ops.relaxlib_allreduce(grad, _name("broadcast.grad", None, op.get_attr("process_set")),
                                      reduce_op=basics.gather_gradient_op(),
                                      prescale=1.0, postscale=1.0, process_set=op.get_attr("process_set"))
    is_root = tf.equal(_ops.relaxlib_rank(process_set=0), op.get_attr("root_rank"))
    return [tf.where(is_root, reduced, tf.zeros_like(reduced)), None]


# ---- reducescatter / alltoall ----------------------------------------------------------------

def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces ``tensor`` over ranks; this rank receives its dim-0 block (blocks differ by at
    most one row, the first ranks taking the extra rows); differentiable."""
    op = basics.resolve_op(op, None)
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise InvalidArgumentError("reducescatter needs a tensor with at least one dimension, got a scalar")
    compressed, ctx = compression.compress(tensor)
    out = _ops.relaxlib_reducescatter(compressed, _name("reducescatter", name, process_set), reduce_op=op,
                                      prescale=float(prescale_factor), postscale=float(postscale_factor),
                                      process_set=_set_id(process_set))
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average, name=None,
                          process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reduce-scatters several tensors as one atomic operation; differentiable."""
    op = basics.resolve_op(op, None)
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    compressed = [compression.compress(t) for t in tensors]
    out = _ops.relaxlib_grouped_reducescatter([c for c, _ in compressed],
                                              _names("grouped_reducescatter", name, len(tensors), process_set),
                                              reduce_op=op,
                                              prescale=float(prescale_factor), postscale=float(postscale_factor),
                                              process_set=_set_id(process_set))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(out, compressed)]


def _reducescatter_grad_of(grad, op):
    set_id = op.get_attr("process_set")
    gathered = _ops.relaxlib_allgather(grad, _name("reducescatter.grad", None, set_id), process_set=set_id)
    scale = op.get_attr("prescale") * op.get_attr("postscale")
    size = tf.cast(_ops.relaxlib_size(process_set=set_id), tf.float64)
    if basics.exact_gradients():
        scale = scale / size if op.get_attr("reduce_op") == Average else tf.constant(scale, tf.float64)
    else:  # Horovod: size x for Sum, unscaled for Average
        scale = scale * size if op.get_attr("reduce_op") == Sum else tf.constant(scale, tf.float64)
    return gathered * tf.cast(scale, gathered.dtype)


@tf.RegisterGradient("RelaxlibReducescatter")
def _reducescatter_grad(op, grad):
    return [_reducescatter_grad_of(grad, op), None]


@tf.RegisterGradient("RelaxlibGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    return [_reducescatter_grad_of(g, op) for g in grads] + [None]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends ``splits[i]`` rows of ``tensor`` (dim 0, in order) to rank i of ``process_set``
    (equal blocks when ``splits`` is None). Returns ``(received, received_splits)`` when
    ``splits`` is given, else only ``received`` (as Horovod)."""
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise InvalidArgumentError("alltoall needs a tensor with at least one dimension, got a scalar")
    given = splits is not None
    splits = tf.cast(tf.convert_to_tensor(splits), tf.int64) if given else tf.zeros([0], tf.int64)
    received, received_splits = _ops.relaxlib_alltoall(tensor, splits, _name("alltoall", name, process_set),
                                                       process_set=_set_id(process_set))
    return (received, received_splits) if given else received


@tf.RegisterGradient("RelaxlibAlltoall")
def _alltoall_grad(op, grad, _received_splits_grad):
    back, _ = _ops.relaxlib_alltoall(grad, op.outputs[1], _name("alltoall.grad", None, op.get_attr("process_set")),
                                     process_set=op.get_attr("process_set"))
    return [back, None, None]


# ---- synchronization and topology ops ----------------------------------------------------------

def barrier(process_set=global_process_set):
    """Returns once every rank of ``process_set`` reached the barrier."""
    _ops.relaxlib_barrier(_name("barrier", None, process_set), process_set=_set_id(process_set))


def join():
    """This rank has no more data: it takes part in other ranks' allreduces with zeros until all
    ranks joined. Returns the last rank to join (an int eagerly, an int32 tensor in a graph)."""
    last = _ops.relaxlib_join(_name("join", None))
    if not tf.executing_eagerly():
        return last
    from relaxlib_tf.functions import allgather_object  # (functions imports this module)
    # The others may have run unnamed operations this rank never named while it was joined.
    basics.align_auto_names(allgather_object(basics.auto_name_counts(), name="relax.join.auto_names"))
    return int(last)


def size_op(process_set_id=0, name=None):
    """The number of ranks (of a process set) as an int32 tensor, evaluated when run."""
    return _ops.relaxlib_size(process_set=process_set_id, name=name)


def rank_op(process_set_id=0, name=None):
    """This process's rank (in a process set) as an int32 tensor, evaluated when run."""
    return _ops.relaxlib_rank(process_set=process_set_id, name=name)


def local_size_op(name=None):
    """The number of ranks on this node as an int32 tensor, evaluated when run."""
    return _ops.relaxlib_local_size(name=name)


def local_rank_op(name=None):
    """This process's rank on its node as an int32 tensor, evaluated when run."""
    return _ops.relaxlib_local_rank(name=name)
