"""A Keras ``fit`` that loses a rank (tests/test_elastic.py launches it with relaxrun --min-np).

Horovod's elastic Keras pattern: KerasState, the batch / epoch / commit callbacks and
``@hvd.elastic.run`` around ``model.fit(epochs=EPOCHS - state.epoch)``. The rank named in
``--kill`` (world rank:global batch) SIGKILLs itself when that batch begins. Every survivor prints
one DONE line (as elastic_torch.py), plus the average of (rank + 1) through a tf.function traced
before the loss, called after it: the traced all-reduce must average over the new world. Under
``relaxrun --max-np`` a worker added back runs this script too: it joins inside ``train`` (no
collective before it) and prints ``average_before=joined``. As in Horovod's examples, the state is
made before the first ``fit``: KerasState builds the optimizer's variables.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal

import keras
import numpy as np
import tensorflow as tf

import relaxlib_tf.keras as hvd
from relaxlib import algorithms, basics

EPOCHS, STEPS = 4, 6

ALGORITHMS = {
    "allreduce": lambda: None,
    "dear": lambda: algorithms.DeAR(fusion_mb=0.0001),
    "uint8": lambda: algorithms.CompressedScatterReduce(codec="uint8", error_feedback=True),
    "sign": lambda: algorithms.CompressedScatterReduce(codec="sign", error_feedback=True),
    "onebit_adam": lambda: algorithms.OneBitAdam(lr=0.001, warmup_steps=6),
    "powersgd": lambda: algorithms.PowerSGD(rank=2, start_iter=4, min_compression_rate=1.0),
    "topk": lambda: algorithms.TopK(density=0.1),
    "decentralized": lambda: algorithms.Decentralized(topology="ring"),
    "partial": lambda: algorithms.PartialAllReduce(group_size=2, generator="random"),
    "async": lambda: algorithms.AsyncModelAverage(sync_interval_ms=5.0),
    "local_sgd": lambda: algorithms.LocalSGD(sync_every=2, codec="uint8"),
}


class KillAt(keras.callbacks.Callback):
    """Sends this process ``signum`` (SIGKILL: lost; SIGSTOP: frozen) when global batch ``at`` begins."""

    def __init__(self, state, at: int | None, signum: int = signal.SIGKILL):
        super().__init__()
        self.state, self.at, self.signum = state, at, signum

    def on_train_batch_begin(self, batch, logs=None):
        if self.at is not None and self.state.epoch * STEPS + self.state.batch == self.at:
            os.kill(os.getpid(), self.signum)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kill", default="")
    parser.add_argument("--freeze", default="", help="world rank:global batch to SIGSTOP (frozen, not lost)")
    parser.add_argument("--algorithm", default="allreduce", choices=sorted(ALGORITHMS))
    args = parser.parse_args()
    hvd.init()
    world_rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", hvd.rank()))
    kills = {int(r): int(b) for r, b in (item.split(":") for item in args.kill.split(",") if item)}
    freezes = {int(r): int(b) for r, b in (item.split(":") for item in args.freeze.split(",") if item)}

    @tf.function
    def average(x):
        return hvd.allreduce(x)

    joined = basics.joined_running_job()  # a worker added back: the others are inside train already
    before = "joined" if joined else float(average(tf.constant([hvd.rank() + 1.0]))[0])
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01, momentum=0.9),
                                         algorithm=ALGORITHMS[args.algorithm]())
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(STEPS * 8, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=2), KillAt(state, kills.get(world_rank)),
                 KillAt(state, freezes.get(world_rank), signal.SIGSTOP)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(x, y, batch_size=8, steps_per_epoch=STEPS, epochs=EPOCHS - state.epoch,
                        callbacks=callbacks, verbose=0)
        algorithm = optimizer._relax_algorithm
        if hasattr(algorithm, "average_now"):  # model averaging: every rank ends with the mean
            algorithm.average_now()

    train(state)
    after = float(average(tf.constant([hvd.rank() + 1.0]))[0])
    digest = hashlib.sha256(b"".join(np.asarray(v).tobytes() for v in model.weights)).hexdigest()[:16]
    print(f"DONE world={world_rank} rank={hvd.rank()} size={hvd.size()} batch={state.epoch * STEPS} "
          f"digest={digest} resets={len(resets)} average_before={before} average_after={after} "
          f"generation={basics.world_generation()}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
