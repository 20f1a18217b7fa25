"""DeAR in Keras while one rank fails: rank 1 raises in its third step (before its gradients reach
DeAR), catches nothing and exits; the other ranks wait in DeAR's reduce-scatter for it and must
get an error naming the rank, not hang. ``eager``: a custom loop (host arrays); ``traced``:
``model.fit`` (DeAR's step as TF ops in the train function).

    mpirun -np N python keras_dear_rank_error.py eager|traced
"""

import sys

import keras
import numpy as np

import relaxlib_tf.keras as hvd
from relaxlib.algorithms import DeAR

hvd.init()
RANK = hvd.rank()
mode = sys.argv[1]
keras.utils.set_random_seed(0)
net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01), algorithm=DeAR())
x, y = np.ones((64, 8), np.float32), np.zeros((64, 1), np.float32)


class FailOnRankOne(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if RANK == 1 and batch == 2:
            raise RuntimeError("rank 1 fails")


try:
    if mode == "traced":
        net.compile(optimizer=opt, loss="mse")
        net.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[FailOnRankOne()])
    else:
        import tensorflow as tf

        for step in range(8):
            if RANK == 1 and step == 2:
                raise RuntimeError("rank 1 fails")
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(net(x[:8]) - y[:8]))
            opt.apply(tape.gradient(loss, net.trainable_variables), net.trainable_variables)
    print(f"RANK {RANK} FINISHED WITHOUT AN ERROR", flush=True)
except Exception as error:  # noqa: BLE001 - the message is what the test checks
    print(f"RANK {RANK} ERROR {type(error).__name__}: {' | '.join(str(error).splitlines())[:3000]}", flush=True)
