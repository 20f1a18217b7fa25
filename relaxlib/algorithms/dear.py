"""DeAR: decoupled all-reduce (reduce-scatter overlapped with backward, all-gather with the next
forward), written against the framework-neutral algorithm interface.

Per step, for buckets of consecutive layers in forward execution order:

* backward: when every gradient of bucket g is accumulated, start g's reduce-scatter;
* ``optimizer.step()``: wait for the reduce-scatters (this rank now holds the averaged chunk of
  every bucket), clip by the global norm if asked (one scalar all-reduce), snapshot the
  hyper-parameters, queue the all-gathers in forward order (the engine runs them back to back);
* next forward: before a module of bucket g runs, wait for g's all-gather and apply g's update
  (exactly once).

Every all-gather is queued at step() instead of starting g+1's from g's hook (the paper's
chain): the chain leaves the link idle while Python reaches the next hook (docs/dear.md has the
measurement).

The update math is the wrapped optimizer's, applied per bucket with the hyper-parameters of its
own step, so training is the same as with all-reduce (bitwise with two ranks).

A binding without forward hooks (Keras) runs the same schedule up to the all-gathers and then
applies the whole step in ``optimizer.step()``, in one optimizer call once every all-gather has
landed: the reduce-scatters and all-gathers of all buckets still run back to back in the engine,
but none of them overlaps backward or the next forward, and optimizer-wide features (global-norm
clipping, moving averages, the iteration count) see one step, as with all-reduce.
"""

from __future__ import annotations

import math
import time

from relaxlib import perfmodel
from relaxlib.algorithms import modes
from relaxlib.algorithms.base import Algorithm, TrainingContext, clip_to_max_grad_norm, wait_out
from relaxlib.algorithms.bucketing import ParamSpec, auto_bucket_bytes, make_buckets
from relaxlib.algorithms.tuning import BayesianSearch

MB = 1 << 20


class DeAR(Algorithm):
    """Decoupled all-reduce. ``fusion_mb``: bucket size in MiB; None (the default) chooses it when
    the first step has recorded the forward order: a sixteenth of the model (1 to 25 MiB) where
    the ranks span nodes, 25 MiB on one node (``bucketing.auto_bucket_bytes``). ``tune=True``
    searches it (1..100 MB) by Bayesian optimization of the measured iteration time over
    ``tune_trials`` trials of ``tune_steps`` steps each, decided on rank 0."""

    name = "dear"
    needs_model = True

    def requirements(self) -> frozenset[str]:
        return frozenset({"reduce_scatter", "allgather"})  # forward hooks are used where the binding has them

    def traceable(self, ctx: TrainingContext) -> bool:
        """Every step the same ops, except while tuning (timed trials re-bucket between steps)."""
        return not self.tune

    def __init__(self, fusion_mb: float | None = None, tune: bool = False, tune_trials: int = 10,
                 tune_steps: int = 4) -> None:
        if fusion_mb is not None and not fusion_mb > 0:  # (NaN too)
            raise ValueError(f"fusion_mb must be positive or None (chosen from the model), not {fusion_mb!r}")
        if tune and (tune_trials < 1 or tune_steps < 2):
            raise ValueError("tuning needs tune_trials >= 1 and tune_steps >= 2")
        self.fusion_mb = fusion_mb
        self.tune = tune
        self.tune_trials = tune_trials
        self.tune_steps = tune_steps
        self.chosen_fusion_mb: float | None = None if tune else fusion_mb  # (None: not decided yet)

    # ---- hooks ----

    def setup(self, ctx: TrainingContext) -> None:
        self._buckets: list[list[int]] | None = None
        self._bucket_of: dict[int, int] = {}
        self._ready: list[int] = []
        self._reduce_scatters: dict[int, object] = {}
        self._allgathers: dict[int, object] = {}
        self._shards: dict[int, object] = {}
        self._pending: list[int] = []
        self._snapshot = None
        self._leftover: int | None = None  # bucket of parameters no module owns
        self._search = BayesianSearch(1, 100, initial=min(3, self.tune_trials)) if self.tune else None
        self._trial_value: float | None = None
        self._trial_times: list[float] = []
        self._last_step_time: float | None = None
        self.chosen_fusion_mb: float | None = None if self.tune else self.fusion_mb

    def on_gradient(self, ctx: TrainingContext, index: int) -> None:
        if self._buckets is None:
            return  # first step: buckets are built in step(), once the forward order is known
        bucket = self._bucket_of[index]
        self._ready[bucket] += 1
        if self._ready[bucket] == len(self._buckets[bucket]):
            self._start_reduce_scatter(ctx, bucket)

    def before_forward(self, ctx: TrainingContext, bucket: int) -> None:
        if bucket in self._pending:
            self._apply(ctx, bucket)

    def step(self, ctx: TrainingContext) -> None:
        self.flush(ctx)  # buckets whose modules did not run since the last step
        if self._buckets is None:
            self._build_buckets(ctx, self.fusion_mb)
        for bucket in range(len(self._buckets)):
            if bucket not in self._reduce_scatters:
                self._start_reduce_scatter(ctx, bucket)  # e.g. unused parameters: zeros
        self._shards = {b: ctx.comm.wait(self._reduce_scatters.pop(b)) for b in range(len(self._buckets))}
        self._clip(ctx)
        self._snapshot = ctx.snapshot()
        self._pending = list(range(len(self._buckets)))
        self._ready = [0] * len(self._buckets)
        new_fusion_mb = self._tuning_tick(ctx)
        if new_fusion_mb is not None:  # finish this step now, then rebucket for the next one
            self.flush(ctx)
            self._build_buckets(ctx, new_fusion_mb)
            return
        # All-gathers are queued now, in forward order: the engine runs them back to back while
        # forward proceeds, instead of waiting for each previous bucket's hook to start the next.
        # The bucket of parameters no module owns is updated before the next forward (below), so
        # its all-gather goes first: queued last, the update waited for every other all-gather.
        for bucket in self._allgather_order():
            self._start_allgather(ctx, bucket)
        if "forward_hooks" not in ctx.capabilities:
            self.flush(ctx)
        elif self._leftover is not None:  # used outside any module: update before the next forward
            self._apply(ctx, self._leftover)

    def abandon_step(self, ctx: TrainingContext) -> None:
        """Waits out the reduce-scatters and all-gathers in flight and forgets the step's shards and
        pending updates (a failed step is not applied: the rollback to the last commit covers it)."""
        wait_out(ctx, [*self._reduce_scatters.values(), *self._allgathers.values()])
        self._reduce_scatters.clear()
        self._allgathers.clear()
        self._shards.clear()
        self._pending = []
        self._ready = [0] * len(self._buckets or [])

    def flush(self, ctx: TrainingContext) -> None:
        if "forward_hooks" not in ctx.capabilities:
            self._apply_together(ctx)
        while self._pending:
            self._apply(ctx, self._pending[0])

    @property
    def buckets(self) -> list[list[int]]:
        """Current buckets (optimizer parameter indices, forward order; the last one holds
        parameters no module owns). Empty before the first step."""
        return [list(b) for b in (getattr(self, "_buckets", None) or [])]

    # ---- internals ----

    def _allgather_order(self) -> list[int]:
        """The pending buckets in the order their all-gathers are queued: the leftover bucket (needed
        before the next forward starts) first, then forward order."""
        if self._leftover is None or self._leftover not in self._pending:
            return list(self._pending)
        return [self._leftover] + [b for b in self._pending if b != self._leftover]

    def _start_reduce_scatter(self, ctx: TrainingContext, bucket: int) -> None:
        self._reduce_scatters[bucket] = ctx.reduce_scatter_grads_async(self._buckets[bucket], name=f"dear.rs.{bucket}")

    def _start_allgather(self, ctx: TrainingContext, bucket: int) -> None:
        if bucket not in self._allgathers:
            self._allgathers[bucket] = ctx.comm.allgather_async(self._shards.pop(bucket), name=f"dear.ag.{bucket}")

    def _apply(self, ctx: TrainingContext, bucket: int) -> None:
        self._start_allgather(ctx, bucket)
        full = ctx.comm.wait(self._allgathers.pop(bucket))
        ctx.apply_update(self._buckets[bucket], self._snapshot, flat_grads=full)
        self._pending.remove(bucket)

    def _apply_together(self, ctx: TrainingContext) -> None:
        """Without forward hooks: every pending bucket's update in one optimizer call."""
        if not self._pending:
            return
        for bucket in self._pending:
            self._start_allgather(ctx, bucket)
        indices, fulls = [], []
        for bucket in self._pending:
            fulls.append(ctx.comm.wait(self._allgathers.pop(bucket)))
            indices.extend(self._buckets[bucket])
        self._pending = []
        ctx.apply_update(indices, self._snapshot, flat_grads=ctx.math.concat(fulls))

    def _clip(self, ctx: TrainingContext) -> None:
        if not ctx.max_grad_norm:
            return
        local = sum(ctx.math.sum_of_squares(shard) for shard in self._shards.values())
        norm = math.sqrt(ctx.comm.allreduce_scalar(local, name="dear.grad_norm"))
        clip_to_max_grad_norm(ctx, list(self._shards.values()), norm)

    def _build_buckets(self, ctx: TrainingContext, fusion_mb: float) -> None:
        """Buckets from the recorded forward order, decided on rank 0 so every rank agrees."""
        plan = None
        if ctx.rank == 0:
            refs = {p.index: p for p in ctx.parameters()}
            order = ctx.forward_order() or []
            seen = {index for index, _ in order}
            specs = [ParamSpec(i, refs[i].numel, refs[i].itemsize, refs[i].dtype, module) for i, module in order]
            bucket_bytes = (int(fusion_mb * MB) if fusion_mb is not None else
                            auto_bucket_bytes(sum(p.numel * p.itemsize for p in refs.values()), _spans_nodes()))
            leftover = [p.index for p in ctx.parameters() if p.index not in seen]
            plan = (make_buckets(specs, bucket_bytes), leftover, bucket_bytes / MB)
        buckets, leftover, chosen_mb = ctx.comm.broadcast_object(plan, root=0)
        if self._search is None:
            self.chosen_fusion_mb = chosen_mb
        self._leftover = len(buckets) if leftover else None
        self._buckets = buckets + ([leftover] if leftover else [])
        self._bucket_of = {i: b for b, members in enumerate(self._buckets) for i in members}
        self._ready = [0] * len(self._buckets)
        if "forward_hooks" in ctx.capabilities:
            ctx.watch_buckets(buckets)

    def _tuning_tick(self, ctx: TrainingContext) -> float | None:
        """Measures iteration times and moves the search on; returns a new fusion size when the
        buckets must be rebuilt (next trial, or the final choice)."""
        if self._search is None:
            return None
        now = time.perf_counter()
        if self._last_step_time is not None and self._trial_value is not None:
            self._trial_times.append(now - self._last_step_time)
        self._last_step_time = now
        if self._trial_value is not None and len(self._trial_times) < self.tune_steps:
            return None
        decision = None
        if ctx.rank == 0:
            if self._trial_value is not None:
                times = self._trial_times[1:]  # the first interval follows a synchronous step
                self._search.observe(self._trial_value, sum(times) / len(times))
            if len(self._search.values) >= self.tune_trials:
                decision = ("done", self._search.best())
            else:
                decision = ("try", self._search.propose())
        kind, value = ctx.comm.broadcast_object(decision, root=0)
        self._trial_times = []
        if kind == "done":
            self._search = None
            self._trial_value = None
            self.fusion_mb = value
            self.chosen_fusion_mb = value
            ctx.log(f"DeAR tuning chose fusion_mb={value:.1f} MB")
        else:
            self._trial_value = value
        return value


def _spans_nodes() -> bool:
    """Whether the world's ranks run on more than one node (RELAX_LOCAL_SIZE can pretend so)."""
    from relaxlib import basics
    return basics.local_size() < basics.size()


modes.register(modes.Mode("dear", kind="exact", caveat="exact (same parameters as all-reduce)", build=DeAR,
                          predict=perfmodel.predict_dear, position=10))
