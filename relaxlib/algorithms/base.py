"""The algorithm interface shared by every framework binding.

An :class:`Algorithm` decides *what* is communicated and *when* during a training step. The
framework binding (``relaxlib_torch.DistributedOptimizer``, later the TensorFlow tape/optimizer)
calls its hooks and hands it a :class:`TrainingContext`, which is the only way an algorithm touches
tensors, the network or the optimizer. Every built-in relaxation is written against this
interface, and so can yours: see docs/write-your-own-relaxation.md.

Hook order in one training step::

    before_forward(ctx, bucket)   # (needs_model only) a module of `bucket` is about to run
    on_gradient(ctx, index)       # parameter `index` has its gradient (once per backward)
    step(ctx)                     # optimizer.step(): communicate and/or apply updates
    flush(ctx)                    # make every deferred update visible (eval, checkpoint, end)
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from relaxlib import perfmodel
from relaxlib.algorithms import modes
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


def missing_capabilities(algorithm: Algorithm, capabilities: frozenset[str]) -> list[str]:
    """What ``algorithm`` needs that a context with ``capabilities`` lacks, described, sorted."""
    return sorted(CAPABILITIES[name] for name in algorithm.requirements() - capabilities)


def require_capabilities(algorithm: Algorithm, capabilities: frozenset[str], where: str) -> None:
    """NotImplementedError naming what ``algorithm`` needs that ``where`` (an entry point with
    ``capabilities``, and what to use instead) does not offer."""
    missing = missing_capabilities(algorithm, capabilities)
    if missing:
        raise NotImplementedError(f"{type(algorithm).__name__} needs {'; '.join(missing)}, which {where}")


class TrainingContext(ABC):
    """What a framework binding offers algorithms. ``Tensor`` means the framework's tensor type;
    ``Handle`` is an opaque token of a started collective. ``capabilities``: the optional parts
    (``CAPABILITIES``) this binding implements; the others raise NotImplementedError."""

    capabilities: frozenset[str] = frozenset(CAPABILITIES)
    rank: int
    size: int
    step_count: int            # completed optimizer steps
    max_grad_norm: float | None  # clip averaged gradients to this global L2 norm (None: no clipping)
    # Whether the optimizer's update replaces each parameter as a whole, so that another thread
    # reading a parameter sees it before or after the update, never half-way (TF variables; not
    # torch's in-place updates).
    updates_whole_parameters: bool = False

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

    # -- tensors --
    @abstractmethod
    def flatten_grads(self, indices: list[int], out: Any = None) -> Any:
        """The gradients of ``indices`` concatenated into one flat tensor (missing ones as zeros)."""

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
    def sum_of_squares(self, tensor: Any) -> float:
        """Sum of squared elements, accumulated in float64."""

    @abstractmethod
    def scale_(self, tensor: Any, factor: float) -> None:
        """Multiplies ``tensor`` in place."""

    @abstractmethod
    def add_(self, tensor: Any, other: Any, alpha: float = 1.0) -> None:
        """``tensor += alpha * other`` in place."""

    @abstractmethod
    def copy_(self, tensor: Any, value: Any) -> None:
        """Overwrites ``tensor`` (from ``zeros``) with ``value`` in place."""

    @abstractmethod
    def zeros(self, numel: int) -> Any:
        """A new flat float32 tensor of zeros that an algorithm may keep as state from step to
        step (in a traced TensorFlow step: a variable), updated with ``copy_``."""

    @abstractmethod
    def concat(self, tensors: list[Any]) -> Any:
        """A new flat tensor: ``tensors`` (flat, one dtype) one after another."""

    def runs_eagerly(self) -> bool:
        """Whether the step's operations run as they are called, so that ``wait`` returns values
        and raises a failed operation's error (False while TensorFlow traces a step)."""
        return True

    def host_view(self, tensor: Any) -> Any:
        """A numpy array sharing ``tensor``'s memory when it is a contiguous float32 tensor in
        host memory that may be written in place, else None (then algorithms compose this
        context's tensor operations instead of calling the core's host passes)."""
        return None

    def sqrt(self, tensor: Any) -> Any:
        """Element-wise square root as a new tensor, correctly rounded (IEEE 754), so that every
        binding computes the same bits. This default suits host arrays (numpy's power 0.5 is its
        sqrt); a binding whose own square root rounds otherwise overrides it."""
        return tensor ** 0.5

    def factor_mean_squares(self, tensor: Any, rows: int, cols: int) -> Any:
        """Mean squares of a flat float32 ``tensor`` viewed as ``rows x cols`` (a parameter's
        step), as a new float32 tensor of ``rows + cols + 1``: each row's, each column's, then the
        whole tensor's. Computed in float64 and rounded once, so every binding gets the same bits.
        This default is for host arrays."""
        import numpy as np
        squares = np.square(np.asarray(tensor), dtype=np.float64).reshape(rows, cols)
        row = squares.mean(axis=1)
        return np.concatenate([row, squares.mean(axis=0), [row.mean()]]).astype(np.float32)

    def outer(self, a: Any, b: Any) -> Any:
        """The outer product of two flat tensors, flattened row by row (``a[i] * b[j]`` at
        ``i * len(b) + j``), as a new tensor. This default is for host arrays."""
        import numpy as np
        return np.outer(a, b).reshape(-1)

    def repeat(self, tensor: Any, count: int) -> Any:
        """A new flat tensor: each element of ``tensor`` ``count`` times in a row. This default is
        for host arrays."""
        import numpy as np
        return np.repeat(tensor, count)

    def finite_or(self, value: Any, fallback: Any) -> Any:
        """A new tensor: ``value`` where it is finite, else ``fallback`` (same shape). This default
        is for host arrays."""
        import numpy as np
        return np.where(np.isfinite(value), value, fallback)

    def difference(self, a: Any, b: Any) -> Any:
        """``a - b`` as a new tensor."""
        return a - b

    def clone(self, tensor: Any) -> Any:
        """A copy of ``tensor`` that later in-place updates of it leave alone (for checkpoints).
        This default is for host arrays."""
        return tensor.copy()

    def add_change_to_params(self, indices: list[int], after: Any, before: Any) -> None:
        """Adds ``after - before`` to the parameters of ``indices`` (``after`` may be used as
        scratch)."""
        self.add_(after, before, -1.0)
        self.add_to_params(indices, after)

    # -- host decisions inside a step --
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

    # -- communication --
    @abstractmethod
    def reduce_scatter_async(self, flat: Any, name: str) -> Any:
        """Averages ``flat`` over ranks; this rank receives its contiguous chunk (docs/architecture.md)."""

    def reduce_scatter_grads_async(self, indices: list[int], name: str) -> Any:
        """``reduce_scatter_async`` of the gradients of ``indices`` laid end to end (missing ones as
        zeros). This default flattens them into a buffer kept per ``name``; a binding whose core
        reads tensors where they lie overrides it to skip that copy (the gradients must then stay
        unchanged until the handle is waited for)."""
        return self.reduce_scatter_async(self._flat_grads(indices, name), name=name)

    def _flat_grads(self, indices: list[int], name: str) -> Any:
        """``flatten_grads`` into a buffer kept per ``name`` (one request of a name is in flight)."""
        buffers = self.__dict__.setdefault("_flat_grad_buffers", {})
        buffers[name] = self.flatten_grads(indices, out=buffers.get(name))
        return buffers[name]

    @abstractmethod
    def allreduce_async(self, tensor: Any, name: str, average: bool = True, group: Any = None) -> Any:
        """Averages (or sums) ``tensor`` over ranks (of ``group``) into a new tensor."""

    @abstractmethod
    def broadcast_async(self, tensor: Any, root: int, name: str, group: Any = None) -> Any:
        """``root``'s (a world rank) ``tensor`` on every rank of ``group``, into a new tensor."""

    @abstractmethod
    def allgather_async(self, shard: Any, name: str) -> Any:
        """Concatenates every rank's ``shard`` in rank order."""

    @abstractmethod
    def wait(self, handle: Any) -> Any:
        """Result of a started collective."""

    @abstractmethod
    def compressed_allreduce_async(self, flat: Any, name: str, codec: str, state: Any = None, average: bool = True,
                                   group: Any = None, prescale: float = 1.0) -> Any:
        """Compressed all-reduce (docs/architecture.md) of a flat float32 tensor over ``group`` (None: all
        ranks); ``state`` is an error-feedback memory from ``error_feedback`` (None: without).
        What is compressed is ``prescale * flat`` (float32), the residuals in those units."""

    def compressed_allreduce_grads_async(self, indices: list[int], name: str, codec: str, state: Any = None,
                                         prescale: float = 1.0) -> Any:
        """``compressed_allreduce_async`` (average, all ranks) of the gradients of ``indices`` laid
        end to end (missing ones as zeros), times ``prescale``. This default flattens them into a
        buffer kept per ``name``; a binding whose core reads tensors where they lie overrides it
        to skip that copy (the gradients must then stay unchanged until the handle is waited for)."""
        return self.compressed_allreduce_async(self._flat_grads(indices, name), name, codec, state, prescale=prescale)

    def scaled_compressed_allreduce_async(self, flat: Any, name: str, codec: str, state: Any,
                                          step_scale: Any) -> Any | None:
        """``compressed_allreduce_async`` (average, all ranks) with the factored step scale run
        inside the operation (``step_scale``: ``relaxlib.direct.StepScaleBuffers``), whose result
        is in ``flat``'s own units; None where this context cannot, and the caller composes the
        scale around ``compressed_allreduce_async`` instead."""
        return None

    def compressed_allreduce_or_nan(self, flat: Any, name: str, codec: str, state: Any = None,
                                    group: Any = None) -> Any:
        """The result of ``compressed_allreduce_async``, or NaN in its place where it failed (the
        memory unchanged): a step passes the failure on to ranks that wait for this result
        before every rank raises. This default waits and catches; a binding whose step may be
        traced (where nothing can be caught) has the operation itself give NaN."""
        try:
            return self.wait(self.compressed_allreduce_async(flat, name, codec, state, group=group))
        except RelaxError:
            return flat * math.nan

    def check_not_nan(self, tensor: Any, message: str) -> Any:
        """For traced steps: ``tensor`` once the step has checked that its first element is not
        NaN; where it is, the step fails with ``InvalidArgumentError(message)``."""
        raise NotImplementedError(f"{type(self).__name__} runs its steps eagerly: look at the values")

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

    # -- optimizer --
    @abstractmethod
    def snapshot(self) -> Any:
        """The optimizer's hyper-parameters now (learning rate, momentum, ... per parameter group)."""

    @abstractmethod
    def apply_update(self, indices: list[int], snapshot: Any, flat_grads: Any = None) -> None:
        """Runs the wrapped optimizer's update on parameters ``indices`` only, with the
        hyper-parameters of ``snapshot``. The gradients are the parameters' own, or consecutive
        slices of ``flat_grads`` when given (then the parameters' gradients are left as they were)."""

    def log(self, message: str) -> None:
        """Reports a decision (rank 0 prints it)."""
        if self.rank == 0:
            print(f"[relaxlib] {message}", flush=True)


class Algorithm:
    """Base class of communication algorithms; override the hooks you need.

    ``needs_model``: the binding must be given the model, to record forward order and call
    ``before_forward``. The default ``step`` is plain data parallelism without communication
    (each rank applies its own gradients), so subclasses always override it.
    """

    name = "algorithm"
    needs_model = False

    def traceable(self, ctx: TrainingContext) -> bool:
        """Whether this configuration's step(), with the optimizer of ``ctx`` (not set up yet),
        only chains the context's collectives, ``flatten_*``, ``concat`` and updates, reads no
        host value from them, keeps no tensor from one step to the next in Python and does the same
        every step except what it decides through ``ctx.start_planned`` and ``ctx.on_host``: a
        graph framework (TensorFlow inside tf.function) may then trace it once as ops instead of
        calling it on host arrays every step."""
        return False

    def splits_around_update(self, ctx: TrainingContext) -> bool:
        """Whether step() is ``before_update(ctx)``, then the wrapped optimizer's update of every
        parameter with its own gradient (``apply_update`` of all, with ``ctx.snapshot()``), then
        ``after_update(ctx)``: a graph framework may then run the update as part of its graph
        and only the two halves on host arrays."""
        return False

    def before_update(self, ctx: TrainingContext) -> None:
        """What step() does before the optimizer's update (see ``splits_around_update``)."""
        raise NotImplementedError(f"{self.name} does not split its step around the update")

    def after_update(self, ctx: TrainingContext) -> None:
        """What step() does after the optimizer's update (see ``splits_around_update``)."""
        raise NotImplementedError(f"{self.name} does not split its step around the update")

    def requirements(self) -> frozenset[str]:
        """The optional context capabilities (``CAPABILITIES``) this configuration uses; a binding
        without one of them refuses the algorithm, naming it. Override when you use one."""
        return frozenset({"forward_hooks"}) if self.needs_model else frozenset()

    def setup(self, ctx: TrainingContext) -> None:
        """Called once, when the optimizer is wrapped."""

    def before_forward(self, ctx: TrainingContext, bucket: int) -> None:
        """A module owning parameters of ``bucket`` is about to run forward."""

    def on_gradient(self, ctx: TrainingContext, index: int) -> None:
        """The gradient of parameter ``index`` is complete for this step."""

    def step(self, ctx: TrainingContext) -> None:
        """``optimizer.step()``: communicate and apply (or schedule) the update."""
        ctx.apply_update([p.index for p in ctx.parameters()], ctx.snapshot())

    def abandon_step(self, ctx: TrainingContext) -> None:
        """``step()`` raised (e.g. a compressed all-reduce refused one rank's non-finite input,
        which fails on every rank): wait out what this step still has in flight and forget its
        per-step state, so that the next step starts afresh as if this one had not been taken.
        Errors of the operations waited out are dropped (the first one is being raised). The
        default has nothing in flight between steps."""

    def flush(self, ctx: TrainingContext) -> None:
        """Applies every deferred update so the parameters are current."""

    def join(self, ctx: TrainingContext) -> int:
        """This rank ran out of data while others may go on (``optimizer.join()``); returns once
        every rank joined. Algorithms whose peers wait for this rank must serve them meanwhile."""
        raise NotImplementedError(f"{self.name} does not support join(); use relaxlib_torch.join() with the "
                                  "all-reduce baseline, or a model-averaging algorithm")

    def state_dict(self) -> dict:
        """Checkpointable state of the algorithm (e.g. error-feedback memories)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restores what ``state_dict`` returned."""

    def describe(self) -> str:
        """One-line human-readable summary of the configuration."""
        knobs = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()) if not k.startswith("_"))
        return f"{self.name}({knobs})"

    def __repr__(self) -> str:
        return self.describe()


def step_or_abandon(algorithm: Algorithm, ctx: TrainingContext) -> None:
    """Runs ``algorithm.step(ctx)``; if it raises, lets the algorithm abandon the step first
    (``abandon_step``) where its operations ran and can be waited for (``ctx.runs_eagerly()``:
    not while a graph is being traced), then re-raises. Ctrl-C is not caught: waiting could block."""
    try:
        algorithm.step(ctx)
    except Exception:
        if ctx.runs_eagerly():
            algorithm.abandon_step(ctx)
        raise


def wait_out(ctx: TrainingContext, handles) -> None:
    """Waits for each of ``handles``, dropping their relaxlib errors (``abandon_step``)."""
    for handle in handles:
        try:
            ctx.wait(handle)
        except RelaxError:
            pass


class AllReduce(Algorithm):
    """Baseline: average gradients with a fused ring all-reduce, overlapped with backward
    (Horovod / DDP). The framework bindings implement it natively."""

    name = "allreduce"


modes.register(modes.Mode(modes.BASELINE, kind="exact", caveat="exact; the baseline", build=AllReduce,
                          predict=perfmodel.predict_allreduce, position=0))
