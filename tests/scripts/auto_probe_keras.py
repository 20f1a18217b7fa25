"""relaxrun --auto probe for Keras: model.fit with relaxlib_tf.keras.DistributedOptimizer and no
algorithm argument; rank 0 reports which algorithm the optimizer ran."""

import keras
import numpy as np

import relaxlib_tf as hvd
import relaxlib_tf.keras as rk

hvd.init()
rng = np.random.default_rng(hvd.rank())
x, y = rng.normal(size=(384, 32)).astype("float32"), rng.integers(0, 10, 384)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
optimizer = rk.DistributedOptimizer(keras.optimizers.SGD(0.01))
model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=32, epochs=1, verbose=0,
          callbacks=[rk.callbacks.BroadcastGlobalVariablesCallback(0)])
algorithm = optimizer._relax_algorithm
if hvd.rank() == 0:
    print(f"probe ran {algorithm.name if algorithm is not None else 'allreduce'}", flush=True)
