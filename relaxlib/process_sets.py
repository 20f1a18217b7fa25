"""Process sets: subsets of ranks that run collectives among themselves.

Only the global set (all ranks, id 0) exists so far; the class is the shared
description used by every framework module.
"""

from __future__ import annotations

from relaxlib import basics
from relaxlib.errors import ProcessSetError


class ProcessSet:
    """A set of ranks; ``ranks=None`` means every rank (the global set)."""

    def __init__(self, ranks: list[int] | None = None) -> None:
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id: int | None = 0 if ranks is None else None

    def size(self) -> int:
        """Number of ranks in the set."""
        return basics.size() if self.ranks is None else len(self.ranks)

    def rank(self) -> int:
        """This process's rank within the set."""
        if self.ranks is None:
            return basics.rank()
        if basics.rank() not in self.ranks:
            raise ProcessSetError(f"rank {basics.rank()} is not a member of process set {self.ranks}")
        return self.ranks.index(basics.rank())

    def included(self) -> bool:
        """True when this process belongs to the set."""
        return self.ranks is None or basics.rank() in self.ranks

    def __repr__(self) -> str:
        if self.ranks is None:
            return "ProcessSet(global)"
        return f"ProcessSet(id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet()


def process_set_id(process_set: ProcessSet | None) -> int:
    """The core id of a process set (0 for the global set), checking it is usable."""
    if process_set is None or process_set.ranks is None:
        return 0
    if process_set.process_set_id is None:
        raise ProcessSetError(f"{process_set!r} has not been registered (pass it to init() or add_process_set())")
    return process_set.process_set_id
