"""An α-β performance model of one training iteration under every relaxation.

The network is described by α (seconds per message, latency plus software overhead) and BW
(bytes per second one rank can send, and receive at the same time: full-duplex links); a
message of b bytes costs α + b/BW. The model is given the gradient buckets in the order the
backward pass produces them, the forward and backward compute time, the codec throughput and
each rank's compute slowdown, and predicts the per-iteration time of every mode. Every equation
is written out in docs/perfmodel.md; this module is that page in code. Which equation predicts
which mode is the mode's own declaration (relaxlib.algorithms.modes); :func:`predict_all` asks
every registered mode.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from relaxlib import compression

if TYPE_CHECKING:
    from relaxlib.algorithms.modes import Mode



@dataclass
class Workload:
    """What one iteration does, per rank.

    ``buckets``: gradient bytes per bucket, in the order backward produces them (the first bucket
    is the last layers'); ``forward_s`` / ``backward_s``: compute time of one iteration on a rank
    of speed 1, spread over the buckets in proportion to their size; ``slowdown``: each rank's
    compute-time factor (empty: all 1); ``reduce_scatter_alpha_s``: α of DeAR's reduce-scatter and
    all-gather steps when calibrated apart (0: ``alpha_s``); ``exchange_bytes_per_s``: bandwidth
    of the whole-model point-to-point exchanges of decentralized and partial modes when
    calibrated apart (0: ``bandwidth_bytes_per_s``); ``codec_bytes_per_s``: encode + decode throughput per codec
    (float32 bytes handled per second); ``batch``: samples per rank and iteration; ``hooks``:
    whether the framework lets communication start during backward and end during the next
    forward (PyTorch's hooks); without (Keras) every bucket is ready when backward ends."""

    ranks: int
    alpha_s: float
    bandwidth_bytes_per_s: float
    buckets: list[float]
    forward_s: float
    backward_s: float
    batch: int = 1
    slowdown: list[float] = field(default_factory=list)
    codec_bytes_per_s: dict[str, float] = field(default_factory=dict)
    group_size: int = 2
    sync_interval_s: float = 0.05
    reduce_scatter_alpha_s: float = 0.0  # α of a reduce-scatter / all-gather step (0: alpha_s)
    exchange_bytes_per_s: float = 0.0  # point-to-point bandwidth of model exchanges (0: bandwidth)
    hooks: bool = True  # PyTorch's hooks: communication overlaps compute; Keras has none
    # Gradient shapes in the order of ``buckets``' tensors (backward order); empty: unknown, and
    # PowerSGD's equation views each bucket as one square matrix.
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    # Host math of the compressors that are not codecs (PowerSGD, Top-K): float32 bytes per second
    # of one element-wise pass, floating-point operations per second of a thin matrix product
    # (rank-r factors: memory-bound, far below the core's peak), and bytes per second of a Top-K
    # selection (argpartition). Defaults: this project's 2-core machine; the advisor measures them.
    host_bytes_per_s: float = 2e9
    matmul_flops_per_s: float = 2e9
    select_bytes_per_s: float = 3e8

    @property
    def model_bytes(self) -> float:
        """Bytes of the whole gradient (= of the model)."""
        return float(sum(self.buckets))

    def speeds(self) -> list[float]:
        """Compute-time factor of every rank (1 = nominal)."""
        return self.slowdown or [1.0] * self.ranks


@dataclass
class Prediction:
    """Predicted cost of one iteration of ``mode``. ``step_s``: iteration time of the fastest
    rank's loop (lock-step modes: everyone's); ``exposed_comm_s``: communication not hidden
    behind compute; ``bytes_sent``: per rank and iteration; ``samples_per_s``: total over ranks."""

    mode: str
    step_s: float
    comm_s: float
    exposed_comm_s: float
    bytes_sent: float
    samples_per_s: float
    note: str = ""


# ---- collective costs ----

def allreduce_time(n: int, nbytes: float, alpha: float, bandwidth: float) -> float:
    """Ring all-reduce: 2(n-1) messages of b/n bytes: 2(n-1)α + 2(n-1)/n · b/BW."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bandwidth


def reduce_scatter_time(n: int, nbytes: float, alpha: float, bandwidth: float) -> float:
    """Ring reduce-scatter (and all-gather): (n-1)α + (n-1)/n · b/BW."""
    if n <= 1:
        return 0.0
    return (n - 1) * alpha + (n - 1) / n * nbytes / bandwidth


def pipeline_end(ready: list[float], costs: list[float]) -> float:
    """One communication channel serving buckets in order: bucket k starts when it is ready and
    the previous one finished. Returns when the last finishes."""
    end = 0.0
    for ready_at, cost in zip(ready, costs):
        end = max(end, ready_at) + cost
    return end


def _ready_times(w: Workload, compute: float) -> list[float]:
    """When each bucket's gradient is complete (to communication) within a backward pass of
    ``compute`` seconds."""
    if not w.hooks:
        return [compute] * len(w.buckets)
    total = w.model_bytes or 1.0
    times, done = [], 0.0
    for b in w.buckets:
        done += b
        times.append(compute * done / total)
    return times


# ---- modes ----

def _lock_step(w: Workload, mode: str, comm_s: float, exposed: float, nbytes: float, note: str = "") -> Prediction:
    slowest = max(w.speeds())
    step = (w.forward_s + w.backward_s) * slowest + exposed
    return Prediction(mode, step, comm_s, exposed, nbytes, w.ranks * w.batch / step, note)


def predict_allreduce(w: Workload) -> Prediction:
    """Gradient buckets all-reduced as backward produces them, one at a time: the iteration is
    forward + max(backward, end of the last bucket's all-reduce)."""
    n, a, bw = w.ranks, w.alpha_s, w.bandwidth_bytes_per_s
    backward = w.backward_s * max(w.speeds())
    costs = [allreduce_time(n, b, a, bw) for b in w.buckets]
    end = pipeline_end(_ready_times(w, backward), costs)
    exposed = max(0.0, end - backward)
    return _lock_step(w, "allreduce", sum(costs), exposed, 2 * (n - 1) / n * w.model_bytes)


def predict_dear(w: Workload) -> Prediction:
    """DeAR: reduce-scatters overlap backward, all-gathers overlap the next forward (in forward
    order: the last bucket produced is the first needed)."""
    n, a, bw = w.ranks, w.reduce_scatter_alpha_s or w.alpha_s, w.bandwidth_bytes_per_s
    speed = max(w.speeds())
    backward, forward = w.backward_s * speed, w.forward_s * speed
    rs = [reduce_scatter_time(n, b, a, bw) for b in w.buckets]
    rs_exposed = max(0.0, pipeline_end(_ready_times(w, backward), rs) - backward)
    # forward: bucket k (in forward order) may run once its all-gather is done
    forward_order = list(reversed(w.buckets))
    total = w.model_bytes or 1.0
    ag_end = compute_end = 0.0
    for b in forward_order:
        ag_end += reduce_scatter_time(n, b, a, bw)
        compute_end = max(compute_end, ag_end) + forward * b / total
    if not w.hooks:  # the step applies every bucket: the next forward starts after the last all-gather
        compute_end = ag_end + forward
    ag_exposed = compute_end - forward
    exposed = rs_exposed + ag_exposed
    return _lock_step(w, "dear", 2 * sum(rs), exposed, 2 * (n - 1) / n * w.model_bytes)


def predict_compressed(w: Workload, codec: str) -> Prediction:
    """Compressed scatter-reduce after backward: both phases move ratio·b, and encoding /
    decoding handle about 2b bytes each way (encode all, decode n-1 chunks, re-encode and
    decode the reduced chunks): 2(n-1)α + 2(n-1)/n · ratio·b/BW + 4b/codec_throughput."""
    n, a, bw = w.ranks, w.alpha_s, w.bandwidth_bytes_per_s
    if codec not in compression.CODECS:
        raise ValueError(f"unknown codec {codec!r}; choose one of {sorted(compression.CODECS)}")
    throughput = w.codec_bytes_per_s.get(codec)
    if not throughput:
        raise ValueError(f"no codec throughput for {codec!r}: calibrate it first")
    ratio = compression.CODECS[codec].ratio  # as the core encodes it, chunk headers included
    wire = allreduce_time(n, ratio * w.model_bytes, a, bw)
    codec_s = 4 * w.model_bytes / throughput
    comm = wire + codec_s
    return _lock_step(w, f"compressed-{codec}", comm, comm, 2 * (n - 1) / n * ratio * w.model_bytes,
                      compression.CODECS[codec].caveat)


def predict_decentralized(w: Workload, topology: str) -> Prediction:
    """Model averaging with neighbours after the local update: ring sends the model to two
    neighbours (α + 2P/BW on a rank's link), a random matching to one (α + P/BW)."""
    peers = 2 if topology == "ring" and w.ranks > 2 else 1
    bandwidth = w.exchange_bytes_per_s or w.bandwidth_bytes_per_s
    comm = w.alpha_s + peers * w.model_bytes / bandwidth if w.ranks > 1 else 0.0
    return _lock_step(w, f"decentralized-{topology}", comm, comm, peers * w.model_bytes,
                      "models differ between ranks until average_now(); random matchings soften stragglers "
                      "(modelled as lock step: pessimistic)" if topology == "random" else
                      "models differ between ranks until average_now()")


def predict_partial(w: Workload, generator: str) -> Prediction:
    """Partial all-reduce of the model within groups of g: 2(g-1)α + 2(g-1)/g · P/BW; the smart
    generator adds a round trip to the generator rank and lets fast ranks run at their own pace."""
    g = min(w.group_size, w.ranks)
    comm = allreduce_time(g, w.model_bytes, w.alpha_s, w.exchange_bytes_per_s or w.bandwidth_bytes_per_s)
    nbytes = 2 * (g - 1) / g * w.model_bytes if g > 1 else 0.0
    if generator != "smart":
        return _lock_step(w, f"partial-{generator}", comm, comm, nbytes, "models differ until average_now()")
    comm += 2 * w.alpha_s
    compute = w.forward_s + w.backward_s
    rates = [w.batch / (compute * s + comm) for s in w.speeds()]
    fastest = compute * min(w.speeds()) + comm
    return Prediction("partial-smart", fastest, comm, comm, nbytes, sum(rates),
                      "fast ranks average less often when others lag")


def predict_async(w: Workload) -> Prediction:
    """Async model averaging: the loop never waits; a background all-reduce of the model runs
    every max(sync_interval, its own duration)."""
    comm = allreduce_time(w.ranks, w.model_bytes, w.alpha_s, w.bandwidth_bytes_per_s)
    compute = w.forward_s + w.backward_s
    rates = [w.batch / (compute * s) for s in w.speeds()]
    round_s = max(w.sync_interval_s, comm)
    step = compute * min(w.speeds())
    per_step_bytes = 2 * (w.ranks - 1) / w.ranks * w.model_bytes * step / round_s if w.ranks > 1 else 0.0
    return Prediction("async", step, comm, 0.0, per_step_bytes, sum(rates),
                      f"models averaged every {1e3 * round_s:.0f} ms, not every step")


def allgather_time(n: int, nbytes_per_rank: float, alpha: float, bandwidth: float) -> float:
    """Ring all-gather of ``nbytes_per_rank`` from every rank: (n-1)α + (n-1) · b/BW."""
    if n <= 1:
        return 0.0
    return (n - 1) * alpha + (n - 1) * nbytes_per_rank / bandwidth


def matrix_views(w: Workload) -> list[tuple[int, int] | None]:
    """Each gradient tensor as the (rows, cols) matrix PowerSGD views it as (its first dimension
    against the rest; None for vectors and scalars), in backward order. Without ``w.shapes``: each
    bucket as one square matrix (a rough stand-in: say the shapes for a real prediction)."""
    if w.shapes:
        views = []
        for shape in w.shapes:
            numel = 1
            for d in shape:
                numel *= int(d)
            views.append((int(shape[0]), numel // int(shape[0])) if len(shape) >= 2 and numel > 0 else None)
        return views
    side = [max(1, int(round((b / 4) ** 0.5))) for b in w.buckets]
    return [(s, s) for s in side]


def predict_powersgd(w: Workload, rank: int, min_compression_rate: float = 2.0, **_: object) -> Prediction:
    """PowerSGD (rank r): each matrix n x m worth compressing ((nm) / ((n+m) r) >= the minimum
    rate) sends P (n r) and Q (m r) floats in two all-reduces; the rest goes exactly with P's.
    P's all-reduce follows backward like all-reduce's buckets (M Q computed first); after
    backward: P's orthogonalization, Q = M^T P, Q's all-reduce, then P Q^T and the error. Host
    math per compressed element: 4 passes over memory (M = g + e, the decompression, the error,
    the copy into the gradient) plus 6r flops (three thin products) at ``matmul_flops_per_s``."""
    n, a, bw = w.ranks, w.alpha_s, w.bandwidth_bytes_per_s
    p_floats = q_floats = matrix_elements = 0.0
    dense_bytes = 0.0
    views = matrix_views(w)
    if w.shapes:  # the vectors and scalars: what no matrix view holds
        dense_bytes = max(0.0, w.model_bytes - sum(4.0 * v[0] * v[1] for v in views if v))
    for view in views:
        if view is None:
            continue
        rows, cols = view
        r = min(rank, rows, cols)
        if rows * cols >= min_compression_rate * (rows + cols) * r:
            p_floats += rows * r
            q_floats += cols * r
            matrix_elements += rows * cols
        else:
            dense_bytes += 4.0 * rows * cols
    flops_per_element = 6 * rank
    host_s = 4 * 4 * matrix_elements / w.host_bytes_per_s + flops_per_element * matrix_elements / w.matmul_flops_per_s
    # phase 1, overlapping backward: P (and the exact rest), in proportion to the buckets
    backward = w.backward_s * max(w.speeds())
    share = [b / (w.model_bytes or 1.0) for b in w.buckets]
    p_bytes = 4 * p_floats + dense_bytes
    costs = [allreduce_time(n, p_bytes * s, a, bw) + host_s / 3 * s for s in share]
    end = pipeline_end(_ready_times(w, backward), costs)
    exposed = max(0.0, end - backward)
    # phase 2, after P arrived: Q's all-reduce and the rest of the host math
    q_s = allreduce_time(n, 4 * q_floats, a, bw) if q_floats else 0.0
    exposed += q_s + 2 * host_s / 3
    sent = 2 * (n - 1) / n * (p_bytes + 4 * q_floats) if n > 1 else 0.0
    return _lock_step(w, f"powersgd-{rank}", sum(costs) + q_s, exposed, sent,
                      "low-rank gradients with error feedback; compresses after start_iter steps of all-reduce")


def predict_topk(w: Workload, density: float, **_: object) -> Prediction:
    """Top-K: after backward each rank selects k = density · N elements (``select_bytes_per_s``),
    all-gathers k values and k indices (8k bytes) from every rank and sums n sparse vectors into
    a dense gradient: (n-1)α + (n-1) · 8k/BW on the wire, against all-reduce's 2(n-1)/n · 4N: it
    moves fewer bytes only while ranks × density < 1."""
    n, a, bw = w.ranks, w.alpha_s, w.bandwidth_bytes_per_s
    pairs_bytes = 2 * density * w.model_bytes  # k float32 values + k float32 indices
    wire = sum(allgather_time(n, 2 * density * b, a, bw) for b in w.buckets)
    host = w.model_bytes / w.select_bytes_per_s + 2 * w.model_bytes / w.host_bytes_per_s \
        + n * pairs_bytes / w.host_bytes_per_s
    comm = wire + host
    sent = (n - 1) * pairs_bytes if n > 1 else 0.0
    return _lock_step(w, f"topk-{density * 100:g}", comm, comm, sent,
                      "sparse gradients with error feedback; gathered, so the bytes grow with the ranks")


def predict_local_updates(w: Workload, sync_every: int, fragments: int = 1, delay: int = 0,
                          codec: str | None = None, density: float | None = None, **_: object) -> Prediction:
    """Local updates (LocalSGD / DiLoCo): H inner steps without communication, then one all-reduce
    of the model (of one fragment of F every H/F steps); with ``delay`` it runs during the next
    inner steps and only what outlasts them shows. Per step on average: compute + exposed / (H/F).
    ``codec="topk"``: the fragment's Top-K pairs all-gathered instead (``predict_topk``'s terms)."""
    n, a, bw = w.ranks, w.alpha_s, w.bandwidth_bytes_per_s
    fragment = w.model_bytes / fragments
    if codec == "topk":
        density = 0.01 if density is None else density
        pairs_bytes = 2 * density * fragment
        sync = allgather_time(n, pairs_bytes, a, bw) + fragment / w.select_bytes_per_s \
            + n * pairs_bytes / w.host_bytes_per_s
        wire_bytes = (n - 1) * pairs_bytes
    else:
        ratio = compression.CODECS[codec].ratio if codec else 1.0
        sync = allreduce_time(n, ratio * fragment, a, bw) + (4 * fragment / w.codec_bytes_per_s[codec]
                                                            if codec and w.codec_bytes_per_s.get(codec) else 0.0)
        wire_bytes = 2 * (n - 1) / n * ratio * fragment
    sync += 3 * fragment / w.host_bytes_per_s  # the outer step's passes over the fragment
    period = sync_every / fragments  # steps between two syncs
    compute = (w.forward_s + w.backward_s) * max(w.speeds())
    exposed_per_sync = max(0.0, sync - delay * compute)
    exposed = exposed_per_sync / period
    sent = wire_bytes / period if n > 1 else 0.0
    name = f"local-{sync_every}" if fragments == 1 else f"streaming-{sync_every}"
    return _lock_step(w, name, sync / period, exposed, sent,
                      "changes the optimization: ranks train apart for H steps (tune H and the outer step)")


def predictable(mode: Mode, w: Workload, codecs: Collection[str] | None = None) -> bool:
    """Whether ``w`` holds what ``mode``'s equation needs: a mode with a codec needs that codec's
    calibrated throughput (and, when ``codecs`` is given, the codec among them)."""
    codec = mode.params.get("codec")
    return codec is None or ((codecs is None or codec in codecs) and bool(w.codec_bytes_per_s.get(codec)))


def predict_all(w: Workload, codecs: Collection[str] | None = None) -> list[Prediction]:
    """Every registered mode (relaxlib.algorithms.modes) the workload can be predicted for, fastest
    (most samples/s) first; ``codecs`` limits the compressed modes to those codecs (None: all)."""
    from relaxlib.algorithms import modes  # here: the algorithms registering into it import this module

    predictions = [mode.prediction(w) for mode in modes.registered() if predictable(mode, w, codecs)]
    return sorted(predictions, key=lambda p: -p.samples_per_s)
