"""Compressed all-reduce for TensorFlow, with error feedback as a separate, checkpointable state
(mirrors ``relaxlib_torch.compressed``). Eager: the core reads and writes host memory directly;
inside ``tf.function`` the Keras ``DistributedOptimizer`` reaches it through ``tf.py_function``."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from relaxlib import basics, direct
from relaxlib.basics import Average, Sum
from relaxlib.compression import chunk_count
from relaxlib.process_sets import global_process_set


def _buffer(array: np.ndarray) -> direct.Buffer:
    return direct.Buffer(array.ctypes.data, array.size, array.dtype.name)


class ErrorFeedback:
    """Error-feedback memory of one compressed all-reduce stream (one tensor or bucket):
    ``worker`` (the full tensor's residual of this rank's compression) and ``owner`` (the residual
    of re-compressing the chunk this rank reduces), float32 host arrays. Keep one per tensor and
    reuse it every step; save it with ``state_dict()`` to resume a run exactly."""

    def __init__(self, numel: int, process_set=global_process_set) -> None:
        self.numel = numel
        self.process_set = process_set
        self.worker = np.zeros(numel, np.float32)
        self.owner = np.zeros(chunk_count(numel, process_set.size(), process_set.rank()), np.float32)

    def reset(self) -> None:
        """Forgets the accumulated residuals."""
        self.worker[:] = 0
        self.owner[:] = 0

    def state_dict(self) -> dict:
        """The residuals (copies)."""
        return {"worker": self.worker.copy(), "owner": self.owner.copy()}

    def load_state_dict(self, state: dict) -> None:
        """Restores residuals saved by ``state_dict`` (same tensor size and rank count)."""
        worker, owner = np.asarray(state["worker"], np.float32), np.asarray(state["owner"], np.float32)
        if worker.shape != self.worker.shape or owner.shape != self.owner.shape:
            raise ValueError("error-feedback state does not match this tensor size / number of ranks")
        self.worker[:] = worker
        self.owner[:] = owner


def compressed_allreduce_flat_async(flat: np.ndarray, codec: str, state: ErrorFeedback | None, name: str,
                                    average: bool = True, process_set=global_process_set) -> direct.DirectHandle:
    """Starts the compressed all-reduce of a flat float32 host array; ``wait()`` returns the result
    (a new array). With ``state`` its residuals are applied and updated (error feedback)."""
    src = np.ascontiguousarray(flat, np.float32).reshape(-1)
    out = np.empty_like(src)
    same_set = state is None or state.process_set.process_set_id == process_set.process_set_id
    if state is not None and (state.numel != src.size or not same_set):
        raise ValueError(f"{name}: the error-feedback state holds {state.numel} elements of process set "
                         f"{state.process_set.process_set_id}; this tensor has {src.size} in set "
                         f"{process_set.process_set_id}")
    worker = _buffer(state.worker) if state is not None else None
    owner = _buffer(state.owner) if state is not None else None
    return direct.flat_compressed_allreduce_async(_buffer(src), _buffer(out), name, codec, worker, owner,
                                                  average=average, process_set=process_set.process_set_id,
                                                  keepalive=(src, out, state), result=out)


def compressed_allreduce(tensor, codec: str = "uint8", state: ErrorFeedback | None = None, name: str | None = None,
                         op=Average, process_set=global_process_set) -> tf.Tensor:
    """Compressed all-reduce of a float32 tensor (eager): ``codec`` is one of
    ``relaxlib.compression.CODECS`` (``"fp16"``, ``"uint8"``, ``"sign"``), ``op`` Average or Sum,
    ``state`` an :class:`ErrorFeedback` of the tensor's size for error feedback. Every rank of
    ``process_set`` gets the same result."""
    if not tf.executing_eagerly():
        raise RuntimeError("relaxlib_tf.compressed_allreduce runs eagerly (wrap it in tf.py_function inside "
                           "tf.function)")
    if op not in (Average, Sum):
        raise ValueError("compressed all-reduce supports op=Average and op=Sum")
    value = tf.convert_to_tensor(tensor)
    if value.dtype != tf.float32:
        raise TypeError(f"compressed all-reduce needs a float32 tensor, got {value.dtype.name}")
    label = basics.auto_name("compressed_allreduce", name, process_set)
    handle = compressed_allreduce_flat_async(value.numpy(), codec, state, label, op == Average, process_set)
    return tf.reshape(tf.constant(handle.wait()), value.shape)
