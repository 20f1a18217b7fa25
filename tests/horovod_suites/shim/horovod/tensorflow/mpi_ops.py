"""``horovod.tensorflow.mpi_ops`` -> ``relaxlib_tf.mpi_ops``."""

from horovod import forward

forward(__name__, "relaxlib_tf.mpi_ops")
