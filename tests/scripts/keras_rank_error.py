"""A Keras algorithm while one rank fails: rank 1 raises in its third step (before its gradients
reach the algorithm), catches nothing and exits; the other ranks wait in the algorithm's
collective (DeAR's reduce-scatter, the compressed all-reduce, the group or neighbour average)
for it and must get an error naming the rank, not hang. ``eager``: a custom loop (host
arrays); ``traced``: ``model.fit`` (the algorithm's step as TF ops in the train function).

    mpirun -np N python keras_rank_error.py dear|compressed-fp16|partial-static|decentralized-ring|async eager|traced
"""

import sys

import keras
import numpy as np

import relaxlib_tf.keras as hvd
from relaxlib.algorithms import AsyncModelAverage, CompressedScatterReduce, DeAR, Decentralized, PartialAllReduce

hvd.init()
RANK = hvd.rank()
ALGORITHMS = {"dear": DeAR, "compressed-fp16": lambda: CompressedScatterReduce("fp16"),
              "partial-static": lambda: PartialAllReduce(group_size=3),
              "decentralized-ring": lambda: Decentralized("ring"), "async": AsyncModelAverage}
algorithm, mode = ALGORITHMS[sys.argv[1]](), sys.argv[2]
keras.utils.set_random_seed(0)
net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01), algorithm=algorithm)
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
