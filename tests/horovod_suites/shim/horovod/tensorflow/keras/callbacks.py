"""``horovod.tensorflow.keras.callbacks`` -> ``relaxlib_tf.keras.callbacks``."""

from horovod import forward

forward(__name__, "relaxlib_tf.keras.callbacks")
