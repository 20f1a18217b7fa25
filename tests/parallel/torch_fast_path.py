"""The fast path on real ranks (cuda_ops/src/engine/engine_fast_path.cc): once the same cycle of
all-reduces has been negotiated a few times, every rank runs it without negotiating. Each test
runs steps of its own tensors until a step ran there, then checks the sums against numpy, and
what happens when some rank leaves the learned schedule: a new request on every rank is simply
negotiated, a rank whose shape or name differs gets the negotiation's clear error on every rank,
and no sum is ever wrong."""

import numpy as np
import pytest
import torch

import relaxlib
import relaxlib_torch as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
SHAPES = ((1000,), (300, 7), (5,))
MAX_STEPS = 250  # after rank groups' earlier modules left it often, it waits for up to 96 equal cycles


def data(prefix, step, index, rank, dtype=torch.float32):
    """Rank ``rank``'s tensor ``index`` at ``step``: the same on every rank that asks (numpy's reference)."""
    seed = (sum(map(ord, prefix)) * 1000 + step * 10 + index) * 16 + rank
    values = np.random.default_rng(seed).standard_normal(SHAPES[index])
    return torch.from_numpy(values).to(dtype)


def expected(prefix, step, index, op, dtype):
    total = sum(data(prefix, step, index, r, torch.float64).numpy() for r in range(SIZE))
    return total / SIZE if op == hvd.Average else total


def run_step(prefix, step, ops=(hvd.Average, hvd.Average, hvd.Sum), dtypes=(torch.float32,) * 3, check=True):
    """Submits the step's three all-reduces in place, waits for all, and checks each sum."""
    tensors = [data(prefix, step, i, RANK, dtypes[i]) for i in range(3)]
    handles = [hvd.allreduce_async_(t, name=f"{prefix}.{i}", op=ops[i]) for i, t in enumerate(tensors)]
    for handle in handles:
        hvd.synchronize(handle)
    if check:
        for i, t in enumerate(tensors):
            tolerance = 1e-12 if dtypes[i] == torch.float64 else 1e-5
            np.testing.assert_allclose(t.double().numpy(), expected(prefix, step, i, ops[i], dtypes[i]),
                                       rtol=tolerance, atol=tolerance)
    return tensors


def steps_until_fast(prefix, **kwargs):
    """Runs checked steps until one ran on the fast path (on every rank alike); returns the next step."""
    for step in range(MAX_STEPS):
        before = hvd.engine_stats()
        run_step(prefix, step, **kwargs)
        after = hvd.engine_stats()
        ran = after["fast_path_buckets"] > before["fast_path_buckets"]
        if ran and after["fast_path_exits"] == before["fast_path_exits"]:
            return step + 1
    raise AssertionError(f"the fast path never took over {prefix}'s steps within {MAX_STEPS} steps: "
                         f"{hvd.engine_stats()}")


def test_steady_steps_run_on_the_fast_path_with_the_right_sums():
    step = steps_until_fast("steady", dtypes=(torch.float32, torch.float64, torch.float32))
    stats = hvd.engine_stats()
    for later in range(step, step + 10):
        run_step("steady", later, dtypes=(torch.float32, torch.float64, torch.float32))
    after = hvd.engine_stats()
    assert after["fast_path_exits"] == stats["fast_path_exits"]
    # Float32 and float64 never share a bucket: at least two per step.
    assert after["fast_path_buckets"] - stats["fast_path_buckets"] >= 20
    assert after["rounds"] == stats["rounds"]  # not one negotiation round in ten steps


def test_a_new_request_on_every_rank_is_negotiated_and_the_fast_path_resumes():
    step = steps_until_fast("resume")
    exits = hvd.engine_stats()["fast_path_exits"]
    tensors = [data("resume", step, i, RANK) for i in range(3)]
    first = hvd.allreduce_async_(tensors[0], name="resume.0", op=hvd.Average)
    metric = hvd.allreduce(torch.tensor([float(RANK)]), name="resume.metric", op=hvd.Sum)  # off the schedule
    rest = [hvd.allreduce_async_(t, name=f"resume.{i}", op=op)
            for i, (t, op) in enumerate(zip(tensors[1:], (hvd.Average, hvd.Sum)), start=1)]
    for handle in [first, *rest]:
        hvd.synchronize(handle)
    assert metric.item() == SIZE * (SIZE - 1) / 2
    for i, op in enumerate((hvd.Average, hvd.Average, hvd.Sum)):
        np.testing.assert_allclose(tensors[i].double().numpy(), expected("resume", step, i, op, torch.float32),
                                   rtol=1e-5, atol=1e-5)
    assert hvd.engine_stats()["fast_path_exits"] == exits + 1
    steps_until_fast("resume")  # learned again, from the steps after


def test_a_rank_that_changes_a_shape_fails_that_tensor_on_every_rank():
    step = steps_until_fast("shape")
    tensors = [data("shape", step, i, RANK) for i in range(3)]
    if RANK == SIZE - 1:
        tensors[1] = torch.ones(3, 7)  # the schedule has (300, 7)
    handles = [hvd.allreduce_async_(t, name=f"shape.{i}", op=op)
               for i, (t, op) in enumerate(zip(tensors, (hvd.Average, hvd.Average, hvd.Sum)))]
    hvd.synchronize(handles[0])
    hvd.synchronize(handles[2])
    with pytest.raises(relaxlib.MismatchError, match=r"shapes for 'shape\.1'"):
        hvd.synchronize(handles[1])
    for i, op in ((0, hvd.Average), (2, hvd.Sum)):
        np.testing.assert_allclose(tensors[i].double().numpy(), expected("shape", step, i, op, torch.float32),
                                   rtol=1e-5, atol=1e-5)
    run_step("shape", step + 1)  # the engine goes on


def test_a_rank_that_submits_another_tensor_in_its_place_fails_on_every_rank():
    """The last rank leaves the order: instead of ``order.1`` it submits ``order.other``. No sum is
    made of the two; every rank's wait ends in the negotiation's deadlock error naming both."""
    step = steps_until_fast("order")
    tensors = [data("order", step, i, RANK) for i in range(3)]
    names = ["order.0", "order.other" if RANK == SIZE - 1 else "order.1", "order.2"]
    handles = [hvd.allreduce_async_(t, name=n, op=hvd.Sum) for t, n in zip(tensors, names)]
    hvd.synchronize(handles[0])
    failed = 0
    for handle in handles[1:]:
        try:
            hvd.synchronize(handle)
        except relaxlib.RelaxError as exc:
            failed += 1
            assert "order.1" in str(exc) or "order.other" in str(exc) or "order.2" in str(exc), str(exc)
    assert failed >= 1
    np.testing.assert_allclose(tensors[0].double().numpy(), expected("order", step, 0, hvd.Sum, torch.float32),
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="order.after"), torch.full((3,), float(SIZE)))
