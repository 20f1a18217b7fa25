"""relaxlib for PyTorch, with Horovod's API: ``import relaxlib_torch as hvd``.

Collectives run on relaxlib's core engine (MPI underneath); ``DistributedOptimizer`` averages
gradients and accepts a relaxation through ``algorithm=``.
"""

from relaxlib import algorithms  # noqa: F401
from relaxlib.basics import (
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    engine_stats,
    gloo_built,
    gloo_enabled,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    set_cycle_time,
    set_fusion_threshold,
    shutdown,
    size,
)
from relaxlib.errors import NotInitializedError, RelaxError
from relaxlib.process_sets import ProcessSet, global_process_set
from relaxlib_torch.compression import Compression
from relaxlib_torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from relaxlib_torch.mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    synchronize,
)
from relaxlib_torch.optimizer import DistributedOptimizer

HorovodInternalError = RelaxError

__all__ = [
    "Adasum", "Average", "Compression", "DistributedOptimizer", "HorovodInternalError", "Max", "Min",
    "NotInitializedError", "ProcessSet", "Product", "RelaxError", "Sum",
    "allgather", "allgather_async", "allgather_object", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "ccl_built",
    "cross_rank", "cross_size", "cuda_built", "ddl_built", "engine_stats", "global_process_set", "gloo_built",
    "gloo_enabled", "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "init", "is_initialized", "join", "local_rank", "local_size", "mpi_built",
    "mpi_enabled", "mpi_threads_supported", "nccl_built", "poll", "rank", "reducescatter", "reducescatter_async",
    "rocm_built", "set_cycle_time", "set_fusion_threshold", "shutdown", "size", "synchronize",
]
