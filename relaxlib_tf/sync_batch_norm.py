"""``SyncBatchNormalization``: Keras batch normalization whose training statistics span all ranks."""

from __future__ import annotations

import keras
import tensorflow as tf

from relaxlib.basics import Sum
from relaxlib.process_sets import global_process_set
from relaxlib_tf import mpi_ops


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Batch normalization over the global batch: in training, the mean and variance are computed
    over every rank's samples (one all-reduce of the per-channel sums and sums of squares per
    call), so small per-rank batches normalize as one large batch would. Inference uses the
    moving statistics, which are then the same on every rank. Arguments as
    ``keras.layers.BatchNormalization``, plus ``process_set``."""

    def __init__(self, *args, process_set=global_process_set, **kwargs) -> None:
        if kwargs.get("synchronized"):
            raise ValueError("SyncBatchNormalization synchronizes through relaxlib; do not pass synchronized=True")
        super().__init__(*args, **kwargs)
        self._process_set = process_set

    def call(self, inputs, training=None, mask=None):
        if not training:
            return super().call(inputs, training=training, mask=mask)
        if mask is not None:
            raise NotImplementedError("SyncBatchNormalization does not support masks")
        x = tf.cast(inputs, tf.float32)
        ndim = x.shape.rank
        axis = self.axis % ndim
        reduce_axes = [i for i in range(ndim) if i != axis]
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), reduce_axes)), tf.float32)
        local = tf.concat([tf.reduce_sum(x, reduce_axes), tf.reduce_sum(tf.square(x), reduce_axes),
                           tf.reshape(count, [1])], axis=0)
        total = mpi_ops.allreduce(local, op=Sum, name=f"SyncBatchNormalization.{self.path}",
                                  process_set=self._process_set)
        channels = x.shape[axis]
        global_count = total[-1]
        mean = total[:channels] / global_count
        variance = tf.maximum(total[channels:2 * channels] / global_count - tf.square(mean), 0.0)
        self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1.0 - self.momentum))
        self.moving_variance.assign(self.moving_variance * self.momentum + variance * (1.0 - self.momentum))
        shape = [1] * ndim
        shape[axis] = channels
        gamma = tf.reshape(self.gamma, shape) if self.scale else None
        beta = tf.reshape(self.beta, shape) if self.center else None
        out = tf.nn.batch_normalization(x, tf.reshape(mean, shape), tf.reshape(variance, shape), beta, gamma,
                                        self.epsilon)
        return tf.cast(out, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.pop("synchronized", None)
        return config
