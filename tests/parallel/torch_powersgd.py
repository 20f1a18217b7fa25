"""PowerSGD on real ranks (torch): exact where the rank covers the matrix, digits accuracy close
to all-reduce's, checkpoint/resume bit for bit, a model of vectors only, and failures on every rank.
Launched by tests/test_torch_parallel.py with 2 and 3 ranks."""

import copy

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

import relaxlib_torch as hvd
from relaxlib.algorithms.powersgd import PowerSGD
from relaxlib.errors import InvalidArgumentError

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


class Linear(torch.nn.Module):
    """One parameter w; forward(g) = <w, g>: its gradient is g exactly, whatever the rank."""

    def __init__(self, shape) -> None:
        super().__init__()
        weight = np.random.default_rng(7).standard_normal(shape).astype(np.float32)  # the same on every rank
        self.w = torch.nn.Parameter(torch.from_numpy(weight))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        return (self.w * g).sum()


def linear_gradients(shapes, step: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(100 * step + RANK)
    return [torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]


def run_linear(shapes, algorithm, steps: int = 4) -> list[np.ndarray]:
    """Parameters after ``steps`` steps of momentum SGD on the linear loss, with ``algorithm``."""
    model = torch.nn.ModuleList(Linear(s) for s in shapes)
    params = [layer.w for layer in model]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.05, momentum=0.9),
                                   named_parameters=[(f"w{i}", p) for i, p in enumerate(params)], algorithm=algorithm)
    for step in range(steps):
        opt.zero_grad()
        sum(layer(g) for layer, g in zip(model, linear_gradients(shapes, step))).backward()
        opt.step()
    return [p.detach().numpy().copy() for p in params]


def test_a_rank_covering_the_matrix_gives_the_allreduce_result():
    """(a) rank >= min(n, m): P Q^T is the mean gradient itself (to float rounding)."""
    shapes = [(6, 4), (3, 5), (4,), (2, 3, 2)]
    algorithm = PowerSGD(rank=4, start_iter=0, min_compression_rate=0)
    exact = run_linear(shapes, algorithm)
    assert algorithm.compressed_parameters() == [0, 1, 3]
    for i, (mine, expected) in enumerate(zip(exact, run_linear(shapes, None))):
        np.testing.assert_allclose(mine, expected, rtol=1e-5, atol=1e-5, err_msg=f"parameter {i}")


def test_rank_one_is_not_the_allreduce_result():
    """The check above would pass if nothing were compressed: rank 1 of the same matrices differs."""
    shapes = [(6, 4), (3, 5)]
    compressed = run_linear(shapes, PowerSGD(rank=1, start_iter=0, min_compression_rate=0))
    assert not np.allclose(compressed[0], run_linear(shapes, None)[0], rtol=1e-3, atol=1e-3)


DIGITS = load_digits()
X = torch.tensor(DIGITS.data, dtype=torch.float32) / 16
Y = torch.tensor(DIGITS.target)
X_TRAIN, Y_TRAIN = X[:1400][RANK::SIZE], Y[:1400][RANK::SIZE]
X_TEST, Y_TEST = X[1400:], Y[1400:]
BATCH = 16


def digits_model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial model on every rank
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def digits_steps(model, opt, first: int, count: int) -> None:
    """Steps ``first`` .. ``first + count - 1`` of training on this rank's shard (cycling)."""
    batches = len(X_TRAIN) // BATCH
    for step in range(first, first + count):
        start = (step % batches) * BATCH
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X_TRAIN[start:start + BATCH]), Y_TRAIN[start:start + BATCH]).backward()
        opt.step()


def digits_optimizer(model, algorithm):
    return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                    named_parameters=model.named_parameters(), algorithm=algorithm)


def digits_accuracy(algorithm, steps: int = 100) -> float:
    model = digits_model()
    digits_steps(model, digits_optimizer(model, algorithm), 0, steps)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = hvd.allgather(params.unsqueeze(0))
    assert all(torch.equal(gathered[0], gathered[r]) for r in range(SIZE)), "ranks diverged"
    with torch.no_grad():
        return (model(X_TEST).argmax(1) == Y_TEST).float().mean().item() * 100


def test_rank_two_with_error_feedback_is_within_two_points_of_allreduce_on_digits():
    """(b) 100 steps; both weight matrices compressed (64x64 and 10x64 at rank 2)."""
    algorithm = PowerSGD(rank=2, start_iter=10)
    compressed = digits_accuracy(algorithm)
    baseline = digits_accuracy(None)
    print(f"[powersgd digits np{SIZE}] all-reduce {baseline:.2f}%, PowerSGD rank 2 {compressed:.2f}%")
    assert algorithm.compressed_parameters() == [0, 2]
    assert compressed > 80, compressed  # chance is 10%
    assert compressed >= baseline - 2, (compressed, baseline)


def test_a_checkpoint_resumes_bit_for_bit():
    """(c) state_dict -> a new optimizer -> load_state_dict: the next steps as without the break."""
    model = digits_model()
    opt = digits_optimizer(model, PowerSGD(rank=2, start_iter=3))
    digits_steps(model, opt, 0, 6)
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    assert saved_opt["relaxlib"]["iteration"] == 6
    digits_steps(model, opt, 6, 4)
    resumed = digits_model()
    resumed.load_state_dict(saved_model)
    resumed_opt = digits_optimizer(resumed, PowerSGD(rank=2, start_iter=3))
    resumed_opt.load_state_dict(saved_opt)
    digits_steps(resumed, resumed_opt, 6, 4)
    for (name, mine), theirs in zip(resumed.named_parameters(), model.parameters()):
        assert torch.equal(mine, theirs), name
    # and the state mattered: without it (error memories zero, Q drawn afresh) the steps differ
    fresh = digits_model()
    fresh.load_state_dict(saved_model)
    fresh_opt = digits_optimizer(fresh, PowerSGD(rank=2, start_iter=0))
    inner_only = {k: v for k, v in saved_opt.items() if k != "relaxlib"}
    fresh_opt.load_state_dict(inner_only)
    digits_steps(fresh, fresh_opt, 6, 4)
    assert not torch.equal(fresh[0].weight, model[0].weight)


def test_a_model_of_vectors_only_falls_back_to_an_exact_average():
    """(d) nothing to compress: every parameter in the exact all-reduce."""
    shapes = [(5,), (3,), (1,)]
    algorithm = PowerSGD(start_iter=0)
    result = run_linear(shapes, algorithm)
    assert algorithm.compressed_parameters() == []
    for i, (mine, expected) in enumerate(zip(result, run_linear(shapes, None))):
        np.testing.assert_allclose(mine, expected, rtol=1e-6, atol=1e-7, err_msg=f"parameter {i}")


def test_one_rank_s_non_finite_gradient_fails_the_step_on_every_rank():
    shapes = [(6, 4), (4,)]
    model = torch.nn.ModuleList(Linear(s) for s in shapes)
    params = [layer.w for layer in model]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.05), algorithm=PowerSGD(start_iter=0),
                                   named_parameters=[(f"w{i}", p) for i, p in enumerate(params)])
    grads = linear_gradients(shapes, 0)
    if RANK == SIZE - 1:
        grads[0][1, 2] = float("nan")
    opt.zero_grad()
    sum(layer(g) for layer, g in zip(model, grads)).backward()
    with pytest.raises(InvalidArgumentError, match="non-finite"):
        opt.step()
    assert all(torch.isfinite(p).all() for p in params)
    opt.zero_grad()  # the next step goes on
    sum(layer(g) for layer, g in zip(model, linear_gradients(shapes, 1))).backward()
    opt.step()
    assert all(torch.isfinite(p).all() for p in params)


@pytest.mark.parametrize("kwargs", [{"rank": 0}, {"start_iter": -1}, {"epsilon": -1.0}])
def test_bad_arguments_fail_on_every_rank(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        PowerSGD(**kwargs)
