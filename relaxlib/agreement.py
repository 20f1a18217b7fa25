"""Checks that every rank configured a distributed object the same way (framework-neutral).

A job where rank 0 wraps its optimizer with DeAR and rank 1 with the plain all-reduce would
wait forever for collectives the other side never issues; comparing the configurations when the
object is built turns that into an error on every rank that says what differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relaxlib.errors import MismatchError


def describe_differences(what: str, gathered: Sequence[dict[str, Any]], ranks: Sequence[int]) -> list[str]:
    """One line per field whose value is not the same on every rank: the ranks holding each value
    (long values shortened). ``gathered[i]`` is the description of world rank ``ranks[i]``."""
    lines = []
    for field in sorted({key for description in gathered for key in description}):
        holders: dict[str, list[int]] = {}
        for rank, description in zip(ranks, gathered):
            holders.setdefault(repr(description.get(field, "<missing>")), []).append(rank)
        if len(holders) > 1:
            values = "; ".join(f"ranks {r}: {_shorten(v)}" for v, r in holders.items())
            lines.append(f"{what}: {field} is not the same on every rank ({values})")
    return lines


def raise_if_different(what: str, gathered: Sequence[tuple[dict[str, Any], Sequence[Any]]],
                       ranks: Sequence[int], items: str = "item lists") -> None:
    """Raises MismatchError unless every rank's (description, item list) is the same; the message
    names each differing field and where the item lists (e.g. parameters) first differ. Every rank
    calls it with the same ``gathered`` list, so every rank raises the same error."""
    lines = describe_differences(what, [description for description, _ in gathered], ranks)
    reference = gathered[0][1]
    for rank, (_, mine) in zip(ranks, gathered):
        if list(mine) != list(reference):
            lines.append(f"{what}: the {items} of rank {ranks[0]} and rank {rank} differ at "
                         f"{first_difference(reference, mine)}")
            break
    if lines:
        raise MismatchError("; ".join(lines) + ". Build it the same way on every rank.")


def first_difference(left: Sequence[Any], right: Sequence[Any]) -> str:
    """Where two sequences (e.g. parameter lists) first differ, for error messages."""
    for index, (a, b) in enumerate(zip(left, right)):
        if a != b:
            return f"entry {index}: {a!r} vs {b!r}"
    return f"lengths {len(left)} vs {len(right)}"


def _shorten(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
