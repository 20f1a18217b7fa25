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
    is_homogeneous,
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
    start_timeline,
    stop_timeline,
)
from relaxlib.errors import NotInitializedError, RelaxError
from relaxlib.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from relaxlib.telemetry import step_stats
from relaxlib_torch import elastic  # Horovod's hvd.elastic
from relaxlib_torch.advise import advise
from relaxlib_torch.compressed import (
    ErrorFeedback,
    compressed_allreduce,
    compressed_allreduce_async,
    compressed_allreduce_concatenated_async,
)
from relaxlib_torch.compression import Compression
from relaxlib_torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from relaxlib_torch.grouped_ops import (
    grouped_allgather,
    grouped_allgather_async,
    grouped_reducescatter,
    grouped_reducescatter_async,
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
    reducescatter_concatenated_async,
    sparse_allreduce_async,
    synchronize,
)
from relaxlib_torch.optimizer import DistributedOptimizer
from relaxlib_torch.relaxed import (
    neighbor_average,
    neighbor_average_async,
    partial_allreduce,
    partial_allreduce_async,
)
from relaxlib_torch.sync_batch_norm import SyncBatchNorm

HorovodInternalError = RelaxError

__all__ = [
    "elastic", "Adasum", "advise", "Average", "Compression", "DistributedOptimizer", "ErrorFeedback",
    "compressed_allreduce",
    "compressed_allreduce_async", "compressed_allreduce_concatenated_async", "HorovodInternalError", "Max", "Min",
    "NotInitializedError", "ProcessSet", "Product", "RelaxError", "Sum", "SyncBatchNorm", "add_process_set",
    "grouped_allgather", "grouped_allgather_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "is_homogeneous", "remove_process_set", "sparse_allreduce_async", "start_timeline", "stop_timeline",
    "allgather", "allgather_async", "allgather_object", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "ccl_built",
    "cross_rank", "cross_size", "cuda_built", "ddl_built", "engine_stats", "global_process_set", "gloo_built",
    "gloo_enabled", "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "init", "is_initialized", "join", "local_rank", "local_size", "mpi_built",
    "mpi_enabled", "mpi_threads_supported", "nccl_built", "neighbor_average", "neighbor_average_async",
    "partial_allreduce", "partial_allreduce_async", "poll", "rank", "reducescatter", "reducescatter_async",
    "reducescatter_concatenated_async", "rocm_built", "set_cycle_time", "set_fusion_threshold", "shutdown", "size",
    "step_stats", "synchronize",
]
