"""Rank 1 never submits 'lonely': the others must get StalledError naming rank 1, then go on."""

import torch
from mpi4py import MPI

import relaxlib
import relaxlib_torch as hvd

hvd.init()
comm = MPI.COMM_WORLD
if hvd.rank() != 1:
    try:
        hvd.allreduce(torch.ones(2), name="lonely")
        raise SystemExit("expected a StalledError")
    except relaxlib.StalledError as exc:
        assert "'lonely'" in str(exc) and "ranks [1]" in str(exc), str(exc)
        print("STALL-ERROR-OK", flush=True)
    if hvd.rank() == 0:
        comm.send("go", dest=1)
else:
    comm.recv(source=0)  # submit nothing until the others have failed 'lonely'
hvd.barrier()
assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())))
print("AFTER-STALL-OK", flush=True)
