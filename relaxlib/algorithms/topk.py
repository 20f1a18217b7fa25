"""Top-K sparsification with error feedback: each rank sends only the ``density`` fraction of its
gradient elements largest in magnitude, as (index, value) pairs gathered by every rank.

This is the sparsification baseline of GRACE and of "On the Utility of Gradient Compression in
Distributed Training Systems" (Agarwal et al., MLSys 2022): the selected sets differ between
ranks, so the pairs cannot be summed on the way (not all-reducible) and are all-gathered instead.
A rank then receives ``(n - 1) · 2k`` floats per bucket, against ``2 (n - 1) / n · N`` for a ring
all-reduce of the dense bucket: Top-K moves fewer bytes only while ``n · 2 · density < 2``, i.e.
``ranks × density < 1``, and stops paying as ranks grow (the performance model,
``relaxlib.perfmodel.predict_topk``, says where). The all-reducible compressors are
``CompressedScatterReduce`` (quantization) and ``PowerSGD`` (low rank).

One step, per bucket of gradients (reverse optimizer order, ``fusion_mb`` each), when the
gradients are sparsified (``compress="gradient"``)::

    v = g + e                     # e: what earlier steps did not send (error feedback)
    S = the k = ceil(density · N) indices of v largest in magnitude (per segment, see below)
    e = v with S zeroed           # kept for the next step
    gather (S, v[S]) from every rank; g_avg = (1/n) Σ_r scatter(S_r, v_r[S_r])
    the wrapped optimizer steps with g_avg

With SGD (``compress="update"``, the default for SGD) each rank first takes its own SGD step
``lr · d`` (momentum on its own gradients: ``relaxlib.algorithms.sgd_steps``) and ``g`` above is
that step; the averaged sparse step is subtracted from the parameters. What was not sent then
never passes through the momentum, which would amplify it by ``1 / (1 - momentum)`` (Deep
Gradient Compression's momentum correction): on the convergence grid this is what closed most of
the gap at momentum 0.9.

Indices travel as float32 values beside the values (one all-gather per bucket), exact for
indices below 2^24; a bucket longer than that is selected in segments of 2^24 elements, each with
its own k. Selection runs on host (numpy's argpartition) on the gradient's memory where it lies
(``ctx.math.host_view``): CPU tensors in PyTorch, Keras's host steps; a GPU tensor is refused with
a message.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from relaxlib import perfmodel
from relaxlib.algorithms import modes
from relaxlib.algorithms.base import Algorithm, TrainingContext, clip_to_max_grad_norm, wait_out
from relaxlib.algorithms.compressed import gradient_buckets
from relaxlib.algorithms.sgd_steps import LocalSGDSteps, is_sgd
from relaxlib.errors import InvalidArgumentError

SEGMENT = 1 << 24  # float32 represents every integer below 2^24 exactly: the largest index sent


def _positive_float(name: str, value: Any, upper: float | None = None) -> float:
    """``value`` as a float in (0, upper], or ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0 \
            or (upper is not None and value > upper):
        bound = f"(0, {upper:g}]" if upper is not None else "> 0"
        raise ValueError(f"TopK: {name} must be a number in {bound}, got {value!r}")
    return float(value)


def segment_sizes(numel: int) -> list[int]:
    """Lengths of the selection segments of a bucket of ``numel`` elements (each at most 2^24)."""
    return [min(SEGMENT, numel - start) for start in range(0, numel, SEGMENT)]


def keep_count(numel: int, density: float) -> int:
    """k of one segment: ceil(density · numel), at least 1 and at most numel."""
    return min(numel, max(1, math.ceil(density * numel - 1e-9)))


def select(values: np.ndarray, density: float) -> tuple[np.ndarray, np.ndarray]:
    """The Top-K of ``values`` per segment: (indices into ``values`` as int64, their values)."""
    indices = []
    start = 0
    for size in segment_sizes(values.size):
        segment = values[start:start + size]
        k = keep_count(size, density)
        chosen = np.argpartition(np.abs(segment), size - k)[size - k:] if k < size else np.arange(size)
        indices.append(np.sort(chosen) + start)
        start += size
    chosen = np.concatenate(indices) if indices else np.zeros(0, np.int64)
    return chosen, values[chosen]


def pack(indices: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One float32 payload: the values, then the indices as float32 (exact: each < 2^24 within its
    segment, so sent relative to the segment start)."""
    relative = indices % SEGMENT
    return np.concatenate([values.astype(np.float32, copy=False), relative.astype(np.float32)])


def densify(gathered: np.ndarray, ranks: int, numel: int, density: float) -> np.ndarray:
    """The mean over ``ranks`` of the sparse vectors in ``gathered`` (each rank's ``pack``, one
    after another), as a dense float32 vector of ``numel`` elements. Sums in rank order."""
    sizes = segment_sizes(numel)
    per_rank = sum(keep_count(size, density) for size in sizes)
    payloads = gathered.reshape(ranks, 2 * per_rank)
    # the absolute index of each relative one: its segment's start
    starts = np.concatenate([np.full(keep_count(size, density), i * SEGMENT, np.int64)
                             for i, size in enumerate(sizes)]) if sizes else np.zeros(0, np.int64)
    dense = np.zeros(numel, np.float32)
    for payload in payloads:
        values, relative = payload[:per_rank], payload[per_rank:]
        np.add.at(dense, relative.astype(np.int64) + starts, values)
    dense /= ranks
    return dense


def host_array(ctx: TrainingContext, tensor: Any, who: str, what: str) -> np.ndarray:
    """``tensor``'s values as a host array (a view where the framework allows), or
    InvalidArgumentError saying that ``who`` selects on host and needs ``what`` there."""
    view = ctx.math.host_view(tensor)
    if view is None:
        raise InvalidArgumentError(f"{who} selects on host and needs {what} as a float32 tensor in host memory "
                                   "(CPU); GPU tensors are not supported")
    return view


def select_with_feedback(values: np.ndarray, residual: np.ndarray | None,
                         density: float) -> tuple[np.ndarray, np.ndarray | None]:
    """One rank's ``pack`` payload for ``values`` (float32, changed in place) plus its error-feedback
    ``residual`` (None: none kept), and the residual that leaves: the sum off the sent elements. A
    non-finite sum sends NaN values, so that every rank learns of it, and leaves the residual as
    it was."""
    if residual is not None:
        values += residual
    if np.all(np.isfinite(values)):
        chosen, kept = select(values, density)
        if residual is not None:
            values[chosen] = 0.0  # what stays behind: sent with a later step
        return pack(chosen, kept), values if residual is not None else None
    chosen, kept = select(np.zeros_like(values), density)
    return pack(chosen, np.full(kept.shape, np.nan, np.float32)), residual


class TopK(Algorithm):
    """Gradients averaged as Top-K sparse vectors: each rank all-gathers the ``density`` fraction
    of its (error-compensated) gradient largest in magnitude, every rank sums them, and the
    wrapped optimizer steps with the mean. ``error_feedback`` keeps what was not sent and adds it
    to the next step's gradient (without it, small coordinates are never sent). ``fusion_mb``:
    bucket size; each bucket is one all-gather.

    ``compress`` says what is sparsified: ``"update"``, each rank's own SGD step (momentum, weight
    decay, dampening, Nesterov on its own gradients; needs a ``torch.optim.SGD``-like optimizer;
    ``max_grad_norm`` clips each rank's gradient); ``"gradient"``, the gradients, the wrapped
    optimizer stepping on their sparse mean (any optimizer; ``max_grad_norm`` clips the mean);
    ``"auto"`` (default): ``"update"`` with SGD, else ``"gradient"``. Not traceable: in Keras
    ``fit`` the step runs on host arrays.
    """

    name = "topk"

    def __init__(self, density: float = 0.01, error_feedback: bool = True, fusion_mb: float = 10,
                 compress: str = "auto") -> None:
        self.density = _positive_float("density", density, upper=1.0)
        if not isinstance(error_feedback, bool):
            raise ValueError(f"TopK: error_feedback must be True or False, got {error_feedback!r}")
        if compress not in ("auto", "update", "gradient"):
            raise ValueError(f"TopK: compress must be 'auto', 'update' or 'gradient', got {compress!r}")
        self.error_feedback = error_feedback
        self.fusion_mb = _positive_float("fusion_mb", fusion_mb)
        self.compress = compress

    def requirements(self) -> frozenset[str]:
        # SGD steps added to the weights ("auto" only does so with SGD, which every binding has)
        return frozenset({"allgather"} | ({"weights"} if self.compress == "update" else set()))

    def _sparsifies_updates_with(self, snapshot: list[dict]) -> bool:
        """Whether ``compress`` means SGD steps with this optimizer (ValueError if it cannot)."""
        sgd = is_sgd(snapshot)
        if self.compress == "update" and not sgd:
            raise ValueError("TopK(compress='update') needs an SGD optimizer (parameter groups with lr, momentum, "
                             "dampening and nesterov); use compress='gradient' for others")
        return self.compress == "update" or (self.compress == "auto" and sgd)

    def sparsifies_updates(self) -> bool:
        """Whether this run sparsifies SGD steps (``compress="update"`` in effect) rather than gradients."""
        return self._updates

    def setup(self, ctx: TrainingContext) -> None:
        self._buckets = gradient_buckets(ctx, self.fusion_mb)
        numel = {p.index: p.numel for p in ctx.parameters()}
        self._numel = [sum(numel[i] for i in bucket) for bucket in self._buckets]
        self._residuals = [np.zeros(n, np.float32) if self.error_feedback else None for n in self._numel]
        self._handles: list[Any] = []
        self._updates = self._sparsifies_updates_with(ctx.snapshot())
        self._ctx = ctx
        self._sgd = LocalSGDSteps(ctx, self._buckets, self._numel, enabled=self._updates)

    def step(self, ctx: TrainingContext) -> None:
        snapshot = ctx.snapshot()
        self._handles = []
        residuals = []
        for b, bucket in enumerate(self._buckets):
            flat = ctx.flatten_grads(bucket)
            if self._updates:
                flat = self._sgd.step(ctx, b, flat)
            values = np.array(host_array(ctx, flat, "TopK", "the gradients"), dtype=np.float32)
            payload, residual = select_with_feedback(values, self._residuals[b], self.density)
            residuals.append(residual)
            self._handles.append(ctx.comm.allgather_async(ctx.math.from_host(payload), f"{self.name}.{b}"))
        handles, self._handles = self._handles, []
        gathered = [np.asarray(host_array(ctx, ctx.comm.wait(h), "TopK", "the gathered pairs"), np.float32)
                    for h in handles]
        bad = sorted({rank for b, pairs in enumerate(gathered) for rank in self._nonfinite_ranks(pairs, b)})
        if bad:
            self._sgd.discard()
            raise InvalidArgumentError(f"TopK: the gradients hold NaN or Inf on rank(s) {bad}; no parameter, no "
                                       "residual and no momentum was updated on any rank")
        self._residuals = residuals
        self._sgd.commit(ctx)
        averaged = [ctx.math.from_host(densify(pairs, ctx.size, self._numel[b], self.density))
                    for b, pairs in enumerate(gathered)]
        if self._updates:  # averaged SGD steps, already scaled by the learning rate
            for bucket, update in zip(self._buckets, averaged):
                ctx.add_to_params(bucket, update, alpha=-1.0)
            return
        clip_to_max_grad_norm(ctx, averaged)
        for bucket, dense in zip(self._buckets, averaged):
            ctx.apply_update(bucket, snapshot, flat_grads=dense)

    def _nonfinite_ranks(self, gathered: np.ndarray, bucket: int) -> list[int]:
        """The ranks whose gathered values of ``bucket`` are not all finite."""
        per_rank = sum(keep_count(size, self.density) for size in segment_sizes(self._numel[bucket]))
        values = gathered.reshape(-1, 2 * per_rank)[:, :per_rank]
        return [int(r) for r in np.flatnonzero(~np.all(np.isfinite(values), axis=1))]

    def abandon_step(self, ctx: TrainingContext) -> None:
        handles, self._handles = self._handles, []
        self._sgd.discard()
        wait_out(ctx, handles)

    def state_dict(self) -> dict:
        """The error-feedback residuals (host float32 arrays, one per bucket) and, sparsifying SGD
        steps, each bucket's momentum buffer."""
        return {"residuals": [None if r is None else r.copy() for r in self._residuals],
                "momentum": self._sgd.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restores ``state_dict``'s residuals; a bucket layout that differs is refused."""
        saved = state["residuals"]
        if len(saved) != len(self._residuals) or any(
                (s is None) != (r is None) or (s is not None and np.shape(s) != r.shape)
                for s, r in zip(saved, self._residuals)):
            raise ValueError("TopK.load_state_dict: the saved residuals do not match this model's buckets "
                             "(other parameters, fusion_mb or error_feedback)")
        self._residuals = [None if s is None else np.array(s, np.float32) for s in saved]
        self._sgd.load_state_dict(self._ctx, state.get("momentum", []))


_CAVEATS = {1: "1 % of the gradient, gathered: pays while ranks < 100; loses accuracy "
                "(grid: median -0.8, worst -4.7 points)",
            10: "10 % of the gradient, gathered: pays only while ranks < 10"}
modes.register(*(modes.Mode(f"topk-{percent}", kind="compressed", caveat=_CAVEATS[percent],
                            build=TopK, predict=perfmodel.predict_topk, params={"density": percent / 100},
                            position=60)
                 for percent in (1, 10)))
