"""The Adasum reduction written plainly in numpy (float64), for the parallel Adasum tests to check
the core against: Horovod's pairwise rule applied in a binary tree over the ranks, per tensor."""

import numpy as np

TINY = np.sqrt(np.finfo(np.float64).tiny)  # Horovod's zero-norm threshold (sqrt(DBL_MIN))


def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a' = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b; a zero vector's coefficient partner stays 1."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    dot, a_sq, b_sq = a @ b, a @ a, b @ b
    a_coeff = 1.0 - dot / a_sq * 0.5 if a_sq >= TINY else 1.0
    b_coeff = 1.0 - dot / b_sq * 0.5 if b_sq >= TINY else 1.0
    return a_coeff * a + b_coeff * b


def tree(vectors: list) -> np.ndarray:
    """Adasum of the ranks' vectors (a power-of-two count): the first half's result combined with
    the second half's, recursively (what vector halving, distance doubling computes)."""
    if len(vectors) == 1:
        return np.asarray(vectors[0], np.float64).ravel()
    half = len(vectors) // 2
    return combine(tree(vectors[:half]), tree(vectors[half:]))


def rank_tensors(rank: int, sizes, dtype=np.float32, seed: int = 0) -> list:
    """Rank ``rank``'s tensors: a direction shared by all ranks plus rank-specific noise, at a
    different scale per tensor, so that each tensor's dot products (and coefficients) differ."""
    out = []
    for index, n in enumerate(sizes):
        shared = np.random.default_rng(seed * 1000 + index).standard_normal(n)
        own = np.random.default_rng(seed * 1000 + 100 * (rank + 1) + index).standard_normal(n)
        out.append(((index + 1) * (shared + (0.5 + index) * own)).astype(dtype))
    return out
