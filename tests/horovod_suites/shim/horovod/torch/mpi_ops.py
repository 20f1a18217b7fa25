"""``horovod.torch.mpi_ops`` -> ``relaxlib_torch.mpi_ops``."""

from horovod import forward

forward(__name__, "relaxlib_torch.mpi_ops")
