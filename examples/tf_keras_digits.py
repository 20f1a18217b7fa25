"""Keras 3 model.fit on scikit-learn's digits (ships offline), data-parallel with relaxlib.

Run with:  relaxrun -np 4 python examples/tf_keras_digits.py [--epochs 8]
Each rank trains on its own quarter of the data; gradients are averaged by the
DistributedOptimizer; callbacks broadcast the initial weights, warm the learning rate up, and
average the metrics. Only rank 0 prints and saves the checkpoint.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import keras
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import relaxlib_tf.keras as hvd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="scaled by the number of ranks")
    args = parser.parse_args()

    hvd.init()
    keras.utils.set_random_seed(hvd.rank())  # different init per rank: the broadcast callback fixes it
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.2, random_state=0,
                                                        stratify=digits.target)
    x_local, y_local = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9))
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=args.lr * hvd.size(), warmup_epochs=2),
    ]
    model.fit(x_local, y_local, batch_size=args.batch_size, epochs=args.epochs, callbacks=callbacks,
              verbose=2 if hvd.rank() == 0 else 0)
    _, test_accuracy = model.evaluate(x_test, y_test, verbose=0)
    if hvd.rank() == 0:  # the rank-0-only checkpoint pattern
        path = os.path.join(tempfile.mkdtemp(), "digits.keras")
        model.save(path)
        restored = hvd.load_model(path)  # its optimizer is a DistributedOptimizer again
        print(f"saved and reloaded {path} ({type(restored.optimizer).__name__})")
        print(f"final test accuracy {test_accuracy:.3f}")


if __name__ == "__main__":
    main()
