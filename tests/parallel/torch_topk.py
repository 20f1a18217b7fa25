"""TopK on real torch ranks (launched by tests/test_topk.py with 3 ranks): density 1 is all-reduce,
a sparse step against the formula (with error feedback carried over steps), digits training near
all-reduce's accuracy, resume bit for bit, NaN refused on every rank."""

import copy

import numpy as np
import pytest
import torch

import relaxlib_torch as hvd
from relaxlib.algorithms.topk import TopK, select
from relaxlib.errors import InvalidArgumentError

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


def model_and_optimizer(algorithm, lr=0.1, seed=0, momentum=0.0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), algorithm=algorithm)
    return model, optimizer


def gradients_of(step, rank, shapes):
    rng = np.random.default_rng(1000 * step + rank)
    return [rng.normal(size=s).astype(np.float32) for s in shapes]


def run_steps(algorithm, steps, nan_at=None):
    """Sets per-(rank, step) gradients directly and steps; returns the parameters after each step."""
    model, optimizer = model_and_optimizer(algorithm)
    params = list(model.parameters())
    shapes = [tuple(p.shape) for p in params]
    history = []
    for step in range(steps):
        optimizer.zero_grad()
        for p, g in zip(params, gradients_of(step, RANK, shapes)):
            p.grad = torch.from_numpy(g)
        optimizer.step()
        history.append([p.detach().clone() for p in params])
    return model, optimizer, history, shapes


def test_density_one_equals_allreduce():
    _, _, exact, _ = run_steps(None, 3)
    _, _, sparse, _ = run_steps(TopK(density=1.0), 3)
    for a, b in zip(exact[-1], sparse[-1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_sparse_steps_follow_the_formula_with_error_feedback():
    """numpy replays every rank: v = g + e, top-k of v (per bucket), e = v off the top-k, mean of
    the sparse vectors; SGD with lr 0.1 from the same start (one bucket: the model is tiny)."""
    density, steps = 0.1, 4
    model, _, history, shapes = run_steps(TopK(density=density), steps)
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    # buckets hold parameters in reverse optimizer order
    order = list(reversed(range(len(shapes))))
    weights = np.concatenate([reference[i // 2 * 2].weight.detach().numpy().ravel() if i % 2 == 0 else
                              reference[i // 2 * 2].bias.detach().numpy().ravel() for i in range(len(shapes))])
    sizes = [int(np.prod(s)) for s in shapes]
    offsets = np.cumsum([0] + sizes)
    residual = [np.zeros(sum(sizes), np.float32) for _ in range(SIZE)]
    for step in range(steps):
        dense = np.zeros(sum(sizes), np.float64)
        for rank in range(SIZE):
            g = gradients_of(step, rank, shapes)
            v = np.concatenate([g[i].ravel() for i in order]) + residual[rank]
            chosen, kept = select(v, density)
            residual[rank] = v.copy()
            residual[rank][chosen] = 0.0
            sparse = np.zeros_like(v)
            sparse[chosen] = kept
            dense += sparse / SIZE
        # back to optimizer order
        position = 0
        for i in order:
            weights[offsets[i]:offsets[i + 1]] -= 0.1 * dense[position:position + sizes[i]]
            position += sizes[i]
        got = np.concatenate([p.numpy().ravel() for p in history[step]])
        np.testing.assert_allclose(got, weights, rtol=1e-5, atol=1e-6, err_msg=f"step {step}")
    gathered = hvd.allgather_object(np.concatenate([p.detach().numpy().ravel() for p in model.parameters()]))
    for other in gathered:
        np.testing.assert_array_equal(other, gathered[0])  # every rank took the same step


def digits_accuracy(algorithm, epochs=8):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    x, test_x, y, test_y = (torch.tensor(a) for a in train_test_split(
        digits.data.astype(np.float32) / 16, digits.target, test_size=0.2, random_state=0, stratify=digits.target))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters(), algorithm=algorithm)
    mine_x, mine_y = x[RANK::SIZE], y[RANK::SIZE]
    for _ in range(epochs):
        for i in range(0, len(mine_x) - 31, 32):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(mine_x[i:i + 32]), mine_y[i:i + 32]).backward()
            optimizer.step()
    with torch.no_grad():
        return (model(test_x).argmax(1) == test_y).float().mean().item()


def test_digits_train_with_ten_and_one_percent():
    """8 epochs, SGD with momentum 0.9: 10 % stays near all-reduce, 1 % (49 of 4810 elements a step)
    learns but trails (0.872 against 0.939 when written: the gap the convergence grid measures)."""
    exact = digits_accuracy(None)
    ten = digits_accuracy(TopK(density=0.1))
    one = digits_accuracy(TopK(density=0.01))
    assert exact > 0.9, exact
    assert ten > exact - 0.03, (ten, exact)
    assert one > 0.8, (one, exact)


def test_state_dict_resumes_bit_for_bit():
    algorithm = TopK(density=0.2)
    model, optimizer, _, shapes = run_steps(algorithm, 2)
    saved_model = copy.deepcopy(model.state_dict())
    saved_optimizer = copy.deepcopy(optimizer.state_dict())
    saved_algorithm = copy.deepcopy(algorithm.state_dict())
    assert any(np.any(r) for r in saved_algorithm["residuals"])

    def two_more(m, o):
        params = list(m.parameters())
        for step in (2, 3):
            o.zero_grad()
            for p, g in zip(params, gradients_of(step, RANK, shapes)):
                p.grad = torch.from_numpy(g)
            o.step()
        return [p.detach().clone() for p in params]

    straight = two_more(model, optimizer)
    resumed_algorithm = TopK(density=0.2)
    model2, optimizer2 = model_and_optimizer(resumed_algorithm, seed=5)
    model2.load_state_dict(saved_model)
    optimizer2.load_state_dict(saved_optimizer)
    resumed_algorithm.load_state_dict(saved_algorithm)
    for a, b in zip(straight, two_more(model2, optimizer2)):
        assert torch.equal(a, b)


def test_nan_on_one_rank_fails_every_rank_and_changes_nothing():
    algorithm = TopK(density=0.2)
    model, optimizer, _, shapes = run_steps(algorithm, 1)
    before = [p.detach().clone() for p in model.parameters()]
    residuals = copy.deepcopy(algorithm.state_dict())
    optimizer.zero_grad()
    for i, (p, g) in enumerate(zip(model.parameters(), gradients_of(7, RANK, shapes))):
        if RANK == 1 and i == 0:
            g[0, 0] = np.nan
        p.grad = torch.from_numpy(g)
    with pytest.raises(InvalidArgumentError, match=r"rank\(s\) \[1\]"):
        optimizer.step()
    for a, b in zip(before, model.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(residuals["residuals"], algorithm.state_dict()["residuals"]):
        np.testing.assert_array_equal(a, b)
