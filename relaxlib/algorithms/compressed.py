"""Compressed relaxations: gradients (or Adam's momentum) exchanged with a lossy codec through
compressed scatter-reduce, with error feedback on both sides (BAGUA's C_LP_S, 1-bit Adam)."""

from __future__ import annotations

import math

from relaxlib import perfmodel
from relaxlib.algorithms import modes
from relaxlib.algorithms.base import (
    Algorithm,
    TrainingContext,
    clip_to_max_grad_norm,
    wait_out,
)
from relaxlib.algorithms.bucketing import ParamSpec, make_buckets
from relaxlib.algorithms.sgd_steps import LocalSGDSteps, is_sgd
from relaxlib.algorithms.step_scale import FactoredScale
from relaxlib.compression import CODECS
from relaxlib.errors import InvalidArgumentError, RelaxError

MB = 1 << 20


def gradient_buckets(ctx: TrainingContext, fusion_mb: float) -> list[list[int]]:
    """Buckets of float32 parameters in reverse optimizer order (backward produces the last
    layers' gradients first), never mixing parameter groups. Deterministic: no agreement needed."""
    params = list(reversed(ctx.parameters()))
    odd = [p.name for p in params if p.dtype != "torch.float32" and p.dtype != "float32"]
    if odd:
        raise ValueError(f"compressed algorithms handle float32 parameters; these are not: {odd[:5]}")
    specs = [ParamSpec(p.index, p.numel, p.itemsize, f"group{p.group}") for p in params]
    return make_buckets(specs, int(fusion_mb * MB))


def _shape(param) -> tuple[int, ...]:
    """A parameter's shape, or a vector of its size where the binding does not know it."""
    return param.shape if math.prod(param.shape) == param.numel else (param.numel,)


class CompressedScatterReduce(Algorithm):
    """Gradients averaged by compressed scatter-reduce: ``codec`` is ``"uint8"`` (min-max, 1 byte
    per element), ``"sign"`` (1 bit) or ``"fp16"``; ``error_feedback`` keeps the residuals of both
    compressions so their sum stays bounded. ``hierarchical=True`` reduces in full precision within
    each node, compresses only between node leaders, then broadcasts within the node.
    Buckets of ``fusion_mb`` start as soon as their gradients exist, overlapping backward.

    ``compress`` says what goes through the codec:

    - ``"update"``: each rank runs SGD's momentum (and weight decay, dampening, Nesterov) on its
      own gradients and compresses the resulting step ``lr * d``, with error feedback in those
      units; the averaged step is subtracted from the parameters. The error then never passes
      through the momentum, which would amplify it by ``1 / (1 - momentum)`` and turn the
      residual's delay into oscillation (what made 1-bit training diverge at lr 0.05 with
      momentum 0.9). With an exact codec it is the same SGD as all-reduce. Needs a
      ``torch.optim.SGD``-like optimizer; clipping (``max_grad_norm``) clips each rank's gradient.
    - ``"gradient"``: the gradients are compressed and the wrapped optimizer runs on their
      average, whatever it is (for Adam-like optimizers; 1-bit Adam is ``OneBitAdam``).
    - ``"auto"`` (default): ``"update"`` with SGD and a lossy codec, else ``"gradient"``.

    ``step_scale`` says whether each element's value is divided by its typical magnitude before
    compression (and the decoded average multiplied back), so that one codec scale per chunk fits
    layers whose steps differ by orders of magnitude: ``"factored"`` (a scale per element from
    the mean squares of each parameter's rows and columns, averaged over the ranks by one small
    all-reduce per bucket and step: relaxlib.algorithms.step_scale), ``"none"``, or ``"auto"``
    (default): factored for the 1-bit ``"sign"`` codec with error feedback when SGD steps are
    compressed, none otherwise (without error feedback the scale cost accuracy).
    ``scale_floor`` bounds the division where a row or column barely moves (a fraction of the
    parameter's root mean square; docs/compression.md has the runs that chose the default). The
    statistics cost ``rows + cols + 1`` floats per parameter on the wire (docs/compression.md
    gives the bits per element).
    """

    name = "compressed_scatter_reduce"

    def __init__(self, codec: str = "uint8", error_feedback: bool = True, hierarchical: bool = False,
                 fusion_mb: float = 10, compress: str = "auto", step_scale: str = "auto",
                 scale_floor: float = 0.1) -> None:
        if codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}; choose one of {sorted(CODECS)}")
        if fusion_mb <= 0:
            raise ValueError("fusion_mb must be positive")
        if compress not in ("auto", "update", "gradient"):
            raise ValueError(f"compress must be 'auto', 'update' or 'gradient', not {compress!r}")
        if step_scale not in ("auto", "factored", "none"):
            raise ValueError(f"step_scale must be 'auto', 'factored' or 'none', not {step_scale!r}")
        if not scale_floor > 0:
            raise ValueError(f"scale_floor must be > 0, not {scale_floor!r}")
        self.codec = codec
        self.error_feedback = error_feedback
        self.hierarchical = hierarchical
        self.fusion_mb = fusion_mb
        self.compress = compress
        self.step_scale = step_scale
        self.scale_floor = scale_floor

    def requirements(self) -> frozenset[str]:
        needs = {"compressed_allreduce"} | ({"error_feedback"} if self.error_feedback else set())
        if self.compress == "update":  # SGD steps added to the weights ("auto" only does so with SGD)
            needs.add("weights")
        if self.hierarchical:
            needs |= {"node_groups", "group_allreduce", "async_broadcast"}
        return frozenset(needs)

    def setup(self, ctx: TrainingContext) -> None:
        self._buckets = gradient_buckets(ctx, self.fusion_mb)
        self._bucket_of = {i: b for b, members in enumerate(self._buckets) for i in members}
        self._ready = [0] * len(self._buckets)
        self._started: dict[int, object] = {}
        self._inputs: dict[int, object] = {}  # hierarchical: each started bucket's input on this rank
        self._waiting: dict[int, tuple] = {}  # buckets waiting for their scale's statistics
        self._unscaled: set[int] = set()  # started buckets whose result is already in the step's units
        self._local = self._leaders = None
        self._leader = 0
        self._ctx = ctx
        self._numels = [sum(ctx.parameters()[i].numel for i in members) for members in self._buckets]
        snapshot = ctx.snapshot()
        self._updates = self._compresses_updates_with(snapshot)
        # SGD's momentum buffers (compressing SGD steps), as context state from the start: a traced
        # step then reads and updates them in place every step
        self._sgd = LocalSGDSteps(ctx, self._buckets, self._numels, enabled=self._updates)
        if self.hierarchical:
            self._local, self._leaders, self._leader = ctx.comm.node_groups()
        holds_state = self.error_feedback and (not self.hierarchical or self._leaders is not None)
        group = self._leaders if self.hierarchical else None
        self._memories = [ctx.comm.error_feedback(numel, group=group) if holds_state else None
                          for numel in self._numels]
        scaled = self.step_scale == "factored" or (self.step_scale == "auto" and self._updates and self.codec == "sign"
                                                   and self.error_feedback)
        self._scales = [FactoredScale(ctx, [_shape(ctx.parameters()[i]) for i in members], self.scale_floor)
                        for members in self._buckets] if scaled else None

    def _compresses_updates_with(self, snapshot: list[dict]) -> bool:
        """Whether ``compress`` means SGD steps with this optimizer (ValueError if it cannot)."""
        sgd = is_sgd(snapshot)
        if self.compress == "update" and not sgd:
            raise ValueError("CompressedScatterReduce(compress='update') needs an SGD optimizer (parameter groups "
                             "with lr, momentum, dampening and nesterov); use compress='gradient' for others")
        lossy = CODECS[self.codec].kind == "compressed"
        return self.compress == "update" or (self.compress == "auto" and sgd and lossy)

    def traceable(self, ctx: TrainingContext) -> bool:
        """The same ops every step (with node groups too: a rank's part of the hierarchy is fixed
        at setup), with the residuals, SGD's momentum and the step scale in context state. Not
        with ``max_grad_norm`` (a host norm) or, when SGD steps are compressed, SGD's
        ``dampening`` (whose first step differs from the others)."""
        snapshot = ctx.snapshot()
        updates = self._compresses_updates_with(snapshot)
        damped = updates and any(group["dampening"] for group in snapshot)
        return not (ctx.max_grad_norm or damped)

    def compresses_updates(self) -> bool:
        """Whether this run compresses SGD steps (``compress="update"`` in effect) rather than gradients."""
        return self._updates

    def on_gradient(self, ctx: TrainingContext, index: int) -> None:
        bucket = self._bucket_of[index]
        self._ready[bucket] += 1
        if self._ready[bucket] == len(self._buckets[bucket]):
            self._start(ctx, bucket)

    def _start_in_place(self, ctx: TrainingContext, bucket: int):
        """The bucket's compressed all-reduce started from its gradients where they lie (no
        flattened copy, the learning rate applied inside the operation), when what is compressed
        is ``lr`` times the gradient or SGD's momentum buffer (without weight decay, Nesterov,
        ``maximize``, clipping or dampening in effect) or the gradient itself; else None. The same
        bits as ``LocalSGDSteps.step``'s tensor ops."""
        members = self._buckets[bucket]
        name, memory = f"{self.name}.{bucket}", self._memories[bucket]
        if not self._updates:
            return ctx.compressed_allreduce_grads_async(members, name, self.codec, memory)
        hyper = self._sgd.hyper(ctx, bucket)
        if hyper.get("maximize") or ctx.max_grad_norm or hyper.get("weight_decay") or hyper["nesterov"]:
            return None
        momentum = hyper["momentum"]
        if not momentum:
            return ctx.compressed_allreduce_grads_async(members, name, self.codec, memory, prescale=hyper["lr"])
        if hyper["dampening"] and self._sgd.started[bucket]:
            return None
        buffer = ctx.add_grads(momentum * self._sgd.buffer(ctx, bucket), members)
        self._sgd.stage(bucket, buffer)  # kept by step() once the step succeeded
        return ctx.comm.compressed_allreduce_async(buffer, name, self.codec, memory, prescale=hyper["lr"])

    def _start(self, ctx: TrainingContext, bucket: int) -> None:
        if self._scales is None and not self.hierarchical:
            handle = self._start_in_place(ctx, bucket)
            if handle is not None:
                self._started[bucket] = handle
                return
        flat = ctx.flatten_grads(self._buckets[bucket])
        if self._updates:
            flat = self._sgd.step(ctx, bucket, flat)
        name = f"{self.name}.{bucket}"
        if self._scales is None:
            self._send(ctx, bucket, flat)
            return
        if not self.hierarchical:  # the whole scale inside the operation, where the binding can
            handle = self._scales[bucket].start_compressed(ctx, flat, name, self.codec, self._memories[bucket])
            if handle is not None:
                self._started[bucket] = handle
                self._unscaled.add(bucket)
                return
        # The scale needs every rank's statistics of this step: their all-reduce runs while
        # backward goes on, and the bucket leaves once the next one is ready (or in step()).
        statistics = self._scales[bucket].statistics(ctx, flat)
        self._waiting[bucket] = (flat, ctx.comm.allreduce_async(statistics, name + ".scale", average=True))
        self._send_waiting(ctx, keep=bucket)

    def _send_waiting(self, ctx: TrainingContext, keep: int | None = None) -> None:
        """Sends the buckets waiting for their scale statistics (but ``keep``), in bucket order:
        each divided by its updated scale, its error-feedback memories following the change."""
        for bucket in sorted(self._waiting):
            if bucket == keep:
                continue
            flat, statistics = self._waiting.pop(bucket)
            scale = self._scales[bucket]
            scale.update(ctx, ctx.comm.wait(statistics))
            self._send(ctx, bucket, scale.scale(ctx, flat, self._memories[bucket]))

    def _send(self, ctx: TrainingContext, bucket: int, flat) -> None:
        """Starts a bucket's compressed all-reduce (hierarchical: its first, node-local stage)."""
        name = f"{self.name}.{bucket}"
        if not self.hierarchical:
            self._started[bucket] = ctx.comm.compressed_allreduce_async(flat, name, self.codec, self._memories[bucket])
        else:  # first stage only; the rest follows in step()
            self._started[bucket] = ctx.comm.allreduce_async(flat, name + ".local", average=True, group=self._local)
            self._inputs[bucket] = flat

    def _finish(self, ctx: TrainingContext, bucket: int):
        result = ctx.comm.wait(self._started.pop(bucket))
        if not self.hierarchical:
            return result
        name = f"{self.name}.{bucket}"
        own_input = self._inputs.pop(bucket)
        if self._leaders is not None:  # node mean -> mean over nodes, compressed
            # NaN where it failed (on every leader alike), which tells the rest of the node: a
            # successful result is finite (the compressed all-reduce refuses non-finite input)
            result = ctx.comm.compressed_allreduce_or_nan(result, name + ".leaders", self.codec, self._memories[bucket],
                                                     group=self._leaders)
        result = ctx.comm.wait(ctx.comm.broadcast_async(result, self._leader, name + ".node", group=self._local))
        if not self._numels[bucket]:
            return result
        if not ctx.runs_eagerly():  # every rank fails its step where the NaN arrives (no host look: no rank named)
            return ctx.check_not_nan(result, f"{name}: the compressed all-reduce between node leaders failed: "
                                             "non-finite values (NaN or Inf) in the input of some rank (eager steps "
                                             "name it); the error-feedback state is unchanged")
        if math.isnan(float(result[0])):
            self._raise_node_failure(ctx, name, own_input)
        return result

    def _raise_node_failure(self, ctx: TrainingContext, name: str, own_input) -> None:
        """Raises on every rank the error of a bucket whose all-reduce between node leaders failed
        (every rank gets here: each got the NaN its leader sent). Only a leader saw the failure,
        and its input was its node's mean: one more all-reduce, of a flag per rank, finds the
        ranks whose own input held non-finite values, as the error names them without hierarchy."""
        zero = ctx.math.zeros(1)
        bad = zero + (0.0 if math.isfinite(ctx.math.sum_of_squares(own_input)) else 1.0)
        flags = ctx.math.concat([ctx.math.repeat(zero, ctx.rank), bad, ctx.math.repeat(zero, ctx.size - ctx.rank - 1)])
        counts = ctx.comm.wait(ctx.comm.allreduce_async(flags, name + ".non_finite", average=False))
        culprits = [str(rank) for rank in range(ctx.size) if float(counts[rank]) > 0]
        if not culprits:  # every input finite: a node's mean overflowed, or the leaders failed otherwise
            raise RelaxError(f"{name}: the compressed all-reduce between node leaders failed, with every rank's "
                             "input finite (a node's mean may have overflowed)")
        raise InvalidArgumentError(
            f"{name}: non-finite values (NaN or Inf) in the input of rank{'s' if len(culprits) > 1 else ''} "
            f"{', '.join(culprits)}; a compressed all-reduce cannot encode them (error-feedback state unchanged)")

    def step(self, ctx: TrainingContext) -> None:
        for bucket in range(len(self._buckets)):
            if bucket not in self._started and bucket not in self._waiting:
                self._start(ctx, bucket)  # parameters without gradient this step: zeros
        self._send_waiting(ctx)
        averaged = [self._finish(ctx, b) for b in range(len(self._buckets))]
        self._ready = [0] * len(self._buckets)
        self._sgd.commit(ctx)
        if self._scales is not None:
            averaged = [update if bucket in self._unscaled else scale.unscale(ctx, update)
                        for bucket, (scale, update) in enumerate(zip(self._scales, averaged))]
            self._unscaled.clear()
        if self._updates:  # averaged SGD steps, already scaled by the learning rate
            for members, update in zip(self._buckets, averaged):
                ctx.add_to_params(members, update, alpha=-1.0)
            return
        clip_to_max_grad_norm(ctx, averaged)  # the same averages on every rank: the same norm
        # one optimizer call for every bucket: optimizer-wide state (Keras counts an iteration per
        # call, global-norm clipping, moving averages) must see one step
        ctx.apply_update([i for members in self._buckets for i in members], ctx.snapshot(),
                         flat_grads=ctx.math.concat(averaged))

    def abandon_step(self, ctx: TrainingContext) -> None:
        wait_out(ctx, [*self._started.values(), *(statistics for _, statistics in self._waiting.values())])
        self._started.clear()
        self._inputs.clear()
        self._waiting.clear()
        self._unscaled.clear()
        self._sgd.discard()
        self._ready = [0] * len(self._buckets)


    def state_dict(self) -> dict:
        return {"error_feedback": [m.state_dict() if m is not None else None for m in self._memories],
                "momentum": self._sgd.state_dict(),
                "step_scale": [s.state_dict(self._ctx) for s in self._scales] if self._scales is not None else None}

    def load_state_dict(self, state: dict) -> None:
        for memory, saved in zip(self._memories, state["error_feedback"]):
            if memory is not None and saved is not None:
                memory.load_state_dict(saved)
        self._sgd.load_state_dict(self._ctx, state.get("momentum", []))
        saved_scales = state.get("step_scale")
        if self._scales is not None and saved_scales is not None:
            for scale, saved in zip(self._scales, saved_scales):
                scale.load_state_dict(self._ctx, saved)


class OneBitAdam(Algorithm):
    """1-bit Adam (Tang et al. 2021, evaluated in BAGUA): Adam with all-reduced gradients for
    ``warmup_steps`` while the variance settles; then the variance is frozen and each rank's
    *momentum* is averaged with the 1-bit sign codec through compressed scatter-reduce with error
    feedback. It replaces the wrapped optimizer's update (the optimizer only supplies parameter
    groups and, when ``lr`` is None, the learning rate, so LR schedulers keep working).

    What is compressed is the momentum divided by the frozen ``sqrt(v) + eps``, i.e. the step
    Adam takes per unit of learning rate: the frozen denominator is the same on every rank, so
    the average is unchanged, but the values are of similar magnitude across layers, which one
    sign scale per chunk needs. Compressing the raw momentum gave elements with a small variance
    the scale of the large ones, divided by their small ``sqrt(v)``: it diverged on a conv net.

    It can diverge when the variance is frozen too early or moves later (BAGUA saw it on VGG16
    and LSTM+AlexNet): choose ``warmup_steps`` past the initial transient (a few % of training).
    An element whose gradient grows after warm-up (a ReLU unit that wakes up) would divide its
    new momentum by a tiny frozen ``sqrt(v)``; the frozen denominator is therefore floored at
    ``variance_floor`` times the bucket's root mean ``sqrt(v)``, which bounds such steps (Adam
    itself would let ``v`` grow). Elements that had no gradient at all during warm-up keep their
    value afterwards. ``betas=None`` takes the wrapped optimizer's betas (``(0.9, 0.999)`` if it
    has none), as ``lr=None`` takes its learning rate.
    """

    name = "onebit_adam"

    def __init__(self, lr: float | None = None, betas: tuple[float, float] | None = None, eps: float = 1e-8,
                 warmup_steps: int = 100, weight_decay: float = 0.0, fusion_mb: float = 10,
                 variance_floor: float = 0.1) -> None:
        if warmup_steps < 1:
            raise ValueError("warmup_steps must be at least 1 (the variance needs full-precision steps)")
        if variance_floor < 0:
            raise ValueError("variance_floor must be >= 0")
        self.lr = lr
        self.betas = betas
        self.variance_floor = variance_floor
        self.eps = eps
        self.warmup_steps = warmup_steps
        self.weight_decay = weight_decay
        self.fusion_mb = fusion_mb

    def requirements(self) -> frozenset[str]:
        return frozenset({"compressed_allreduce", "error_feedback", "weights"})

    def setup(self, ctx: TrainingContext) -> None:
        self._buckets = gradient_buckets(ctx, self.fusion_mb)
        self._bucket_of = {i: b for b, members in enumerate(self._buckets) for i in members}
        self._ready = [0] * len(self._buckets)
        self._started: dict[int, object] = {}
        self._betas = tuple(self.betas or ctx.snapshot()[0].get("betas", (0.9, 0.999)))
        self._momentum = [0.0 * ctx.flatten_params(members) for members in self._buckets]
        self._variance = [0.0 * ctx.flatten_params(members) for members in self._buckets]
        self._memories = [ctx.comm.error_feedback(sum(ctx.parameters()[i].numel for i in members))
                          for members in self._buckets]
        self._frozen: dict[int, tuple] = {}  # per bucket once compressing: (sqrt(v_hat) + eps, mask)

    def _preconditioner(self, ctx: TrainingContext, bucket: int) -> tuple:
        """The frozen denominator ``sqrt(v_hat) + eps`` (floored, see the class) of a bucket and
        the mask of its elements that had a gradient during warm-up (v > 0). The others would
        move by +-scale from the sign codec: they keep their value, as DeepSpeed's 1-bit Adam asks
        a user-given mask for."""
        if bucket not in self._frozen:
            v_hat = self._variance[bucket] / (1 - self._betas[1] ** self.warmup_steps)
            root = ctx.math.sqrt(v_hat)
            numel = sum(ctx.parameters()[i].numel for i in self._buckets[bucket])
            floor = self.variance_floor * math.sqrt(ctx.math.sum_of_squares(root) / max(numel, 1))
            self._frozen[bucket] = (root + (self.eps + floor), v_hat / (v_hat + 1e-30))
        return self._frozen[bucket]

    def compressing(self, ctx: TrainingContext) -> bool:
        """Whether the current step exchanges compressed momentum (after warm-up)."""
        return ctx.step_count >= self.warmup_steps

    def on_gradient(self, ctx: TrainingContext, index: int) -> None:
        bucket = self._bucket_of[index]
        self._ready[bucket] += 1
        if self._ready[bucket] == len(self._buckets[bucket]):
            self._start(ctx, bucket)

    def _start(self, ctx: TrainingContext, bucket: int) -> None:
        grad = ctx.flatten_grads(self._buckets[bucket])
        name = f"{self.name}.{bucket}"
        if not self.compressing(ctx):
            self._started[bucket] = ctx.comm.allreduce_async(grad, name + ".grad")
            return
        beta1 = self._betas[0]
        local_momentum = beta1 * self._momentum[bucket] + (1 - beta1) * grad
        denominator, mask = self._preconditioner(ctx, bucket)
        self._started[bucket] = ctx.comm.compressed_allreduce_async(local_momentum * mask / denominator,
                                                               name + ".momentum", "sign", self._memories[bucket])

    def step(self, ctx: TrainingContext) -> None:
        for bucket in range(len(self._buckets)):
            if bucket not in self._started:
                self._start(ctx, bucket)
        snapshot = ctx.snapshot()
        beta1, beta2 = self._betas
        t = ctx.step_count + 1
        # every bucket's average first: a failed all-reduce leaves no bucket half stepped
        received_all = [ctx.comm.wait(self._started.pop(bucket)) for bucket in range(len(self._buckets))]
        for bucket, (members, received) in enumerate(zip(self._buckets, received_all)):
            if not self.compressing(ctx):  # Adam on the all-reduced gradient
                self._momentum[bucket] = beta1 * self._momentum[bucket] + (1 - beta1) * received
                self._variance[bucket] = beta2 * self._variance[bucket] + (1 - beta2) * received * received
                m_hat = self._momentum[bucket] / (1 - beta1 ** t)
                v_hat = self._variance[bucket] / (1 - beta2 ** t)
                step = m_hat / (ctx.math.sqrt(v_hat) + self.eps)
            else:  # the averaged 1-bit step under the frozen variance
                denominator, mask = self._preconditioner(ctx, bucket)
                step = received * mask
                self._momentum[bucket] = step * denominator
            lr = self.lr if self.lr is not None else self._group_lr(ctx, snapshot, members[0])
            params = ctx.flatten_params(members)
            if self.weight_decay:
                params = params - lr * self.weight_decay * params
            ctx.set_params_from_flat(members, params - lr * step)
        self._ready = [0] * len(self._buckets)

    def abandon_step(self, ctx: TrainingContext) -> None:
        wait_out(ctx, self._started.values())
        self._started.clear()
        self._ready = [0] * len(self._buckets)

    @staticmethod
    def _group_lr(ctx: TrainingContext, snapshot, index: int) -> float:
        return snapshot[ctx.parameters()[index].group]["lr"]


    def state_dict(self) -> dict:
        return {"momentum": [m * 1.0 for m in self._momentum], "variance": [v * 1.0 for v in self._variance],
                "error_feedback": [m.state_dict() for m in self._memories]}

    def load_state_dict(self, state: dict) -> None:
        self._momentum = [m * 1.0 for m in state["momentum"]]
        self._variance = [v * 1.0 for v in state["variance"]]
        self._frozen = {}
        for memory, saved in zip(self._memories, state["error_feedback"]):
            memory.load_state_dict(saved)


def compressed_mode(codec: str) -> modes.Mode:
    """The advisor mode ``compressed-<codec>``: CompressedScatterReduce's defaults with that codec,
    whose kind and caveat are the codec's own (as the core registered it)."""
    spec = CODECS[codec]
    return modes.Mode(f"compressed-{codec}", kind=spec.kind, caveat=spec.caveat, build=CompressedScatterReduce,
                      predict=perfmodel.predict_compressed, params={"codec": codec}, position=50)


modes.register_lazily(lambda: [compressed_mode(codec) for codec in CODECS])  # CODECS comes from the core
