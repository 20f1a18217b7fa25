"""Compressed all-reduce for TensorFlow, with error feedback as a separate, checkpointable state
(mirrors ``relaxlib_torch.compressed``): a TF op (``RelaxlibCompressedAllreduce``), so it runs
eagerly and inside ``tf.function`` alike, with the residuals in TF variables. The Keras
``DistributedOptimizer``'s algorithms, which work on host arrays, use :class:`HostErrorFeedback`."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from relaxlib import compression, direct
from relaxlib.basics import Average, Sum
from relaxlib.compression import chunk_count, chunk_offset, saved_owner_residual_applies
from relaxlib.direct import Buffer
from relaxlib.process_sets import global_process_set, process_set_id
from relaxlib_tf import mpi_ops


def _check_state(state, numel: int, set_id: int, what: str) -> None:
    """ValueError unless an error-feedback ``state`` fits a tensor of ``numel`` elements in set ``set_id``."""
    if state.numel != numel or process_set_id(state.process_set) != set_id:
        raise ValueError(f"{what}: the error-feedback state holds {state.numel} elements of process set "
                         f"{process_set_id(state.process_set)}; this tensor has {numel} in set {set_id}")


def _saved_residuals(state: dict, memory) -> tuple[np.ndarray, np.ndarray]:
    """(worker, owner) residuals of a saved ``state`` for ``memory``: the worker's of the same size
    (else ValueError); the owner's where its chunk is laid out as now
    (relaxlib.compression.saved_owner_residual_applies), else zeros."""
    worker = np.asarray(state["worker"], np.float32)
    if worker.shape != tuple(memory.worker.shape):
        raise ValueError(f"error-feedback state holds {worker.size} elements, this tensor {memory.numel}")
    owner_numel = int(memory.owner.shape[0])
    if saved_owner_residual_applies(state, memory.ranks, memory.owner_offset, owner_numel):
        return worker, np.asarray(state["owner"], np.float32)
    return worker, np.zeros(owner_numel, np.float32)


class ErrorFeedback(tf.Module):
    """Error-feedback memory of one compressed all-reduce stream (one tensor or bucket), in TF
    variables so that ``tf.train.Checkpoint`` saves it with the model: ``worker`` (the tensor's
    residual of this rank's compression, one per element) and ``owner`` (the residual of
    re-compressing the chunk this rank reduces: the tensor's elements from ``owner_offset``; it
    stays zero with two ranks, which have no owner stage). Keep one per tensor and pass it every
    step."""

    def __init__(self, numel: int, process_set=global_process_set, name: str | None = None) -> None:
        super().__init__(name=name)
        self.numel = numel
        self.process_set = process_set
        own = chunk_count(numel, process_set.size(), process_set.rank())
        self.worker = tf.Variable(tf.zeros([numel], tf.float32), trainable=False, name="worker_error")
        self.owner = tf.Variable(tf.zeros([own], tf.float32), trainable=False, name="owner_error")
        self.owner_offset = chunk_offset(numel, process_set.size(), process_set.rank())
        self.ranks = process_set.size()

    def rescale(self, factor) -> None:
        """Multiplies the residuals element by element by ``factor`` (the tensor's size): what
        keeps them in the input's units when the input's per-element scale changes."""
        self.worker.assign(self.worker * factor)
        self.owner.assign(self.owner * factor[self.owner_offset:self.owner_offset + self.owner.shape[0]])

    def reset(self) -> None:
        """Forgets the accumulated residuals."""
        self.worker.assign(tf.zeros_like(self.worker))
        self.owner.assign(tf.zeros_like(self.owner))

    def state_dict(self) -> dict:
        """The residuals as numpy arrays (what algorithms' ``state_dict`` saves; a
        ``tf.train.Checkpoint`` of this module saves the variables themselves)."""
        return {"worker": self.worker.numpy(), "owner": self.owner.numpy(), "ranks": self.ranks,
                "owner_offset": self.owner_offset}

    def load_state_dict(self, state: dict) -> None:
        """Restores residuals saved by ``state_dict`` (of the same tensor size; the owner's restarts
        at zero where its chunk is laid out otherwise now, e.g. after a lost rank)."""
        worker, owner = _saved_residuals(state, self)
        self.worker.assign(worker)
        self.owner.assign(owner)


def compressed_allreduce(tensor, codec: str = "uint8", state: ErrorFeedback | None = None, name: str | None = None,
                         op=Average, process_set=global_process_set, nan_on_error: bool = False) -> tf.Tensor:
    """Compressed all-reduce of a float32 tensor: ``codec`` is one of
    ``relaxlib.compression.CODECS`` (``"fp16"``, ``"uint8"``, ``"sign"``), ``op`` Average or Sum,
    ``state`` an :class:`ErrorFeedback` of the tensor's size for error feedback (its variables
    are updated). Every rank of ``process_set`` gets the same result. Eager or in ``tf.function``;
    its gradient is the all-reduce (same op) of the incoming gradient, as if it were exact.
    ``nan_on_error``: a failure (e.g. a rank's non-finite input) gives a result of NaN, the
    residuals unchanged, instead of an error, so that a graph can pass it on before it raises."""
    if op not in (Average, Sum):
        raise ValueError("compressed all-reduce supports op=Average and op=Sum")
    value = tf.convert_to_tensor(tensor)
    if value.dtype != tf.float32:
        raise TypeError(f"compressed all-reduce needs a float32 tensor, got {value.dtype.name}")
    set_id = process_set_id(process_set)
    if state is not None:
        _check_state(state, value.shape.num_elements(), set_id, "compressed_allreduce")
        worker, owner = state.worker, state.owner
    else:
        worker = owner = tf.zeros([0], tf.float32)
    output, new_worker, new_owner = mpi_ops._ops.relaxlib_compressed_allreduce(
        value, worker, owner, mpi_ops._name("compressed_allreduce", name, process_set),
        codec=compression.codec_id(codec), reduce_op=op, process_set=set_id, nan_on_error=nan_on_error)
    if state is not None:
        state.worker.assign(new_worker)
        state.owner.assign(new_owner)
    return output


@tf.RegisterGradient("RelaxlibCompressedAllreduce")
def _compressed_allreduce_grad(op, grad, *residual_grads):
    set_id = op.get_attr("process_set")
    reduced = mpi_ops._ops.relaxlib_allreduce(grad, mpi_ops._name("compressed_allreduce.grad", None, set_id),
                                              reduce_op=op.get_attr("reduce_op"), process_set=set_id)
    return [reduced, None, None, None]


class HostErrorFeedback:
    """:class:`ErrorFeedback` in host arrays, for algorithms that work on numpy arrays (the Keras
    optimizer's context): ``worker`` and ``owner`` float32 arrays; ``state_dict()`` saves them."""

    def __init__(self, numel: int, process_set=global_process_set) -> None:
        self.numel = numel
        self.process_set = process_set
        self.worker = np.zeros(numel, np.float32)
        self.owner = np.zeros(chunk_count(numel, process_set.size(), process_set.rank()), np.float32)
        self.owner_offset = chunk_offset(numel, process_set.size(), process_set.rank())
        self.ranks = process_set.size()

    def rescale(self, factor: np.ndarray) -> None:
        """Multiplies the residuals element by element by ``factor`` (the tensor's size): what
        keeps them in the input's units when the input's per-element scale changes."""
        self.worker *= factor
        self.owner *= factor[self.owner_offset:self.owner_offset + self.owner.size]

    def reset(self) -> None:
        """Forgets the accumulated residuals."""
        self.worker[:] = 0
        self.owner[:] = 0

    def state_dict(self) -> dict:
        """The residuals (copies)."""
        return {"worker": self.worker.copy(), "owner": self.owner.copy(), "ranks": self.ranks,
                "owner_offset": self.owner_offset}

    def load_state_dict(self, state: dict) -> None:
        """Restores residuals saved by ``state_dict`` (of the same tensor size; the owner's restarts
        at zero where its chunk is laid out otherwise now, e.g. after a lost rank)."""
        worker, owner = _saved_residuals(state, self)
        self.worker[:] = worker
        self.owner[:] = owner


def compressed_allreduce_flat_async(flat: np.ndarray | list[np.ndarray], codec: str, state: HostErrorFeedback | None,
                                    name: str, average: bool = True, process_set=global_process_set,
                                    step_scale: direct.StepScaleBuffers | None = None,
                                    prescale: float = 1.0) -> direct.DirectHandle:
    """Starts the compressed all-reduce of a flat float32 host array, or of a list of them laid
    end to end (each read where it lies), times ``prescale``; ``wait()`` returns the result (a new
    flat array). With ``state`` its residuals are applied and updated (error feedback); with
    ``step_scale`` the operation divides by that scale first and multiplies the result back."""
    laid = isinstance(flat, (list, tuple))
    src = [np.ascontiguousarray(a, np.float32).reshape(-1) for a in flat] if laid else \
        np.ascontiguousarray(flat, np.float32).reshape(-1)
    out = np.empty(sum(a.size for a in src) if laid else src.size, np.float32)
    if state is not None:
        _check_state(state, out.size, process_set_id(process_set), name)
    worker = Buffer.of(state.worker) if state is not None else None
    owner = Buffer.of(state.owner) if state is not None else None
    source = [Buffer.of(a) for a in src] if laid else Buffer.of(src)
    return direct.flat_compressed_allreduce_async(source, Buffer.of(out), name, codec, worker, owner,
                                                  average=average, process_set=process_set.process_set_id,
                                                  keepalive=(src, out, state), result=out,
                                                  step_scale=step_scale, prescale=prescale)
