"""Partial all-reduce (Prague): each step a *group* of ranks averages its weights; the group
generator decides who, so fast ranks need not wait for slow ones."""

from __future__ import annotations

from typing import Any

from relaxlib import direct, groups, perfmodel
from relaxlib.algorithms import modes
from relaxlib.algorithms.averaging import AveragePlan, ModelAveraging
from relaxlib.algorithms.base import TrainingContext


class PartialAllReduce(ModelAveraging):
    """Weights averaged within groups of ``group_size`` ranks every ``period`` steps.

    ``generator``: ``"static"`` (a rotating partition computed from the step number: every rank
    in exactly one group per step), ``"random"`` (a fresh seeded random partition per step) or
    ``"smart"`` (heterogeneity-aware: each step has a pseudo-random intended partition and a
    rank waits within its grace time for its intended partners that are ready or coming, then
    goes with whoever waits, or alone; a rank more than ``max_lag`` steps behind the most
    advanced one is left out of others' averages and instead adopts the next group's average and
    step). The grace time is ``grace_ms`` or ``grace_fraction`` of the rank's own step interval,
    whichever is longer: ranks whose steps jitter still meet, and a rank never waits more than
    that fraction of a step for a partner. 0.3 lets ranks over slow links, whose pairs finish
    their averaging out of phase with each other, still meet their intended partners (0.1 left
    them alone in half of the steps and their models 2-12x further apart than random groups').
    With a straggler it costs nothing measurable on shared memory; over slow links it averages
    more often at some speed, where 0.1 buys speed by skipping averagings (docs/decentralized.md).
    ``static``/``random`` keep all ranks in lock step through the overlapping groups; ``smart``
    is the one that lets fast ranks run ahead of a straggler."""

    name = "partial_allreduce"

    def requirements(self) -> frozenset[str]:
        return super().requirements() | {"group_average"}

    def __init__(self, group_size: int = 2, generator: str = "static", max_lag: int = 2, period: int = 1,
                 seed: int = 0, grace_ms: float = 2.0, grace_fraction: float = 0.3) -> None:
        if generator not in groups.GENERATORS:
            raise ValueError(f"unknown generator {generator!r}; choose one of {groups.GENERATORS}")
        if not isinstance(group_size, int) or group_size < 2:
            raise ValueError(f"group_size must be an integer >= 2, got {group_size!r}")
        if not isinstance(max_lag, int) or max_lag < 0:
            raise ValueError(f"max_lag must be an integer >= 0, got {max_lag!r}")
        if not isinstance(period, int) or period < 1:
            raise ValueError(f"period must be a positive integer, got {period!r}")
        if grace_ms < 0:
            raise ValueError(f"grace_ms must be >= 0, got {grace_ms}")
        if not 0 <= grace_fraction < 1:
            raise ValueError(f"grace_fraction must be in [0, 1), got {grace_fraction}")
        self.group_size = group_size
        self.generator = generator
        self.max_lag = max_lag
        self.period = period
        self.seed = seed
        self.grace_ms = grace_ms
        self.grace_fraction = grace_fraction

    def setup(self, ctx: TrainingContext) -> None:
        super().setup(ctx)
        self._join_serves = self.generator != "smart"  # smart groups only ever hold waiting ranks
        self.last_group: list[int] = []
        if self.generator == "smart":
            direct.start_group_service(self.group_size, self.max_lag, self.grace_ms, self.grace_fraction)

    def _plan(self, ctx: TrainingContext, step: int) -> AveragePlan | None:
        if step % self.period:
            return None
        if self.generator == "smart":
            assignment = direct.request_group(step, ctx.size)
            if assignment.new_step > step:  # a lagging rank adopts its group's step and skips ahead
                self._adopted_step = assignment.new_step
            members, weights, name = assignment.members, assignment.weights, f"{self.name}.g{assignment.group_id}"
        else:
            members = groups.group_of(ctx.rank, groups.deterministic_groups(self.generator, step, ctx.size,
                                                                            self.group_size, self.seed))
            weights, name = [1.0 / len(members)] * len(members), f"{self.name}.{step}"
        self.last_group = members
        if len(members) == 1:
            return None
        return AveragePlan(list(members), list(weights), name)

    def _issue(self, ctx: TrainingContext, flat: Any, plan: AveragePlan) -> Any:
        return ctx.comm.group_average_async(flat, plan.name, plan.ranks, plan.weights, out=self._averaged)

    def join(self, ctx: TrainingContext) -> int:
        """This rank ran out of data. Smart groups only ever hold ranks that asked for one, so
        nobody waits for this rank; static and random schedules are served until all joined."""
        if self.generator == "smart":
            direct.retire_from_groups()
        return super().join(ctx)


def partial_mode(generator: str) -> modes.Mode:
    """The advisor mode ``partial-<generator>``: PartialAllReduce's defaults with that group generator."""
    caveat = ("fast ranks may average less often than every step" if generator == "smart"
              else "models differ until average_now()")
    return modes.Mode(f"partial-{generator}", kind="averaging", caveat=caveat, build=PartialAllReduce,
                      predict=perfmodel.predict_partial, params={"generator": generator}, position=30)


modes.register(*(partial_mode(generator) for generator in groups.GENERATORS))
