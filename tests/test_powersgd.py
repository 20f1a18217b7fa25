"""PowerSGD in one process: its numerics against a numpy implementation of the paper's formula
(two ranks simulated by threads over an in-memory all-reduce), the orthogonalization, which
parameters are compressed, the argument checks, and the state it checkpoints. The same algorithm
on real ranks, in torch and Keras: tests/parallel/torch_powersgd.py, tests/parallel/conformance.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from relaxlib.algorithms.base import step_or_abandon
from relaxlib.algorithms.context import ParamRef
from relaxlib.algorithms.host_math import HostMath
from relaxlib.algorithms.powersgd import PowerSGD, matrix_shape, worth_compressing
from relaxlib.errors import InvalidArgumentError

SEED = 5


class World:
    """An in-memory all-reduce (mean, float64 then float32) between ``size`` threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size, timeout=30)  # a test bug fails instead of hanging
        self.posted: dict[tuple[str, int], np.ndarray] = {}


class Comm:
    """The two calls PowerSGD makes of a communicator; ``names`` records what was sent."""

    def __init__(self, world: World, rank: int) -> None:
        self.world, self.rank, self.names = world, rank, []

    def allreduce_async(self, tensor, name: str, average: bool = True, group=None):
        self.world.posted[(name, self.rank)] = np.array(tensor, np.float32, copy=True)
        self.names.append((name, int(np.size(tensor))))
        return name

    def wait(self, name: str) -> np.ndarray:
        self.world.barrier.wait()  # every rank posted this name
        values = [self.world.posted[(name, r)].astype(np.float64) for r in range(self.world.size)]
        self.world.barrier.wait()  # every rank read it before anyone posts the name again
        return (sum(values) / self.world.size).astype(np.float32)


class Context:
    """A host-array context of float32 parameters of ``shapes`` (what PowerSGD uses of one)."""

    math = HostMath()
    max_grad_norm = None

    def __init__(self, shapes, comm: Comm, rank: int = 0, size: int = 1) -> None:
        self.refs = [ParamRef(i, f"p{i}", int(np.prod(s)), 4, "float32", 0, tuple(s)) for i, s in enumerate(shapes)]
        self.comm, self.rank, self.size = comm, rank, size
        self.grads: list[np.ndarray] = []
        self.applied: dict[int, np.ndarray] = {}
        self.step_count = 0

    def parameters(self):
        return self.refs

    def flatten_grads(self, indices, out=None):
        return np.concatenate([self.grads[i].reshape(-1) for i in indices]).astype(np.float32)

    def snapshot(self):
        return [{"lr": 0.1}]

    def apply_update(self, indices, snapshot, flat_grads=None):
        offset = 0
        for i in indices:
            n = self.refs[i].numel
            self.applied[i] = flat_grads[offset:offset + n].reshape(self.refs[i].shape).copy()
            offset += n

    def runs_eagerly(self):
        return True

    def log(self, message):
        pass


def run_ranks(size: int, body):
    """``body(rank, world)`` on ``size`` threads; their results in rank order (re-raises the first error)."""
    world = World(size)
    results, errors = [None] * size, [None] * size

    def run(rank):
        try:
            results[rank] = body(rank, world)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors[rank] = e
            world.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for e in errors:
        if e is not None:
            raise e
    return results


def gradients(shapes, rank: int, step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1000 * step + rank)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def train(shapes, steps: int, size: int = 2, grads=gradients, **kwargs):
    """Each rank's (context, algorithm) after ``steps`` steps of PowerSGD(**kwargs) on ``grads``;
    ``applied`` holds the last step's averaged gradients."""

    def body(rank, world):
        ctx = Context(shapes, Comm(world, rank), rank, size)
        algorithm = PowerSGD(**kwargs)
        algorithm.setup(ctx)
        for step in range(steps):
            ctx.grads = grads(shapes, rank, step)
            step_or_abandon(algorithm, ctx)
            ctx.step_count += 1
        return ctx, algorithm

    return run_ranks(size, body)


# ---- a numpy implementation of the formula (float64, QR for the orthogonalization) ----

def orthonormal(matrix: np.ndarray) -> np.ndarray:
    """Gram-Schmidt's result: QR's Q with the signs that make R's diagonal positive."""
    q, r = np.linalg.qr(matrix.astype(np.float64))
    return q * np.sign(np.diag(r))


def drawn_q(step: int, index: int, cols: int, rank: int) -> np.ndarray:
    return np.random.RandomState([SEED, step, index]).standard_normal((cols, rank)).astype(np.float32)


def reference_step(ms: list[np.ndarray], q: np.ndarray):
    """(mean approximation P Q^T, mean Q, each rank's error M - P Q^T) of one PowerSGD step."""
    q = orthonormal(q)
    p_hat = orthonormal(np.mean([m @ q for m in ms], axis=0))
    q_mean = np.mean([m.T @ p_hat for m in ms], axis=0)
    approximation = p_hat @ q_mean.T
    return approximation, q_mean, [m - approximation for m in ms]


# ---- arguments ----

@pytest.mark.parametrize("kwargs, named", [
    ({"rank": 0}, "rank"), ({"rank": -1}, "rank"), ({"rank": 1.5}, "rank"), ({"rank": True}, "rank"),
    ({"start_iter": -1}, "start_iter"), ({"start_iter": 2.0}, "start_iter"),
    ({"epsilon": -1e-8}, "epsilon"), ({"epsilon": float("nan")}, "epsilon"),
    ({"min_compression_rate": -1}, "min_compression_rate"), ({"min_compression_rate": float("inf")},
                                                              "min_compression_rate"),
    ({"seed": -1}, "seed"), ({"seed": 1 << 32}, "seed"), ({"fusion_mb": 0}, "fusion_mb"),
    ({"error_feedback": 1}, "error_feedback"), ({"warm_start": "yes"}, "warm_start"),
])
def test_bad_arguments_are_refused_naming_the_argument(kwargs, named):
    with pytest.raises(ValueError, match=named):
        PowerSGD(**kwargs)


def test_non_float32_parameters_are_refused_naming_them():
    ctx = Context([(4, 4)], Comm(World(1), 0))
    ctx.refs = [ParamRef(0, "half", 16, 2, "float16", 0, (4, 4))]
    with pytest.raises(ValueError, match="half"):
        PowerSGD().setup(ctx)


# ---- tensor math ----

def test_orthogonalize_is_gram_schmidt():
    matrix = np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32)
    result = HostMath().orthogonalize(matrix.reshape(-1), 20, 3).reshape(20, 3)
    np.testing.assert_allclose(result.T @ result, np.eye(3), atol=1e-6)
    np.testing.assert_allclose(result, orthonormal(matrix), atol=1e-6)
    np.testing.assert_array_equal(matrix, np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32))


def test_orthogonalize_leaves_zero_columns_zero_and_adds_epsilon_to_the_norm():
    matrix = np.zeros((4, 2), np.float32)
    matrix[:, 1] = [3, 0, 4, 0]  # norm 5
    result = HostMath().orthogonalize(matrix.reshape(-1), 4, 2).reshape(4, 2)
    assert np.all(np.isfinite(result))
    np.testing.assert_array_equal(result[:, 0], 0)
    np.testing.assert_allclose(result[:, 1], [0.6, 0, 0.8, 0], rtol=1e-6)
    with_epsilon = HostMath().orthogonalize(matrix.reshape(-1), 4, 2, epsilon=1.0).reshape(4, 2)
    np.testing.assert_allclose(with_epsilon[:, 1], np.array([3, 0, 4, 0]) / 6, rtol=1e-6)


@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_views_flat_buffers_as_matrices(transpose_a, transpose_b):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32)
    stored_a = a.T.copy() if transpose_a else a
    stored_b = b.T.copy() if transpose_b else b
    product = HostMath().matmul(stored_a.reshape(-1), stored_b.reshape(-1), 3, 5, 2, transpose_a, transpose_b)
    np.testing.assert_allclose(product, (a @ b).reshape(-1), rtol=1e-6)


def test_torch_math_computes_what_host_math_does():
    torch = pytest.importorskip("torch")
    from relaxlib_torch.tensor_math import TorchMath

    host, mine = HostMath(), TorchMath()
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(15).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    for flags in ((False, False), (True, False), (False, True)):
        inner = 5
        expected = host.matmul(a, b, 3, inner, 2, *flags)
        np.testing.assert_allclose(mine.matmul(torch.from_numpy(a), torch.from_numpy(b), 3, inner, 2, *flags).numpy(),
                                   expected, rtol=1e-6)
        for math_, kind in ((mine, torch.from_numpy), (host, np.asarray)):  # into a slice, the rest untouched
            buffer = math_.zeros(10)
            math_.matmul_into(buffer[2:8], kind(a), kind(b), 3, inner, 2, *flags)
            got = np.asarray(buffer)
            assert np.array_equal(got[2:8], np.asarray(math_.matmul(kind(a), kind(b), 3, inner, 2, *flags)))
            assert not got[:2].any() and not got[8:].any()
    matrix = rng.standard_normal(12).astype(np.float32)
    matrix[1::2] = 0  # a zero second column
    np.testing.assert_allclose(mine.orthogonalize(torch.from_numpy(matrix), 6, 2, 0.0).numpy(),
                               host.orthogonalize(matrix, 6, 2), atol=1e-6)
    assert np.array_equal(mine.from_host(matrix).numpy(), host.from_host(matrix))


# ---- which parameters are compressed ----

def test_vectors_scalars_and_small_matrices_are_not_compressed():
    assert matrix_shape((10,), 10) is None and matrix_shape((), 1) is None and matrix_shape((0, 5), 0) is None
    assert matrix_shape((64, 3, 3, 3), 1728) == (64, 27)
    assert worth_compressing(4, 4, 1, 2.0)  # 16 elements against 8: exactly 2
    assert not worth_compressing(3, 3, 1, 2.0)  # 9 against 6
    shapes = [(10,), (4, 4), (3, 3), (64, 3, 3, 3), (), (0, 5)]
    ctx = Context(shapes, Comm(World(1), 0))
    algorithm = PowerSGD()
    algorithm.setup(ctx)
    assert algorithm.compressed_parameters() == [1, 3]
    capped = PowerSGD(rank=8)  # rank min(8, 4) = 4 on a 4 x 4: 16 elements against 32
    capped.setup(ctx)
    assert capped.compressed_parameters() == [3]
    everything = PowerSGD(rank=8, min_compression_rate=0)
    everything.setup(ctx)
    assert everything.compressed_parameters() == [1, 2, 3]


# ---- numerics ----

SHAPES = [(6, 5), (7,), (8, 2, 3)]  # compressed (at rank 2 with min_compression_rate=1), exact, compressed (8 x 6)
MATRICES = {0: (6, 5), 2: (8, 6)}


@pytest.mark.parametrize("rank", [1, 2])
def test_two_steps_follow_the_formula_with_error_feedback_and_warm_start(rank):
    runs = {}
    for steps in (1, 2):
        runs[steps] = train(SHAPES, steps, rank=rank, start_iter=0, seed=SEED, min_compression_rate=1)
    ms = {i: [gradients(SHAPES, r, 0)[i].reshape(MATRICES[i]) for r in range(2)] for i in MATRICES}
    second = {}
    for i, (rows, cols) in MATRICES.items():
        approximation, q_mean, errors = reference_step(ms[i], drawn_q(0, i, cols, rank))
        for ctx, _ in runs[1]:
            np.testing.assert_allclose(ctx.applied[i].reshape(rows, cols), approximation, rtol=1e-4, atol=1e-5)
        # the next step: M = grad + error, Q warm-started from the mean Q
        next_ms = [gradients(SHAPES, r, 1)[i].reshape(rows, cols) + errors[r] for r in range(2)]
        second[i] = (reference_step(next_ms, q_mean.astype(np.float32)), errors, q_mean)
    mean_vector = np.mean([gradients(SHAPES, r, 1)[1] for r in range(2)], axis=0)
    for ctx, _ in runs[2]:
        np.testing.assert_allclose(ctx.applied[1], mean_vector, rtol=1e-6)  # the vector: exact
        for i, (rows, cols) in MATRICES.items():
            (approximation, _, errors), _, _ = second[i]
            np.testing.assert_allclose(ctx.applied[i].reshape(rows, cols), approximation, rtol=1e-4, atol=1e-5)
    # the state after one step: each rank's error, the mean Q (bucket order: parameters reversed)
    for r, (_, algorithm) in enumerate(runs[1]):
        state = algorithm.state_dict()
        assert state["iteration"] == 1
        expected_error = np.concatenate([second[i][1][r].reshape(-1) for i in (2, 0)])
        np.testing.assert_allclose(state["error_feedback"][0], expected_error, rtol=1e-4, atol=1e-5)
        expected_q = np.concatenate([second[i][2].reshape(-1) for i in (2, 0)])
        np.testing.assert_allclose(state["q"][0], expected_q, rtol=1e-4, atol=1e-5)


def test_what_is_sent_is_the_factors_and_the_exact_part():
    [(ctx, _), _] = train(SHAPES, 1, rank=2, start_iter=0, min_compression_rate=1)
    # bucket 0 holds the parameters in reverse: P is 8*2 + 6*2, Q is 6*2 + 5*2, the rest the vector
    assert sorted(ctx.comm.names) == sorted([("powersgd.0.dense", 7), ("powersgd.0.p", 28), ("powersgd.0.q", 22)])


def test_without_error_feedback_or_warm_start_every_step_starts_afresh():
    [(ctx, algorithm), _] = train(SHAPES, 2, rank=1, start_iter=0, seed=SEED, error_feedback=False,
                                  warm_start=False)
    assert algorithm.state_dict()["error_feedback"] == [None] and algorithm.state_dict()["q"] == [None]
    for i, (rows, cols) in MATRICES.items():
        ms = [gradients(SHAPES, r, 1)[i].reshape(rows, cols) for r in range(2)]
        approximation, _, _ = reference_step(ms, drawn_q(1, i, cols, 1))  # drawn for step 1
        np.testing.assert_allclose(ctx.applied[i].reshape(rows, cols), approximation, rtol=1e-4, atol=1e-5)


def test_before_start_iter_gradients_are_averaged_exactly():
    [(ctx, algorithm), _] = train(SHAPES, 2, start_iter=3)
    assert not algorithm.compressing()
    for i in range(len(SHAPES)):
        mean = np.mean([gradients(SHAPES, r, 1)[i] for r in range(2)], axis=0)
        np.testing.assert_array_equal(ctx.applied[i], mean)
    assert {name for name, _ in ctx.comm.names} == {"powersgd.0.grad"}
    np.testing.assert_array_equal(algorithm.state_dict()["error_feedback"][0], 0)


def test_a_model_of_vectors_only_is_averaged_exactly():
    shapes = [(5,), (), (3,)]
    [(ctx, algorithm), _] = train(shapes, 2, start_iter=0)
    assert algorithm.compressed_parameters() == []
    for i in range(len(shapes)):
        np.testing.assert_array_equal(ctx.applied[i], np.mean([gradients(shapes, r, 1)[i] for r in range(2)], axis=0))
    assert {name for name, _ in ctx.comm.names} == {"powersgd.0.dense"}


def test_a_zero_gradient_does_not_leave_the_warm_start_stuck_at_zero():
    def grads(shapes, rank, step):
        g = gradients(shapes, rank, step)
        return [x * 0 for x in g] if step == 0 else g

    runs = train(SHAPES, 2, rank=1, start_iter=0, seed=SEED, grads=grads)
    for i, (rows, cols) in MATRICES.items():
        ms = [gradients(SHAPES, r, 1)[i].reshape(rows, cols) for r in range(2)]
        approximation, _, _ = reference_step(ms, drawn_q(1, i, cols, 1))  # Q drawn afresh at step 1
        for ctx, _ in runs:
            assert np.all(np.isfinite(ctx.applied[i]))
            np.testing.assert_allclose(ctx.applied[i].reshape(rows, cols), approximation, rtol=1e-4, atol=1e-5)


def test_non_finite_gradients_fail_the_step_on_every_rank_and_leave_the_state():
    def body(rank, world):
        ctx = Context(SHAPES, Comm(world, rank), rank, 2)
        algorithm = PowerSGD(start_iter=0)
        algorithm.setup(ctx)
        ctx.grads = gradients(SHAPES, rank, 0)
        step_or_abandon(algorithm, ctx)
        before = algorithm.state_dict()
        ctx.grads = gradients(SHAPES, rank, 1)
        if rank == 1:
            ctx.grads[0][2, 3] = np.nan
        with pytest.raises(InvalidArgumentError, match="non-finite.*p0"):
            step_or_abandon(algorithm, ctx)
        after = algorithm.state_dict()
        for key in ("error_feedback", "q"):
            np.testing.assert_array_equal(before[key][0], after[key][0])
        assert after["iteration"] == before["iteration"]
        ctx.grads = gradients(SHAPES, rank, 1)  # the next step goes on
        step_or_abandon(algorithm, ctx)
        return algorithm.state_dict()["iteration"]

    assert run_ranks(2, body) == [2, 2]


def test_a_checkpoint_resumes_bit_for_bit():
    def body(rank, world):
        ctx = Context(SHAPES, Comm(world, rank), rank, 2)
        algorithm = PowerSGD(rank=2, start_iter=1, min_compression_rate=1)
        algorithm.setup(ctx)
        for step in range(3):
            ctx.grads = gradients(SHAPES, rank, step)
            step_or_abandon(algorithm, ctx)
        saved = algorithm.state_dict()
        ctx.grads = gradients(SHAPES, rank, 3)
        step_or_abandon(algorithm, ctx)
        uninterrupted = dict(ctx.applied)
        resumed_ctx = Context(SHAPES, Comm(world, rank), rank, 2)
        resumed = PowerSGD(rank=2, start_iter=1, min_compression_rate=1)
        if rank == 0:  # as Keras does: loaded before setup, which restores it
            resumed.load_state_dict(saved)
            resumed.setup(resumed_ctx)
        else:
            resumed.setup(resumed_ctx)
            resumed.load_state_dict(saved)
        resumed_ctx.grads = gradients(SHAPES, rank, 3)
        step_or_abandon(resumed, resumed_ctx)
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(resumed_ctx.applied[i], uninterrupted[i])
        return True

    assert run_ranks(2, body) == [True, True]


def test_a_checkpoint_of_another_model_is_refused():
    ctx = Context(SHAPES, Comm(World(1), 0))
    algorithm = PowerSGD(start_iter=0)
    algorithm.setup(ctx)
    state = algorithm.state_dict()
    other = PowerSGD(start_iter=0)
    other.setup(ctx)
    state["q"] = [np.zeros(5, np.float32)]
    with pytest.raises(ValueError, match="bucket 0's Q has 5 elements"):
        other.load_state_dict(state)


def test_state_before_setup_is_refused_with_the_reason():
    with pytest.raises(RuntimeError, match="before it is set up"):
        PowerSGD().state_dict()


TAPE = """
import numpy as np, tensorflow as tf
import relaxlib_tf as hvd
from relaxlib.algorithms.host_math import HostMath
from relaxlib.algorithms.powersgd import PowerSGD
from relaxlib_tf.tensor_math import GraphMath
hvd.init()
host, graph = HostMath(), GraphMath()
rng = np.random.default_rng(2)
a, b = rng.standard_normal(15).astype(np.float32), rng.standard_normal(10).astype(np.float32)
for flags in ((False, False), (True, False), (False, True)):
    np.testing.assert_allclose(graph.matmul(tf.constant(a), tf.constant(b), 3, 5, 2, *flags).numpy(),
                               host.matmul(a, b, 3, 5, 2, *flags), rtol=1e-6)
m = rng.standard_normal(12).astype(np.float32)
m[1::2] = 0  # a zero second column
np.testing.assert_allclose(graph.orthogonalize(tf.constant(m), 6, 2).numpy(), host.orthogonalize(m, 6, 2), atol=1e-6)

# the tape, eagerly, against the host-array path (tests/test_powersgd.py's Context) on one rank
shapes, targets = [(6, 5), (7,)], [np.arange(30, dtype=np.float32).reshape(6, 5) % 7, np.ones(7, np.float32)]
variables = [tf.Variable(np.zeros(s, np.float32)) for s in shapes]
algorithm = PowerSGD(start_iter=1)
for step in range(3):
    with hvd.DistributedGradientTape(tf.GradientTape(), algorithm=algorithm) as tape:
        loss = tf.add_n([tf.reduce_sum((v - t * (step + 1)) ** 2) for v, t in zip(variables, targets)])
    grads = tape.gradient(loss, variables)
    np.save(f"{OUT}/tape{step}.npy", np.concatenate([g.numpy().reshape(-1) for g in grads]))
print("TAPE OK", algorithm.state_dict()["iteration"])
"""


def test_tensorflow_math_and_the_tape_compute_what_host_math_does(tmp_path):
    """GraphMath's products and orthogonalization equal HostMath's, and PowerSGD runs in
    DistributedGradientTape eagerly (with TF tensors), giving the host-array path's gradients."""
    import subprocess
    import sys

    from mpi_launch import REPO

    code = f"OUT = {str(tmp_path)!r}\n" + TAPE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert "TAPE OK 3" in out.stdout, out.stdout + out.stderr[-3000:]
    shapes = [(6, 5), (7,)]
    targets = [np.arange(30, dtype=np.float32).reshape(6, 5) % 7, np.ones(7, np.float32)]
    variables = [np.zeros(s, np.float32) for s in shapes]
    ctx = Context(shapes, Comm(World(1), 0))
    algorithm = PowerSGD(start_iter=1)
    algorithm.setup(ctx)
    for step in range(3):
        ctx.grads = [2 * (v - t * (step + 1)) for v, t in zip(variables, targets)]
        step_or_abandon(algorithm, ctx)
        expected = np.concatenate([ctx.applied[i].reshape(-1) for i in range(2)])
        np.testing.assert_allclose(np.load(tmp_path / f"tape{step}.npy"), expected, rtol=1e-5, atol=1e-5,
                                   err_msg=f"step {step}")


def test_a_bucket_s_all_reduces_start_as_soon_as_its_gradients_exist():
    """Overlap with backward: P's and the exact part's all-reduces leave from ``on_gradient``;
    only Q's waits for ``step``."""

    def body(rank, world):
        ctx = Context(SHAPES, Comm(world, rank), rank, 2)
        algorithm = PowerSGD(start_iter=0)
        algorithm.setup(ctx)
        ctx.grads = gradients(SHAPES, rank, 0)
        for index in reversed(range(len(SHAPES))):  # backward order
            algorithm.on_gradient(ctx, index)
        started = [name for name, _ in ctx.comm.names]
        step_or_abandon(algorithm, ctx)
        return started, [name for name, _ in ctx.comm.names]

    for started, sent in run_ranks(2, body):
        assert sorted(started) == ["powersgd.0.dense", "powersgd.0.p"]
        assert sorted(sent) == ["powersgd.0.dense", "powersgd.0.p", "powersgd.0.q"]  # nothing sent twice


def test_max_grad_norm_clips_the_averaged_gradient():
    def body(rank, world):
        ctx = Context(SHAPES, Comm(world, rank), rank, 2)
        ctx.max_grad_norm = 0.5
        algorithm = PowerSGD(start_iter=0)
        algorithm.setup(ctx)
        ctx.grads = gradients(SHAPES, rank, 0)
        step_or_abandon(algorithm, ctx)
        return np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in ctx.applied.values()))

    for norm in run_ranks(2, body):
        assert norm == pytest.approx(0.5, rel=1e-5)
