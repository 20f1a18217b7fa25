"""LocalSGD / DiLoCo in torch on real ranks (launched with 3 by tests/test_local_updates.py):
against all-reduce SGD, the sync schedule, convergence on digits, checkpoint resume, a codec with
error feedback, and arguments refused on every rank."""

import copy

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

import relaxlib_torch as hvd
from relaxlib.algorithms.local_updates import DiLoCo, LocalSGD, fragment_schedule, split_fragments
from relaxlib.algorithms.topk import select
from relaxlib.errors import MismatchError, RelaxError

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
DIGITS = load_digits()
X = torch.tensor(DIGITS.data, dtype=torch.float32) / 16
Y = torch.tensor(DIGITS.target)
X_TRAIN, Y_TRAIN = X[:1400][RANK::SIZE], Y[:1400][RANK::SIZE]
X_TEST, Y_TEST = X[1400:], Y[1400:]
BATCH = 16


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)  # the same initial weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of ``step`` (its own shard: ranks see different data)."""
    start = (step * BATCH) % (len(X_TRAIN) - BATCH)
    return X_TRAIN[start:start + BATCH], Y_TRAIN[start:start + BATCH]


def train(model, opt, steps: range) -> None:
    for step in steps:
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def everyone(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's tensor (row r = rank r)."""
    return hvd.allgather(tensor.reshape(1, -1))


def same_everywhere(tensor: torch.Tensor) -> bool:
    rows = everyone(tensor)
    return all(torch.equal(rows[0], rows[r]) for r in range(SIZE))


def wrap(model, algorithm, inner=None):
    inner = inner or torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters(), algorithm=algorithm)


def test_every_step_with_plain_averaging_is_allreduce_sgd():
    """H = 1, outer lr 1, no outer momentum: the mean of the ranks' (linear) momentum-SGD steps
    from one point is the step of momentum SGD on the mean gradient."""
    reference, local = make_model(), make_model()
    train(reference, wrap(reference, None), range(12))
    train(local, wrap(local, LocalSGD(sync_every=1)), range(12))
    assert not torch.equal(flat(local), flat(make_model()))
    torch.testing.assert_close(flat(local), flat(reference), rtol=1e-5, atol=1e-6)


def test_ranks_agree_after_each_sync_and_differ_between():
    model = make_model()
    algorithm = LocalSGD(sync_every=4)
    opt = wrap(model, algorithm)
    for step in range(1, 10):
        train(model, opt, range(step - 1, step))
        assert same_everywhere(flat(model)) == (step % 4 == 0), f"after inner step {step}"
    assert algorithm.syncs == 2 and algorithm.inner_steps == 9


def test_fragments_are_synchronised_in_turn():
    """Two fragments, H = 4: the first layer's weights are averaged at steps 2, 6, the rest at 4, 8."""
    model = make_model()
    opt = wrap(model, LocalSGD(sync_every=4, fragments=2))
    first = model[0].weight  # fragment 0 is the first layer's weight (2048 of 2410 elements)
    rest = lambda: torch.cat([p.detach().flatten() for p in list(model.parameters())[1:]])  # noqa: E731
    for step in range(1, 9):
        train(model, opt, range(step - 1, step))
        assert same_everywhere(first.detach().flatten()) == (step % 4 == 2), f"fragment 0 after step {step}"
        assert same_everywhere(rest()) == (step % 4 == 0), f"fragment 1 after step {step}"


def test_diloco_learns_digits():
    """DiLoCo (outer Nesterov 0.9, lr 0.7) every 8 steps of Adam reaches a sensible accuracy."""
    model = make_model()
    algorithm = DiLoCo(sync_every=8)
    train(model, wrap(model, algorithm, torch.optim.Adam(model.parameters(), lr=3e-3)), range(240))
    assert algorithm.syncs == 30
    assert same_everywhere(flat(model))  # (240 is a sync step)
    with torch.no_grad():
        accuracy = (model(X_TEST).argmax(1) == Y_TEST).float().mean().item()
    assert accuracy > 0.85, f"DiLoCo reached {accuracy:.3f} on digits (chance: 0.1)"


RESUMABLE = {
    "diloco": lambda: DiLoCo(sync_every=4),
    "diloco-uint8": lambda: DiLoCo(sync_every=4, codec="uint8"),
    "diloco-topk": lambda: DiLoCo(sync_every=4, codec="topk", density=0.1),
    "streaming": lambda: DiLoCo(sync_every=4, fragments=2, delay=1, mixing=0.5),
}


@pytest.mark.parametrize("case", sorted(RESUMABLE))
def test_resuming_from_a_checkpoint_is_bit_identical(case):
    """Checkpoint between syncs (step 7 of H = 4; with delay, an outer step is in flight), then go
    on to step 15; a fresh model and optimizer loaded with the checkpoint end with the same bits."""
    model = make_model()
    opt = wrap(model, RESUMABLE[case]())
    train(model, opt, range(7))
    checkpoint = copy.deepcopy({"model": model.state_dict(), "optimizer": opt.state_dict()})
    assert checkpoint["optimizer"]["relaxlib"]["inner_steps"] == 7
    train(model, opt, range(7, 15))

    resumed = make_model(seed=1)
    resumed.load_state_dict(checkpoint["model"])
    opt2 = wrap(resumed, RESUMABLE[case]())
    opt2.load_state_dict(checkpoint["optimizer"])
    train(resumed, opt2, range(7, 15))
    for (name, a), b in zip(model.named_parameters(), resumed.parameters()):
        assert torch.equal(a, b), f"{case}: {name} differs after resuming"


def distance_from_exact(codec: str, error_feedback: bool = True) -> float:
    """||compressed - exact|| / ||exact - start|| after 40 steps of DiLoCo (H = 4)."""
    exact, compressed = make_model(), make_model()
    train(exact, wrap(exact, DiLoCo(sync_every=4)), range(40))
    algorithm = DiLoCo(sync_every=4, codec=codec, error_feedback=error_feedback)
    train(compressed, wrap(compressed, algorithm), range(40))
    assert same_everywhere(flat(compressed))
    residuals = algorithm.state_dict()["sparse_residuals" if codec == "topk" else "error_feedback"]
    assert (residuals[0] is not None) == error_feedback
    return ((flat(compressed) - flat(exact)).norm() / (flat(exact) - flat(make_model())).norm()).item()


# (measured: fp16 3e-5, uint8 4e-3, sign 0.37, and 0.90 for sign without error feedback)
@pytest.mark.parametrize("codec, bound", [("fp16", 1e-3), ("uint8", 0.02), ("sign", 0.6)])
def test_compressed_outer_gradients_with_error_feedback_stay_close_to_exact(codec, bound):
    distance = distance_from_exact(codec)
    assert distance < bound, f"{codec} ended {distance:.4f} (relative to the distance travelled) from exact"


@pytest.mark.parametrize("codec", ["sign", "topk"])
def test_error_feedback_on_the_outer_gradient_matters(codec):
    """1 bit, and Top-K at its default 1 %."""
    with_feedback, without = distance_from_exact(codec), distance_from_exact(codec, error_feedback=False)
    assert with_feedback < without, (with_feedback, without)


def test_unsupported_models_are_refused_on_every_rank():
    half = torch.nn.Linear(4, 2).to(torch.float16)
    with pytest.raises(ValueError, match=r"float32 or float64 .*float16"):
        wrap(half, LocalSGD())
    with pytest.raises(ValueError, match="fragments=3 is more than the 2 parameter tensors"):
        wrap(torch.nn.Linear(4, 2), LocalSGD(sync_every=4, fragments=3))


def test_ranks_with_different_settings_are_told_what_differs():
    model = make_model()
    with pytest.raises(MismatchError, match="sync_every"):
        wrap(model, LocalSGD(sync_every=4 if RANK == 0 else 8))


def test_a_process_set_is_refused_on_each_of_its_ranks():
    """The anchor comes from world rank 0: within a set that lacks it, every member is told, at the first step."""
    high = hvd.add_process_set(list(range(1, SIZE)))
    try:
        if high.included():
            model = make_model()
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                           named_parameters=model.named_parameters(), algorithm=LocalSGD(),
                                           process_set=high)
            with pytest.raises(ValueError, match="process sets are not supported"):
                train(model, opt, range(1))
    finally:
        hvd.remove_process_set(high)


@pytest.mark.parametrize("codec", [None, "uint8", "topk"])
def test_a_non_finite_outer_gradient_is_named_on_every_rank(codec):
    """Rank 1's weights turn NaN between syncs: every rank's sync step fails naming rank 1, and no
    NaN reaches the anchor (the other ranks' weights and the checkpoint stay finite)."""
    model = make_model()
    algorithm = LocalSGD(sync_every=2, codec=codec)
    opt = wrap(model, algorithm)
    train(model, opt, range(1))
    if RANK == 1:
        with torch.no_grad():
            model[0].weight[0, 0] = float("nan")
    with pytest.raises(RelaxError, match=r"non-finite|not finite") as raised:
        train(model, opt, range(1, 2))
    assert "rank 1" in str(raised.value), str(raised.value)
    state = algorithm.state_dict()
    assert all(torch.isfinite(anchor).all() for anchor in state["anchor"])
    assert all(r is None or np.isfinite(r).all() for r in state["sparse_residuals"])
    if RANK != 1:
        assert torch.isfinite(flat(model)).all()


# ---- the whole algorithm against a float64 numpy simulation of every rank ----

SHAPES = [(5, 3), (3,), (3, 2), (7,)]


def linear_gradients(step: int, rank: int) -> list[np.ndarray]:
    """The gradient of rank ``rank`` at ``step`` (any rank can compute any rank's)."""
    rng = np.random.default_rng(100 * step + rank)
    return [(rng.standard_normal(shape) * (1 + i)).astype(np.float32) for i, shape in enumerate(SHAPES)]


def sparse_mean(deltas: np.ndarray, residuals: np.ndarray, density: float) -> np.ndarray:
    """The mean over ranks (rows) of each one's Top-K of ``delta + residual``; each rank's residual
    keeps what it did not send (in place)."""
    mean = np.zeros(deltas.shape[1])
    for rank, delta in enumerate(deltas):
        values = delta + residuals[rank]
        chosen = select(values.astype(np.float32), density)[0]
        mean[chosen] += values[chosen] / len(deltas)
        residuals[rank] = values
        residuals[rank][chosen] = 0.0
    return mean


def simulate(algorithm: LocalSGD, start: list[np.ndarray], steps: int, lr: float, mu: float) -> np.ndarray:
    """Every rank's flat weights after ``steps``, in float64: inner momentum SGD per rank, then the
    module docstring's outer step per fragment when it is due, applied ``delay`` steps later
    (codec="topk": each rank's outer gradient sparsified, with error feedback)."""
    sizes = [int(np.prod(shape)) for shape in SHAPES]
    bounds = np.cumsum([0, *sizes])
    fragments = [np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in group])
                 for group in split_fragments(sizes, algorithm.fragments)]
    phases = fragment_schedule(algorithm.sync_every, algorithm.fragments)
    theta = np.tile(np.concatenate([w.ravel() for w in start]).astype(np.float64), (SIZE, 1))
    inner = np.zeros_like(theta)
    anchor = theta[0].copy()
    outer = [None] * len(fragments)
    pending = {}
    residuals = [np.zeros((SIZE, len(members))) for members in fragments]
    for step in range(1, steps + 1):
        grads = np.stack([np.concatenate([g.ravel() for g in linear_gradients(step - 1, r)]) for r in range(SIZE)])
        inner = mu * inner + grads
        theta -= lr * inner
        due = [f for f, (_, when) in pending.items() if when <= step]
        sending = [f for f, phase in enumerate(phases) if step % algorithm.sync_every == phase]
        for f in sending:
            deltas = anchor[fragments[f]] - theta[:, fragments[f]]
            mean = (sparse_mean(deltas, residuals[f], algorithm.density) if algorithm.codec == "topk"
                    else deltas.mean(0))
            pending[f] = (mean, step + algorithm.delay)
        for f in sorted(due) + (sending if algorithm.delay == 0 else []):
            delta, _ = pending.pop(f)
            m = algorithm.outer_momentum
            if m:
                outer[f] = delta.copy() if outer[f] is None else m * outer[f] + delta
                update = delta + m * outer[f] if algorithm.nesterov else outer[f]
            else:
                update = delta
            anchor[fragments[f]] -= algorithm.outer_lr * update
            theta[:, fragments[f]] = algorithm.mixing * theta[:, fragments[f]] + (1 - algorithm.mixing) * anchor[
                fragments[f]]
    return theta


SIMULATED = {
    "localsgd-heavy-ball": lambda: LocalSGD(sync_every=2, outer_lr=0.8, outer_momentum=0.5),
    "diloco": lambda: DiLoCo(sync_every=3),
    "streaming": lambda: DiLoCo(sync_every=4, fragments=2, delay=1, mixing=0.5),
    "streaming-4": lambda: DiLoCo(sync_every=4, fragments=4, delay=2),
    "diloco-topk": lambda: DiLoCo(sync_every=3, codec="topk", density=0.3),
    "streaming-topk": lambda: DiLoCo(sync_every=4, fragments=2, delay=1, mixing=0.5, codec="topk", density=0.2),
}


@pytest.mark.parametrize("case", sorted(SIMULATED))
def test_weights_follow_the_simulated_algorithm(case):
    start = [np.random.default_rng(7).standard_normal(shape).astype(np.float32) for shape in SHAPES]
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in start]
    algorithm = SIMULATED[case]()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.05, momentum=0.9),
                                   named_parameters=[(f"w{i}", p) for i, p in enumerate(params)], algorithm=algorithm)
    for step in range(11):
        opt.zero_grad()
        sum((p * torch.from_numpy(g)).sum() for p, g in zip(params, linear_gradients(step, RANK))).backward()
        opt.step()
    expected = simulate(SIMULATED[case](), start, 11, lr=0.05, mu=0.9)[RANK]
    mine = torch.cat([p.detach().flatten() for p in params]).double().numpy()
    np.testing.assert_allclose(mine, expected, rtol=1e-4, atol=1e-5, err_msg=case)
