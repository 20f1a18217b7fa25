"""``relaxlib_tf.advise``: the advisor on a Keras model (see relaxlib.advisor)."""

from __future__ import annotations

import statistics
import time

import numpy as np
import tensorflow as tf

from relaxlib import advisor


def gradient_bytes(variables) -> list[int]:
    """Bytes of each variable's gradient, in the order backward produces them (last layer first)."""
    return [int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in reversed(list(variables))]


def gradient_shapes(variables) -> list[tuple[int, ...]]:
    """Each variable's shape, in the order of ``gradient_bytes``."""
    return [tuple(int(d) for d in v.shape) for v in reversed(list(variables))]


def advise(model, sample_batch, loss_fn=None, reps: int = 3, show: bool = True):
    """Collective: times the forward and backward pass of ``model`` on ``sample_batch`` (this
    rank's batch, eagerly), calibrates the network and codecs, and prints (rank 0) and returns
    every mode's predicted iteration, fastest first. ``loss_fn(output)`` defaults to the mean
    square of the output."""
    loss_fn = loss_fn or (lambda out: tf.reduce_mean(tf.square(tf.cast(out, tf.float32))))
    variables = model.trainable_variables
    forward, backward = [], []
    for _ in range(reps + 1):  # the first pass builds and warms up
        with tf.GradientTape() as tape:
            start = time.perf_counter()
            loss = loss_fn(model(sample_batch, training=True))
            _ = float(loss)  # forward finished
            middle = time.perf_counter()
        grads = tape.gradient(loss, variables)
        _ = [g.numpy() for g in grads if g is not None]  # backward finished
        forward.append(middle - start)
        backward.append(time.perf_counter() - middle)
    sizes = gradient_bytes(variables)
    batch = int(tf.shape(sample_batch)[0]) if hasattr(sample_batch, "shape") else 1
    return advisor.advise(statistics.median(forward[1:]), statistics.median(backward[1:]), sizes, batch, show=show,
                          hooks=False,  # Keras has no gradient or forward hooks: nothing overlaps compute
                          shapes=gradient_shapes(variables))
