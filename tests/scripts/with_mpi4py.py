"""relaxlib beside mpi4py in one process, in either import/initialization order."""

import sys

import torch

if sys.argv[1] == "mpi4py-first":
    from mpi4py import MPI

    import relaxlib_torch as hvd
    hvd.init()
else:
    import relaxlib_torch as hvd
    hvd.init()
    from mpi4py import MPI

comm = MPI.COMM_WORLD
assert comm.Get_rank() == hvd.rank() and comm.Get_size() == hvd.size()
assert comm.allreduce(1) == hvd.size()
assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum), torch.full((3,), float(hvd.size())))
print("MPI4PY-OK", flush=True)
