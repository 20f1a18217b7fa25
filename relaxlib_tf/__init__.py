"""relaxlib for TensorFlow 2, with Horovod's API: ``import relaxlib_tf as hvd``.

Collectives are TensorFlow ops running on relaxlib's core engine (MPI underneath); they work
eagerly and inside ``tf.function``. ``DistributedGradientTape`` averages gradients of a
``tf.GradientTape``; ``relaxlib_tf.keras`` holds the Keras 3 optimizer and callbacks. PyTorch and
TensorFlow imported in one process share one engine.
"""

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
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from relaxlib.errors import NotInitializedError, RelaxError
from relaxlib.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from relaxlib.telemetry import step_stats
from relaxlib_tf.advise import advise
from relaxlib_tf.compressed import ErrorFeedback, compressed_allreduce
from relaxlib_tf.compression import Compression
from relaxlib_tf.functions import (
    allgather_object,
    broadcast_global_variables,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)
from relaxlib_tf.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from relaxlib_tf.mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    broadcast_,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    join,
    local_rank_op,
    local_size_op,
    rank_op,
    reducescatter,
    size_op,
)
from relaxlib_tf.relaxed import neighbor_average, partial_allreduce
from relaxlib_tf.sync_batch_norm import SyncBatchNormalization

HorovodInternalError = RelaxError


def DistributedOptimizer(optimizer, *args, **kwargs):
    """The Keras 3 ``DistributedOptimizer`` (``relaxlib_tf.keras.DistributedOptimizer``): TensorFlow 2
    optimizers are Keras optimizers."""
    from relaxlib_tf.keras.optimizer import DistributedOptimizer as keras_distributed_optimizer

    return keras_distributed_optimizer(optimizer, *args, **kwargs)

from relaxlib_tf import elastic  # noqa: E402 - Horovod's hvd.elastic (it imports this package)

__all__ = [
    "elastic", "Adasum", "advise", "Average", "Compression", "DistributedGradientTape", "DistributedOptimizer",
    "ErrorFeedback", "HorovodInternalError", "compressed_allreduce",
    "Max", "Min", "NotInitializedError", "PartialDistributedGradientTape", "ProcessSet", "Product", "RelaxError",
    "Sum", "SyncBatchNormalization",
    "add_process_set", "allgather", "allgather_object", "allreduce", "alltoall", "barrier", "broadcast",
    "broadcast_", "broadcast_global_variables", "broadcast_object", "broadcast_object_fn", "broadcast_variables",
    "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "engine_stats", "global_process_set",
    "gloo_built", "gloo_enabled", "grouped_allgather", "grouped_allreduce", "grouped_reducescatter", "init",
    "is_homogeneous", "is_initialized", "join", "local_rank", "local_rank_op", "local_size", "local_size_op",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "neighbor_average", "partial_allreduce",
    "rank", "rank_op", "reducescatter",
    "remove_process_set", "rocm_built", "shutdown", "size", "size_op", "start_timeline", "step_stats", "stop_timeline",
]
