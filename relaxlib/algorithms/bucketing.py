"""Grouping parameters into communication buckets (framework-neutral, pure functions; the automatic
bucket size is the core's rule, shared with the all-reduce's fast path)."""

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


# The largest automatic bucket of a split collective: DDP's bucket_cap_mb default.
MAX_AUTO_BUCKET_BYTES = 25 << 20


def auto_bucket_bytes(model_bytes: int, spans_nodes: bool) -> int:
    """The bucket size of a split collective (DeAR) when the user gave none. Across nodes (the
    TCP ring) the all-reduce's fast-path rule from the core (``relax_auto_bucket_bytes``): a
    sixteenth of the model, at least 1 MiB, here at most 25 MiB: enough buckets that communication
    overlaps backward and the next forward, each large enough for its fixed cost. On one node
    (shared memory) the collectives' fixed cost is what remains and their copies compete with
    compute for the same cores: 25 MiB, DDP's default. docs/dear.md has the measurements behind both."""
    if not spans_nodes:
        return MAX_AUTO_BUCKET_BYTES
    from relaxlib import _core  # the core's rule, not a copy of it

    return int(_core.lib().relax_auto_bucket_bytes(int(model_bytes), MAX_AUTO_BUCKET_BYTES))
