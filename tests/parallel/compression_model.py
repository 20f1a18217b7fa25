"""A numpy model of compressed scatter-reduce (docs/architecture.md), all ranks at once, and the
inputs the bindings' tests feed it: what relaxlib_torch and relaxlib_tf are compared with bitwise."""

import numpy as np

from relaxlib import compression


def inputs(step: int, count: int, rank: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * step + rank)
    scales = np.linspace(0.1, 3.0, count, dtype=np.float32)  # uneven magnitudes: sign's bias shows
    return (scales * (rng.standard_normal(count, dtype=np.float32) + 0.3)).astype(np.float32)


def encode_parts(codec: str, chunk: np.ndarray, parts: list[int]) -> list[np.ndarray]:
    """A chunk as the core sends it: each part encoded on its own."""
    offsets = np.concatenate([[0], np.cumsum(parts)]).astype(int)
    return [compression.encode(codec, chunk[offsets[p]:offsets[p + 1]]) for p in range(len(parts))]


def decode_parts(codec: str, encoded: list[np.ndarray], parts: list[int]) -> np.ndarray:
    return np.concatenate([compression.decode(codec, e, c) for e, c in zip(encoded, parts)] or
                          [np.zeros(0, np.float32)])


class Model:
    """numpy model of compressed scatter-reduce (docs/architecture.md), all ranks at once. With two
    ranks there is no owner stage: the result is the average of the two ranks' decoded encodings,
    and the owner memories stay zero."""

    def __init__(self, codec: str, count: int, feedback: bool, size: int) -> None:
        self.codec, self.count, self.feedback, self.size = codec, count, feedback, size
        self.counts = [compression.chunk_count(count, size, r) for r in range(size)]
        self.parts = [compression.part_counts(count, size, r) for r in range(size)]
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(int)
        self.worker = [np.zeros(count, np.float32) for _ in range(size)]
        self.owner = [np.zeros(c, np.float32) for c in self.counts]

    def chunk(self, x, j):
        return x[self.offsets[j]:self.offsets[j] + self.counts[j]]

    def step(self, xs: list[np.ndarray], average: bool = True) -> np.ndarray:
        vs = [x + (w if self.feedback else 0) for x, w in zip(xs, self.worker)]
        sent = [[encode_parts(self.codec, self.chunk(v, j), self.parts[j]) for j in range(self.size)] for v in vs]
        out = np.empty(self.count, np.float32)
        for owner in range(self.size):
            s = np.zeros(self.counts[owner], np.float32)
            for r in range(self.size):
                decoded = decode_parts(self.codec, sent[r][owner], self.parts[owner])
                s = decoded if self.size == 2 and r == 0 else s + decoded  # (two ranks: the first written)
            if average:
                s = s * (np.float32(1.0) / np.float32(self.size))
            if self.size == 2:  # no owner stage: the owner forwards its own encoding, both ranks sum the two
                out[self.offsets[owner]:self.offsets[owner] + self.counts[owner]] = s
                continue
            if self.feedback:
                s = s + self.owner[owner]
            q = decode_parts(self.codec, encode_parts(self.codec, s, self.parts[owner]), self.parts[owner])
            if self.feedback:
                self.owner[owner] = s - q
            out[self.offsets[owner]:self.offsets[owner] + self.counts[owner]] = q
        if self.feedback:
            for r in range(self.size):
                decoded = np.concatenate([decode_parts(self.codec, sent[r][j], self.parts[j])
                                          for j in range(self.size)])
                self.worker[r] = vs[r] - decoded
        return out
