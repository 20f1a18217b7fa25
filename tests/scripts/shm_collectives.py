"""Runs allreduce, allgather and reducescatter on every rank, checks the exact results, and prints
how many of relaxlib's shared-memory segments this process maps (SEGMENTS=<n>). Float sums must
equal numpy's sum in rank order bit for bit, alone, in place and fused behind another tensor
(which moves each element to another owning rank), and fused tensors reduced where they lie agree
with each alone.

    shm_collectives.py             the global set
    shm_collectives.py subset      a process set of ranks 0 and 1 (launch 3 ranks)
    shm_collectives.py no-room     files are limited to 1 MiB (RLIMIT_FSIZE), too small for the segment
    shm_collectives.py rank1-on    rank 1 enables shared memory, rank 0 keeps the launch setting
"""

import os
import resource
import sys
from pathlib import Path

import torch

import relaxlib
import relaxlib_torch as hvd
from relaxlib import _core

if sys.argv[1:] == ["rank1-on"] and os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
    os.environ["RELAX_SHM_COLLECTIVES"] = "auto"  # rank 0 keeps "off": rank 0 decides for both
if sys.argv[1:] == ["no-room"]:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    hvd.init()
except relaxlib.InvalidArgumentError as exc:
    print(f"INIT-ERROR {exc}", flush=True)
    sys.exit(0)



def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (so NaN and -0.0 compare exactly)."""
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


subset = len(sys.argv) > 1 and sys.argv[1] == "subset"
process_set = hvd.add_process_set([0, 1]) if subset else hvd.global_process_set
if not subset or hvd.rank() in process_set.ranks:
    ranks = process_set.ranks if subset else list(range(hvd.size()))
    me, n = ranks.index(hvd.rank()), len(ranks)
    for count in (1, 5, 4099, 300_001):  # 300001 int32 = 1.2 MB: several rounds of the default slot
        for dtype in (torch.int32, torch.float16):
            base = torch.arange(count) % 11
            mine = (base + hvd.rank()).to(dtype)
            expected = sum((base + r).to(torch.float64) for r in ranks).to(dtype)
            summed = hvd.allreduce(mine, op=hvd.Sum, name=f"ar.{count}.{dtype}", process_set=process_set)
            assert torch.equal(summed, expected), ("allreduce", count, dtype)
            gathered = hvd.allgather(mine[: count // (me + 1)], name=f"ag.{count}.{dtype}", process_set=process_set)
            assert torch.equal(gathered, torch.cat([(base + r).to(dtype)[: count // (i + 1)]
                                                    for i, r in enumerate(ranks)])), ("allgather", count, dtype)
            if count >= n:
                rows = [count // n + (1 if i < count % n else 0) for i in range(n)]
                block = hvd.reducescatter(mine, op=hvd.Sum, name=f"rs.{count}.{dtype}", process_set=process_set)
                start = sum(rows[:me])
                assert torch.equal(block, expected[start:start + rows[me]]), ("reducescatter", count, dtype)
    for count in (7, 70_001):
        generator = torch.Generator().manual_seed(count)
        values = [torch.randn(count, generator=generator) * 10.0 ** (3 * i) for i in range(hvd.size())]
        expected = values[ranks[0]].numpy().copy()
        for r in ranks[1:]:
            expected = expected + values[r].numpy()  # float32, in rank order
        mine = values[hvd.rank()]
        alone = hvd.allreduce(mine, op=hvd.Sum, name=f"order.{count}", process_set=process_set)
        in_place = hvd.allreduce_(mine.clone(), op=hvd.Sum, name=f"order.inplace.{count}", process_set=process_set)
        _, fused = hvd.grouped_allreduce([torch.ones(count // 3 + 1), mine], op=hvd.Sum, name=f"order.fused.{count}",
                                         process_set=process_set)
        for label, result in (("alone", alone), ("in place", in_place), ("fused", fused)):
            assert (result.numpy().view("int32") == expected.view("int32")).all(), ("rank-order sum", label, count)
    # Fused tensors are reduced where they lie (no fusion buffer): out of place and in place, with
    # pieces that cross rounds (300001 floats span several slots) and reduction tiles, the same
    # bits as each tensor alone.
    generator = torch.Generator().manual_seed(5 + hvd.rank())
    for dtype, op in ((torch.float32, hvd.Sum), (torch.float16, hvd.Average), (torch.int32, hvd.Sum)):
        group = [(torch.randn(size, generator=generator) * 100).to(dtype) for size in (1, 70_001, 3, 300_001, 17)]
        alone = [hvd.allreduce(t, op=op, name=f"apart.alone.{i}.{dtype}", process_set=process_set)
                 for i, t in enumerate(group)]
        fused = hvd.grouped_allreduce(group, op=op, name=f"apart.fused.{dtype}", process_set=process_set)
        in_place = [t.clone() for t in group]
        hvd.grouped_allreduce_(in_place, op=op, name=f"apart.in_place.{dtype}", process_set=process_set)
        base = torch.cat([t.clone() for t in group])  # adjacent views of one buffer
        views = list(base.split([t.numel() for t in group]))
        hvd.grouped_allreduce_(views, op=op, name=f"apart.views.{dtype}", process_set=process_set)
        for label, results in (("fused", fused), ("in place", in_place), ("views", views)):
            assert all(bits(a).equal(bits(b)) for a, b in zip(alone, results)), ("apart", label, dtype)
    # Tensors sharing memory cannot be reduced where they lie (a result would overwrite an input
    # not yet read on 3+ ranks): the same tensor twice, and overlapping views, still give the sum.
    big = (torch.arange(300_001) % 7 + hvd.rank()).to(torch.float32)
    expected = sum((torch.arange(300_001) % 7 + r).to(torch.float32) for r in ranks)
    twice = big.clone()
    hvd.grouped_allreduce_([twice, twice], op=hvd.Sum, name="shared.twice", process_set=process_set)
    assert torch.equal(twice, expected), "the same tensor twice in one group"
    overlapping = big.clone()
    hvd.grouped_allreduce_([overlapping[:200_000], overlapping[100_000:]], op=hvd.Sum, name="shared.overlap",
                           process_set=process_set)
    assert torch.equal(overlapping, expected), "overlapping views in one group"
    # synchronize() runs the rounds of what it waits for on this thread (relax_drive); driving an
    # unknown request does nothing.
    assert _core.lib().relax_drive(987_654_321) == 0
    handles = [hvd.allreduce_async((torch.arange(4099) + hvd.rank()).to(torch.int32), op=hvd.Sum,
                                   name=f"driven.{i}", process_set=process_set) for i in range(3)]
    driven = [hvd.synchronize(h) for h in handles]
    assert all(torch.equal(d, sum(torch.arange(4099) + r for r in ranks).to(torch.int32)) for d in driven)
    # A small all-reduce announced again (by its cache id) and alone carries its data in the
    # negotiation round: the same bits as its first, negotiated, run.
    inline_before = hvd.engine_stats()["inline_allreduces"]
    for count in (3, 1000):
        for dtype in (torch.float32, torch.int32, torch.float16):
            mine = (torch.randn(count, generator=torch.Generator().manual_seed(count + hvd.rank())) * 100).to(dtype)
            for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
                name = f"inline.{count}.{dtype}.{op}"
                first = hvd.allreduce(mine, op=op, name=name, process_set=process_set)
                again = hvd.allreduce(mine, op=op, name=name, process_set=process_set)
                in_place = hvd.allreduce_(mine.clone(), op=op, name=name, process_set=process_set)
                for label, result in (("again", again), ("in place", in_place)):
                    assert bits(result).equal(bits(first)), ("inline", label, count, dtype, op)
    print(f"INLINE={hvd.engine_stats()['inline_allreduces'] - inline_before}", flush=True)
hvd.barrier()  # a rank that shuts down ends the job's collectives: wait for the subset
names = {line.split()[-2] if line.endswith("(deleted)") else line.split()[-1]
         for line in Path("/proc/self/maps").read_text().splitlines() if "/relaxlib-" in line}
# A rank that shuts down ends every rank's engine, which unmaps the segments: nobody may shut down
# before every rank has counted (two clean-clone runs saw a rank count too few).
hvd.barrier()
print(f"SEGMENTS={len(names)}", flush=True)
hvd.shutdown()
