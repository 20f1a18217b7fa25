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


STATE_CODE = """
import keras, numpy as np
import relaxlib_tf.keras as hvd
hvd.init()
unbuilt = keras.Sequential([keras.layers.Dense(2)])
unbuilt.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
try:
    hvd.elastic.KerasState(unbuilt, batch=0)
except ValueError as error:
    print("UNBUILT", error)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), loss="mse")
state = hvd.elastic.KerasState(model, batch=0)  # before the first fit, as in Horovod's examples
print("SLOTS", len(model.optimizer.variables), "KEPT", len(state._variables))
model.fit(np.ones((8, 4), np.float32), np.zeros((8, 2), np.float32), epochs=1, verbose=0)
moved = float(sum(np.abs(np.asarray(v)).sum() for v in model.optimizer.variables[2:]))
state.restore()
print("MOMENTUM AFTER A STEP", moved > 0, "RESTORED", float(sum(np.abs(np.asarray(v)).sum()
      for v in model.optimizer.variables[2:])), "ITERATIONS", int(model.optimizer.iterations))
"""


def test_keras_state_made_before_the_first_fit_keeps_the_optimizer_slots():
    """KerasState builds the optimizer's variables Keras would build at the first step, so a restore
    rolls the momentum back too (and a worker added later receives it); a model without variables
    yet is refused, naming what to do."""
    out = subprocess.run([sys.executable, "-c", STATE_CODE], capture_output=True, text=True, cwd=REPO, timeout=180)
    assert "UNBUILT KerasState: the model has no variables yet; build it first" in out.stdout, out.stdout + out.stderr
    # SGD with momentum: iteration, learning rate and one slot per model variable (kernel, bias)
    assert "SLOTS 4 KEPT 6" in out.stdout, out.stdout + out.stderr
    assert "MOMENTUM AFTER A STEP True RESTORED 0.0 ITERATIONS 0" in out.stdout, out.stdout + out.stderr
