"""Keras training on this rank's share of scikit-learn's digits, shared by the Keras test files:
the same loop with ``model.fit`` or a custom GradientTape loop, so algorithms are checked in both."""

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

TRAIN = 1200  # the first 1200 samples train, the rest test
BATCH = 32


def digits(rank: int, size: int):
    """(this rank's training inputs, labels, test inputs, test labels), inputs scaled to [0, 1]."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return x[:TRAIN][rank::size], y[:TRAIN][rank::size], x[TRAIN:], y[TRAIN:]


def run(net: keras.Model, optimizer, x, y, epochs: int, use_fit: bool) -> None:
    """Trains ``net`` with ``optimizer`` (batches of 32 in order): ``model.fit`` (which also runs
    the last partial batch) or a custom loop over full batches with ``optimizer.apply``."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if use_fit:
        net.compile(optimizer=optimizer, loss=loss)
        net.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, shuffle=False)
        return
    for _ in range(epochs):
        for start in range(0, len(x) - BATCH + 1, BATCH):
            with tf.GradientTape() as tape:
                value = loss(y[start:start + BATCH], net(x[start:start + BATCH]))
            optimizer.apply(tape.gradient(value, net.trainable_variables), net.trainable_variables)
