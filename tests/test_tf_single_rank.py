"""One process without mpirun: Keras training works and communicates nothing."""

import subprocess
import sys

from mpi_launch import REPO

CODE = """
import keras, numpy as np
import relaxlib, relaxlib_tf.keras as hvd
hvd.init()
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
model.fit(np.ones((8, 4), np.float32), np.zeros((8, 2), np.float32), epochs=2, verbose=0)
print("COLLECTIVES", relaxlib.basics.engine_stats()["completed"], "ITERATIONS", int(model.optimizer.iterations))
"""


def test_single_rank_keras_fit_skips_the_allreduce():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd=REPO, timeout=180)
    assert "COLLECTIVES 0 ITERATIONS 2" in out.stdout, out.stdout + out.stderr
