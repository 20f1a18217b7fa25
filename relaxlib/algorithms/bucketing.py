"""Grouping parameters into communication buckets (framework-neutral, pure functions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ParamSpec:
    """What bucketing needs to know about one parameter."""

    index: int        # position in the optimizer's parameter list
    numel: int
    itemsize: int
    dtype: str
    group: int = -1   # unit that must stay in one bucket (e.g. its module); -1: on its own


def make_buckets(params_in_order: Sequence[ParamSpec], bucket_bytes: int) -> list[list[int]]:
    """Consecutive parameters (in the given order, e.g. forward execution order) grouped into
    buckets of at most ``bucket_bytes`` each. Parameters of one ``group`` (a module) are never split,
    a bucket holds one dtype only, and a unit larger than the limit forms a bucket of its own.
    Returns lists of parameter indices."""
    units: list[list[ParamSpec]] = []
    for p in params_in_order:
        if units and p.group >= 0 and units[-1][-1].group == p.group and units[-1][-1].dtype == p.dtype:
            units[-1].append(p)
        else:
            units.append([p])
    buckets: list[list[int]] = []
    current: list[int] = []
    current_bytes, current_dtype = 0, None
    for unit in units:
        unit_bytes = sum(p.numel * p.itemsize for p in unit)
        dtype = unit[0].dtype
        if current and (dtype != current_dtype or current_bytes + unit_bytes > bucket_bytes):
            buckets.append(current)
            current, current_bytes = [], 0
        current.extend(p.index for p in unit)
        current_bytes += unit_bytes
        current_dtype = dtype
    if current:
        buckets.append(current)
    return buckets


# auto_bucket_bytes' limits: the fast path's smallest bucket (engine/steady_schedule.h) and DDP's
# bucket_cap_mb default.
MIN_AUTO_BUCKET_BYTES = 1 << 20
MAX_AUTO_BUCKET_BYTES = 25 << 20
AUTO_BUCKETS_PER_MODEL = 16


def auto_bucket_bytes(model_bytes: int, spans_nodes: bool) -> int:
    """The bucket size of a split collective (DeAR) when the user gave none. Across nodes (the
    TCP ring) a sixteenth of the model, between 1 and 25 MiB, the rule of the all-reduce's fast
    path: enough buckets that communication overlaps backward and the next forward, each large
    enough for its fixed cost. On one node (shared memory) the collectives' fixed cost is what
    remains and their copies compete with compute for the same cores: 25 MiB, DDP's default.
    docs/dear.md has the measurements behind both."""
    if not spans_nodes:
        return MAX_AUTO_BUCKET_BYTES
    return max(MIN_AUTO_BUCKET_BYTES, min(MAX_AUTO_BUCKET_BYTES, model_bytes // AUTO_BUCKETS_PER_MODEL))
