"""The algorithm interface shared by every framework binding.

An :class:`Algorithm` decides *what* is communicated and *when* during a training step. The
framework binding (``relaxlib_torch.DistributedOptimizer``, the Keras ``DistributedOptimizer``,
``DistributedGradientTape``) calls its hooks and hands it a :class:`TrainingContext`
(relaxlib.algorithms.context), the only way an algorithm touches tensors, the network or the
optimizer. Every built-in relaxation is written against this interface, and so can yours: see
docs/write-your-own-relaxation.md.

Hook order in one training step::

    before_forward(ctx, bucket)   # (needs_model only) a module of `bucket` is about to run
    on_gradient(ctx, index)       # parameter `index` has its gradient (once per backward)
    step(ctx)                     # optimizer.step(): communicate and/or apply updates
    flush(ctx)                    # make every deferred update visible (eval, checkpoint, end)
"""

from __future__ import annotations

import math

from relaxlib import perfmodel
from relaxlib.algorithms import modes
from relaxlib.algorithms.context import CAPABILITIES, ParamRef, TrainingContext
from relaxlib.errors import RelaxError

__all__ = ["CAPABILITIES", "Algorithm", "AllReduce", "ParamRef", "TrainingContext", "follow_new_world",
           "missing_capabilities", "require_capabilities", "step_or_abandon", "wait_out"]


def missing_capabilities(algorithm: Algorithm, capabilities: frozenset[str]) -> list[str]:
    """What ``algorithm`` needs that a context with ``capabilities`` lacks, described, sorted."""
    return sorted(CAPABILITIES[name] for name in algorithm.requirements() - capabilities)


def require_capabilities(algorithm: Algorithm, capabilities: frozenset[str], where: str) -> None:
    """NotImplementedError naming what ``algorithm`` needs that ``where`` (an entry point with
    ``capabilities``, and what to use instead) does not offer."""
    missing = missing_capabilities(algorithm, capabilities)
    if missing:
        raise NotImplementedError(f"{type(algorithm).__name__} needs {'; '.join(missing)}, which {where}")


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

    def teardown(self, ctx: TrainingContext) -> None:
        """Stops what ``setup`` started that outlives a step (threads, services): the binding calls
        it before setting the algorithm up again for a world re-formed after a lost rank
        (``hvd.elastic``; see ``follow_new_world``). The default has nothing to stop."""

    def state_for_new_world(self, state: dict) -> dict:
        """What of ``state`` (this algorithm's ``state_dict``, laid out for the world before a lost
        rank) carries over into the re-formed world: ``load_state_dict`` receives it after ``setup``
        there. The default keeps all of it; override where part of the state is laid out for the
        old ranks and loading would not notice (estimates of neighbours). Error-feedback state needs
        none: it records its chunk's layout, and a moved chunk's residual restarts at zero on load."""
        return state

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


def clip_to_max_grad_norm(ctx: TrainingContext, tensors: list, norm: float | None = None) -> None:
    """Scales ``tensors`` in place so that their global L2 norm is at most ``ctx.max_grad_norm``
    (nothing without it). ``norm``: the norm when the caller has it (e.g. summed over ranks), else
    computed here from the float64 sums of squares, so every algorithm clips the same way."""
    if not ctx.max_grad_norm:
        return
    if norm is None:
        norm = math.sqrt(sum(ctx.math.sum_of_squares(t) for t in tensors))
    coefficient = ctx.max_grad_norm / (norm + 1e-6)
    if coefficient < 1.0:
        for t in tensors:
            ctx.math.scale_(t, coefficient)


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


def follow_new_world(algorithm: Algorithm, ctx: TrainingContext, renew_context) -> TrainingContext:
    """Sets ``algorithm`` up again after ``relaxlib.reset()`` re-formed the world without lost ranks
    (``hvd.elastic``): waits out what the failed step left in flight, keeps the state that
    ``state_for_new_world`` carries over, stops what ``setup`` started (``teardown``), then sets the
    algorithm up on ``renew_context(ctx)`` (the binding's context, now over the new world) and loads
    the carried state there. Returns the new context."""
    algorithm.abandon_step(ctx)
    carried = algorithm.state_for_new_world(algorithm.state_dict())
    algorithm.teardown(ctx)
    new_ctx = renew_context(ctx)
    algorithm.setup(new_ctx)
    algorithm.load_state_dict(carried)
    return new_ctx


def wait_out(ctx: TrainingContext, handles) -> None:
    """Waits for each of ``handles``, dropping their relaxlib errors (``abandon_step``)."""
    for handle in handles:
        try:
            ctx.comm.wait(handle)
        except RelaxError:
            pass


class AllReduce(Algorithm):
    """Baseline: average gradients with a fused ring all-reduce, overlapped with backward
    (Horovod / DDP). The framework bindings implement it natively."""

    name = "allreduce"


modes.register(modes.Mode(modes.BASELINE, kind="exact", caveat="exact; the baseline", build=AllReduce,
                          predict=perfmodel.predict_allreduce, position=0))
