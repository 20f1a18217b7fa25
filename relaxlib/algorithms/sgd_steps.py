"""Each rank's own SGD step, for the relaxations that compress SGD's *steps* rather than the
gradients (``CompressedScatterReduce`` and ``TopK`` with ``compress="update"``).

Why: with error feedback on the gradient, what a lossy codec or a sparse selection holds back
reaches the parameters later *through the momentum*, which amplifies it by ``1 / (1 - momentum)``
and turns the residual's delay into oscillation (1-bit training diverged at lr 0.05 with momentum
0.9; Top-K 1 % lost up to 12 points on the convergence grid). Running SGD's momentum on each
rank's own gradients and compressing the resulting step ``lr * d``, with error feedback in those
units, keeps the error out of the momentum (Deep Gradient Compression's "momentum correction").
With an exact codec it is the same SGD as all-reduce.
"""

from __future__ import annotations

import math

from relaxlib.algorithms.base import TrainingContext

SGD_KEYS = frozenset({"lr", "momentum", "dampening", "nesterov"})


def is_sgd(snapshot: list[dict]) -> bool:
    """Whether every parameter group of an optimizer snapshot is plain (momentum) SGD's."""
    return all(SGD_KEYS <= group.keys() for group in snapshot)


class LocalSGDSteps:
    """SGD's momentum buffers of each bucket of parameters on this rank, and the step
    ``lr * d`` that ``torch.optim.SGD`` would take from a bucket's gradient (weight decay,
    momentum, dampening, Nesterov, ``maximize``; one parameter group per bucket).

    A step's new buffers are staged, not kept: ``commit`` keeps them once every bucket's exchange
    succeeded, ``discard`` drops them (a step that fails on one rank's NaN must not leave that
    rank's buffer non-finite for good)."""

    def __init__(self, ctx: TrainingContext, buckets: list[list[int]], numels: list[int], enabled: bool) -> None:
        """Buffers for the ``buckets`` (parameter indices) of ``numels`` elements each, created
        up front where the group has momentum and ``enabled`` (a traced step then updates them in
        place every step)."""
        snapshot, refs = ctx.snapshot(), ctx.parameters()
        self._buckets, self._numels = buckets, numels
        self.momentum: list[object | None] = [
            ctx.math.zeros(numel) if enabled and snapshot[refs[members[0]].group]["momentum"] else None
            for members, numel in zip(buckets, numels)]
        self.started = [False] * len(buckets)
        self._staged: dict[int, object] = {}

    def hyper(self, ctx: TrainingContext, bucket: int) -> dict:
        """The optimizer's hyperparameters for ``bucket`` (its first parameter's group) now."""
        return ctx.snapshot()[ctx.parameters()[self._buckets[bucket][0]].group]

    def buffer(self, ctx: TrainingContext, bucket: int):
        """``bucket``'s momentum buffer, created as zeros when momentum was set after setup."""
        if self.momentum[bucket] is None:
            self.momentum[bucket] = ctx.math.zeros(self._numels[bucket])
        return self.momentum[bucket]

    def stage(self, bucket: int, buffer) -> None:
        """Holds ``buffer`` as ``bucket``'s new momentum until ``commit``."""
        self._staged[bucket] = buffer

    def step(self, ctx: TrainingContext, bucket: int, grad):
        """This rank's SGD step ``lr * d`` for ``bucket`` from its flat gradient ``grad``
        (``max_grad_norm`` clips this rank's gradient first); stages the new momentum."""
        hyper = self.hyper(ctx, bucket)
        if hyper.get("maximize"):
            grad = -grad
        if ctx.max_grad_norm:
            coefficient = ctx.max_grad_norm / (math.sqrt(ctx.math.sum_of_squares(grad)) + 1e-6)
            if coefficient < 1.0:
                grad = grad * coefficient
        if hyper.get("weight_decay"):
            grad = grad + hyper["weight_decay"] * ctx.flatten_params(self._buckets[bucket])
        momentum = hyper["momentum"]
        if momentum:
            # torch.optim.SGD starts the buffer at the first gradient, without dampening (from
            # zeros: momentum * 0 + 1 * grad is grad exactly)
            dampening = hyper["dampening"] if self.started[bucket] else 0.0
            buffer = momentum * self.buffer(ctx, bucket) + (1 - dampening) * grad
            self.stage(bucket, buffer)
            grad = grad + momentum * buffer if hyper["nesterov"] else buffer
        return hyper["lr"] * grad

    def commit(self, ctx: TrainingContext) -> None:
        """Keeps the staged buffers: the step succeeded on every rank."""
        for bucket, buffer in self._staged.items():
            ctx.math.copy_(self.momentum[bucket], buffer)
            self.started[bucket] = True
        self._staged.clear()

    def discard(self) -> None:
        """Drops the staged buffers: the step failed."""
        self._staged.clear()

    def state_dict(self) -> list:
        """A copy of each bucket's buffer (None where none has started)."""
        return [m * 1.0 if m is not None and started else None for m, started in zip(self.momentum, self.started)]

    def load_state_dict(self, ctx: TrainingContext, saved: list) -> None:
        """Restores ``state_dict``'s buffers."""
        for bucket, buffer in enumerate(saved):
            if buffer is None:
                continue
            ctx.math.copy_(self.buffer(ctx, bucket), buffer)
            self.started[bucket] = True
