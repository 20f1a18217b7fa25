"""Communication topologies of decentralized training: who averages with whom at each step, and
with which weights. Pure functions of (rank, size, step, seed): every rank computes the same
schedule locally, so no coordination is needed.

Both topologies give a symmetric, doubly-stochastic mixing matrix ``W`` (rows and columns sum to
one), so averaging preserves the global mean and contracts the spread of the models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOPOLOGIES = ("ring", "random")


@dataclass(frozen=True)
class Neighbors:
    """This rank's row of the mixing matrix: ``x' = self_weight * x + sum_k weights[k] * x[peers[k]]``."""

    peers: tuple[int, ...]
    weights: tuple[float, ...]
    self_weight: float


def ring(rank: int, size: int) -> Neighbors:
    """Left and right neighbour, each weight 1/3. With two ranks the neighbours coincide (weight
    2/3 for the other rank); a single rank keeps its model."""
    if size == 1:
        return Neighbors((), (), 1.0)
    if size == 2:
        return Neighbors((1 - rank,), (2.0 / 3.0,), 1.0 / 3.0)
    left, right = (rank - 1) % size, (rank + 1) % size
    return Neighbors((left, right), (1.0 / 3.0, 1.0 / 3.0), 1.0 / 3.0)


def random_matching(step: int, size: int, seed: int) -> list[tuple[int, ...]]:
    """A random perfect matching of the ranks, fresh for every ``step``, the same on every rank
    (seeded by ``seed`` and ``step``). With an odd ``size`` one rank is left alone: a 1-tuple."""
    order = np.random.default_rng([seed, step]).permutation(size).tolist()
    pairs = [tuple(sorted(order[i:i + 2])) for i in range(0, size - 1, 2)]
    if size % 2:
        pairs.append((order[-1],))
    return pairs


def random_peer(rank: int, size: int, step: int, seed: int) -> Neighbors:
    """This rank's partner in ``random_matching`` (weights 1/2 each), or nobody (keeps its model)."""
    for pair in random_matching(step, size, seed):
        if rank in pair:
            if len(pair) == 1:
                return Neighbors((), (), 1.0)
            other = pair[0] if pair[1] == rank else pair[1]
            return Neighbors((other,), (0.5,), 0.5)
    raise ValueError(f"rank {rank} is out of range [0, {size})")


def neighbors(topology: str, rank: int, size: int, step: int, seed: int = 0) -> Neighbors:
    """This rank's neighbours at ``step`` in ``topology`` ("ring" or "random")."""
    if topology == "ring":
        return ring(rank, size)
    if topology == "random":
        return random_peer(rank, size, step, seed)
    raise ValueError(f"unknown topology {topology!r}; choose one of {TOPOLOGIES}")


def mixing_matrix(topology: str, size: int, step: int, seed: int = 0) -> np.ndarray:
    """The full ``size`` x ``size`` mixing matrix at ``step`` (for tests and analysis)."""
    w = np.zeros((size, size))
    for rank in range(size):
        row = neighbors(topology, rank, size, step, seed)
        w[rank, rank] = row.self_weight
        for peer, weight in zip(row.peers, row.weights):
            w[rank, peer] += weight
    return w
