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
