"""Measures the inputs of the performance model on the user's own launch, in seconds: the
network's α and bandwidth (timed all-reduces through relaxlib's engine), codec throughput, and
each rank's compute time (from the step telemetry or a timed function). Collective: every rank
calls the same functions in the same order.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from relaxlib import basics, compression, direct

SMALL_BYTES = 8
LARGE_BYTES = 32 << 20  # above RELAX_MPI_ALLREDUCE_MAX_BYTES on one node: the ring the model assumes


@dataclass
class Network:
    """α (seconds per message) and bandwidth (bytes per second per rank) as the engine sees them."""

    alpha_s: float
    bandwidth_bytes_per_s: float
    small_allreduce_s: float
    large_allreduce_s: float
    large_bytes: int


def _allreduce(values: np.ndarray, name: str, average: bool = True) -> np.ndarray:
    out = np.empty_like(values)
    return direct.flat_allreduce_async(direct.Buffer(values.ctypes.data, values.size, values.dtype.name),
                                       direct.Buffer(out.ctypes.data, out.size, out.dtype.name), name, average,
                                       keepalive=(values, out), result=out).wait()


def _timed_allreduce(nbytes: int, reps: int, label: str) -> float:
    """Median over ``reps`` of the ranks' mean time for one all-reduce of ``nbytes``."""
    values = np.ones(max(1, nbytes // 4), np.float32)
    times = []
    for i in range(-2, reps):  # two warm-ups (buffers, connections)
        # the same names every time, as in training: the engine's response cache answers them
        _allreduce(np.zeros(1, np.float32), f"{label}.sync")  # start together
        start = time.perf_counter()
        _allreduce(values, label)
        if i >= 0:
            times.append(time.perf_counter() - start)
    return statistics.median(_allreduce(np.array(times, np.float64), f"{label}.times").tolist())


def measure_network(reps: int = 7, large_bytes: int = LARGE_BYTES) -> Network:
    """Collective: α from a tiny all-reduce, bandwidth from a large one, by the ring formula
    T(b) = 2(n-1)α + 2(n-1)/n · b/BW (docs/perfmodel.md)."""
    n = basics.size()
    if n < 2:
        raise ValueError("measuring the network needs at least 2 ranks")
    small = _timed_allreduce(SMALL_BYTES, reps, "relax.calibrate.small")
    large = _timed_allreduce(large_bytes, max(3, reps // 2), "relax.calibrate.large")
    alpha = small / (2 * (n - 1))
    transfer = max(large - small, 1e-9)
    bandwidth = 2 * (n - 1) / n * large_bytes / transfer
    return Network(alpha, bandwidth, small, large, large_bytes)


def measure_codecs(nbytes: int = 16 << 20, reps: int = 3) -> dict[str, float]:
    """Local: bytes encoded plus bytes decoded per second, per codec (the model's codec throughput)."""
    values = np.random.default_rng(0).normal(size=nbytes // 4).astype(np.float32)
    result = {}
    for codec in compression.CODECS:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            encoded = compression.encode(codec, values)
            compression.decode(codec, encoded, values.size)
            times.append(time.perf_counter() - start)
        result[codec] = 2 * values.nbytes / min(times)
    return result


def slowdowns(compute_s: float) -> list[float]:
    """Collective: every rank's compute time relative to the fastest rank's."""
    times = _allgather_scalar(compute_s)
    fastest = min(times)
    return [t / fastest if fastest > 0 else 1.0 for t in times]


def _allgather_scalar(value: float) -> list[float]:
    n, rank = basics.size(), basics.rank()
    slots = np.zeros(n, np.float64)
    slots[rank] = value
    return _allreduce(slots, "relax.calibrate.gather", average=False).tolist() if n > 1 else [value]
