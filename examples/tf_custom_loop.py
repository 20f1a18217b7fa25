"""A custom TensorFlow training loop with DistributedGradientTape on scikit-learn's digits.

Run with:  relaxrun -np 4 python examples/tf_custom_loop.py [--epochs 8]
The step is a tf.function: the gradient all-reduce is a TensorFlow op inside the graph.
"""

from __future__ import annotations

import argparse

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import relaxlib_tf as hvd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="scaled by the number of ranks")
    args = parser.parse_args()

    hvd.init()
    keras.utils.set_random_seed(hvd.rank())
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.2, random_state=0,
                                                        stratify=digits.target)
    x_local, y_local = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9)
    optimizer.build(model.trainable_variables)
    hvd.broadcast_variables(model.variables + optimizer.variables, root_rank=0)  # every rank starts equal
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(xb, yb):
        with hvd.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    steps = len(x_local) // args.batch_size
    for epoch in range(1, args.epochs + 1):
        order = np.random.default_rng(epoch * 100 + hvd.rank()).permutation(len(x_local))
        losses = [float(train_step(x_local[order[s * args.batch_size:(s + 1) * args.batch_size]],
                                   y_local[order[s * args.batch_size:(s + 1) * args.batch_size]]))
                  for s in range(steps)]
        mean_loss = float(hvd.allreduce(tf.constant(np.mean(losses)), name=f"loss.{epoch}"))
        if hvd.rank() == 0:
            print(f"epoch {epoch}/{args.epochs}  loss {mean_loss:.4f}", flush=True)
    accuracy = float(np.mean(np.argmax(model(x_test), axis=1) == y_test))
    if hvd.rank() == 0:
        print(f"final test accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
