"""PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019): each large gradient matrix is sent as
a rank-``r`` approximation found by one step of power iteration, warm-started from the last
step's factor, with error feedback of what the approximation left out.

Per step and per compressed parameter, with M its gradient viewed as an n x m matrix (the first
dimension against the rest) plus this rank's error memory e, and Q (m x r) the same on every rank:

    M = grad + e;  P = M Q;  P <- mean over ranks of P;  P <- orthogonalize(P)
    Q = M^T P;  Q <- mean over ranks of Q;  the averaged gradient is P Q^T;  e <- M - P Q^T

Parameters too small to gain (``(n*m) / ((n+m)*r) < min_compression_rate``), vectors and
scalars are averaged exactly, in one fused all-reduce per bucket. The averaged gradient is
written back as the gradient and the wrapped optimizer takes its step, so any optimizer works.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from relaxlib import perfmodel
from relaxlib.algorithms import modes
from relaxlib.algorithms.base import Algorithm, TrainingContext, clip_to_max_grad_norm, wait_out
from relaxlib.algorithms.compressed import gradient_buckets
from relaxlib.errors import InvalidArgumentError


@dataclass(frozen=True)
class Matrix:
    """A compressed parameter: where it lies and its low-rank factors' sizes."""

    index: int     # optimizer index of the parameter
    rows: int
    cols: int
    rank: int      # min(rank, rows, cols): a factor of more columns than that spans nothing more
    m_offset: int  # in the bucket's buffer of compressed gradients (and error memory)
    p_offset: int  # in the bucket's P (rows x rank each)
    q_offset: int  # in the bucket's Q (cols x rank each)

    @property
    def numel(self) -> int:
        """Elements of the parameter."""
        return self.rows * self.cols


@dataclass
class BucketPlan:
    """How one bucket is sent: its compressed matrices, and the (offset, numel) of the rest."""

    members: list[int]
    matrices: list[Matrix]
    dense_members: list[int]  # optimizer indices of the exactly averaged parameters, in order
    numel: int                # elements of the whole bucket
    compressed_numel: int
    p_numel: int
    q_numel: int
    # the bucket's gradient in order, piece by piece: (True: from the low-rank buffer, False: from
    # the exact all-reduce's; offset there; numel)
    layout: list[tuple[bool, int, int]]


def matrix_shape(shape: tuple[int, ...], numel: int) -> tuple[int, int] | None:
    """The (rows, cols) a parameter of ``shape`` is viewed as (its first dimension against the
    rest), or None for scalars, vectors, empty tensors and shapes that do not match ``numel``."""
    if len(shape) < 2 or math.prod(shape) != numel or numel == 0:
        return None
    return shape[0], numel // shape[0]


def worth_compressing(rows: int, cols: int, rank: int, min_compression_rate: float) -> bool:
    """Whether a ``rows`` x ``cols`` matrix sent as rank-``rank`` factors shrinks by at least
    ``min_compression_rate``: ``rows * cols >= min_compression_rate * (rows + cols) * rank``."""
    return rows * cols >= min_compression_rate * (rows + cols) * rank


def plan_bucket(ctx: TrainingContext, members: list[int], rank: int, min_compression_rate: float) -> BucketPlan:
    """Splits a bucket's parameters into compressed matrices and the exactly averaged rest."""
    refs = ctx.parameters()
    matrices: list[Matrix] = []
    dense_members: list[int] = []
    layout: list[tuple[bool, int, int]] = []
    offset = m_offset = p_offset = q_offset = dense_offset = 0
    for index in members:
        ref = refs[index]
        shape = matrix_shape(tuple(ref.shape), ref.numel)
        if shape is not None and worth_compressing(*shape, min(rank, *shape), min_compression_rate):
            rows, cols = shape
            r = min(rank, rows, cols)
            matrices.append(Matrix(index, rows, cols, r, m_offset, p_offset, q_offset))
            layout.append((True, m_offset, ref.numel))
            m_offset += rows * cols
            p_offset += rows * r
            q_offset += cols * r
        else:
            dense_members.append(index)
            layout.append((False, dense_offset, ref.numel))
            dense_offset += ref.numel
        offset += ref.numel
    return BucketPlan(list(members), matrices, dense_members, offset, m_offset, p_offset, q_offset, layout)


def _check_int(name: str, value, minimum: int) -> None:
    """ValueError naming ``name`` unless ``value`` is an integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"PowerSGD: {name} must be an integer >= {minimum}, not {value!r}")


def _check_number(name: str, value, minimum: float) -> None:
    """ValueError naming ``name`` unless ``value`` is a finite real number >= ``minimum``."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)
            or value < minimum):
        raise ValueError(f"PowerSGD: {name} must be a finite number >= {minimum}, not {value!r}")


class _Flight:
    """One bucket's operations in flight during a step, and what its later stages need."""

    def __init__(self) -> None:
        self.plain = None   # before start_iter: the whole bucket's all-reduce
        self.dense = None   # the uncompressed parameters' all-reduce
        self.p = None       # the all-reduce of P, then of Q
        self.q = None
        self.m = None       # gradients (+ error) of the compressed matrices, laid end to end
        self.p_hat = None   # orthogonalized mean P

    def handles(self) -> list:
        """What is still to be waited for."""
        return [h for h in (self.plain, self.dense, self.p, self.q) if h is not None]


class PowerSGD(Algorithm):
    """Gradients averaged as rank-``rank`` approximations (PowerSGD), with error feedback.

    - ``rank``: columns of the factors P and Q (capped at each matrix's smaller side).
    - ``start_iter``: steps that average the full gradients first (no compression), as the
      early, sensitive phase of training needs; then every step compresses.
    - ``min_compression_rate``: a matrix is compressed only where it shrinks at least this much,
      ``(n*m) / ((n+m)*rank) >= min_compression_rate``; others, vectors and scalars are averaged
      exactly in one fused all-reduce per bucket (the documented fallback for tensors too small
      to compress: never an error). 0 compresses every matrix.
    - ``error_feedback``: what the approximation leaves out is added to the next step's gradient.
    - ``warm_start``: Q starts from the last step's Q (one power-iteration step per training
      step refines it); else a fresh random Q every step.
    - ``epsilon``: added to each column's norm in the orthogonalization (a zero column stays
      zero in any case).
    - ``seed``: random Qs come from ``numpy.random.RandomState([seed, step, parameter index])``,
      the same on every rank and in every framework, whatever order buckets start in.
    - ``fusion_mb``: bucket size; a bucket's P all-reduce starts as soon as its gradients exist,
      overlapping backward.

    Non-finite gradients on any rank make the step fail on every rank (the mean P is not
    finite), leaving the error memories and warm-start factors as they were.

    Runs in torch's and the Keras ``DistributedOptimizer`` (Keras: on host arrays, inside
    ``tf.function`` as a py_function) and in ``DistributedGradientTape`` called eagerly; it is not
    traceable (see ``traceable``).
    """

    name = "powersgd"

    def __init__(self, rank: int = 1, start_iter: int = 1000, min_compression_rate: float = 2.0,
                 error_feedback: bool = True, warm_start: bool = True, epsilon: float = 0.0, seed: int = 0,
                 fusion_mb: float = 25) -> None:
        _check_int("rank", rank, 1)
        _check_int("start_iter", start_iter, 0)
        _check_number("min_compression_rate", min_compression_rate, 0.0)
        _check_number("epsilon", epsilon, 0.0)
        _check_int("seed", seed, 0)
        if seed >= 1 << 32:
            raise ValueError(f"PowerSGD: seed must be below 2**32, not {seed!r}")
        _check_number("fusion_mb", fusion_mb, 0.0)
        if fusion_mb == 0:
            raise ValueError("PowerSGD: fusion_mb must be positive, not 0")
        for flag, value in (("error_feedback", error_feedback), ("warm_start", warm_start)):
            if not isinstance(value, bool):
                raise ValueError(f"PowerSGD: {flag} must be True or False, not {value!r}")
        self.rank = int(rank)
        self.start_iter = int(start_iter)
        self.min_compression_rate = float(min_compression_rate)
        self.error_feedback = error_feedback
        self.warm_start = warm_start
        self.epsilon = float(epsilon)
        self.seed = int(seed)
        self.fusion_mb = fusion_mb

    def traceable(self, ctx: TrainingContext) -> bool:
        """No: the step reads host values (whether a warm-start factor degenerated, whether the
        mean P is finite) and keeps a step count in Python."""
        return False

    # ---- hooks ----

    def setup(self, ctx: TrainingContext) -> None:
        self._ctx = ctx
        self._plans = [plan_bucket(ctx, members, self.rank, self.min_compression_rate)
                       for members in gradient_buckets(ctx, self.fusion_mb)]
        self._bucket_of = {i: b for b, plan in enumerate(self._plans) for i in plan.members}
        self._ready = [0] * len(self._plans)
        self._flights: dict[int, _Flight] = {}
        self._iteration = 0  # steps taken (own count: restored by load_state_dict, unlike the binding's)
        self._errors = [ctx.math.zeros(plan.compressed_numel) if self.error_feedback and plan.matrices else None
                        for plan in self._plans]
        # Buffers written in place every step (a fresh 27 MB tensor per step costs its page faults, and
        # the copies between them were most of PowerSGD's CPU on top of all-reduce's). ``_work[b]``
        # receives M = gradient + error, then becomes what the approximation leaves of it: when the
        # step commits it is swapped with the error memory, so a failed step leaves the memory as it was.
        # Where tensors are not written in place (TensorFlow's), each step makes new ones instead.
        self._in_place = ctx.math.writes_in_place
        self._work = [ctx.math.zeros(plan.compressed_numel) if plan.matrices and self._in_place else None
                      for plan in self._plans]
        # the averaged gradients of every bucket, laid out as the optimizer update takes them
        self._bucket_offsets = [sum(plan.numel for plan in self._plans[:b]) for b in range(len(self._plans))]
        self._averaged = ctx.math.zeros(sum(plan.numel for plan in self._plans)) if self._in_place else None
        self._q: list[object | None] = [None] * len(self._plans)  # warm start: last step's mean Q
        restore, self._restore = getattr(self, "_restore", None), None
        if restore is not None:  # loaded before setup (Keras sets algorithms up at the first step)
            self.load_state_dict(restore)

    def compressed_parameters(self) -> list[int]:
        """Optimizer indices of the parameters sent as low-rank factors (after ``setup``)."""
        return sorted(m.index for plan in self._plans for m in plan.matrices)

    def compressing(self) -> bool:
        """Whether the current step compresses (``start_iter`` steps taken)."""
        return self._iteration >= self.start_iter

    def on_gradient(self, ctx: TrainingContext, index: int) -> None:
        bucket = self._bucket_of[index]
        self._ready[bucket] += 1
        if self._ready[bucket] == len(self._plans[bucket].members):
            self._start(ctx, bucket)

    def step(self, ctx: TrainingContext) -> None:
        for bucket in range(len(self._plans)):
            if bucket not in self._flights:
                self._start(ctx, bucket)  # parameters without gradient this step: zeros
        compressed = self.compressing()
        if not compressed:
            averaged = []
            for flight in (self._flights[b] for b in range(len(self._plans))):
                handle, flight.plain = flight.plain, None  # (a wait that raises has used its handle up)
                averaged.append(ctx.comm.wait(handle))
            new_q = self._q
            new_errors = self._errors
        else:
            for bucket in range(len(self._plans)):  # every Q all-reduce started before any is waited for
                self._start_q(ctx, bucket)
            averaged, new_q, new_errors = [], [], []
            for bucket in range(len(self._plans)):
                gradient, q, error = self._finish(ctx, bucket)
                averaged.append(gradient)
                new_q.append(q)
                new_errors.append(error)
        # every collective of the step succeeded: now the state moves on
        self._flights.clear()
        self._ready = [0] * len(self._plans)
        if self.warm_start:
            self._q = new_q
        for bucket, error in enumerate(new_errors):
            if self._errors[bucket] is None or error is None or error is self._errors[bucket]:
                continue
            if self._in_place:  # the residual, in the work buffer, becomes the memory
                self._errors[bucket], self._work[bucket] = error, self._errors[bucket]
            else:
                ctx.math.copy_(self._errors[bucket], error)
        self._iteration += 1
        clip_to_max_grad_norm(ctx, averaged)  # the same averages on every rank: the same norm
        # one optimizer call for every bucket: optimizer-wide state must see one step
        flat_grads = self._averaged if compressed and self._in_place else ctx.math.concat(averaged)
        ctx.apply_update([i for plan in self._plans for i in plan.members], ctx.snapshot(), flat_grads=flat_grads)

    def abandon_step(self, ctx: TrainingContext) -> None:
        wait_out(ctx, [h for flight in self._flights.values() for h in flight.handles()])
        self._flights.clear()
        self._ready = [0] * len(self._plans)

    def state_dict(self) -> dict:
        """Steps taken, error memories and warm-start factors (copies), per bucket."""
        if not hasattr(self, "_ctx"):
            raise RuntimeError(f"{self.name} has no state before it is set up (in Keras: before the first step)")
        return {"iteration": self._iteration,
                "error_feedback": [None if e is None else self._ctx.math.clone(e) for e in self._errors],
                "q": [None if q is None else self._ctx.math.clone(q) for q in self._q]}

    def load_state_dict(self, state: dict) -> None:
        """Restores what ``state_dict`` returned (the same model, ``rank`` and ``fusion_mb``).
        Before setup (a Keras optimizer sets its algorithm up at the first step) the state is
        kept and restored by setup."""
        if not hasattr(self, "_ctx"):
            self._restore = state
            return
        errors, factors = state["error_feedback"], state["q"]
        if len(errors) != len(self._plans) or len(factors) != len(self._plans):
            raise ValueError(f"PowerSGD.load_state_dict: the checkpoint has {len(errors)} buckets, this model "
                             f"{len(self._plans)} (a different model, rank or fusion_mb)")
        for bucket, (plan, saved_error, saved_q) in enumerate(zip(self._plans, errors, factors)):
            for what, saved, numel in (("error memory", saved_error, plan.compressed_numel),
                                       ("Q", saved_q, plan.q_numel)):
                if saved is not None and len(saved) != numel:
                    raise ValueError(f"PowerSGD.load_state_dict: bucket {bucket}'s {what} has {len(saved)} "
                                     f"elements in the checkpoint, {numel} here (a different model or rank)")
            if self._errors[bucket] is not None:
                if saved_error is None:
                    self._ctx.math.copy_(self._errors[bucket], self._ctx.math.zeros(plan.compressed_numel))
                else:
                    self._ctx.math.copy_(self._errors[bucket], saved_error)
            self._q[bucket] = None if saved_q is None else self._ctx.math.clone(saved_q)
        self._iteration = int(state["iteration"])

    # ---- internals ----

    def _name(self, bucket: int) -> str:
        return f"{self.name}.{bucket}"

    def _start(self, ctx: TrainingContext, bucket: int) -> None:
        """A bucket's gradients are complete: its exact part's all-reduce and P's start."""
        plan, flight = self._plans[bucket], _Flight()
        self._flights[bucket] = flight
        name = self._name(bucket)
        if not self.compressing():
            flight.plain = ctx.comm.allreduce_async(ctx.flatten_grads(plan.members), name + ".grad")
            return
        if plan.dense_members:
            flight.dense = ctx.comm.allreduce_async(ctx.flatten_grads(plan.dense_members), name + ".dense")
        if not plan.matrices:
            return
        # M, laid end to end in the bucket's work buffer (hosts of either framework write it in place)
        m = ctx.flatten_grads([x.index for x in plan.matrices], out=self._work[bucket])
        if self._errors[bucket] is not None:
            if self._in_place:
                ctx.math.add_(m, self._errors[bucket])
            else:
                m = m + self._errors[bucket]
        flight.m = m
        q = self._initial_q(ctx, bucket)
        p = ctx.math.concat([ctx.math.matmul(m[x.m_offset:x.m_offset + x.numel],
                                             q[x.q_offset:x.q_offset + x.cols * x.rank], x.rows, x.cols, x.rank)
                             for x in plan.matrices])
        flight.p = ctx.comm.allreduce_async(p, name + ".p")

    def _initial_q(self, ctx: TrainingContext, bucket: int):
        """The bucket's Q for this step, each matrix's orthonormalized: last step's mean Q (warm
        start), or drawn from the shared seed where there is none or it degenerated to zeros or
        non-finite values (then power iteration could never leave it: P = M Q would stay 0)."""
        plan, previous = self._plans[bucket], self._q[bucket]
        parts = []
        for x in plan.matrices:
            q = None if previous is None else previous[x.q_offset:x.q_offset + x.cols * x.rank]
            if q is not None:
                norm = ctx.math.sum_of_squares(q)
                if norm == 0 or not math.isfinite(norm):
                    q = None
            if q is None:
                rng = np.random.RandomState([self.seed, self._iteration, x.index])
                q = ctx.math.from_host(rng.standard_normal((x.cols, x.rank)).astype(np.float32))
            parts.append(ctx.math.orthogonalize(q, x.cols, x.rank, self.epsilon))
        return ctx.math.concat(parts)

    def _start_q(self, ctx: TrainingContext, bucket: int) -> None:
        """The mean P arrived: orthogonalize it, and start the all-reduce of Q = M^T P."""
        plan, flight = self._plans[bucket], self._flights[bucket]
        if flight.p is None:
            return
        handle, flight.p = flight.p, None  # (taken first: a wait that raises has used its handle up)
        p = ctx.comm.wait(handle)
        norm = ctx.math.sum_of_squares(p)  # the mean: the same on every rank, so every rank fails alike
        if not math.isfinite(norm):
            names = [ctx.parameters()[x.index].name for x in plan.matrices]
            raise InvalidArgumentError(
                f"{self._name(bucket)}: non-finite values (NaN or Inf) in the gradients (plus error feedback) of "
                f"some rank, in parameters {names[:5]}; the step was not taken, the error memories and "
                "warm-start factors are unchanged")
        flight.p_hat = ctx.math.concat([ctx.math.orthogonalize(p[x.p_offset:x.p_offset + x.rows * x.rank], x.rows,
                                                               x.rank, self.epsilon) for x in plan.matrices])
        m, p_hat = flight.m, flight.p_hat
        q = ctx.math.concat([ctx.math.matmul(m[x.m_offset:x.m_offset + x.numel],
                                             p_hat[x.p_offset:x.p_offset + x.rows * x.rank], x.cols, x.rows, x.rank,
                                             transpose_a=True)
                             for x in plan.matrices])
        flight.q = ctx.comm.allreduce_async(q, self._name(bucket) + ".q")

    def _finish(self, ctx: TrainingContext, bucket: int) -> tuple:
        """(the bucket's averaged gradient, its mean Q, its new error memory), the latter two
        None where it has no compressed matrix."""
        plan, flight = self._plans[bucket], self._flights[bucket]
        handle, flight.dense = flight.dense, None
        dense = ctx.comm.wait(handle) if handle is not None else None
        q = error = p_hat = None
        if plan.matrices:
            handle, flight.q = flight.q, None
            q = ctx.comm.wait(handle)
            p_hat = flight.p_hat
        if not self._in_place:
            return self._assemble(ctx, plan, flight.m, p_hat, q, dense)
        # the averaged gradient written piece by piece into its place in the step's buffer
        start = self._bucket_offsets[bucket]
        out = self._averaged[start:start + plan.numel]
        matrices = iter(plan.matrices)
        offset = 0
        for compressed, at, numel in plan.layout:
            target = out[offset:offset + numel]
            if compressed:
                x = next(matrices)
                ctx.math.matmul_into(target, p_hat[x.p_offset:x.p_offset + x.rows * x.rank],
                                     q[x.q_offset:x.q_offset + x.cols * x.rank], x.rows, x.rank, x.cols,
                                     transpose_b=True)
                if self._errors[bucket] is not None:  # what the mean approximation leaves of M
                    ctx.math.add_(flight.m[at:at + numel], target, alpha=-1.0)
            else:
                ctx.math.copy_(target, dense[at:at + numel])
            offset += numel
        if plan.matrices and self._errors[bucket] is not None:
            error = flight.m
        return out, q, error

    def _assemble(self, ctx: TrainingContext, plan: BucketPlan, m, p_hat, q, dense) -> tuple:
        """``_finish`` with new tensors, for kinds that are not written in place."""
        low_rank = error = None
        if plan.matrices:
            low_rank = ctx.math.concat([ctx.math.matmul(p_hat[x.p_offset:x.p_offset + x.rows * x.rank],
                                                        q[x.q_offset:x.q_offset + x.cols * x.rank], x.rows, x.rank,
                                                        x.cols, transpose_b=True)
                                        for x in plan.matrices])
            if self.error_feedback:
                error = ctx.math.difference(m, low_rank)  # what the mean approximation leaves of M
        pieces = [(low_rank if compressed else dense)[at:at + numel] for compressed, at, numel in plan.layout]
        return ctx.math.concat(pieces), q, error


# Advisor modes: compressing from step 10 (what the advisor predicts is the compressed steady state;
# torch's hook defaults to 1000 steps of all-reduce first, for ImageNet-length runs).
modes.register(*(modes.Mode(f"powersgd-{rank}", kind="compressed",
                            caveat=f"rank-{rank} gradients with error feedback; all-reducible, host matrix products",
                            build=PowerSGD, predict=perfmodel.predict_powersgd, params={"rank": rank, "start_iter": 10},
                            position=55)
                 for rank in (2, 4)))  # rank 1 lost up to 7 points on the convergence grid
