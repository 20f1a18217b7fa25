"""Re-initialization after shutdown is collective. ``again``: every rank shuts down and calls
init() again (rank 1 two seconds late), and collectives work. ``peer-gone``: rank 1 finishes
after the first round; rank 0's engine stops with it. init() then changes nothing (Horovod's
behaviour), and after shutdown() it must fail after RELAX_INIT_TIMEOUT instead of waiting in MPI
forever."""

import sys
import time

import torch

import relaxlib
import relaxlib_torch as hvd

mode = sys.argv[1]
hvd.init()
assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())))
rank = hvd.rank()
if mode == "again":
    hvd.shutdown()
    if rank == 1:
        time.sleep(2)
    hvd.init()
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="again"), torch.full((2,), float(hvd.size())))
    print("REINIT-OK", flush=True)
elif hvd.rank() == 0:
    while True:  # until rank 1's exit has stopped this rank's engine
        try:
            hvd.allreduce(torch.ones(2), name=f"probe.{time.monotonic()}")
        except relaxlib.ShutdownError:
            break
        except relaxlib.StalledError:
            continue
    hvd.init()  # as in Horovod: does nothing while this rank has not shut down itself
    assert hvd.is_initialized() and hvd.size() == 2
    hvd.shutdown()
    try:
        hvd.init()
        raise SystemExit("init() returned although rank 1 is gone")
    except relaxlib.StalledError as exc:
        assert "RELAX_INIT_TIMEOUT" in str(exc), str(exc)
        print("REINIT-TIMEOUT-OK", flush=True)
else:
    print("RANK-1-DONE", flush=True)
