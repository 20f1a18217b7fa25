"""``horovod.tensorflow.util``: only the helper the suites import, ``_executing_eagerly``.

Horovod's version is a one-line wrapper around TensorFlow's eager check; the suites use it to
choose between eager evaluation and a session, so it is plumbing, not relaxlib API. Nothing
else of Horovod's util module is provided.
"""

import tensorflow as tf


def _executing_eagerly():
    """True when TensorFlow runs eagerly (and not while building a graph)."""
    return tf.executing_eagerly()

