"""Ring collectives checked against numpy, and identical on every rank, whichever transport the
ring's steps use (run with RELAX_LOCAL_SIZE=1 for ranks on separate nodes, RELAX_TCP_RING to
choose). Prints ``TCP-RING=<connected>`` from relaxlib's debug log line being present or not
(the caller reads the log: run with RELAX_LOG_LEVEL=debug)."""

import os

import numpy as np
import torch
from rank_reports import wait_for_the_others

import relaxlib_torch as hvd
from relaxlib.errors import RelaxError


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (so NaN and -0.0 compare exactly)."""
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


try:
    hvd.init()
except RelaxError as error:  # a bad setting: every rank names it before any exits
    print(f"INIT-FAILED {type(error).__name__}: {error}", flush=True)
    wait_for_the_others(int(os.environ["OMPI_COMM_WORLD_RANK"]))
    raise SystemExit(1) from None
rank, size = hvd.rank(), hvd.size()
# sizes around the ring's blocks and the 256 KiB receive piece, odd counts for uneven blocks
for count in (1, 7, 65_537, 300_001, 2_000_003):
    for dtype in (torch.float32, torch.float64, torch.int64, torch.float16):
        inputs = [torch.from_numpy(np.random.default_rng(count + r).standard_normal(count) * 50).to(dtype)
                  for r in range(size)]
        mine = inputs[rank]
        summed = hvd.allreduce(mine, op=hvd.Sum, name=f"sum.{count}.{dtype}")
        expected = sum(x.double() for x in inputs)
        tolerance = 0.5 if dtype == torch.float16 else 1e-4
        assert torch.allclose(summed.double(), expected, rtol=tolerance, atol=tolerance), (count, dtype)
        everyone = hvd.allgather(summed.unsqueeze(0), name=f"same.{count}.{dtype}")
        assert all(torch.equal(everyone[0], row) for row in everyone), f"ranks differ: {count} {dtype}"
        if dtype == torch.int64:
            assert torch.equal(summed, sum(inputs)), count
        part = hvd.reducescatter(mine, op=hvd.Sum, name=f"rs.{count}.{dtype}")
        gathered = hvd.allgather(part, name=f"rsg.{count}.{dtype}")
        assert torch.allclose(gathered.double(), expected, rtol=tolerance, atol=tolerance), (count, dtype)
        uneven = hvd.allgather(mine[: count // 2 + rank], name=f"ag.{count}.{dtype}")
        assert torch.equal(uneven, torch.cat([x[: count // 2 + r] for r, x in enumerate(inputs)])), (count, dtype)
# Fused tensors (reduced where they lie over the TCP ring, through a fusion buffer otherwise):
# out of place, in place and as adjacent views, the same bits as one all-reduce of their
# concatenation, with pieces that straddle the ring's blocks and its 256 KiB receive pieces.
sizes = (1, 70_001, 3, 300_001, 0, 17)
for dtype, op in ((torch.float32, hvd.Sum), (torch.float16, hvd.Average), (torch.int64, hvd.Sum)):
    generator = torch.Generator().manual_seed(11 + rank)
    group = [(torch.randn(n, generator=generator) * 100).to(dtype) for n in sizes]
    sent_before = hvd.engine_stats()["bytes_sent"]
    whole = list(hvd.allreduce(torch.cat(group), op=op, name=f"concat.{dtype}").split(sizes))
    sent_alone = hvd.engine_stats()["bytes_sent"] - sent_before
    fused = hvd.grouped_allreduce(group, op=op, name=f"pieces.fused.{dtype}")
    sent_fused = hvd.engine_stats()["bytes_sent"] - sent_before - sent_alone
    assert sent_fused == sent_alone > 0, ("bytes sent: fused against their concatenation", sent_fused, sent_alone)
    in_place = [t.clone() for t in group]
    hvd.grouped_allreduce_(in_place, op=op, name=f"pieces.in_place.{dtype}")
    views = list(torch.cat(group).split(sizes))
    hvd.grouped_allreduce_(views, op=op, name=f"pieces.views.{dtype}")
    for label, results in (("fused", fused), ("in place", in_place), ("views", views)):
        assert all(torch.equal(bits(a), bits(b)) for a, b in zip(whole, results)), ("pieces", label, dtype)
# A reducescatter of tensors laid end to end, read where they lie: the same bits as a
# reducescatter of their concatenation, with tensors straddling the ranks' blocks, an empty one,
# a 2-D one, and a prescale (which scales a copy).
for dtype, op, prescale in ((torch.float32, hvd.Average, 1.0), (torch.float16, hvd.Sum, 1.0),
                            (torch.int64, hvd.Sum, 1.0), (torch.float64, hvd.Average, 0.5)):
    def laid_out(r, dtype=dtype):
        generator = torch.Generator().manual_seed(23 + r)
        tensors = [(torch.randn(n, generator=generator) * 100).to(dtype) for n in sizes]
        return tensors + [(torch.randn(301, 7, generator=generator) * 100).to(dtype)]

    group = laid_out(rank)
    flat = torch.cat([t.reshape(-1) for t in group])
    reference = sum(torch.cat([t.reshape(-1) for t in laid_out(r)]).to(dtype).double() * prescale for r in range(size))
    reference = reference / size if op == hvd.Average else reference
    block = [len(b) for b in torch.arange(flat.numel()).tensor_split(size)]
    before = [t.clone() for t in group]
    whole = hvd.reducescatter(flat, op=op, prescale_factor=prescale, name=f"rs.concat.{dtype}")
    laid = hvd.synchronize(hvd.reducescatter_concatenated_async(group, op=op, prescale_factor=prescale,
                                                                name=f"rs.pieces.{dtype}"))
    assert laid.shape == whole.shape and torch.equal(bits(laid), bits(whole)), ("reducescatter pieces", dtype)
    mine_expected = reference[sum(block[:rank]):sum(block[:rank + 1])]
    tolerance = {torch.float16: 0.5, torch.float32: 1e-4}.get(dtype, 1e-9)
    assert torch.allclose(whole.double(), mine_expected, rtol=tolerance, atol=tolerance), ("reducescatter", dtype)
    assert all(torch.equal(bits(a), bits(b)) for a, b in zip(before, group)), ("inputs changed", dtype)
try:  # one dtype per request: refused before anything is sent, on every rank alike
    hvd.reducescatter_concatenated_async([torch.ones(3), torch.ones(3, dtype=torch.float64)], name="rs.mixed")
    raise AssertionError("mixed dtypes were accepted")
except (RuntimeError, ValueError) as error:
    assert "must share a dtype" in str(error), error
# Ranks that lay out different totals fail alike, naming the shapes each sent.
try:
    hvd.synchronize(hvd.reducescatter_concatenated_async([torch.ones(5), torch.ones(5 + rank)], name="rs.mismatch"))
    mismatch = "accepted"
except RuntimeError as error:
    mismatch = str(error)
assert "Mismatched reducescatter shapes for 'rs.mismatch'" in mismatch, mismatch
# Tensors sharing memory keep the fusion buffer: the same tensor twice gives the sum.
twice = (torch.arange(300_001) % 7 + rank).to(torch.float32)
hvd.grouped_allreduce_([twice, twice], op=hvd.Sum, name="pieces.twice")
assert torch.equal(twice, sum((torch.arange(300_001) % 7 + r).to(torch.float32) for r in range(size))), "twice"
print(f"CHECKED rank {rank}", flush=True)
