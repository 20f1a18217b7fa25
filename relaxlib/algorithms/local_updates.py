"""Local updates with an outer optimizer: LocalSGD and DiLoCo (Douillard et al. 2023), with
Streaming DiLoCo's fragments and delayed application (Douillard et al. 2025) as options.

Every rank runs ``sync_every`` (H) steps of the wrapped optimizer on its own gradients, without
communicating. Then the *outer gradient* of the parameters, the change since the last sync
averaged over ranks, is applied to a replicated copy of the parameters (the *anchor*) by an
outer SGD, and every rank continues from the new anchor::

    delta   = anchor - mean_over_ranks(theta_local)      # one all-reduce of (anchor - theta_local)
    m       = mu * m + delta                             # outer momentum (when mu > 0)
    update  = delta + mu * m  (Nesterov)  or  m  (heavy ball)  or  delta  (mu = 0)
    anchor  = anchor - outer_lr * update
    theta   = anchor                                     # on every rank

(the Nesterov form of ``torch.optim.SGD(nesterov=True)``). ``outer_lr=1`` without momentum is
plain model averaging every H steps (LocalSGD); ``DiLoCo`` is SGD with Nesterov momentum 0.9 and
learning rate 0.7. The outer step runs on flat buffers with the context's tensor math, so the same
object runs in torch and in Keras.

``fragments`` (F) splits the parameters, in optimizer order, into F contiguous groups of similar
size synchronised in turn, one every H/F steps (each still every H steps), which spreads the
traffic; ``delay`` (tau) lets a fragment's all-reduce run during the next tau inner steps, and its
result is applied then: ``theta_fragment = mixing * theta_fragment + (1 - mixing) * anchor``
(Streaming DiLoCo's rule; ``mixing=0`` takes the anchor and drops the tau local steps).
``codec`` sends the outer gradient through the core's compressed all-reduce (``"fp16"``,
``"uint8"``, ``"sign"``, ...), with error feedback on it when ``error_feedback``; ``codec="topk"``
sends the ``density`` fraction of it largest in magnitude as (index, value) pairs, all-gathered
(the Top-K half of SparseLoCo's outer gradient, values in float32; ``relaxlib.algorithms.topk``
has the selection and the bytes), with error feedback on host arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from relaxlib import basics, perfmodel
from relaxlib.algorithms import modes
from relaxlib.algorithms.averaging import FLOAT_DTYPES, dtype_name
from relaxlib.algorithms.base import (
    Algorithm,
    TrainingContext,
    clip_to_max_grad_norm,
    wait_out,
)
from relaxlib.algorithms.context import TensorMath
from relaxlib.algorithms.topk import densify, host_array, keep_count, segment_sizes, select_with_feedback
from relaxlib.compression import CODECS
from relaxlib.errors import InvalidArgumentError

SPARSE = "topk"  # the outer codec that is not a core codec: Top-K pairs, all-gathered

__all__ = ["DiLoCo", "LocalSGD", "OuterSGD", "fragment_schedule", "split_fragments"]


def _positive_int(name: str, value: Any) -> int:
    """``value`` if it is an integer >= 1, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True)
class OuterSGD:
    """The outer optimizer: SGD with learning rate ``lr``, (heavy-ball or Nesterov) ``momentum``,
    on the outer gradient. It holds no parameters: LocalSGD applies it to the anchor of the
    parameters the wrapped optimizer trains."""

    lr: float = 1.0
    momentum: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not (
                math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"outer_lr must be a finite number > 0, got {self.lr!r}")
        if isinstance(self.momentum, bool) or not isinstance(self.momentum, (int, float)) or not (
                0 <= self.momentum < 1):
            raise ValueError(f"outer_momentum must be a number in [0, 1), got {self.momentum!r}")
        if not isinstance(self.nesterov, bool):
            raise ValueError(f"nesterov must be True or False, got {self.nesterov!r}")
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov=True needs outer_momentum > 0")

    def step(self, tensor_math: TensorMath, anchor: Any, delta: Any, momentum: Any) -> Any:
        """One outer step in place: ``anchor -= lr * update`` (see the module); ``delta`` (the
        averaged outer gradient) is used as scratch. ``momentum`` is the buffer of the previous
        steps (None before the first); returns the new one (None without momentum)."""
        mu = float(self.momentum)
        if mu == 0:
            tensor_math.add_(anchor, delta, -float(self.lr))
            return None
        if momentum is None:  # torch's first step: the buffer is the gradient (mu * 0 + delta)
            momentum = tensor_math.clone(delta)
        else:
            tensor_math.scale_(momentum, mu)
            tensor_math.add_(momentum, delta)
        if self.nesterov:
            tensor_math.add_(delta, momentum, mu)
            update = delta
        else:
            update = momentum
        tensor_math.add_(anchor, update, -float(self.lr))
        return momentum


def split_fragments(numels: list[int], fragments: int) -> list[list[int]]:
    """Positions 0..len(numels)-1 cut into ``fragments`` contiguous, non-empty groups whose total
    sizes are as even as contiguity allows (a cut where the running total first reaches k/F of it)."""
    if fragments > len(numels):
        raise ValueError(f"fragments={fragments} is more than the {len(numels)} parameter tensors to split")
    total = sum(numels)
    groups: list[list[int]] = [[] for _ in range(fragments)]
    running, current = 0, 0
    for position, numel in enumerate(numels):
        left = len(numels) - position  # this one included
        must_advance = groups[current] and left <= fragments - 1 - current  # one tensor per later group
        may_advance = groups[current] and current < fragments - 1 and running * fragments >= total * (current + 1)
        if must_advance or may_advance:
            current += 1
        groups[current].append(position)
        running += numel
    return groups


def fragment_schedule(sync_every: int, fragments: int) -> list[int]:
    """For each fragment, the inner step (mod ``sync_every``) at which it is sent: fragment f at
    the steps s (counted from 1) with ``s % sync_every == ((f + 1) * sync_every // fragments) %
    sync_every``, so the last one is sent every H-th step, as without fragments."""
    return [((f + 1) * sync_every // fragments) % sync_every for f in range(fragments)]


@dataclass
class _Pending:
    """A fragment's outer all-reduce in flight: its handle and the inner step that applies it."""

    handle: Any
    due: int
    sent: Any  # what was sent (kept alive until waited for)
    residual: Any = None  # codec="topk": this rank's residual once the outer step is applied


class LocalSGD(Algorithm):
    """Local updates with an outer optimizer (the module docstring has the algorithm).

    ``sync_every``: inner steps (H) between synchronisations. The outer optimizer is SGD with
    ``outer_lr``, ``outer_momentum`` and ``nesterov``, or ``outer_optimizer=OuterSGD(...)`` (not a
    framework optimizer: the outer step runs on the anchor of the wrapped optimizer's own
    parameters). ``codec`` (None: exact) and ``error_feedback``: compress the outer gradient;
    ``codec="topk"`` keeps its ``density`` fraction largest in magnitude (host arrays: CPU
    tensors in PyTorch, Keras's host steps). ``fragments``, ``delay``, ``mixing``: Streaming
    DiLoCo (module docstring).

    Weights must be one dtype, float32 or float64 (float32 with a codec). The anchor is rank 0's
    weights at the first step, so every rank starts from the same point even if the model was
    not broadcast. ``state_dict()`` holds the anchors, outer momenta, the step counter and the
    codec residuals; with it (and the model's and inner optimizer's state) training resumes bit
    for bit. ``flush()`` (also run by the torch optimizer's ``state_dict``) applies outer steps
    still in flight (``delay > 0``) at once.
    """

    name = "local_sgd"

    def __init__(self, sync_every: int = 8, outer_lr: float = 1.0, outer_momentum: float = 0.0,
                 nesterov: bool = False, outer_optimizer: OuterSGD | None = None, codec: str | None = None,
                 error_feedback: bool = True, fragments: int = 1, delay: int = 0, mixing: float = 0.0,
                 density: float | None = None) -> None:
        _positive_int("sync_every", sync_every)
        _positive_int("fragments", fragments)
        if outer_optimizer is not None:
            if not isinstance(outer_optimizer, OuterSGD):
                raise TypeError(
                    f"outer_optimizer must be a relaxlib.algorithms.local_updates.OuterSGD, got "
                    f"{type(outer_optimizer).__name__}: a framework optimizer holds its own parameters, while the "
                    "outer step must run on the anchor of the parameters the wrapped optimizer trains; pass "
                    "OuterSGD(lr, momentum, nesterov) or outer_lr=, outer_momentum=, nesterov=")
            if (outer_lr, outer_momentum, nesterov) != (1.0, 0.0, False):
                raise ValueError("give either outer_optimizer or outer_lr/outer_momentum/nesterov, not both")
            outer = outer_optimizer
        else:
            outer = OuterSGD(outer_lr, outer_momentum, nesterov)
        if fragments > sync_every:
            raise ValueError(f"fragments={fragments} must not exceed sync_every={sync_every}: each fragment is "
                             "sent once every sync_every steps, at its own step")
        if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay < sync_every:
            raise ValueError(f"delay must be an integer in [0, sync_every={sync_every}), got {delay!r}")
        if isinstance(mixing, bool) or not isinstance(mixing, (int, float)) or not 0 <= mixing < 1:
            raise ValueError(f"mixing must be a number in [0, 1), got {mixing!r}")
        if codec is not None and codec != SPARSE and codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}; choose one of {sorted(CODECS)}, {SPARSE!r} or None")
        if codec == SPARSE:
            density = 0.01 if density is None else density
            if isinstance(density, bool) or not isinstance(density, (int, float)) or not 0 < density <= 1:
                raise ValueError(f"density must be a number in (0, 1], got {density!r}")
        elif density is not None:
            raise ValueError(f"density is the fraction codec={SPARSE!r} keeps; codec is {codec!r}")
        if not isinstance(error_feedback, bool):
            raise ValueError(f"error_feedback must be True or False, got {error_feedback!r}")
        self.sync_every = sync_every
        self.outer_lr = float(outer.lr)
        self.outer_momentum = float(outer.momentum)
        self.nesterov = outer.nesterov
        self.codec = codec
        self.error_feedback = error_feedback
        self.fragments = fragments
        self.delay = delay
        self.mixing = float(mixing)
        self.density = None if density is None else float(density)

    @property
    def outer_optimizer(self) -> OuterSGD:
        """The outer SGD this configuration applies."""
        return OuterSGD(self.outer_lr, self.outer_momentum, self.nesterov)

    @property
    def inner_steps(self) -> int:
        """Local updates completed (restored from a checkpoint)."""
        return self._inner_steps

    @property
    def syncs(self) -> int:
        """Outer steps applied, counting each fragment's (restored from a checkpoint)."""
        return self._syncs

    def requirements(self) -> frozenset[str]:
        needs = {"weights", "async_broadcast"}
        if self.codec == SPARSE:
            needs.add("allgather")
        elif self.codec is not None:
            needs |= {"compressed_allreduce"} | ({"error_feedback"} if self.error_feedback else set())
        return super().requirements() | needs

    # -- setup --

    def setup(self, ctx: TrainingContext) -> None:
        params = ctx.parameters()
        kinds = sorted({dtype_name(p.dtype) for p in params})
        if len(kinds) != 1 or kinds[0] not in FLOAT_DTYPES:
            raise ValueError(f"{self.name} keeps one flat float32 or float64 copy of the model; the parameters have "
                             f"dtypes {kinds}")
        if self.codec is not None and kinds != ["float32"]:
            raise ValueError(f"{self.name} with codec={self.codec!r} compresses float32 outer gradients; the "
                             f"parameters are {kinds[0]}")
        self._ctx = ctx
        self._fragments = [[params[i].index for i in group]
                           for group in split_fragments([p.numel for p in params], self.fragments)]
        self._sends = fragment_schedule(self.sync_every, self.fragments)
        self._outer = self.outer_optimizer
        self._anchors: list[Any] | None = None  # taken at the first step (after the user's broadcast)
        self._momenta: list[Any] = [None] * self.fragments
        self._numels = [sum(params[i].numel for i in group) for group in self._fragments]
        core_codec = self.codec not in (None, SPARSE)
        self._memories = [ctx.comm.error_feedback(numel) if core_codec and self.error_feedback else None
                          for numel in self._numels]
        # codec="topk": what each fragment's outer gradients did not send yet, on host
        self._residuals = [np.zeros(numel, np.float32) if self.codec == SPARSE and self.error_feedback else None
                           for numel in self._numels]
        self._pending: dict[int, _Pending] = {}
        self._inner_steps = 0  # completed local updates
        self._syncs = 0  # outer steps applied (all fragments)
        restore, self._restore = getattr(self, "_restore", None), None
        if restore is not None:  # loaded before setup (Keras sets algorithms up at the first step)
            self.load_state_dict(restore)

    # -- one training step --

    def step(self, ctx: TrainingContext) -> None:
        self.before_update(ctx)
        self._local_update(ctx)
        self.after_update(ctx)

    def splits_around_update(self, ctx: TrainingContext) -> bool:
        """The inner step is the wrapped optimizer's own update (unless clipping needs the norm first)."""
        return not ctx.max_grad_norm

    def before_update(self, ctx: TrainingContext) -> None:
        """At the first step: the anchor is rank 0's weights, which every rank takes."""
        if self._anchors is None:
            if ctx.size != basics.size():  # (the anchor comes from world rank 0)
                raise ValueError(f"{self.name} runs over all ranks; process sets are not supported")
            self._anchors = []
            for f, members in enumerate(self._fragments):
                flat = ctx.flatten_params(members)
                start = ctx.comm.wait(ctx.comm.broadcast_async(flat, 0, f"{self.name}.anchor.{f}"))
                ctx.set_params_from_flat(members, start)
                self._anchors.append(ctx.math.clone(start))

    def _local_update(self, ctx: TrainingContext) -> None:
        """This rank's optimizer update from its own gradients (clipped to max_grad_norm)."""
        indices = [i for members in self._fragments for i in members]
        snapshot = ctx.snapshot()
        if not ctx.max_grad_norm:
            ctx.apply_update(indices, snapshot)
            return
        grads = ctx.flatten_grads(indices)
        clip_to_max_grad_norm(ctx, [grads])
        ctx.apply_update(indices, snapshot, flat_grads=grads)

    def after_update(self, ctx: TrainingContext) -> None:
        """Counts the inner step; applies the outer steps due now, sends the fragments due now."""
        self._inner_steps += 1
        step = self._inner_steps
        for f in sorted(f for f, pending in self._pending.items() if pending.due <= step):
            self._apply(ctx, f)
        for f, phase in enumerate(self._sends):
            if step % self.sync_every == phase:
                self._send(ctx, f, due=step + self.delay)
                if self.delay == 0:
                    self._apply(ctx, f)

    def _send(self, ctx: TrainingContext, f: int, due: int) -> None:
        """Starts the all-reduce of fragment ``f``'s outer gradient ``anchor - theta``."""
        delta = ctx.math.difference(self._anchors[f], ctx.flatten_params(self._fragments[f]))
        name = f"{self.name}.outer.{f}"
        if self.codec == SPARSE:
            self._send_sparse(ctx, f, due, delta, name)
            return
        if self.codec is None:
            handle = ctx.comm.allreduce_async(delta, name)
        else:
            handle = ctx.comm.compressed_allreduce_async(delta, name, self.codec, self._memories[f])
        self._pending[f] = _Pending(handle, due, delta)

    def _host(self, ctx: TrainingContext, tensor: Any, what: str) -> np.ndarray:
        """``tensor``'s values on host, or InvalidArgumentError (codec="topk" selects there)."""
        return host_array(ctx, tensor, f"{self.name} with codec={SPARSE!r}", what)

    def _send_sparse(self, ctx: TrainingContext, f: int, due: int, delta: Any, name: str) -> None:
        """Starts the all-gather of fragment ``f``'s Top-K pairs (error feedback added first; a
        non-finite outer gradient sends NaN values, which every rank then finds in the average)."""
        values = np.array(self._host(ctx, delta, "the weights"), dtype=np.float32)
        packed, residual = select_with_feedback(values, self._residuals[f], self.density)
        payload = ctx.math.from_host(packed)
        self._pending[f] = _Pending(ctx.comm.allgather_async(payload, name), due, payload, residual=residual)

    def _received(self, ctx: TrainingContext, f: int, pending: _Pending) -> Any:
        """Fragment ``f``'s averaged outer gradient, once its collective completed."""
        result = ctx.comm.wait(pending.handle)
        if self.codec != SPARSE:
            return result
        gathered = np.asarray(self._host(ctx, result, "the gathered pairs"), np.float32)
        return ctx.math.from_host(densify(gathered, ctx.size, self._numels[f], self.density))

    def _apply(self, ctx: TrainingContext, f: int) -> None:
        """Waits for fragment ``f``'s averaged outer gradient, steps its anchor, sets its weights."""
        pending = self._pending.pop(f)
        delta = self._received(ctx, f, pending)
        own = pending.sent
        if delta is pending.sent:  # (a communicator that averaged in place: keep what we own apart)
            delta = ctx.math.clone(delta)
            own = ctx.math.difference(self._anchors[f], ctx.flatten_params(self._fragments[f]))
        if not math.isfinite(ctx.math.sum_of_squares(delta)):  # the same average, so every rank gets here
            self._raise_non_finite(ctx, f, own if self.codec != SPARSE else self._own_outer_gradient(ctx, f, pending))
        if pending.residual is not None:  # what this rank sent is applied: kept back is the rest
            self._residuals[f] = pending.residual
        self._momenta[f] = self._outer.step(ctx.math, self._anchors[f], delta, self._momenta[f])
        members = self._fragments[f]
        if self.mixing == 0:
            ctx.set_params_from_flat(members, self._anchors[f])
        else:  # Streaming DiLoCo: keep part of the local progress made while the all-reduce ran
            local = ctx.flatten_params(members)
            ctx.math.scale_(local, self.mixing)
            ctx.math.add_(local, self._anchors[f], 1.0 - self.mixing)
            ctx.set_params_from_flat(members, local)
        self._syncs += 1

    def _own_outer_gradient(self, ctx: TrainingContext, f: int, pending: _Pending) -> Any:
        """What this rank sent for fragment ``f`` (codec="topk": its values, NaN where the outer
        gradient was not finite), as the non-finite check reads it."""
        values = np.asarray(self._host(ctx, pending.sent, "the pairs"), np.float32)
        return ctx.math.from_host(values[:sum(keep_count(size, self.density)
                                               for size in segment_sizes(self._numels[f]))])

    def _raise_non_finite(self, ctx: TrainingContext, f: int, own: Any) -> None:
        """Raises on every rank, naming the ranks whose outer gradient of fragment ``f`` was not
        finite (one all-reduce of a flag per rank), before a NaN reaches the anchor, which would
        keep it for good. The anchor and outer momentum are unchanged."""
        zero = ctx.math.zeros(1)
        bad = zero + (0.0 if math.isfinite(ctx.math.sum_of_squares(own)) else 1.0)
        flags = ctx.math.concat([ctx.math.repeat(zero, ctx.rank), bad, ctx.math.repeat(zero, ctx.size - ctx.rank - 1)])
        counts = ctx.comm.wait(ctx.comm.allreduce_async(flags, f"{self.name}.non_finite.{f}", average=False))
        culprits = [str(rank) for rank in range(ctx.size) if float(counts[rank]) > 0]
        where = (f"the weights of rank{'s' if len(culprits) > 1 else ''} {', '.join(culprits)}" if culprits
                 else "no rank's weights (their average overflowed)")
        raise InvalidArgumentError(f"{self.name}: the outer gradient of fragment {f} is not finite (NaN or Inf in "
                                   f"{where}); the anchor and outer momentum are unchanged")

    def abandon_step(self, ctx: TrainingContext) -> None:
        """A failed step (e.g. a codec refused a non-finite outer gradient, on every rank): the
        outer all-reduces in flight are waited out and dropped; anchors stay as they were."""
        wait_out(ctx, [pending.handle for pending in self._pending.values()])
        self._pending.clear()

    def flush(self, ctx: TrainingContext) -> None:
        """Applies the outer steps still in flight now (every rank at the same point of training)."""
        for f in sorted(self._pending):
            self._apply(ctx, f)

    # -- checkpoints --


    def state_dict(self) -> dict:
        """Anchors, outer momenta, step counter and codec residuals (copies), after ``flush``."""
        if not hasattr(self, "_ctx"):
            raise RuntimeError(f"{self.name} has no state before it is set up (in Keras: before the first step)")
        ctx = self._ctx
        self.flush(ctx)
        clone = ctx.math.clone
        return {"inner_steps": self.inner_steps, "syncs": self.syncs,
                "anchor": None if self._anchors is None else [clone(a) for a in self._anchors],
                "momentum": [None if m is None else clone(m) for m in self._momenta],
                "error_feedback": [None if m is None else m.state_dict() for m in self._memories],
                "sparse_residuals": [None if r is None else r.copy() for r in self._residuals]}

    def load_state_dict(self, state: dict) -> None:
        """Restores what ``state_dict`` returned (the fragments must be the same). Before setup
        (a Keras optimizer sets its algorithm up at the first step) the state is kept and
        restored by setup."""
        if not hasattr(self, "_ctx"):
            self._restore = state
            return
        ctx = self._ctx
        saved = state.get("anchor")
        if saved is not None and len(saved) != len(self._fragments):
            raise ValueError(f"{self.name}: the checkpoint has {len(saved)} fragments, this configuration "
                             f"{len(self._fragments)}")
        numels = [sum(ctx.parameters()[i].numel for i in members) for members in self._fragments]
        for f, (anchor, numel) in enumerate(zip(saved or [], numels)):
            if len(anchor) != numel:
                raise ValueError(f"{self.name}: the checkpoint's anchor of fragment {f} has {len(anchor)} elements, "
                                 f"the model's {numel}: it is another model's")
        self._pending.clear()
        self._inner_steps = int(state["inner_steps"])
        self._syncs = int(state.get("syncs", 0))
        self._anchors = None if saved is None else [ctx.math.clone(a) for a in saved]
        self._momenta = [None if m is None else ctx.math.clone(m) for m in state["momentum"]]
        for memory, residual in zip(self._memories, state["error_feedback"]):
            if memory is not None and residual is not None:
                memory.load_state_dict(residual)
        for f, residual in enumerate(state.get("sparse_residuals", [])):
            if residual is not None and self._residuals[f] is not None:
                if np.shape(residual) != self._residuals[f].shape:
                    raise ValueError(f"{self.name}: the checkpoint's Top-K residual of fragment {f} has "
                                     f"{np.shape(residual)} elements, the model's {self._residuals[f].shape}")
                self._residuals[f] = np.array(residual, np.float32)


def DiLoCo(sync_every: int = 500, outer_lr: float = 0.7, outer_momentum: float = 0.9, nesterov: bool = True,
           **options: Any) -> LocalSGD:
    """DiLoCo (Douillard et al. 2023): LocalSGD with outer SGD, Nesterov momentum 0.9, learning
    rate 0.7, every ``sync_every`` inner steps (the paper's H = 500). ``options``: LocalSGD's
    others (``codec``, ``fragments``, ``delay``, ``mixing``, ...)."""
    return LocalSGD(sync_every, outer_lr=outer_lr, outer_momentum=outer_momentum, nesterov=nesterov, **options)


def _predict_diloco(w: perfmodel.Workload, sync_every: int) -> perfmodel.Prediction:
    """DiLoCo's step: local updates' equation (the outer optimizer costs passes, not messages)."""
    return replace(perfmodel.predict_local_updates(w, sync_every), mode=f"diloco-{sync_every}")


# Advisor modes (kind "averaging": the ranks' models differ between syncs, and the optimization is
# not all-reduce's: a different trajectory, with H and the outer step to tune).
modes.register(
    modes.Mode("local-8", kind="averaging", build=LocalSGD, predict=perfmodel.predict_local_updates,
               caveat="models averaged every 8 steps: a different optimization (tune H)", params={"sync_every": 8},
               position=70),
    modes.Mode("diloco-32", kind="averaging", build=DiLoCo, predict=_predict_diloco,
               caveat="outer Nesterov SGD every 32 steps: a different optimization (tune H and the outer lr)",
               params={"sync_every": 32}, position=71))
