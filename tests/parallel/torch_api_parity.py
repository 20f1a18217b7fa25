"""horovod.torch parity on real ranks: process sets, grouped ops, join, timeline, SyncBatchNorm,
sparse gradients and introspection. Launched with 2 and 4 ranks."""

import json
import os
import re
import warnings

import pytest
import torch

import relaxlib
import relaxlib_torch as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


# ---- process sets ----------------------------------------------------------------------------

def test_process_set_collectives_involve_only_members():
    evens = hvd.add_process_set([r for r in range(SIZE) if r % 2 == 0])
    odds = hvd.add_process_set(hvd.ProcessSet([r for r in range(SIZE) if r % 2 == 1]))
    try:
        mine, other = (evens, odds) if RANK % 2 == 0 else (odds, evens)
        assert mine.included() and not other.included()
        assert mine.size() == len(mine.ranks) and mine.rank() == mine.ranks.index(RANK)
        total = hvd.allreduce(torch.tensor([float(RANK)]), op=hvd.Sum, process_set=mine)
        assert total.item() == sum(mine.ranks)
        gathered = hvd.allgather(torch.tensor([RANK]), process_set=mine)
        assert gathered.tolist() == mine.ranks
        root = mine.ranks[-1]  # roots are world ranks
        assert hvd.broadcast(torch.tensor([RANK]), root_rank=root, process_set=mine).item() == root
        scattered = hvd.reducescatter(torch.ones(2 * mine.size(), 3), op=hvd.Sum, process_set=mine)
        assert torch.equal(scattered, torch.full((2, 3), float(mine.size())))
        hvd.barrier(process_set=mine)
        with pytest.raises(ValueError, match="not a member of process set"):
            hvd.allreduce(torch.ones(1), process_set=other)
        with pytest.raises(ValueError, match="root rank"):
            hvd.broadcast(torch.ones(1), root_rank=other.ranks[0], process_set=mine)
    finally:
        hvd.remove_process_set(odds)
        hvd.remove_process_set(evens)


def test_unnamed_operations_are_numbered_per_process_set():
    """Members of sets of different sizes run different numbers of unnamed operations in them (as
    a loop over each set's roots does); unnamed operations of the global set must still match."""
    evens = hvd.add_process_set([r for r in range(SIZE) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(SIZE) if r % 2 == 1]) if SIZE > 1 else None
    try:
        mine = evens if RANK % 2 == 0 else odds
        for root in mine.ranks:  # len(evens) != len(odds) for an odd number of ranks
            hvd.broadcast(torch.tensor([RANK]), root_rank=root, process_set=mine)
            hvd.allreduce(torch.ones(1), process_set=mine)
        assert hvd.broadcast(torch.tensor([RANK]), root_rank=0).item() == 0
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == SIZE
    finally:
        if odds is not None:
            hvd.remove_process_set(odds)
        hvd.remove_process_set(evens)


def test_overlapping_sets_run_concurrently_without_deadlock():
    low = hvd.add_process_set(list(range(max(1, SIZE - 1))))
    high = hvd.add_process_set(list(range(1, SIZE)) or [0])
    try:
        handles = []
        for i in range(20):
            for ps in (low, high):
                if ps.included():
                    handles.append((ps, hvd.allreduce_async(torch.ones(4) * i, op=hvd.Sum, name=f"ov.{i}",
                                                            process_set=ps)))
            handles.append((hvd.global_process_set, hvd.allreduce_async(torch.ones(2), op=hvd.Sum,
                                                                         name=f"ov.global.{i}")))
        for ps, h in handles:
            out = hvd.synchronize(h)
            assert torch.allclose(out, out.new_full(out.shape, out[0].item())) and out[0] >= 0
            assert out[0].item() % ps.size() == 0
    finally:
        hvd.remove_process_set(high)
        hvd.remove_process_set(low)


def test_process_set_errors():
    everyone = list(range(SIZE))
    with pytest.raises(ValueError, match="already exists|global"):
        hvd.add_process_set(everyone if SIZE > 1 else [0])  # same ranks as an existing set
    with pytest.raises(ValueError, match="cannot be removed"):
        hvd.remove_process_set(hvd.global_process_set)
    single = hvd.add_process_set([0])
    with pytest.raises(ValueError, match="duplicate"):
        hvd.add_process_set(single)
    hvd.remove_process_set(single)
    with pytest.raises(ValueError, match="not been registered"):
        hvd.allreduce(torch.ones(1), process_set=single)
    with pytest.raises(relaxlib.MismatchError, match="process set ranks"):
        hvd.add_process_set([RANK])  # every rank names a different set
    with pytest.raises(ValueError, match="out of range"):
        hvd.add_process_set([SIZE + 5])


def test_distributed_optimizer_on_a_process_set():
    members = hvd.add_process_set(list(range(0, SIZE, 2)))
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                       named_parameters=model.named_parameters(), process_set=members)
        model(torch.full((1, 3), float(RANK + 1))).sum().backward()
        opt.step()
        if members.included():
            expected = -sum(r + 1 for r in members.ranks) / members.size()
        else:
            expected = -float(RANK + 1)  # not a member: its own gradient only
        torch.manual_seed(0)
        reference = torch.nn.Linear(3, 1)
        assert torch.allclose(model.weight - reference.weight, torch.full((1, 3), expected))
    finally:
        hvd.remove_process_set(members)


# ---- grouped allgather / reducescatter ---------------------------------------------------------

def test_grouped_allgather_and_reducescatter():
    parts = [torch.full((RANK + 1, 2), float(RANK)), torch.arange(3.0) + RANK]
    gathered = hvd.grouped_allgather(parts)
    assert isinstance(gathered, tuple)
    assert torch.equal(gathered[0], torch.cat([torch.full((r + 1, 2), float(r)) for r in range(SIZE)]))
    assert torch.equal(gathered[1], torch.cat([torch.arange(3.0) + r for r in range(SIZE)]))
    scattered = hvd.grouped_reducescatter([torch.ones(SIZE, 2), torch.ones(SIZE * 3)], op=hvd.Sum)
    assert isinstance(scattered, list)
    assert torch.equal(scattered[0], torch.full((1, 2), float(SIZE)))
    assert torch.equal(scattered[1], torch.full((3,), float(SIZE)))


# ---- join --------------------------------------------------------------------------------------

def test_join_with_uneven_steps_contributes_zeros_and_nothing():
    """Joined ranks contribute zeros to allreduce; allgather and broadcast fail while a rank has
    joined, as in Horovod, unless RELAX_JOINED_RANKS=contribute-nothing (no rows, and they receive)."""
    gather_nothing = os.environ.get("RELAX_JOINED_RANKS") == "contribute-nothing"
    for step in range(RANK + 1):  # rank r runs r+1 steps, then joins
        active = [r for r in range(SIZE) if r + 1 > step]
        total = hvd.allreduce(torch.ones(3), op=hvd.Sum, name=f"join.ar.{step}")
        assert torch.equal(total, torch.full((3,), float(len(active))))
        if gather_nothing:
            gathered = hvd.allgather(torch.tensor([RANK]), name=f"join.ag.{step}")
            assert gathered.tolist() == active
        elif len(active) < SIZE:
            joined = [r for r in range(SIZE) if r not in active]
            with pytest.raises(relaxlib.InvalidArgumentError, match=re.escape(f"ranks {joined} have joined")):
                hvd.allgather(torch.tensor([RANK]), name=f"join.ag.{step}")
            with pytest.raises(relaxlib.InvalidArgumentError, match="have joined"):
                hvd.broadcast(torch.tensor([RANK]), root_rank=SIZE - 1, name=f"join.bc.{step}")
    assert hvd.join() == SIZE - 1
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(SIZE)))


def test_unnamed_operations_match_again_after_join():
    """Rank r runs r+1 unnamed allreduces before joining, so the joined ranks never name the
    others' later ones; after join() the next unnamed operations must still match."""
    for _ in range(RANK + 1):
        hvd.allreduce(torch.ones(2))
    hvd.join()
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(SIZE)))
    assert hvd.allgather(torch.tensor([RANK])).tolist() == list(range(SIZE))


# ---- elastic state -----------------------------------------------------------------------------

def test_elastic_state_syncs_from_rank_0_commits_and_restores():
    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.fill_(float(RANK + 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(model, optimizer, epoch=RANK + 10)

    @hvd.elastic.run
    def train(state):
        assert torch.equal(state.model.weight, torch.ones(1, 2)) and state.epoch == 10  # rank 0's
        state.model(torch.ones(3, 2)).sum().backward()
        state.optimizer.step()
        state.epoch = 11
        state.commit()
        trained = state.model.weight.detach().clone()
        with torch.no_grad():
            state.model.weight.zero_()
        state.epoch = 99
        state.restore()
        assert torch.equal(state.model.weight, trained) and state.epoch == 11
        return "done"

    assert train(state) == "done"
    state.check_host_updates()  # a fixed launch: never interrupted


# ---- timeline ----------------------------------------------------------------------------------

def test_timeline_records_every_submitted_tensor(tmp_path_factory):
    path = hvd.broadcast_object(str(tmp_path_factory.mktemp("timeline") / "timeline.json"), root_rank=0)
    hvd.start_timeline(path, mark_cycles=True)
    names = [f"timeline.t{i}" for i in range(5)]
    for name in names:
        hvd.allreduce(torch.ones(10), name=name)
    hvd.allgather(torch.ones(2), name="timeline.gathered")
    hvd.stop_timeline()
    hvd.barrier()
    if RANK == 0:
        events = json.load(open(path))["traceEvents"]
        rows = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        phases = {(rows.get(e.get("tid")), e["name"]) for e in events if e.get("ph") == "X"}
        for name in names:
            assert (name, "NEGOTIATE_ALLREDUCE") in phases and (name, "ALLREDUCE") in phases, name
        assert ("timeline.gathered", "ALLGATHER") in phases
        assert any(e.get("name") == "CYCLE_START" for e in events)
        os.remove(path)


def test_timeline_with_rank_in_the_path_is_written_by_every_rank(tmp_path_factory):
    folder = hvd.broadcast_object(str(tmp_path_factory.mktemp("timeline_ranks")), root_rank=0)
    hvd.start_timeline(os.path.join(folder, "timeline.{rank}.json"))
    hvd.allreduce(torch.ones(10), name="timeline.per_rank")
    hvd.stop_timeline()
    hvd.barrier()
    events = json.load(open(os.path.join(folder, f"timeline.{RANK}.json")))["traceEvents"]
    assert {e["pid"] for e in events} == {RANK}
    assert any(e["name"] == "process_name" and f"rank {RANK}" in e["args"]["name"] for e in events)
    rows = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    phases = {(rows.get(e.get("tid")), e["name"]) for e in events if e.get("ph") == "X"}
    assert {("timeline.per_rank", "NEGOTIATE_ALLREDUCE"), ("timeline.per_rank", "ALLREDUCE")} <= phases
    assert sorted(os.listdir(folder)) == [f"timeline.{r}.json" for r in range(SIZE)]
    hvd.barrier()


# ---- SyncBatchNorm -----------------------------------------------------------------------------

def test_sync_batch_norm_matches_batch_norm_on_the_concatenated_batch():
    torch.manual_seed(7)
    full = torch.randn(4 * SIZE, 3, 5, 5, dtype=torch.float64)
    upstream = torch.randn_like(full)
    reference = torch.nn.BatchNorm2d(3).double()
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5)
        reference.bias.uniform_(-0.5, 0.5)
    sync = hvd.SyncBatchNorm(3).double()
    sync.load_state_dict(reference.state_dict())

    x_full = full.clone().requires_grad_(True)
    reference_out = reference(x_full)
    (reference_out * upstream).sum().backward()
    mine = slice(4 * RANK, 4 * (RANK + 1))
    x = full[mine].clone().requires_grad_(True)
    out = sync(x)
    (out * upstream[mine]).sum().backward()

    torch.testing.assert_close(out, reference_out[mine].detach(), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(x.grad, x_full.grad[mine], rtol=1e-9, atol=1e-9)
    weight_grad = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
    torch.testing.assert_close(weight_grad, reference.weight.grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(sync.running_mean, reference.running_mean, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(sync.running_var, reference.running_var, rtol=1e-9, atol=1e-9)
    sync.eval()
    torch.testing.assert_close(sync(full[mine]), torch.nn.functional.batch_norm(
        full[mine], reference.running_mean, reference.running_var, reference.weight, reference.bias, False))
    with pytest.raises(ValueError, match="at least 2D"):
        sync(torch.ones(3))


# ---- sparse gradients --------------------------------------------------------------------------

def embedding_training(sparse: bool, sparse_as_dense: bool = False) -> torch.Tensor:
    torch.manual_seed(3)
    model = torch.nn.Embedding(20, 4, sparse=sparse)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), sparse_as_dense=sparse_as_dense)
    for step in range(3):
        ids = torch.tensor([(RANK * 3 + step) % 20, (RANK + 7 * step) % 20, 5])
        opt.zero_grad()
        (model(ids) ** 2).sum().backward()
        opt.step()
    return model.weight.detach().clone()


def test_sparse_embedding_training_matches_dense():
    dense = embedding_training(sparse=False)
    torch.testing.assert_close(embedding_training(sparse=True), dense)
    torch.testing.assert_close(embedding_training(sparse=True, sparse_as_dense=True), dense)


def test_sparse_allreduce_async_sums_and_averages():
    t = torch.sparse_coo_tensor(torch.tensor([[RANK % 3, 4]]), torch.tensor([1.0, float(RANK)]), (6,))
    summed = hvd.synchronize(hvd.sparse_allreduce_async(t, name="sp", op=hvd.Sum))
    expected = torch.zeros(6)
    for r in range(SIZE):
        expected[r % 3] += 1.0
        expected[4] += float(r)
    torch.testing.assert_close(summed.to_dense(), expected)
    averaged = hvd.sparse_allreduce_async(t, name="sp.avg")()
    torch.testing.assert_close(averaged.to_dense(), expected / SIZE)


# ---- introspection and small rules -------------------------------------------------------------

def test_introspection_and_aliases():
    assert hvd.mpi_built() and hvd.mpi_enabled() and not hvd.gloo_built() and not hvd.gloo_enabled()
    assert not hvd.nccl_built() and not hvd.ccl_built() and not hvd.cuda_built() and not hvd.rocm_built()
    assert isinstance(hvd.mpi_threads_supported(), bool)
    assert hvd.HorovodInternalError is relaxlib.RelaxError and issubclass(hvd.HorovodInternalError, RuntimeError)
    assert hvd.is_homogeneous()
    with pytest.raises(ValueError, match="Adasum reduction supports float16, float32 and float64 tensors, not int64"):
        hvd.allreduce(torch.ones(1, dtype=torch.int64), op=hvd.Adasum)


def test_average_argument_is_deprecated_but_works():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = hvd.allreduce(torch.full((2,), float(RANK)), average=False)
    assert torch.equal(out, torch.full((2,), float(sum(range(SIZE)))))
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


def test_integer_average_truncates_like_horovod():
    out = hvd.allreduce(torch.tensor([RANK * 2 + 1, -(RANK * 2 + 1)], dtype=torch.int32), op=hvd.Average)
    total = sum(r * 2 + 1 for r in range(SIZE))
    assert out.tolist() == [int(total / SIZE), -int(total / SIZE)]


# ---- Horovod's observable details ---------------------------------------------------------------

def test_broadcast_optimizer_state_initializes_an_empty_state_like_horovod():
    """No state yet: a local zero-gradient step creates it (the zero gradients stay), then the
    root's state reaches every rank."""
    model = torch.nn.Linear(3, 2)
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    optimizer = torch.optim.SGD(list(model.parameters()) + [frozen], lr=0.1, momentum=0.9)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in model.parameters())
    assert frozen.grad is None
    assert all("momentum_buffer" in optimizer.state[p] for p in model.parameters())


def test_alltoall_with_float_splits_raises_value_error():
    with pytest.raises(ValueError, match="splits must be integers"):
        hvd.alltoall(torch.zeros(SIZE), torch.ones(SIZE, dtype=torch.float32))


def test_step_after_synchronize_warns_with_horovods_words():
    model = torch.nn.Linear(1, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    model(torch.ones(1, 1)).sum().backward()
    optimizer.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizer.step()
    assert any("optimizer.step() called without optimizer.skip_synchronize()" in str(w.message) for w in caught)
