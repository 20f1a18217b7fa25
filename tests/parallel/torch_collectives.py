"""Collectives on real ranks against numpy: every rank runs every test and checks its own result.

Launched by tests/test_torch_parallel.py under mpirun with 2, 3 and 4 ranks.
"""

import threading
import time
import zlib

import numpy as np
import pytest
import torch

import relaxlib_torch as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint16, torch.uint8]  # every dtype Horovod has, bool aside
UNSIGNED = (torch.uint8, torch.uint16)
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
SHAPES = [(0,), (1,), (SIZE - 1 if SIZE > 1 else 2,), (17,), (1031,), (3, 5, 7)]


def rank_data(rank: int, shape, dtype: torch.dtype, seed: int, small: bool = False) -> torch.Tensor:
    """The tensor rank ``rank`` contributes; every rank can recompute every other rank's data."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        values = torch.rand(shape, generator=gen, dtype=torch.float64)
        values = 0.5 + values if small else values * 20 - 10
    else:
        low, high = (1, 3) if small else ((0, 40) if dtype in UNSIGNED else (-20, 20))
        values = torch.randint(low, high, shape, generator=gen, dtype=torch.int64)
    return values.to(dtype)


def reference(dtype, op, tensors):
    """Expected allreduce result computed locally from every rank's input."""
    if dtype == torch.bfloat16 or dtype == torch.float16:
        acc = tensors[0].to(torch.float64)
        for t in tensors[1:]:
            acc = {hvd.Sum: torch.add, hvd.Average: torch.add, hvd.Min: torch.minimum, hvd.Max: torch.maximum,
                   hvd.Product: torch.mul}[op](acc, t.to(torch.float64))
        if op == hvd.Average:
            acc = acc / SIZE
        return acc.to(dtype)
    arrays = [t.numpy() for t in tensors]
    reduce = {hvd.Sum: np.add, hvd.Average: np.add, hvd.Min: np.minimum, hvd.Max: np.maximum,
              hvd.Product: np.multiply}[op]
    acc = arrays[0].copy()
    for a in arrays[1:]:
        acc = reduce(acc, a, dtype=acc.dtype)
    if op == hvd.Average:
        if np.issubdtype(acc.dtype, np.integer):
            acc = np.trunc(acc.astype(np.float64) * (1.0 / SIZE)).astype(acc.dtype)
        else:
            acc = acc / SIZE
    return torch.from_numpy(np.asarray(acc))


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and values (uint16 compared in numpy: torch has no equal() for it)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return np.array_equal(a.numpy(), b.numpy()) if a.dtype == torch.uint16 else torch.equal(a, b)


def assert_matches(result: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert result.dtype == dtype and result.shape == expected.shape
    if dtype.is_floating_point:
        tol = {torch.float16: 2e-2, torch.bfloat16: 1e-1}.get(dtype, 1e-5)
        torch.testing.assert_close(result.to(torch.float64), expected.to(torch.float64), rtol=tol, atol=tol)
    else:
        assert same(result, expected), f"{result} != {expected}"


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op_name", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_allreduce_matches_numpy(dtype, op_name, shape):
    op = OPS[op_name]
    seed = zlib.crc32(f"{dtype}{op_name}{shape}".encode()) % 10_000  # same on every rank
    small = op_name == "product"
    tensors = [rank_data(r, shape, dtype, seed, small) for r in range(SIZE)]
    result = hvd.allreduce(tensors[RANK], op=op, name=f"ar.{dtype}.{op_name}.{shape}")
    assert_matches(result, reference(dtype, op, tensors), dtype)


def test_allreduce_does_not_modify_input_and_inplace_does():
    x = torch.full((5,), float(RANK + 1))
    before = x.clone()
    out = hvd.allreduce(x, op=hvd.Sum)
    assert torch.equal(x, before)
    expected = sum(range(1, SIZE + 1))
    assert torch.equal(out, torch.full((5,), float(expected)))
    returned = hvd.allreduce_(x, op=hvd.Sum)
    assert returned is x and torch.equal(x, torch.full((5,), float(expected)))


def test_non_contiguous_inputs_and_inplace_outputs():
    base = torch.arange(12.0).reshape(3, 4) * (RANK + 1)
    view = base.t()  # non-contiguous
    assert not view.is_contiguous()
    out = hvd.allreduce(view, op=hvd.Sum)
    total = sum(range(1, SIZE + 1))
    assert torch.equal(out, torch.arange(12.0).reshape(3, 4).t() * total)
    hvd.allreduce_(view, op=hvd.Sum)
    assert torch.equal(base, torch.arange(12.0).reshape(3, 4) * total)
    # Named calls take the binding's fast path, which hands non-contiguous tensors back.
    base = torch.arange(12.0).reshape(3, 4) * (RANK + 1)
    view = base.t()
    named = hvd.allreduce(view, op=hvd.Sum, name="noncontiguous")
    assert torch.equal(named, torch.arange(12.0).reshape(3, 4).t() * total)
    assert hvd.allreduce_(view, op=hvd.Sum, name="noncontiguous_") is view
    assert torch.equal(base, torch.arange(12.0).reshape(3, 4) * total)


def test_the_direct_binding_names_its_signature_when_called_wrongly():
    from relaxlib_torch import mpi_ops
    with pytest.raises(TypeError, match=r"allreduce_sync\(input, output, name, op"):
        mpi_ops._allreduce_sync_direct(torch.ones(2), torch.ones(2), "x")
    with pytest.raises(TypeError):
        mpi_ops._allreduce_sync_direct(torch.ones(2), torch.ones(2), "x", "sum", 1.0, 1.0, 0)
    with pytest.raises(TypeError, match="allreduce_sync"):
        mpi_ops._allreduce_sync_direct([1.0], torch.ones(2), "x", 1, 1.0, 1.0, 0)


def test_async_handles_poll_and_synchronize_many_small_tensors():
    handles = [hvd.allreduce_async(torch.full((i % 7 + 1,), float(RANK + i)), name=f"many.{i}", op=hvd.Sum)
               for i in range(300)]
    results = [hvd.synchronize(h) for h in handles]
    for i, r in enumerate(results):
        assert torch.equal(r, torch.full((i % 7 + 1,), float(sum(range(SIZE)) + SIZE * i)))
    h = hvd.allreduce_async(torch.ones(3), name="polled")
    while not hvd.poll(h):
        pass
    assert torch.equal(hvd.synchronize(h), torch.ones(3))
    with pytest.raises(ValueError):
        hvd.synchronize(h)


def test_inplace_allreduce_run_by_callers_beside_async_ops_and_a_late_peer():
    """allreduce_ lets the calling thread run the rounds itself while the engine thread is idle.
    Threads driving at once, async requests completing in their rounds, and a peer that arrives
    late (the driver hands over to the engine thread) must all give the exact sums."""
    total = sum(range(1, SIZE + 1))
    errors = []

    def driver(thread: int):
        try:
            for i in range(60):
                x = torch.full((1 + (i * 37) % 5000,), float((RANK + 1) * (thread + 1)))
                hvd.allreduce_(x, op=hvd.Sum, name=f"driven.{thread}.{i}")
                assert torch.equal(x, torch.full_like(x, float(total * (thread + 1)))), (thread, i)
        except Exception as exc:  # surfaced below: a failing thread must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=driver, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    handles = [hvd.allreduce_async(torch.full((3,), float(RANK + i)), name=f"beside.{i}", op=hvd.Sum)
               for i in range(100)]
    for t in threads:
        t.join()
    assert not errors, errors
    for i, h in enumerate(handles):
        assert torch.equal(hvd.synchronize(h), torch.full((3,), float(sum(range(SIZE)) + SIZE * i)))
    for late_rank in range(SIZE):
        if RANK == late_rank:
            time.sleep(0.05)
        x = torch.full((1000,), float(RANK + 1))
        hvd.allreduce_(x, op=hvd.Sum, name=f"late.{late_rank}")
        assert torch.equal(x, torch.full_like(x, float(total)))


def test_synchronous_collectives_let_other_python_threads_run():
    """allreduce_, allgather and reducescatter wait for a late peer without holding the GIL: a
    Python thread keeps running all through the wait."""
    for name, call in [("allreduce", lambda: hvd.allreduce_(torch.ones(4), name="gil.allreduce")),
                       ("allgather", lambda: hvd.allgather(torch.ones(2), name="gil.allgather")),
                       ("reducescatter", lambda: hvd.reducescatter(torch.ones(2 * SIZE), name="gil.reducescatter"))]:
        stamps: list[float] = []
        stop = threading.Event()

        def tick(stamps: list[float], stop: threading.Event):
            while not stop.is_set():
                stamps.append(time.perf_counter())
                time.sleep(0.001)

        hvd.barrier()
        ticker = threading.Thread(target=tick, args=(stamps, stop))
        ticker.start()
        if RANK != 0:
            time.sleep(0.5)  # rank 0 waits inside the collective meanwhile
        start = time.perf_counter()
        call()
        stop.set()
        ticker.join()
        if RANK == 0:
            during = [t for t in stamps if start + 0.1 < t < start + 0.3]
            assert len(during) >= 10, f"{name}: a Python thread ran {len(during)} times in 0.2 s of waiting"


def test_large_tensor_uses_ring_path_correctly():
    n = 5_000_011  # > 16 MiB MPI threshold in float64, prime
    x = torch.arange(n, dtype=torch.float64) * (RANK + 1)
    out = hvd.allreduce(x, op=hvd.Sum, name="large")
    total = sum(range(1, SIZE + 1))
    assert torch.equal(out, torch.arange(n, dtype=torch.float64) * total)
    half = hvd.allreduce(torch.ones(n, dtype=torch.float16), op=hvd.Average, name="large.half")
    assert torch.equal(half, torch.ones(n, dtype=torch.float16))


def test_prescale_and_postscale():
    x = torch.full((4,), float(RANK + 1), dtype=torch.float64)
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert torch.allclose(out, torch.full((4,), 0.5 * 3.0 * sum(range(1, SIZE + 1)), dtype=torch.float64))


def test_grouped_allreduce_in_and_out_of_place():
    tensors = [torch.full((i + 1,), float(RANK)) for i in range(5)]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Sum)
    for i, o in enumerate(outs):
        assert torch.equal(o, torch.full((i + 1,), float(sum(range(SIZE)))))
    hvd.grouped_allreduce_(tensors, op=hvd.Average)
    for i, t in enumerate(tensors):
        assert torch.allclose(t, torch.full((i + 1,), sum(range(SIZE)) / SIZE))


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool], ids=str)
def test_allgather_with_different_first_dimensions(dtype):
    rows = [r % 3 for r in range(SIZE)]  # includes ranks with zero rows
    parts = [rank_data(r, (rows[r], 2, 3), dtype if dtype != torch.bool else torch.int32, 5) for r in range(SIZE)]
    if dtype == torch.bool:
        parts = [p > 0 for p in parts]
    out = hvd.allgather(parts[RANK], name=f"ag.{dtype}")
    assert out.dtype == dtype
    assert same(out, torch.cat(parts))


GRADIENTS = ["horovod", "exact"]  # RELAX_COLLECTIVE_GRADIENTS: Horovod's formulas (default) or exact


@pytest.mark.parametrize("gradients", GRADIENTS)
def test_allgather_one_dimensional_and_autograd(gradients, monkeypatch):
    monkeypatch.setenv("RELAX_COLLECTIVE_GRADIENTS", gradients)
    x = torch.full((RANK + 1,), float(RANK), requires_grad=True)
    y = hvd.allgather(x)
    assert y.shape == (sum(r + 1 for r in range(SIZE)),)
    (y * 2).sum().backward()
    # Horovod: the incoming gradients averaged over ranks; exact: summed
    assert torch.equal(x.grad, torch.full((RANK + 1,), 2.0 * (SIZE if gradients == "exact" else 1)))


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool], ids=str)
def test_broadcast_from_every_root(dtype):
    for root in range(SIZE):
        data = rank_data(root, (4, 3), dtype if dtype != torch.bool else torch.int32, 11)
        if dtype == torch.bool:
            data = data > 0
        mine = data if RANK == root else torch.zeros_like(data)
        out = hvd.broadcast(mine, root_rank=root, name=f"bc.{dtype}.{root}")
        assert same(out, data)
        hvd.broadcast_(mine, root_rank=root, name=f"bc_.{dtype}.{root}")
        assert same(mine, data)


@pytest.mark.parametrize("gradients", GRADIENTS)
def test_broadcast_autograd_routes_gradient_to_root(gradients, monkeypatch):
    monkeypatch.setenv("RELAX_COLLECTIVE_GRADIENTS", gradients)
    x = torch.ones(3, requires_grad=True)
    hvd.broadcast(x, root_rank=0).sum().backward()
    expected = (float(SIZE) if gradients == "exact" else 1.0) if RANK == 0 else 0.0
    assert torch.equal(x.grad, torch.full((3,), expected))


def test_allreduce_autograd():
    x = torch.full((2,), float(RANK), requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum) * 3).sum().backward()
    assert torch.equal(x.grad, torch.full((2,), 3.0 * SIZE))


def test_results_record_no_autograd_graph_without_grad():
    """Outside autograd (no_grad, or inputs without requires_grad) the differentiable collectives
    take the direct path: same results, no graph."""
    x = torch.full((2 * SIZE,), float(RANK + 1), requires_grad=True)
    total = float(sum(range(1, SIZE + 1)))
    with torch.no_grad():
        summed = hvd.allreduce(x, op=hvd.Sum, name="nograd.allreduce")
        gathered = hvd.allgather(x, name="nograd.allgather")
        block = hvd.reducescatter(x, op=hvd.Sum, name="nograd.reducescatter")
    for out in (summed, gathered, block):
        assert out.grad_fn is None and not out.requires_grad
    assert torch.equal(summed, torch.full((2 * SIZE,), total))
    assert torch.equal(gathered, torch.cat([torch.full((2 * SIZE,), float(r + 1)) for r in range(SIZE)]))
    assert torch.equal(block, torch.full((2,), total))
    assert hvd.allreduce(x, op=hvd.Sum, name="grad.allreduce").grad_fn is not None


@pytest.mark.parametrize("rows", [0, 1, SIZE - 1, SIZE + 1, 2 * SIZE + 3])
@pytest.mark.parametrize("op_name", ["sum", "average"])
def test_reducescatter_blocks(rows, op_name):
    op = OPS[op_name]
    tensors = [rank_data(r, (rows, 3), torch.float64, 17) for r in range(SIZE)]
    out = hvd.reducescatter(tensors[RANK], op=op, name=f"rs.{rows}.{op_name}")
    full = reference(torch.float64, op, tensors)
    counts = [rows // SIZE + (1 if r < rows % SIZE else 0) for r in range(SIZE)]
    start = sum(counts[:RANK])
    torch.testing.assert_close(out, full[start:start + counts[RANK]])


@pytest.mark.parametrize("gradients", GRADIENTS)
@pytest.mark.parametrize("op_name", ["sum", "average"])
def test_reducescatter_autograd_is_allgather(gradients, op_name, monkeypatch):
    monkeypatch.setenv("RELAX_COLLECTIVE_GRADIENTS", gradients)
    x = torch.ones(SIZE * 2, 2, requires_grad=True)
    hvd.reducescatter(x, op=OPS[op_name], postscale_factor=3.0).sum().backward()
    # Horovod: all-gathered gradients times size for Sum, as they are for Average; exact: the
    # derivative of the (summed or averaged) reduction
    exact = 3.0 if op_name == "sum" else 3.0 / SIZE
    assert torch.allclose(x.grad, torch.full((SIZE * 2, 2), exact if gradients == "exact" else exact * SIZE))


def test_alltoall_with_and_without_splits():
    splits = [(RANK + j) % 3 for j in range(SIZE)]
    data = torch.arange(sum(splits) * 2, dtype=torch.float32).reshape(-1, 2) + 100 * RANK
    out, received = hvd.alltoall(data, splits=splits, name="a2a")
    expected_parts, expected_splits = [], []
    for src in range(SIZE):
        src_splits = [(src + j) % 3 for j in range(SIZE)]
        src_data = torch.arange(sum(src_splits) * 2, dtype=torch.float32).reshape(-1, 2) + 100 * src
        offset = sum(src_splits[:RANK])
        expected_parts.append(src_data[offset:offset + src_splits[RANK]])
        expected_splits.append(src_splits[RANK])
    assert torch.equal(out, torch.cat(expected_parts))
    assert received.tolist() == expected_splits
    even = hvd.alltoall(torch.full((SIZE * 2,), float(RANK)), name="a2a.even")
    assert torch.equal(even, torch.arange(SIZE, dtype=torch.float32).repeat_interleave(2))


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool], ids=str)
def test_reducescatter_and_alltoall_take_every_dtype(dtype):
    """Round trips of the collectives the per-dtype tests above do not cover."""
    def data(rank, rows):
        values = rank_data(rank, (rows, 2), dtype if dtype != torch.bool else torch.int32, 23, small=True)
        return values > 1 if dtype == torch.bool else values
    parts = [data(r, SIZE) for r in range(SIZE)]
    expected = torch.cat([p[RANK:RANK + 1] for p in parts])  # row j of rank r goes to rank j
    assert same(hvd.alltoall(parts[RANK], name=f"a2a.{dtype}"), expected)
    if dtype == torch.bool:
        with pytest.raises(Exception, match="bool"):
            hvd.reducescatter(parts[RANK], op=hvd.Sum, name=f"rs.{dtype}")
        return
    full = reference(dtype, hvd.Sum, parts)
    assert_matches(hvd.reducescatter(parts[RANK], op=hvd.Sum, name=f"rs.{dtype}"), full[RANK:RANK + 1], dtype)


def test_barrier_and_join_return():
    hvd.barrier()
    assert hvd.join() in range(SIZE)


def test_broadcast_parameters_and_optimizer_state():
    torch.manual_seed(RANK)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (RANK + 1))
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0))
    assert all(torch.equal(gathered[0], gathered[r]) for r in range(SIZE))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    exp_avg = torch.cat([opt.state[p]["exp_avg"].flatten() for p in model.parameters()])
    gathered_state = hvd.allgather(exp_avg.unsqueeze(0))
    assert all(torch.equal(gathered_state[0], gathered_state[r]) for r in range(SIZE))


def test_broadcast_and_allgather_objects():
    obj = {"rank": RANK, "payload": list(range(RANK + 1))} if RANK == 1 % SIZE else None
    got = hvd.broadcast_object(obj, root_rank=1 % SIZE)
    assert got == {"rank": 1 % SIZE, "payload": list(range(1 % SIZE + 1))}
    assert hvd.allgather_object(("r", RANK)) == [("r", r) for r in range(SIZE)]


def test_topology_queries():
    assert hvd.size() == SIZE and 0 <= hvd.rank() < SIZE
    assert hvd.local_size() * hvd.cross_size() == SIZE
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert hvd.is_initialized() and hvd.mpi_enabled() and hvd.mpi_built()
    assert not hvd.nccl_built() and not hvd.gloo_enabled()
