"""Group generators of partial all-reduce (Prague): which ranks average together at each step.

``static`` and ``random`` are pure functions of the step, computed on every rank alike, with every
rank in exactly one group per step. ``smart`` is heterogeneity-aware: groups form from the ranks
that are ready, so a slow rank never holds up fast ones; it is coordinated by a generator thread on
rank 0 (see docs/decentralized.md for why that beats a lock-free scheme here).
"""

from __future__ import annotations

import numpy as np

GENERATORS = ("static", "random", "smart")


def _chunks(order: list[int], group_size: int) -> list[list[int]]:
    return [sorted(order[i:i + group_size]) for i in range(0, len(order), group_size)]


def static_groups(step: int, size: int, group_size: int) -> list[list[int]]:
    """A conflict-free partition of the ranks into consecutive groups of ``group_size`` (the
    last one smaller when ``size`` is not a multiple), rotated by ``step mod group_size`` so that
    groups overlap across steps and information reaches every rank."""
    shift = step % group_size if group_size < size else 0
    order = [(shift + i) % size for i in range(size)]
    return _chunks(order, group_size)


def random_groups(step: int, size: int, group_size: int, seed: int) -> list[list[int]]:
    """A random partition into groups of ``group_size``, fresh every step, the same on every rank."""
    order = np.random.default_rng([seed, step, 1]).permutation(size).tolist()
    return _chunks(order, group_size)


def group_of(rank: int, groups: list[list[int]]) -> list[int]:
    """The group that holds ``rank``."""
    for group in groups:
        if rank in group:
            return group
    raise ValueError(f"rank {rank} is in no group of {groups}")


def deterministic_groups(generator: str, step: int, size: int, group_size: int, seed: int = 0) -> list[list[int]]:
    """The groups of ``step`` for the ``static`` or ``random`` generator."""
    if generator == "static":
        return static_groups(step, size, group_size)
    if generator == "random":
        return random_groups(step, size, group_size, seed)
    raise ValueError(f"generator {generator!r} is not a deterministic schedule; use 'static' or 'random'")


def averaging_matrix(groups: list[list[int]], size: int) -> np.ndarray:
    """The mixing matrix of one partial all-reduce step (each group replaced by its mean)."""
    w = np.zeros((size, size))
    for group in groups:
        for i in group:
            for j in group:
                w[i, j] = 1.0 / len(group)
    return w
