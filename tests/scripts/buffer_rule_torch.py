"""Buffers too small for what a request writes, through the torch binding and the ctypes lane
(relaxlib.direct), on 4 ranks with a process set of ranks 0-2. Each short buffer is a view at the
start of a larger tensor filled with a sentinel, so that a write past it lands in memory this
script owns and shows (instead of an undefined crash): every case must be refused with an error
naming the request, the buffer and both sizes, and leave the sentinel untouched.

Prints "OK <case>" per case that behaved, "FAIL <case>: <why>" otherwise.

    mpirun -np 4 python buffer_rule_torch.py
"""

import numpy as np
import torch

import relaxlib_torch as hvd
from relaxlib import direct
from relaxlib.direct import Buffer

SENTINEL = -7.0
hvd.init()
RANK = hvd.rank()
assert hvd.size() == 4, "run on 4 ranks"
subset = hvd.add_process_set([0, 1, 2])


def expect_refusal(case, run, canary, words):
    """Runs ``run``; it must raise an error whose message holds every one of ``words``, and
    ``canary`` (the memory just past the short buffer) must keep the sentinel."""
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - any error class is reported with its message
        text = str(exc)
        missing = [w for w in words if w not in text]
        if missing:
            print(f"FAIL {case}: the error lacks {missing}: {text}", flush=True)
        elif not bool((canary == SENTINEL).all()):
            print(f"FAIL {case}: refused, but memory past the buffer was written", flush=True)
        else:
            print(f"OK {case}: {text}", flush=True)
        return
    written = int((canary != SENTINEL).sum())
    print(f"FAIL {case}: accepted; {written} elements past the buffer were overwritten", flush=True)


# 1. Error feedback sized for the global set (owner chunk 1200 / 4 = 300 floats) used on the
#    3-rank set, whose chunk is 400 floats: 100 floats (400 bytes) past the owner residual.
if subset.included():
    state = hvd.ErrorFeedback(1200)  # the global set's chunk
    room = torch.full((state.owner.numel() + 200,), SENTINEL)
    state.owner = room[:state.owner.numel()]
    expect_refusal("owner_residual",
                   lambda: hvd.compressed_allreduce(torch.ones(1200), state=state, name="ef.wrong_set",
                                                    process_set=subset),
                   room[state.owner.numel():], ["ef.wrong_set", "owner", "1200 bytes", "1600 bytes"])

# 2. grouped_allreduce_async with a 10-element output for a 1000-element input.
room = torch.full((1200,), SENTINEL)
expect_refusal("grouped_output",
               lambda: hvd.synchronize(hvd.mpi_ops._grouped_allreduce_async(
                   [torch.ones(1000)], [room[:10]], "grouped.short", hvd.Sum, 1.0, 1.0, hvd.global_process_set)),
               room[10:], ["grouped.short", "output", "40 bytes", "4000 bytes"])

# 3. The ctypes lane: a compressed all-reduce whose owner residual is the global set's chunk, on
#    the 3-rank set.
if subset.included():
    src, dst, worker = np.ones(1200, np.float32), np.zeros(1200, np.float32), np.zeros(1200, np.float32)
    owner_room = np.full(500, SENTINEL, np.float32)
    expect_refusal("direct_owner_residual",
                   lambda: direct.flat_compressed_allreduce_async(
                       Buffer.of(src), Buffer.of(dst), "direct.ef.wrong_set", "uint8", Buffer.of(worker),
                       Buffer.of(owner_room[:300]), process_set=subset.process_set_id).wait(),
                   owner_room[300:], ["direct.ef.wrong_set", "owner", "1200 bytes", "1600 bytes"])

# 4. The ctypes lane: a reduce-scatter whose output is smaller than this rank's block.
src = np.ones(1000, np.float32)
out_room = np.full(400, SENTINEL, np.float32)
expect_refusal("direct_reducescatter_output",
               lambda: direct.flat_reducescatter_async(Buffer.of(src), Buffer.of(out_room[:10]),
                                                       "direct.rs.short").wait(),
               out_room[10:], ["direct.rs.short", "output", "40 bytes", "1000 bytes"])

# The job still works: a correct compressed all-reduce on the set, an all-reduce on all ranks.
if subset.included():
    fine = hvd.compressed_allreduce(torch.ones(1200), state=hvd.ErrorFeedback(1200, process_set=subset),
                                    name="ef.right_set", process_set=subset)
    assert torch.allclose(fine, torch.ones(1200)), fine
total = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after")
assert torch.equal(total, torch.full((3,), 4.0)), total
print("DONE", flush=True)
hvd.shutdown()
