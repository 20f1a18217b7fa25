"""What a framework binding offers an algorithm, as small protocols (docs/architecture.md, "Python layer").

An algorithm touches tensors, the network and the optimizer only through the :class:`TrainingContext`
a binding hands its hooks. The context is composed of pieces, each a small abstract class a binding
implements once and may share between its contexts:

* :class:`ParameterAccess` (the context itself): the parameters, their gradients and the wrapped
  optimizer's update; framework- and optimizer-specific, so every context implements it.
* :class:`TensorMath` (``ctx.math``): arithmetic on flat tensors. One implementation per tensor
  kind: numpy arrays (``relaxlib.algorithms.host_math``), torch tensors, TensorFlow ops.
* :class:`Communicator` (``ctx.comm``): collectives on flat tensors with handles, the neighbour
  and group exchanges, the compressed all-reduce and its error-feedback memories.
* :class:`StepControl` (the context itself): how the step runs (eagerly or traced) and the host
  decisions inside it.

What only the step scale needs (per-element statistics, host views, the scale inside the compressed
all-reduce) is declared next to it, in ``relaxlib.algorithms.step_scale``; ``ctx.math`` implements
it, and a communicator that can run the scale inside the operation implements ``ScaledCompression``.

Algorithms call ``ctx.comm.*`` and ``ctx.math.*``; the same names on the context itself
(``ctx.allreduce_async``, ``ctx.zeros``, ...) stay as aliases, so algorithms written against the
flat interface keep working.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from relaxlib.errors import RelaxError


@dataclass(frozen=True)
class ParamRef:
    """A parameter as algorithms see it: its position in the optimizer and its size."""

    index: int
    name: str
    numel: int
    itemsize: int
    dtype: str
    group: int = 0  # index of its optimizer parameter group
    shape: tuple[int, ...] = ()  # the parameter's shape (() for a scalar, or where unknown)


# What a binding may lack, by name: an algorithm lists what it needs (Algorithm.requirements), a
# context what it offers (TrainingContext.capabilities), and a binding refuses an algorithm by
# naming what is missing instead of by its class.
CAPABILITIES = {
    "forward_hooks": "hooks before each module's forward (the model given to the optimizer)",
    "reduce_scatter": "reduce-scatter of flat buffers",
    "allgather": "all-gather of flat buffers",
    "async_broadcast": "asynchronous broadcast within a group",
    "group_allreduce": "all-reduce within a group of ranks",
    "node_groups": "per-node process groups (hierarchical communication)",
    "compressed_allreduce": "compressed all-reduce",
    "error_feedback": "error-feedback memories",
    "neighbor_average": "neighbour averaging",
    "group_average": "group averaging",
    "weights": "writing the parameters (set_params_from_flat, add_to_params)",
}


class TensorMath(ABC):
    """Arithmetic on flat tensors of one kind (``Tensor``: numpy arrays, torch tensors or TF tensors)."""

    # Whether buffers from ``zeros``, their slices and ``flatten_grads(out=...)`` can be written in
    # place (``add_``, ``copy_`` into a slice, ``matmul_into``): host arrays and torch tensors can;
    # TensorFlow's tensors cannot, and algorithms then build new tensors instead.
    writes_in_place: bool = True

    @abstractmethod
    def zeros(self, numel: int) -> Any:
        """A new flat float32 tensor of zeros that an algorithm may keep as state from step to
        step (in a traced TensorFlow step: a variable), updated with ``copy_``."""

    @abstractmethod
    def concat(self, tensors: list[Any]) -> Any:
        """A new flat tensor: ``tensors`` (flat, one dtype) one after another."""

    @abstractmethod
    def copy_(self, tensor: Any, value: Any) -> None:
        """Overwrites ``tensor`` (from ``zeros``) with ``value`` in place."""

    @abstractmethod
    def add_(self, tensor: Any, other: Any, alpha: float = 1.0) -> None:
        """``tensor += alpha * other`` in place."""

    @abstractmethod
    def scale_(self, tensor: Any, factor: float) -> None:
        """Multiplies ``tensor`` in place."""

    @abstractmethod
    def sum_of_squares(self, tensor: Any) -> float:
        """Sum of squared elements, accumulated in float64."""

    @abstractmethod
    def clone(self, tensor: Any) -> Any:
        """A copy of ``tensor`` that later in-place updates of it leave alone (for checkpoints)."""

    @abstractmethod
    def sqrt(self, tensor: Any) -> Any:
        """Element-wise square root as a new tensor, correctly rounded (IEEE 754), so that every
        binding computes the same bits."""

    @abstractmethod
    def repeat(self, tensor: Any, count: int) -> Any:
        """A new flat tensor: each element of ``tensor`` ``count`` times in a row."""

    def difference(self, a: Any, b: Any) -> Any:
        """``a - b`` as a new tensor."""
        return a - b

    # -- low-rank matrix products (relaxlib.algorithms.powersgd) --

    @abstractmethod
    def from_host(self, array: Any) -> Any:
        """A new flat float32 tensor of this kind (on its device) holding the values of the numpy
        ``array`` (e.g. random matrices drawn on host with a seed shared by every rank)."""

    @abstractmethod
    def matmul(self, a: Any, b: Any, rows: int, inner: int, cols: int, transpose_a: bool = False,
               transpose_b: bool = False) -> Any:
        """The product ``A @ B`` (``rows`` x ``cols``) as a new flat tensor, row-major. ``a`` holds
        A (``rows`` x ``inner``) row-major, or with ``transpose_a`` its transpose (``inner`` x
        ``rows``); ``b`` holds B (``inner`` x ``cols``), or with ``transpose_b`` its transpose."""

    def matmul_into(self, out: Any, a: Any, b: Any, rows: int, inner: int, cols: int, transpose_a: bool = False,
                    transpose_b: bool = False) -> None:
        """``matmul`` written into ``out`` (``rows * cols`` elements of a buffer from ``zeros``, or a
        slice of one) instead of a new tensor; kinds that can write in place override it."""
        self.copy_(out, self.matmul(a, b, rows, inner, cols, transpose_a, transpose_b))

    @abstractmethod
    def orthogonalize(self, tensor: Any, rows: int, cols: int, epsilon: float = 0.0) -> Any:
        """The columns of ``tensor`` viewed as a ``rows`` x ``cols`` matrix (row-major) made
        orthonormal by Gram-Schmidt, in column order, as a new flat tensor: each column, once the
        earlier ones are projected out, is divided by its norm plus ``epsilon``; a column whose
        norm plus ``epsilon`` is zero stays zero (never NaN)."""


class Communicator(ABC):
    """Collectives on flat tensors. ``Handle`` is an opaque token of a started operation, turned
    into its result by ``wait``; names must be the same on every rank. ``group``: a process set
    (None: every rank of the context)."""

    @abstractmethod
    def allreduce_async(self, tensor: Any, name: str, average: bool = True, group: Any = None) -> Any:
        """Averages (or sums) ``tensor`` over ranks (of ``group``) into a new tensor."""

    @abstractmethod
    def reduce_scatter_async(self, flat: Any, name: str) -> Any:
        """Averages ``flat`` over ranks; this rank receives its contiguous chunk (docs/architecture.md)."""

    @abstractmethod
    def allgather_async(self, shard: Any, name: str) -> Any:
        """Concatenates every rank's ``shard`` in rank order."""

    @abstractmethod
    def broadcast_async(self, tensor: Any, root: int, name: str, group: Any = None) -> Any:
        """``root``'s (a world rank) ``tensor`` on every rank of ``group``, into a new tensor."""

    @abstractmethod
    def wait(self, handle: Any) -> Any:
        """Result of a started collective."""

    @abstractmethod
    def compressed_allreduce_async(self, flat: Any, name: str, codec: str, state: Any = None, average: bool = True,
                                   group: Any = None, prescale: float = 1.0) -> Any:
        """Compressed all-reduce (docs/architecture.md) of a flat float32 tensor over ``group`` (None: all
        ranks); ``state`` is an error-feedback memory from ``error_feedback`` (None: without).
        What is compressed is ``prescale * flat`` (float32), the residuals in those units."""

    def compressed_allreduce_or_nan(self, flat: Any, name: str, codec: str, state: Any = None,
                                    group: Any = None) -> Any:
        """The result of ``compressed_allreduce_async``, or NaN in its place where it failed (the
        memory unchanged): a step passes the failure on to ranks that wait for this result
        before every rank raises. This default waits and catches; a communicator whose step may
        be traced (where nothing can be caught) has the operation itself give NaN."""
        try:
            return self.wait(self.compressed_allreduce_async(flat, name, codec, state, group=group))
        except RelaxError:
            return flat * math.nan

    @abstractmethod
    def error_feedback(self, numel: int, group: Any = None) -> Any:
        """A new, zeroed error-feedback memory for a flat tensor of ``numel`` elements; it has
        ``state_dict()``, ``load_state_dict(state)`` and ``reset()``."""

    @abstractmethod
    def neighbor_average_async(self, flat: Any, name: str, peers: list[int], weights: list[float], self_weight: float,
                               codec: str | None = None, estimates: tuple[Any, Any] | None = None,
                               consensus_step: float = 1.0, out: Any = None) -> Any:
        """``self_weight * flat + sum_k weights[k] * flat@peers[k]`` (world ranks) into ``out`` or a
        new tensor, not negotiated (see relaxlib.direct); with ``codec``, CHOCO against
        ``estimates`` = (own estimate, peers' estimates), flat float32 tensors updated in place."""

    @abstractmethod
    def group_average_async(self, flat: Any, name: str, members: list[int], weights: list[float],
                            out: Any = None) -> Any:
        """``sum_k weights[k] * flat@members[k]`` over the ascending world ranks ``members``
        (including this rank) into ``out`` or a new tensor, not negotiated (see relaxlib.direct)."""

    @abstractmethod
    def node_groups(self) -> tuple[Any, Any, int]:
        """Collective over all ranks: (this node's group, the group of node leaders or None on
        other ranks, world rank of this node's leader). Groups serve the ``group=`` arguments."""

    @abstractmethod
    def allreduce_scalar(self, value: float, name: str) -> float:
        """Sum of ``value`` over ranks (float64)."""

    @abstractmethod
    def broadcast_object(self, obj: Any, root: int = 0) -> Any:
        """``root``'s ``obj`` on every rank."""

    def reduce_scatter_parts_async(self, parts: list[Any], name: str) -> Any:
        """``reduce_scatter_async`` of ``parts`` laid end to end, each read where it lies (they
        must stay unchanged until the handle is waited for); None where this communicator cannot,
        and the caller concatenates them first."""
        return None

    def compressed_allreduce_parts_async(self, parts: list[Any], name: str, codec: str, state: Any = None,
                                         prescale: float = 1.0) -> Any:
        """``compressed_allreduce_async`` (average, all ranks) of ``parts`` laid end to end, each
        read where it lies; None where this communicator cannot (then the caller concatenates)."""
        return None


class ParameterAccess(ABC):
    """The parameters, their gradients and the wrapped optimizer, as flat tensors by optimizer index."""

    @abstractmethod
    def parameters(self) -> list[ParamRef]:
        """Optimizer parameters in optimizer order."""

    @abstractmethod
    def forward_order(self) -> list[tuple[int, int]] | None:
        """(parameter index, module id) in recorded forward execution order, once recorded
        (needs the model); parameters no module uses directly are absent. None before."""

    @abstractmethod
    def watch_buckets(self, buckets: list[list[int]]) -> None:
        """From now on call ``before_forward(ctx, b)`` before any module owning a parameter of
        bucket ``b`` runs forward."""

    @abstractmethod
    def flatten_grads(self, indices: list[int], out: Any = None) -> Any:
        """The gradients of ``indices`` concatenated into one flat tensor (missing ones as zeros)."""

    def grads_where_they_lie(self, indices: list[int]) -> list[Any] | None:
        """The gradients of ``indices`` as flat tensors that a communicator may read in place (no
        flattened copy), or None where one is missing or not such a tensor (this default)."""
        return None

    def add_grads(self, flat: Any, indices: list[int]) -> Any:
        """``flat`` plus the gradients of ``indices`` laid end to end (missing ones as zeros). A
        binding may add them into ``flat`` in place, without a flattened copy."""
        return flat + self.flatten_grads(indices)

    @abstractmethod
    def flatten_params(self, indices: list[int], out: Any = None) -> Any:
        """The parameters (weights) of ``indices`` concatenated into one flat tensor (``out`` if
        given and of the right size and dtype, else a new one)."""

    @abstractmethod
    def set_params_from_flat(self, indices: list[int], flat: Any) -> None:
        """Overwrites the parameters of ``indices`` with consecutive slices of ``flat``."""

    @abstractmethod
    def add_to_params(self, indices: list[int], flat: Any, alpha: float = 1.0) -> None:
        """Adds ``alpha`` times consecutive slices of ``flat`` to the parameters of ``indices``."""

    @abstractmethod
    def snapshot(self) -> Any:
        """The optimizer's hyper-parameters now (learning rate, momentum, ... per parameter group)."""

    @abstractmethod
    def apply_update(self, indices: list[int], snapshot: Any, flat_grads: Any = None) -> None:
        """Runs the wrapped optimizer's update on parameters ``indices`` only, with the
        hyper-parameters of ``snapshot``. The gradients are the parameters' own, or consecutive
        slices of ``flat_grads`` when given (then the parameters' gradients are left as they were)."""


class StepControl:
    """How a step runs and the host decisions inside it. These defaults are for steps whose
    operations run as they are called; a binding that traces the step (TensorFlow inside
    tf.function) overrides them."""

    rank: int

    def runs_eagerly(self) -> bool:
        """Whether the step's operations run as they are called, so that ``wait`` returns values
        and raises a failed operation's error (False while TensorFlow traces a step)."""
        return True

    def start_planned(self, plan: Callable[[], Any], start: Callable[[Any], Any], unchanged: Any) -> tuple[Any, Any]:
        """Decides on host and starts what was decided: ``plan()`` returns an ``AveragePlan``
        (relaxlib.algorithms.averaging) or None, ``start(plan)`` starts the communication it
        describes. Returns (the started handle, or None when the plan was None; whether one
        started). Where the step is traced once for all steps (TensorFlow inside tf.function)
        ``plan`` runs on host every step and the handle is then always a result: ``unchanged``
        when no plan started."""
        decided = plan()
        return (None, False) if decided is None else (start(decided), True)

    def on_host(self, fn: Callable[..., None], *args: Any) -> None:
        """Calls ``fn(*args)`` (bookkeeping that must happen every step, also where the step is
        traced once; ``args`` are values of this step, e.g. ``start_planned``'s flag)."""
        fn(*args)

    def check_not_nan(self, tensor: Any, message: str) -> Any:
        """For traced steps: ``tensor`` once the step has checked that its first element is not
        NaN; where it is, the step fails with ``InvalidArgumentError(message)``."""
        raise NotImplementedError(f"{type(self).__name__} runs its steps eagerly: look at the values")

    def log(self, message: str) -> None:
        """Reports a decision (rank 0 prints it)."""
        if self.rank == 0:
            print(f"[relaxlib] {message}", flush=True)


class TrainingContext(ParameterAccess, StepControl):
    """What a framework binding offers algorithms: the parameters and the optimizer (this
    object), ``math`` (a :class:`TensorMath`, which also implements the step scale's
    ``StepScaleMath``) and ``comm`` (a :class:`Communicator`). ``capabilities``: the optional
    parts (``CAPABILITIES``) this binding implements; the others raise NotImplementedError."""

    capabilities: frozenset[str] = frozenset(CAPABILITIES)
    rank: int
    size: int
    step_count: int            # completed optimizer steps
    max_grad_norm: float | None  # clip averaged gradients to this global L2 norm (None: no clipping)
    # Whether the optimizer's update replaces each parameter as a whole, so that another thread
    # reading a parameter sees it before or after the update, never half-way (TF variables; not
    # torch's in-place updates).
    updates_whole_parameters: bool = False
    math: TensorMath
    comm: Communicator

    # -- what needs both the gradients and the communicator: shared by every binding --

    def reduce_scatter_grads_async(self, indices: list[int], name: str) -> Any:
        """``comm.reduce_scatter_async`` of the gradients of ``indices`` laid end to end (missing
        ones as zeros): read where they lie when the binding and its communicator can (the
        gradients must then stay unchanged until the handle is waited for), else flattened into
        a buffer kept per ``name``."""
        parts = self.grads_where_they_lie(indices)
        handle = self.comm.reduce_scatter_parts_async(parts, name) if parts is not None else None
        return handle if handle is not None else self.comm.reduce_scatter_async(self._flat_grads(indices, name), name)

    def compressed_allreduce_grads_async(self, indices: list[int], name: str, codec: str, state: Any = None,
                                         prescale: float = 1.0) -> Any:
        """``comm.compressed_allreduce_async`` (average, all ranks) of the gradients of ``indices``
        laid end to end (missing ones as zeros), times ``prescale``; read where they lie, or
        flattened into a buffer kept per ``name``, as ``reduce_scatter_grads_async``."""
        parts = self.grads_where_they_lie(indices)
        handle = (self.comm.compressed_allreduce_parts_async(parts, name, codec, state, prescale)
                  if parts is not None else None)
        if handle is not None:
            return handle
        return self.comm.compressed_allreduce_async(self._flat_grads(indices, name), name, codec, state,
                                                    prescale=prescale)

    def add_change_to_params(self, indices: list[int], after: Any, before: Any) -> None:
        """Adds ``after - before`` to the parameters of ``indices`` (``after`` may be used as
        scratch: this default subtracts in place)."""
        self.math.add_(after, before, -1.0)
        self.add_to_params(indices, after)

    def _flat_grads(self, indices: list[int], name: str) -> Any:
        """``flatten_grads`` into a buffer kept per ``name`` (one request of a name is in flight)."""
        buffers = self.__dict__.setdefault("_flat_grad_buffers", {})
        buffers[name] = self.flatten_grads(indices, out=buffers.get(name))
        return buffers[name]


# The flat interface of earlier versions: ``ctx.<name>`` for what now lives on ``ctx.math`` and
# ``ctx.comm``, so algorithms written against it keep working (built-in ones use the pieces).
MATH_ALIASES = ("zeros", "concat", "copy_", "add_", "scale_", "sum_of_squares", "clone", "sqrt", "repeat",
                "difference", "from_host", "matmul", "matmul_into", "orthogonalize",
                # relaxlib.algorithms.step_scale.StepScaleMath
                "host_view", "factor_mean_squares", "outer", "finite_or")
COMM_ALIASES = ("allreduce_async", "reduce_scatter_async", "allgather_async", "broadcast_async", "wait",
                "compressed_allreduce_async", "compressed_allreduce_or_nan", "error_feedback",
                "neighbor_average_async", "group_average_async", "node_groups", "allreduce_scalar",
                "broadcast_object")


def _alias(piece: str, name: str) -> Callable[..., Any]:
    """A context method that calls ``self.<piece>.<name>``."""

    def method(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(getattr(self, piece), name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``self.{piece}.{name}`` (the flat interface of earlier versions)."
    return method


def _scaled_compressed_allreduce_async(self, flat: Any, name: str, codec: str, state: Any, step_scale: Any) -> Any:
    """``self.comm.scaled_compressed_allreduce_async`` where the communicator implements
    ``relaxlib.algorithms.step_scale.ScaledCompression``, else None (the flat interface of
    earlier versions)."""
    scaled = getattr(self.comm, "scaled_compressed_allreduce_async", None)
    return None if scaled is None else scaled(flat, name, codec, state, step_scale)


for _name in MATH_ALIASES:
    setattr(TrainingContext, _name, _alias("math", _name))
for _name in COMM_ALIASES:
    setattr(TrainingContext, _name, _alias("comm", _name))
TrainingContext.scaled_compressed_allreduce_async = _scaled_compressed_allreduce_async
