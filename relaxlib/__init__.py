"""relaxlib: Horovod-style data-parallel training with communication relaxations.

Framework-neutral part: the core loader, process-level API and (in later modules) topology,
algorithm specifications and the performance model. Use it through ``relaxlib_torch`` (or
``relaxlib_tf``); ``import relaxlib_torch as hvd`` runs Horovod-style scripts.
"""

from relaxlib.basics import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    engine_stats,
    fault_tolerance,
    gloo_built,
    gloo_enabled,
    grow,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    process_failure_noted,
    rank,
    reset,
    rocm_built,
    set_cycle_time,
    set_fusion_threshold,
    shutdown,
    size,
    version,
)
from relaxlib.errors import (
    DuplicateNameError,
    HostsUpdatedInterrupt,
    InvalidArgumentError,
    MismatchError,
    MPIError,
    NotInitializedError,
    ProcessFailedError,
    ProcessSetError,
    RelaxError,
    ShutdownError,
    StalledError,
)

HorovodInternalError = RelaxError
__version__ = "0.1.0"

__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum", "ccl_built", "cross_rank", "cross_size", "cuda_built",
    "ddl_built", "engine_stats", "fault_tolerance", "gloo_built", "gloo_enabled", "grow", "init", "is_initialized",
    "local_rank", "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built",
    "process_failure_noted", "rank", "reset", "rocm_built", "set_cycle_time", "set_fusion_threshold", "shutdown",
    "size", "version", "DuplicateNameError", "HorovodInternalError", "HostsUpdatedInterrupt", "InvalidArgumentError",
    "MismatchError", "MPIError", "NotInitializedError", "ProcessFailedError", "ProcessSetError", "RelaxError",
    "ShutdownError", "StalledError",
]
