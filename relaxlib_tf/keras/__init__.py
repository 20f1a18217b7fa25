"""relaxlib for Keras 3, with ``horovod.tensorflow.keras``'s API: ``import relaxlib_tf.keras as hvd``.

``hvd.DistributedOptimizer(keras.optimizers.SGD(...))`` averages gradients over ranks in
``model.fit`` and custom loops; ``hvd.callbacks`` holds the broadcast, metric-averaging and
learning-rate callbacks. Save checkpoints on rank 0 only (``if hvd.rank() == 0: model.save(...)``)
and reload with ``hvd.load_model``, which wraps the restored optimizer again.
"""

from __future__ import annotations

import keras

from relaxlib_tf import (  # noqa: F401 - the Horovod Keras module re-exports these
    Adasum,
    Average,
    Compression,
    Max,
    Min,
    ProcessSet,
    Product,
    Sum,
    SyncBatchNormalization,
    add_process_set,
    allgather,
    allgather_object,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    broadcast_global_variables,
    broadcast_object,
    broadcast_variables,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    global_process_set,
    gloo_built,
    gloo_enabled,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    init,
    is_initialized,
    join,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    reducescatter,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
)
from relaxlib_tf.keras import callbacks, elastic  # noqa: F401 - Horovod's hvd.callbacks, hvd.elastic
from relaxlib_tf.keras.optimizer import DistributedOptimizer


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none, **kwargs):
    """Loads a saved Keras model and wraps its optimizer in ``DistributedOptimizer`` (state kept).
    ``custom_optimizers``: optimizer classes the file refers to, beside Keras' own."""
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects, **kwargs)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        wrapped = DistributedOptimizer(optimizer, compression=compression)  # in place when already built
        if wrapped is not optimizer:
            model.optimizer = wrapped
    return model


__all__ = ["DistributedOptimizer", "callbacks", "elastic", "load_model"]
