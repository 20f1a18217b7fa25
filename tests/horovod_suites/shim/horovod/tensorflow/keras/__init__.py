"""``horovod.tensorflow.keras`` -> ``relaxlib_tf.keras`` (attribute forwarding)."""

from horovod import forward

forward(__name__, "relaxlib_tf.keras")
