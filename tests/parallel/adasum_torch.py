"""op=Adasum through relaxlib_torch on real ranks (tests/test_adasum.py launches 2, 3 and 4): results
against the numpy tree (adasum_reference.py) for several tensors in one fused call, float64, float16,
zero vectors and DistributedOptimizer(op=Adasum); bad dtypes, other collectives and a rank count that
is not a power of two refused on every rank, the engine working on afterwards."""

import numpy as np
import pytest
import torch
from adasum_reference import combine, rank_tensors, tree

import relaxlib_torch as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
POWER_OF_TWO = SIZE & (SIZE - 1) == 0
power_of_two = pytest.mark.skipif(not POWER_OF_TWO, reason="Adasum runs on a power-of-two number of ranks")
SIZES = [1, 7, 1000, 33, 4]  # halves fall inside tensors, and a tensor smaller than the ranks


def still_works():
    assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum), torch.full((3,), float(SIZE)))


def expected(sizes, dtype=np.float32, seed=0):
    """Each tensor's Adasum over every rank's version of it."""
    per_rank = [rank_tensors(r, sizes, dtype, seed) for r in range(SIZE)]
    return [tree([per_rank[r][t] for r in range(SIZE)]) for t in range(len(sizes))]


@power_of_two
def test_fused_tensors_are_combined_per_tensor_as_the_numpy_tree():
    mine = [torch.from_numpy(a) for a in rank_tensors(RANK, SIZES)]
    want = expected(SIZES)
    grouped = hvd.grouped_allreduce(mine, op=hvd.Adasum, name="adasum.grouped")  # one atomic, fused request
    handles = [hvd.allreduce_async(t, op=hvd.Adasum, name=f"adasum.async.{i}") for i, t in enumerate(mine)]
    separate = [hvd.synchronize(h) for h in handles]  # submitted together: fused by the engine
    for index, (g, s, w) in enumerate(zip(grouped, separate, want)):
        assert g.dtype == torch.float32 and g.shape == mine[index].shape
        np.testing.assert_allclose(g.numpy(), w, rtol=2e-5, atol=2e-5 * np.abs(w).max(), err_msg=f"tensor {index}")
        assert torch.equal(g, s), index  # the same bits, fused or not
    # Per tensor, not over the fused buffer: the concatenation's Adasum differs.
    whole = tree([np.concatenate(rank_tensors(r, SIZES)) for r in range(SIZE)])
    assert not np.allclose(np.concatenate([g.numpy() for g in grouped]), whole, rtol=1e-3)


@power_of_two
def test_float64_in_place():
    tensor = torch.from_numpy(rank_tensors(RANK, [513], np.float64, seed=3)[0])
    hvd.allreduce_(tensor, op=hvd.Adasum, name="adasum.f64")
    np.testing.assert_allclose(tensor.numpy(), expected([513], np.float64, seed=3)[0], rtol=1e-12, atol=1e-12)


@power_of_two
def test_float16_is_combined_in_double_and_rounded_once():
    """As Horovod's half-precision Adasum: dot products in double, each result rounded to float16."""
    tensor = torch.from_numpy(rank_tensors(RANK, [300], np.float16, seed=4)[0])
    out = hvd.allreduce(tensor, op=hvd.Adasum, name="adasum.f16")
    assert out.dtype == torch.float16
    want = expected([300], np.float16, seed=4)[0]
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=5e-3, atol=5e-3 * np.abs(want).max())


@power_of_two
def test_zero_vectors():
    """A zero gradient leaves the others' Adasum unchanged (it is the identity); all zeros give
    zeros, not NaN. Identical gradients give that gradient (parallel ones are averaged)."""
    values = rank_tensors(RANK, [50], seed=5)[0] if RANK else np.zeros(50, np.float32)
    out = hvd.allreduce(torch.from_numpy(values), op=hvd.Adasum, name="adasum.one_zero")
    others = [rank_tensors(r, [50], seed=5)[0] for r in range(1, SIZE)]
    want = tree([np.zeros(50), *others])
    # Rank 0's zeros drop out: with 2 ranks the result is rank 1's gradient.
    np.testing.assert_allclose(want, others[0] if SIZE == 2 else combine(others[0], tree(others[1:])))
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=1e-5)
    zeros = hvd.allreduce(torch.zeros(9), op=hvd.Adasum, name="adasum.zeros")
    assert torch.equal(zeros, torch.zeros(9))
    same = torch.linspace(-1, 1, 11)
    np.testing.assert_allclose(hvd.allreduce(same, op=hvd.Adasum, name="adasum.same").numpy(), same.numpy(),
                               rtol=1e-6, atol=1e-6)


@power_of_two
def test_prescale_and_postscale_apply_around_the_combination():
    values = rank_tensors(RANK, [20], seed=7)[0]
    out = hvd.allreduce(torch.from_numpy(values), op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.25,
                        name="adasum.scaled")
    want = 0.25 * tree([2.0 * rank_tensors(r, [20], seed=7)[0].astype(np.float64) for r in range(SIZE)])
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=1e-5)


def test_integer_tensors_are_refused_on_every_rank():
    with pytest.raises(ValueError, match=r"allreduce 'adasum\.int'.*Adasum.*float16, float32 and float64.*int32"):
        hvd.allreduce(torch.ones(4, dtype=torch.int32), op=hvd.Adasum, name="adasum.int")
    with pytest.raises(ValueError, match=r"Adasum.*allreduce only"):
        hvd.reducescatter(torch.ones(4 * SIZE), op=hvd.Adasum, name="adasum.reducescatter")
    still_works()


@pytest.mark.skipif(POWER_OF_TWO, reason="checks the refusal on a rank count that is not a power of two")
def test_a_rank_count_that_is_not_a_power_of_two_is_refused_on_every_rank():
    with pytest.raises(ValueError, match=rf"'adasum\.odd'.*power-of-two number of ranks.*there are {SIZE}"):
        hvd.allreduce(torch.ones(4), op=hvd.Adasum, name="adasum.odd")
    model = torch.nn.Linear(3, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    model(torch.ones(2, 3)).sum().backward()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="power-of-two number of ranks"):
        opt.step()
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))  # not left half-stepped
    still_works()


@power_of_two
def test_distributed_optimizer_adds_the_adasum_of_each_ranks_step():
    """Horovod's delta optimizer: every rank steps from the same start; the model becomes the
    start plus the Adasum of the ranks' changes (-lr * grad for SGD), not divided by the size."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = [torch.from_numpy(rank_tensors(r, [8 * 5], seed=11)[0]).reshape(8, 5) for r in range(SIZE)]

    def gradients(x):
        model.zero_grad()
        (model(x) ** 2).mean().backward()
        return {n: p.grad.detach().clone() for n, p in model.named_parameters()}

    lr = 0.1
    per_rank = [gradients(x) for x in data]  # every rank's gradients, computed here from their data
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    opt.zero_grad()
    (model(data[RANK]) ** 2).mean().backward()
    opt.step()
    for name, p in model.named_parameters():
        delta = tree([(-lr * g[name]).numpy().ravel() for g in per_rank])
        np.testing.assert_allclose(p.detach().numpy().ravel(), start[name].numpy().ravel() + delta, rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    with pytest.raises(AssertionError, match="Skipping synchronization"):
        with opt.skip_synchronize():
            pass


def test_pairwise_rule_is_horovods():
    """The reference itself: orthogonal vectors add, parallel ones average."""
    a, b = np.array([1.0, 0.0]), np.array([0.0, 2.0])
    np.testing.assert_allclose(combine(a, b), a + b)
    np.testing.assert_allclose(combine(a, 3 * a), 2 * a)
