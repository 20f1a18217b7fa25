"""Rank 0 shuts down while rank 1 waits on an op rank 0 never submits: rank 1 gets ShutdownError."""

import torch

import relaxlib
import relaxlib_torch as hvd

hvd.init()
if hvd.rank() == 0:
    hvd.shutdown()
    print("ROOT-SHUTDOWN", flush=True)
else:
    try:
        hvd.allreduce(torch.ones(2), name="never")
        raise SystemExit("expected ShutdownError")
    except relaxlib.ShutdownError as exc:
        assert "rank 0" in str(exc), str(exc)
        print("PEER-SHUTDOWN-OK", flush=True)
    # rank and size stay usable (e.g. for a final `if hvd.rank() == 0: save()`); collectives fail.
    assert hvd.is_initialized() and hvd.rank() == 1 and hvd.size() == 2
    hvd.init()  # as in Horovod, changes nothing: the engine stays stopped with its reason
    try:
        hvd.allreduce(torch.ones(1), name="after")
        raise SystemExit("expected ShutdownError")
    except relaxlib.ShutdownError as exc:
        assert "rank 0 shut down" in str(exc), str(exc)
