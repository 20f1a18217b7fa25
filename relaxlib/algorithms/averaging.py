"""The shared machinery of model-averaging algorithms (decentralized, partial all-reduce, async).

They communicate weights, not gradients: every rank applies its own gradients locally, and an
averaging step pulls the models together. One step is::

    before = x_t                 # flat copy of this rank's weights
    start averaging `before`     # neighbours / group / nothing this step
    x_t' = optimizer(x_t, g_t)   # local update, overlapping the averaging
    x_{t+1} = x_t' + (avg - before)

so with any optimizer the result is ``W x_t - lr * update``: the mixing of D-PSGD, with the local
update computed while the network works. Who averages with whom at a step is decided on host
(``_plan``); the rest is the context's tensors and collectives, so a graph framework can trace
the step once and still make that decision every step (``TrainingContext.start_planned``).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from relaxlib import basics, direct
from relaxlib.algorithms.base import Algorithm, TrainingContext, clip_to_max_grad_norm, wait_out

FLOAT_DTYPES = ("float32", "float64")


def dtype_name(dtype: str) -> str:
    """'torch.float32' / 'float32' -> 'float32'."""
    return dtype.rsplit(".", 1)[-1]


@dataclass
class AveragePlan:
    """Who this rank averages with at one step: world ``ranks`` with their ``weights`` (and the
    own ``self_weight`` of a neighbour average) under the collective's ``name``, which every
    participant uses. Host values from ``_plan``; tensors of them inside a traced step."""

    ranks: Any
    weights: Any
    name: Any
    self_weight: Any = 0.0


class ModelAveraging(Algorithm):
    """Base of algorithms that average weights. Subclasses implement ``_plan(ctx, step)`` (on
    host: an ``AveragePlan``, or None when this rank does not average at ``step``) and
    ``_issue(ctx, flat, plan)`` (start that average with the context's collectives), and may
    override ``_join_serves`` (False when nobody can wait for a rank that stopped).

    ``averagings`` counts the averages this rank took part in with at least one peer: against the
    number of steps it tells how often a mode that skips or goes alone (``period``, smart groups,
    async averaging) actually mixed the models."""

    _join_serves = True

    def requirements(self) -> frozenset[str]:
        return super().requirements() | {"weights"}

    def setup(self, ctx: TrainingContext) -> None:
        params = ctx.parameters()
        kinds = {dtype_name(p.dtype) for p in params}
        if len(kinds) != 1 or not kinds <= set(FLOAT_DTYPES):
            raise ValueError(f"{self.name} averages one flat float32 or float64 model; parameters have dtypes "
                             f"{sorted(kinds)}")
        if ctx.size != basics.size():
            raise ValueError(f"{self.name} runs over all ranks; process sets are not supported")
        self._ctx = ctx
        self._indices = [p.index for p in params]
        self._numel = sum(p.numel for p in params)
        self._last_step = -1  # the last step this rank ran (its own numbering)
        self._adopted_step: int | None = None  # set by an average that moves this rank ahead
        self._params_lock = threading.Lock()  # against a communication thread (async averaging)
        # flat buffers reused every step: fresh large allocations cost page faults on each write
        self._before: Any = None
        self._averaged: Any = None
        self._handle: Any = None  # the average started before this step's local update
        self._started: Any = False  # whether it is one (a tensor inside a traced step)
        self.averagings = 0  # averages this rank took part in with at least one peer
        self._joined = False
        self._finishing = False  # joined by shutdown(): this rank submits no negotiated operation again
        basics.before_shutdown(self.finish)

    # -- one training step --

    def _local_update(self, ctx: TrainingContext) -> None:
        """This rank's optimizer update from its own gradients (clipped to max_grad_norm)."""
        snapshot = ctx.snapshot()
        if not ctx.max_grad_norm:
            ctx.apply_update(self._indices, snapshot)
            return
        grads = ctx.flatten_grads(self._indices)
        clip_to_max_grad_norm(ctx, [grads])
        ctx.apply_update(self._indices, snapshot, flat_grads=grads)

    def traceable(self, ctx: TrainingContext) -> bool:
        """Yes unless clipping needs the gradients' norm as a host value: the plan of each step
        runs on host through ``ctx.start_planned``."""
        return not ctx.max_grad_norm

    def _plan(self, ctx: TrainingContext, step: int) -> AveragePlan | None:
        raise NotImplementedError

    def _issue(self, ctx: TrainingContext, flat: Any, plan: AveragePlan) -> Any:
        raise NotImplementedError

    def _plan_at(self, ctx: TrainingContext, step: int | None) -> AveragePlan | None:
        """The plan of ``step`` (None: the step after this rank's last), decided when it runs."""
        return self._plan(ctx, self._last_step + 1 if step is None else step)

    def _begin_average(self, ctx: TrainingContext, step: int | None) -> None:
        self._before = ctx.flatten_params(self._indices, out=self._before)
        before = self._before
        self._handle, self._started = ctx.start_planned(
            lambda: self._plan_at(ctx, step), lambda plan: self._issue(ctx, before, plan), before)

    def _end_average(self, ctx: TrainingContext) -> None:
        """Adds the average's change to the weights: x <- x + (averaged - before) keeps the local
        update made while averaging."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._averaged = ctx.comm.wait(handle)
            ctx.add_change_to_params(self._indices, self._averaged, self._before)

    def abandon_step(self, ctx: TrainingContext) -> None:
        """Waits out the average in flight (its change is not added: the weights stay this rank's)."""
        handle, self._handle = self._handle, None
        if handle is not None and ctx.runs_eagerly():
            wait_out(ctx, [handle])

    def _count(self, started: Any) -> None:
        if bool(started):
            self.averagings += 1

    def _average_step(self, ctx: TrainingContext, step: int, update: bool) -> None:
        self._begin_average(ctx, step)
        if update:
            self._local_update(ctx)
        self._end_average(ctx)
        ctx.on_host(self._count, self._started)

    def step(self, ctx: TrainingContext) -> None:
        self.before_update(ctx)
        self._local_update(ctx)
        self.after_update(ctx)

    def splits_around_update(self, ctx: TrainingContext) -> bool:
        """The local update sits between starting and finishing the average (unless clipping
        needs the gradients' norm first)."""
        return not ctx.max_grad_norm

    def before_update(self, ctx: TrainingContext) -> None:
        """Copies the weights and starts this step's average."""
        self._begin_average(ctx, None)

    def after_update(self, ctx: TrainingContext) -> None:
        """Finishes the average and adds its change to the locally updated weights."""
        self._end_average(ctx)
        ctx.on_host(self._advance, self._started)

    def _advance(self, started: Any) -> None:
        """Host bookkeeping at the end of a step: counts its average, moves to the next step."""
        self._count(started)
        step = self._last_step + 1
        self._last_step = step if self._adopted_step is None else max(step, self._adopted_step)
        self._adopted_step = None

    # -- monitoring and the end of training --

    def _effective_params(self, ctx: TrainingContext) -> Any:
        """A flat copy of the weights including changes not yet applied."""
        return ctx.flatten_params(self._indices)

    def consensus_distance(self) -> float:
        """Collective: the mean over ranks of ||x_i - mean_j x_j|| (L2 over all weights)."""
        ctx = self._ctx
        self.flush(ctx)
        with self._params_lock:
            params = self._effective_params(ctx)
        average = ctx.comm.wait(ctx.comm.allreduce_async(params, f"{self.name}.consensus"))
        distance = math.sqrt(ctx.math.sum_of_squares(ctx.math.difference(params, average)))
        return ctx.comm.allreduce_scalar(distance, f"{self.name}.distance") / ctx.size

    def average_now(self) -> None:
        """Collective: replaces every rank's model by the exact mean over all ranks (call it at the
        end of training, after ``join`` if ranks stopped at different steps)."""
        ctx = self._ctx
        self.flush(ctx)
        mean = ctx.comm.wait(ctx.comm.allreduce_async(ctx.flatten_params(self._indices), f"{self.name}.average_now"))
        ctx.set_params_from_flat(self._indices, mean)

    def finish(self) -> None:
        """Collective end of training, run by ``shutdown()`` (also at exit) unless this rank already
        joined: a rank that finishes early serves the others' remaining steps instead of stopping
        the engine under them."""
        if not self._joined:
            self._finishing = True
            self.join(self._ctx)

    def join(self, ctx: TrainingContext) -> int:
        """This rank ran out of data: keep averaging (without local updates) for as long as peers
        still run steps that include it, until every rank joined. Returns the last step of any
        rank. Every rank calls it once its own steps are done."""
        self._joined = True
        self.flush(ctx)
        finishing = self._finishing
        if not self._join_serves:
            return direct.serve_until_all_joined(self._last_step, lambda step: None, finishing=finishing)

        def passive(step: int) -> None:
            self._average_step(ctx, step, update=False)
            self._last_step = step

        return direct.serve_until_all_joined(self._last_step, passive, finishing=finishing)
