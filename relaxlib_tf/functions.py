"""Helpers built on the TensorFlow collectives: broadcasting variables, and moving arbitrary
picklable Python objects between ranks."""

from __future__ import annotations

import cloudpickle
import numpy as np
import tensorflow as tf

from relaxlib import basics
from relaxlib.process_sets import global_process_set
from relaxlib_tf import mpi_ops


def broadcast_variables(variables, root_rank: int, process_set=global_process_set, inplace: bool = False):
    """Assigns ``root_rank``'s values to ``variables`` (tf.Variable or Keras variables) on every
    rank. Use it once the model (and optimizer) variables exist, so all ranks start equal.
    Eagerly it assigns at once; in a TF1 graph it returns the op that does (run it in the
    session), as Horovod. ``inplace`` is accepted for Horovod compatibility (assignment is always
    in place here)."""
    variables = list(variables)
    if not tf.executing_eagerly():
        base = mpi_ops._auto_name("broadcast_variables", None, process_set)
        return tf.group(*[var.assign(mpi_ops.broadcast(var, root_rank, name=f"{base}.{i}", process_set=process_set))
                          for i, var in enumerate(variables)])
    # one tf.function call: the broadcasts run concurrently and the engine fuses them
    values = _broadcast_all([tf.convert_to_tensor(v) for v in variables], root_rank, process_set)
    for var, value in zip(variables, values):
        var.assign(value)
    return None


@tf.function
def _broadcast_all(tensors: list, root_rank: int, process_set) -> list:
    base = mpi_ops._auto_name("broadcast_variables", None, process_set)
    return [mpi_ops.broadcast(t, root_rank, name=f"{base}.{i}", process_set=process_set)
            for i, t in enumerate(tensors)]


def broadcast_global_variables(root_rank: int):
    """TensorFlow 1 graph mode: the op broadcasting every global variable from ``root_rank`` (run
    it in the session). Eagerly there are no global variables (as in Horovod): use
    ``broadcast_variables(model.variables, root_rank)`` or the Keras callback."""
    if tf.executing_eagerly():
        raise RuntimeError("broadcast_global_variables() does not support eager execution; use "
                           "broadcast_variables(model.variables + optimizer.variables, root_rank) or "
                           "relaxlib_tf.keras.callbacks.BroadcastGlobalVariablesCallback")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def _to_numpy(value: tf.Tensor, session) -> np.ndarray:
    """The value of a tensor: eagerly at once, in a TF1 graph by running it in ``session`` (or
    the default session), as Horovod's object helpers do."""
    if tf.executing_eagerly():
        return value.numpy()
    return (session or tf.compat.v1.get_default_session()).run(value)


def _to_bytes(obj) -> np.ndarray:
    return np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8)


def broadcast_object(obj=None, root_rank: int = 0, session=None, name: str | None = None,
                     process_set=global_process_set):
    """Returns ``root_rank``'s ``obj`` (any picklable object) on every rank (eagerly, or in a TF1
    graph through ``session``)."""
    label = mpi_ops._auto_name("broadcast_object", f"broadcast_object.{name}" if name else None, process_set)
    is_root = basics.rank() == root_rank
    payload = _to_bytes(obj) if is_root else np.zeros(0, np.uint8)
    length = _to_numpy(mpi_ops.broadcast(tf.constant([payload.size], tf.int64), root_rank, name=label + ".size",
                                         process_set=process_set), session)
    if not is_root:
        payload = np.zeros(int(length[0]), np.uint8)
    data = _to_numpy(mpi_ops.broadcast(tf.constant(payload), root_rank, name=label + ".data",
                                       process_set=process_set), session)
    return obj if is_root else cloudpickle.loads(data.tobytes())


def broadcast_object_fn(root_rank: int = 0, session=None, name: str | None = None, process_set=global_process_set):
    """A function ``fn(obj)`` that broadcasts ``obj`` from ``root_rank`` (Horovod's helper)."""
    def broadcast_fn(obj=None):
        return broadcast_object(obj, root_rank, session=session, name=name, process_set=process_set)

    return broadcast_fn


def allgather_object(obj, session=None, name: str | None = None, process_set=global_process_set) -> list:
    """Returns the list of every rank's ``obj``, in rank order (eagerly, or in a TF1 graph through
    ``session``)."""
    label = mpi_ops._auto_name("allgather_object", f"allgather_object.{name}" if name else None, process_set)
    payload = _to_bytes(obj)
    sizes = _to_numpy(mpi_ops.allgather(tf.constant([payload.size], tf.int64), name=label + ".sizes",
                                        process_set=process_set), session)
    data = _to_numpy(mpi_ops.allgather(tf.constant(payload), name=label + ".data", process_set=process_set), session)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [cloudpickle.loads(data[bounds[i]:bounds[i + 1]].tobytes()) for i in range(len(bounds) - 1)]
