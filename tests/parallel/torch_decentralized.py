"""Neighbour averaging, partial all-reduce and the model-averaging algorithms on real ranks,
against numpy. Launched with 2, 3 and 4 ranks."""

import time

import numpy as np
import pytest
import torch

import relaxlib_torch as hvd
from relaxlib import groups, topology
from relaxlib.algorithms import AsyncModelAverage, Decentralized, PartialAllReduce
from relaxlib.errors import RelaxError

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


def everyone(tensor: torch.Tensor) -> np.ndarray:
    """Every rank's tensor, stacked (row r = rank r)."""
    return hvd.allgather(tensor.detach().reshape(1, -1).to(torch.float64)).numpy()


def own_values(numel: int, dtype=torch.float32, step: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 * step + RANK)
    return torch.randn(numel, generator=gen, dtype=torch.float64).to(dtype)


# ---- primitives against numpy ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["ring", "random"])
def test_neighbor_average_matches_mixing_matrix(kind, dtype):
    for step in range(3):
        x = own_values(1001, dtype, step)
        row = topology.neighbors(kind, RANK, SIZE, step, seed=7)
        if row.peers:
            out = hvd.neighbor_average(x, row.peers, row.weights, row.self_weight, name=f"nb.{kind}.{step}")
        else:
            out = x.clone()
        expected = topology.mixing_matrix(kind, SIZE, step, seed=7) @ everyone(x)
        tolerance = 1e-6 if dtype == torch.float32 else 1e-12
        np.testing.assert_allclose(everyone(out), expected, rtol=tolerance, atol=tolerance)


def test_mixing_matrices_are_doubly_stochastic():
    for kind in topology.TOPOLOGIES:
        for step in range(50):
            w = topology.mixing_matrix(kind, SIZE, step, seed=3)
            np.testing.assert_allclose(w.sum(0), 1.0)
            np.testing.assert_allclose(w.sum(1), 1.0)
            np.testing.assert_allclose(w, w.T)


@pytest.mark.parametrize("generator", ["static", "random"])
@pytest.mark.parametrize("group_size", [2, 3])
def test_partial_allreduce_matches_group_means(generator, group_size):
    for step in range(4):
        x = own_values(513, torch.float64, step)
        layout = groups.deterministic_groups(generator, step, SIZE, group_size, seed=5)
        out = hvd.partial_allreduce(x, groups.group_of(RANK, layout), name=f"pa.{generator}.{group_size}.{step}")
        expected = groups.averaging_matrix(layout, SIZE) @ everyone(x)
        np.testing.assert_allclose(everyone(out), expected, rtol=1e-12, atol=1e-12)


def test_disjoint_groups_of_different_sizes_run_concurrently():
    layout = [[0, 1], list(range(2, SIZE))] if SIZE > 2 else [[0, 1]]
    x = own_values(300, torch.float64, step=9)
    out = hvd.partial_allreduce(x, groups.group_of(RANK, layout), name="pa.disjoint")
    expected = groups.averaging_matrix(layout, SIZE) @ everyone(x)
    np.testing.assert_allclose(everyone(out), expected, rtol=1e-12, atol=1e-12)


def test_compressed_neighbor_average_tracks_estimates():
    """CHOCO: estimates are replicated bit for bit, so the global mean is preserved, and with
    repeated gossip (no updates) the models reach consensus."""
    x = own_values(4099)
    row = topology.ring(RANK, SIZE)
    estimates = (torch.zeros(x.numel()), torch.zeros(x.numel() * len(row.peers)))
    mean_before = everyone(x).mean(0)
    first = None
    for step in range(30):
        x = hvd.neighbor_average(x, row.peers, row.weights, row.self_weight, name=f"choco.{step}", codec="uint8",
                                 estimates=estimates, consensus_step=0.8)
        models = everyone(x)
        spread = np.linalg.norm(models - models.mean(0), axis=1).mean()
        first = spread if first is None else first
    np.testing.assert_allclose(models.mean(0), mean_before, atol=1e-4)
    assert spread < 0.05 * first, (first, spread)
    # rank r's own estimate equals its neighbours' copy of it
    gathered = everyone(estimates[0])
    left = row.peers[0]
    np.testing.assert_array_equal(estimates[1][:x.numel()].to(torch.float64).numpy(), gathered[left])


# ---- errors ----

def test_mismatched_neighbor_sizes_name_the_rank():
    if SIZE != 2:
        pytest.skip("two-rank scenario")
    x = torch.ones(10 + RANK)
    with pytest.raises(RelaxError, match=f"rank {1 - RANK} sent a different operation"):
        hvd.neighbor_average(x, [1 - RANK], [0.5], 0.5, name="mismatch")


def test_bad_direct_requests_fail_locally():
    x = torch.ones(4)
    with pytest.raises(RelaxError, match="not a member of its group"):
        hvd.partial_allreduce(x, [r for r in range(SIZE) if r != RANK] or [RANK + 1], name="bad.group")
    with pytest.raises(RelaxError, match="out of range"):
        hvd.neighbor_average(x, [SIZE], [0.5], 0.5, name="bad.peer")
    with pytest.raises(RelaxError, match="not its own neighbour"):
        hvd.neighbor_average(x, [RANK], [0.5], 0.5, name="bad.self")
    with pytest.raises(ValueError, match="float32"):
        hvd.neighbor_average(torch.ones(4, dtype=torch.int32), [], [], 1.0, name="bad.dtype")
    with pytest.raises(ValueError, match="topology='ring'"):
        Decentralized("random", codec="uint8")


# ---- algorithms: consensus at the predicted rate (learning rate 0) ----

def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train_steps(opt, model, steps: int, first_step: int = 0, sleep: float = 0.0) -> None:
    for step in range(first_step, first_step + steps):
        gen = torch.Generator().manual_seed(step * 31 + RANK)
        x, y = torch.randn(8, 5, generator=gen), torch.randint(0, 2, (8,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if sleep:
            time.sleep(sleep)


def wrap(algorithm, lr: float = 0.0, seed: int | None = None):
    model = make_model(RANK if seed is None else seed)  # different models per rank
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.5),
                                   named_parameters=model.named_parameters(), algorithm=algorithm)
    return model, opt


def predicted(matrices, models: np.ndarray) -> list[float]:
    """Consensus distance after each mixing matrix."""
    distances = []
    for w in matrices:
        models = w @ models
        distances.append(np.linalg.norm(models - models.mean(0), axis=1).mean())
    return distances


CASES = {
    "ring": (lambda: Decentralized("ring"), lambda s: topology.mixing_matrix("ring", SIZE, s)),
    "random": (lambda: Decentralized("random", seed=11), lambda s: topology.mixing_matrix("random", SIZE, s, 11)),
    "static2": (lambda: PartialAllReduce(2, "static"),
                lambda s: groups.averaging_matrix(groups.static_groups(s, SIZE, 2), SIZE)),
    "static3": (lambda: PartialAllReduce(3, "static"),
                lambda s: groups.averaging_matrix(groups.static_groups(s, SIZE, 3), SIZE)),
    "random3": (lambda: PartialAllReduce(3, "random", seed=4),
                lambda s: groups.averaging_matrix(groups.random_groups(s, SIZE, 3, 4), SIZE)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_lr0_preserves_mean_and_contracts_at_predicted_rate(case):
    make_algorithm, matrix = CASES[case]
    algorithm = make_algorithm()
    model, opt = wrap(algorithm)
    start = everyone(flat(model))
    expected = predicted([matrix(s) for s in range(6)], start)
    measured = []
    for step in range(6):
        train_steps(opt, model, 1, first_step=step)
        measured.append(algorithm.consensus_distance())
    np.testing.assert_allclose(everyone(flat(model)).mean(0), start.mean(0), atol=1e-6)
    np.testing.assert_allclose(measured, expected, rtol=1e-4, atol=1e-6)
    if SIZE > 1:
        assert measured[-1] < 0.5 * np.linalg.norm(start - start.mean(0), axis=1).mean()
    algorithm.average_now()
    models = everyone(flat(model))
    np.testing.assert_allclose(models, np.repeat(start.mean(0)[None], SIZE, 0), atol=1e-6)


def test_period_skips_averaging_steps():
    algorithm = Decentralized("ring", period=3)
    model, opt = wrap(algorithm)
    start = everyone(flat(model))
    train_steps(opt, model, 2)  # steps 0 (averages) and 1 (does not)
    w = topology.mixing_matrix("ring", SIZE, 0)
    np.testing.assert_allclose(everyone(flat(model)), w @ start, atol=1e-6)


# ---- ranks that stop at different steps, start late, or straggle ----

ALGORITHMS = {
    "ring": lambda: Decentralized("ring"),
    "random": lambda: Decentralized("random", seed=2),
    "ring-uint8": lambda: Decentralized("ring", codec="uint8"),
    "static": lambda: PartialAllReduce(2, "static"),
    "random-groups": lambda: PartialAllReduce(2, "random", seed=9),
    "smart": lambda: PartialAllReduce(2, "smart", max_lag=2),
    "async": lambda: AsyncModelAverage(sync_interval_ms=5),
}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_ranks_stop_at_different_steps(name):
    algorithm = ALGORITHMS[name]()
    model, opt = wrap(algorithm, lr=0.05, seed=0)
    my_steps = 4 + 3 * RANK
    train_steps(opt, model, my_steps)
    final = opt.join()
    if name == "smart":  # a lagging rank adopts its group's (later) step number
        assert final >= 4 + 3 * (SIZE - 1) - 1
    else:
        assert final == 4 + 3 * (SIZE - 1) - 1
    algorithm.average_now()
    models = everyone(flat(model))
    np.testing.assert_allclose(models, np.repeat(models[:1], SIZE, 0), atol=1e-6)
    assert np.isfinite(models).all()


@pytest.mark.parametrize("name", ["ring", "static", "smart", "async"])
def test_a_rank_that_starts_late(name):
    algorithm = ALGORITHMS[name]()
    model, opt = wrap(algorithm, lr=0.05, seed=0)
    if RANK == SIZE - 1:
        time.sleep(1.0)
    train_steps(opt, model, 6)
    opt.join()
    algorithm.average_now()
    assert algorithm.consensus_distance() < 1e-6


def test_async_averages_while_training():
    algorithm = AsyncModelAverage(sync_interval_ms=1)
    model, opt = wrap(algorithm, lr=0.0)
    start = everyone(flat(model))
    train_steps(opt, model, 20, sleep=0.005)
    algorithm.pause()
    assert algorithm.averagings > 0
    np.testing.assert_allclose(everyone(flat(model)).mean(0), start.mean(0), atol=1e-5)
    if SIZE > 1:
        assert algorithm.consensus_distance() < 1e-5  # lr 0: every round is an exact average
    algorithm.resume()
    train_steps(opt, model, 3)
    algorithm.average_now()
