"""Measures the inputs of the performance model on the user's own launch, in seconds: the
network's α and bandwidth (timed all-reduces through relaxlib's engine), codec throughput, and
each rank's compute time (from the step telemetry or a timed function). Collective: every rank
calls the same functions in the same order.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from relaxlib import basics, compression, direct, perfmodel
from relaxlib.direct import Buffer

SMALL_BYTES = 8
LARGE_BYTES = 32 << 20  # above RELAX_MPI_ALLREDUCE_MAX_BYTES on one node: the ring the model assumes


@dataclass
class Network:
    """α (seconds per message) and bandwidth (bytes per second per rank) as the engine sees them;
    ``reduce_scatter_alpha_s``: α of a reduce-scatter / all-gather step (DeAR's primitives),
    which can differ from an all-reduce's on the same link."""

    alpha_s: float
    bandwidth_bytes_per_s: float
    small_allreduce_s: float
    large_allreduce_s: float
    large_bytes: int
    bucket_bytes: int = 0
    bucket_allreduce_s: float = 0.0
    bucket_reduce_scatter_s: float = 0.0
    reduce_scatter_alpha_s: float = 0.0
    exchange_bytes_per_s: float = 0.0  # point-to-point model exchange (decentralized, partial)

    def __post_init__(self) -> None:
        if not self.reduce_scatter_alpha_s:
            self.reduce_scatter_alpha_s = self.alpha_s
        if not self.exchange_bytes_per_s:
            self.exchange_bytes_per_s = self.bandwidth_bytes_per_s


def _allreduce_async(values: np.ndarray, name: str, average: bool = True) -> direct.DirectHandle:
    out = np.empty_like(values)
    return direct.flat_allreduce_async(Buffer.of(values), Buffer.of(out), name, average, keepalive=(values, out),
                                       result=out)


def _allreduce(values: np.ndarray, name: str, average: bool = True) -> np.ndarray:
    return _allreduce_async(values, name, average).wait()


def _reducescatter_async(values: np.ndarray, name: str) -> direct.DirectHandle:
    out = np.empty(-(-values.size // basics.size()), values.dtype)
    return direct.flat_reducescatter_async(Buffer.of(values), Buffer.of(out), name, keepalive=(values, out), result=out)


def _median_over_ranks(label: str, reps: int, warmups: int, run: Callable[[], object], per_run: int = 1) -> float:
    """Times ``reps`` calls of ``run`` (after ``warmups`` untimed ones: buffers, connections),
    each started together on every rank, in seconds per ``per_run`` operations: the median of the
    ranks' mean. Names stay the same from call to call, as in training (the engine's response
    cache answers them)."""
    times = []
    for i in range(-warmups, reps):
        _allreduce(np.zeros(1, np.float32), f"{label}.sync")  # start together
        start = time.perf_counter()
        run()
        if i >= 0:
            times.append((time.perf_counter() - start) / per_run)
    return statistics.median(_allreduce(np.array(times, np.float64), f"{label}.times").tolist())


def _timed(nbytes: int, reps: int, label: str, operation=_allreduce) -> float:
    """Seconds of one ``operation(values, label)`` (by default an all-reduce) of ``nbytes``."""
    values = np.ones(max(1, nbytes // 4), np.float32)
    return _median_over_ranks(label, reps, 2, lambda: operation(values, label))


def _timed_stream(nbytes: int, reps: int, label: str, start_async=_allreduce_async, streak: int = 4,
                  gap_s: float = 1e-3) -> float:
    """Seconds per operation of a stream: ``streak`` operations submitted ``gap_s`` apart without
    waiting, as backward hands buckets to the engine (the gap keeps the engine from fusing them).
    A lone operation costs more on TCP: the link idles between them."""
    buffers = [np.ones(max(1, nbytes // 4), np.float32) for _ in range(streak)]

    def run() -> None:
        handles = []
        for k, values in enumerate(buffers):
            handles.append(start_async(values, f"{label}.{k}"))
            time.sleep(gap_s)
        for handle in handles:
            handle.wait()

    return _median_over_ranks(label, reps, 1, run, per_run=streak)


def _timed_exchange(nbytes: int, reps: int, label: str) -> float:
    """Seconds of a pairwise model exchange (rank 2k with 2k+1; a last odd rank idles): a
    neighbour average on the direct lane, what decentralized and partial modes send."""
    partner = basics.rank() ^ 1
    values, out = np.ones(max(1, nbytes // 4), np.float32), np.empty(max(1, nbytes // 4), np.float32)

    def run() -> None:
        if partner < basics.size():
            direct.neighbor_average_async(Buffer.of(values), Buffer.of(out), label, [partner], [0.5], 0.5,
                                          keepalive=(values, out)).wait()

    return _median_over_ranks(label, reps, 1, run)


def measure_network(reps: int = 7, large_bytes: int = LARGE_BYTES, bucket_bytes: int = 0,
                    exchange_bytes: int = 0) -> Network:
    """Collective: α and bandwidth of the ring formula T(b) = 2(n-1)α + 2(n-1)/n · b/BW
    (docs/perfmodel.md), from timed all-reduces.

    Without ``bucket_bytes`` the line runs through a tiny and a large all-reduce. With it (the
    model's typical gradient bucket) the line runs through the bucket-sized and the large one:
    mid-sized messages pay costs a tiny one does not (rendezvous, TCP slow start after idle),
    and the model is about buckets; they are timed as a stream, the way backward produces them.
    A bucket-sized reduce-scatter stream then gives DeAR's α. With ``exchange_bytes`` (the model
    size, at most ``large_bytes``), a pairwise exchange gives the point-to-point bandwidth of the
    modes that send whole models to neighbours."""
    n = basics.size()
    if n < 2:
        raise ValueError("measuring the network needs at least 2 ranks")
    small = _timed(SMALL_BYTES, reps, "relax.calibrate.small")
    large = _timed(large_bytes, max(3, reps // 2), "relax.calibrate.large")
    share = 2 * (n - 1) / n  # of the buffer each rank sends in an all-reduce
    exchange_bytes = min(exchange_bytes, large_bytes)
    exchange = exchange_bytes / _timed_exchange(exchange_bytes, max(3, reps // 2), "relax.calibrate.exchange") \
        if exchange_bytes > 0 else 0.0
    if not SMALL_BYTES < bucket_bytes < large_bytes:
        bandwidth = share * large_bytes / max(large - small, 1e-9)
        return Network(small / (2 * (n - 1)), bandwidth, small, large, large_bytes, exchange_bytes_per_s=exchange)
    bucket = _timed_stream(bucket_bytes, reps, "relax.calibrate.bucket")
    scatter = _timed_stream(bucket_bytes, reps, "relax.calibrate.scatter", _reducescatter_async)
    if large <= bucket:  # noise at near sizes: the slope is meaningless, use the wide one
        bandwidth = share * large_bytes / max(large - small, 1e-9)
    else:
        bandwidth = share * (large_bytes - bucket_bytes) / (large - bucket)
    alpha = max(bucket - share * bucket_bytes / bandwidth, small) / (2 * (n - 1))
    scatter_alpha = max(scatter - share / 2 * bucket_bytes / bandwidth, small / 2) / (n - 1)
    return Network(alpha, bandwidth, small, large, large_bytes, bucket_bytes, bucket, scatter, scatter_alpha, exchange)


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


def measure_compressed(network: Network, nbytes: int, codecs: tuple[str, ...] | None = None,
                       reps: int = 5) -> dict[str, float]:
    """Collective: each codec's (default: every registered one's) effective throughput as the
    engine's compressed all-reduce with error feedback runs it on ``nbytes`` (the model), on every
    rank at once: 4·nbytes over the time the all-reduce takes beyond its wire time (the model's
    codec term, docs/perfmodel.md).
    It includes what the bare codec misses: error-feedback passes, chunking, cores shared by ranks.
    It is never above the bare codec's throughput (:func:`measure_codecs`), which also stands in
    when the all-reduce is no slower than its predicted wire time."""
    n, rank = basics.size(), basics.rank()
    count = max(n, min(nbytes, LARGE_BYTES) // 4)
    chunk = count // n + (1 if rank < count % n else 0)
    values = np.random.default_rng(rank).normal(size=count).astype(np.float32)
    out, worker, owner = np.empty_like(values), np.zeros(count, np.float32), np.zeros(chunk, np.float32)
    bare = measure_codecs(nbytes=min(4 * count, 16 << 20), reps=2)
    result = {}
    for codec in codecs if codecs is not None else tuple(compression.CODECS):
        def run(_values, label, codec=codec):
            return direct.flat_compressed_allreduce_async(Buffer.of(values), Buffer.of(out), label, codec,
                                                          Buffer.of(worker), Buffer.of(owner),
                                                          keepalive=(values, out, worker, owner)).wait()
        elapsed = _timed(4 * count, reps, f"relax.calibrate.codec.{codec}", run)
        wire = perfmodel.allreduce_time(n, compression.CODECS[codec].ratio * 4 * count, network.alpha_s,
                                        network.bandwidth_bytes_per_s)
        result[codec] = 4 * 4 * count / max(elapsed - wire, 4 * 4 * count / bare[codec])
    return result


@dataclass
class HostMath:
    """Host-side rates of the compressors that are not codecs (perfmodel.Workload's fields)."""

    host_bytes_per_s: float    # one element-wise pass over float32 memory
    matmul_flops_per_s: float  # a thin (rank-4) float32 matrix product
    select_bytes_per_s: float  # a Top-K selection (argpartition of magnitudes)


def measure_host_math(nbytes: int = 16 << 20, reps: int = 3) -> HostMath:
    """Collective: PowerSGD's and Top-K's host rates measured on every rank at once (the ranks
    share the cores as in training), averaged over the ranks so every rank predicts the same."""
    count = max(1024, min(nbytes, 16 << 20) // 4)
    values = np.random.default_rng(basics.rank()).normal(size=count).astype(np.float32)
    other, out = values[::-1].copy(), np.empty_like(values)
    side = max(32, int(count ** 0.5))
    matrix = values[:side * side].reshape(side, side)
    factor = np.ones((side, 4), np.float32)

    def best(run) -> float:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return max(min(times), 1e-9)

    if basics.size() > 1:
        _allreduce(np.zeros(1), "relax.calibrate.host.start")  # start together: the cores are shared
    rates = np.array([
        3 * values.nbytes / best(lambda: np.add(values, other, out=out)),  # two reads, one write
        2 * side * side * 4 / best(lambda: matrix @ factor),
        values.nbytes / best(lambda: np.argpartition(np.abs(values), count - count // 100)),
    ], np.float64)
    rates = _allreduce(rates, "relax.calibrate.host") if basics.size() > 1 else rates
    return HostMath(*(float(r) for r in rates))


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
