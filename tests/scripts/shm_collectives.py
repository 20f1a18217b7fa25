"""Runs allreduce, allgather and reducescatter on every rank, checks the exact results, and prints
whether this process maps relaxlib's shared-memory segment (SEGMENT=yes|no).

    shm_collectives.py             the global set
    shm_collectives.py subset      a process set of ranks 0 and 1 (launch 3 ranks)
"""

import sys
from pathlib import Path

import torch

import relaxlib
import relaxlib_torch as hvd

try:
    hvd.init()
except relaxlib.InvalidArgumentError as exc:
    print(f"INIT-ERROR {exc}", flush=True)
    sys.exit(0)

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
hvd.barrier()  # a rank that shuts down ends the job's collectives: wait for the subset
maps = Path("/proc/self/maps").read_text()
print(f"SEGMENT={'yes' if '/relaxlib-' in maps else 'no'}", flush=True)
hvd.shutdown()
