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
