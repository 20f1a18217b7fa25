"""Ranks that wait for each other's different operations (``order``: rank 0 runs 'a' then 'b', the
others 'b' then 'a') must all get StalledError naming the deadlock, then go on; a rank that is
merely slow to submit (``slow``: it computes for twice RELAX_DEADLOCK_TIME) must not be taken for
a deadlock."""

import os
import sys
import time

import torch

import relaxlib
import relaxlib_torch as hvd

hvd.init()
mode = sys.argv[1]
if mode == "order":
    names = ["a", "b"] if hvd.rank() == 0 else ["b", "a"]
    try:
        for name in names:
            hvd.allreduce(torch.ones(2), name=name)
        raise SystemExit("expected a StalledError")
    except relaxlib.StalledError as exc:
        text = str(exc)
        assert "Deadlock" in text, text
        assert "'a' submitted by ranks [0], not by [1, 2]" in text, text
        assert "'b' submitted by ranks [1, 2], not by [0]" in text, text
        print("DEADLOCK-ERROR-OK", flush=True)
elif mode == "slow":
    if hvd.rank() == 1:
        time.sleep(2 * float(os.environ["RELAX_DEADLOCK_TIME"]))
    assert torch.equal(hvd.allreduce(torch.ones(2), name="late", op=hvd.Sum), torch.full((2,), float(hvd.size())))
    print("NO-FALSE-DEADLOCK-OK", flush=True)
hvd.barrier()
assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())))
print("AFTER-OK", flush=True)
