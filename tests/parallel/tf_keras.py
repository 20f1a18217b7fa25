"""Keras 3 on real ranks: DistributedOptimizer in fit and custom loops equals one process on the
full batch, the callbacks, and torch + TensorFlow sharing one engine. Launched by
tests/test_tf_parallel.py with 2 ranks.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import relaxlib_tf
import relaxlib_tf.keras as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
BATCH = 8 * SIZE  # global batch; each rank trains on its own SIZE-th of it


def data(steps: int = 4):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * BATCH, 6)).astype(np.float32)
    y = (x @ rng.normal(size=(6, 2)) + 0.1 * rng.normal(size=(steps * BATCH, 2))).astype(np.float32)
    return x, y


def model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(2)])


def my_shard(x, y):
    """Rank r's rows of every global batch, so SIZE ranks see exactly the full batches."""
    rows = np.arange(len(x)).reshape(-1, BATCH)[:, RANK::SIZE].reshape(-1)
    return x[rows], y[rows]


def single_process_weights(optimizer_factory, epochs: int = 2):
    """What one process training on the full global batches ends with (computed on every rank)."""
    x, y = data()
    reference = model(seed=1)
    optimizer = optimizer_factory()
    reference.compile(optimizer=optimizer, loss="mse")
    reference.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)
    return [w.numpy() for w in reference.weights]


@pytest.mark.parametrize("factory", [lambda: keras.optimizers.SGD(0.1, momentum=0.9),
                                     lambda: keras.optimizers.Adam(0.01)], ids=["sgd", "adam"])
def test_fit_on_shards_equals_one_process_on_full_batches(factory):
    x, y = data()
    distributed = model(seed=1)
    distributed.compile(optimizer=hvd.DistributedOptimizer(factory()), loss="mse")
    xs, ys = my_shard(x, y)
    distributed.fit(xs, ys, batch_size=BATCH // SIZE, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(distributed.weights, single_process_weights(factory)):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-4, atol=2e-5)


def test_backward_passes_per_step_accumulates_before_one_allreduce():
    # two half-size micro-batches per rank and step == one step on the full global batch
    x, y = data()
    distributed = model(seed=1)
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2)
    distributed.compile(optimizer=optimizer, loss="mse")
    xs, ys = my_shard(x, y)
    # rank r's micro-batches k and k+1 are its rows of global batches k and k+1
    distributed.fit(xs, ys, batch_size=BATCH // SIZE, epochs=1, shuffle=False, verbose=0)
    reference = model(seed=1)
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    reference.fit(x, y, batch_size=2 * BATCH, epochs=1, shuffle=False, verbose=0)
    assert int(optimizer.iterations.numpy()) == len(x) // (2 * BATCH)
    for got, want in zip(distributed.weights, reference.weights):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-4, atol=2e-5)


def test_custom_loop_with_distributed_tape_equals_one_process():
    x, y = data()
    xs, ys = my_shard(x, y)
    net, optimizer = model(seed=1), keras.optimizers.SGD(0.1)
    per_rank = BATCH // SIZE
    for step in range(len(xs) // per_rank):
        xb, yb = xs[step * per_rank:(step + 1) * per_rank], ys[step * per_rank:(step + 1) * per_rank]
        with relaxlib_tf.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = tf.reduce_mean(tf.square(net(xb) - yb))
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))
    for got, want in zip(net.weights, single_process_weights(lambda: keras.optimizers.SGD(0.1), epochs=1)):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-4, atol=2e-5)


def test_broadcast_callback_makes_differently_initialized_ranks_equal():
    net = model(seed=100 + RANK)
    net.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse")
    x, y = data(steps=1)
    net.fit(x[:BATCH // SIZE], y[:BATCH // SIZE], batch_size=BATCH // SIZE, epochs=1, verbose=0,
            callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    root = hvd.broadcast_object([w.numpy() for w in net.weights], root_rank=0)
    for got, want in zip(net.weights, root):
        np.testing.assert_array_equal(got.numpy(), want)


def test_metric_average_callback_averages_logs():
    callback = hvd.callbacks.MetricAverageCallback()
    logs = {"loss": float(RANK), "mae": 2.0 * RANK, "note": "text"}
    callback.on_epoch_end(0, logs)
    assert logs["loss"] == pytest.approx((SIZE - 1) / 2) and logs["mae"] == pytest.approx(SIZE - 1)
    assert logs["note"] == "text"


def test_warmup_schedule_follows_the_formula():
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    net = model(seed=1)
    net.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    x, y = data(steps=4)
    xs, ys = my_shard(x, y)
    warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.4, warmup_epochs=2)
    net.fit(xs, ys, batch_size=BATCH // SIZE, epochs=3, shuffle=False, verbose=0, callbacks=[warmup, Record()])
    steps = 4
    expected = []
    for epoch in range(3):
        for batch in range(steps):
            e = epoch + batch / steps
            expected.append(0.4 / SIZE * (e * (SIZE - 1) / 2 + 1) if e < 2 else 0.4)
    np.testing.assert_allclose(seen, expected, rtol=1e-6)


def test_schedule_callback_staircase():
    net = model(seed=1)
    net.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    x, y = data(steps=1)
    schedule = hvd.callbacks.LearningRateScheduleCallback(initial_lr=1.0, multiplier=lambda epoch: 0.5 ** epoch,
                                                          start_epoch=1)
    history = net.fit(x, y, batch_size=BATCH, epochs=3, verbose=0, callbacks=[schedule])
    np.testing.assert_allclose(history.history["learning_rate"], [0.1, 0.5, 0.25], rtol=1e-6)


def test_save_on_rank_zero_and_load_model(tmp_path_factory):
    net = model(seed=1)
    net.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), loss="mse")
    x, y = data(steps=1)
    net.fit(*my_shard(x, y), batch_size=BATCH // SIZE, epochs=1, verbose=0)
    path = hvd.broadcast_object(str(tmp_path_factory.mktemp("ckpt") / "model.keras"), root_rank=0)
    if RANK == 0:
        net.save(path)
    hvd.barrier()
    loaded = hvd.load_model(path)
    assert type(loaded.optimizer).__name__ == "SGD" and hasattr(loaded.optimizer, "_relax_reducer")
    for got, want in zip(loaded.weights, net.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_torch_and_tensorflow_share_one_engine():
    import torch

    import relaxlib_torch
    assert relaxlib_torch.size() == SIZE and relaxlib_torch.rank() == RANK
    t = relaxlib_torch.allreduce(torch.full((2,), float(RANK)), op=relaxlib_torch.Sum, name="mixed.torch")
    f = hvd.allreduce(tf.fill([2], float(RANK)), op=hvd.Sum, name="mixed.tf")
    assert t.tolist() == f.numpy().tolist() == [SIZE * (SIZE - 1) / 2] * 2


def test_sync_batch_norm_equals_batch_norm_on_the_global_batch():
    rng = np.random.default_rng(5)
    full = rng.normal(2.0, 3.0, size=(4 * SIZE, 3, 5)).astype(np.float32)
    mine = full[RANK * 4:(RANK + 1) * 4]
    sync, plain = hvd.SyncBatchNormalization(momentum=0.5), keras.layers.BatchNormalization(momentum=0.5)
    with tf.GradientTape() as tape:
        out = sync(mine, training=True)
        loss = tf.reduce_sum(out * tf.range(5, dtype=tf.float32))
    grads = tape.gradient(loss, [sync.gamma, sync.beta])
    with tf.GradientTape() as tape:
        ref = plain(full, training=True)
        ref_loss = tf.reduce_sum(ref * tf.range(5, dtype=tf.float32))
    ref_grads = tape.gradient(ref_loss, [plain.gamma, plain.beta])
    np.testing.assert_allclose(out.numpy(), ref.numpy()[RANK * 4:(RANK + 1) * 4], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sync.moving_mean.numpy(), plain.moving_mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(sync.moving_variance.numpy(), plain.moving_variance.numpy(), rtol=1e-4)
    summed = [hvd.allreduce(g, op=hvd.Sum, name=f"syncbn.grad.{i}") for i, g in enumerate(grads)]
    for got, want in zip(summed, ref_grads):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


def test_advise_on_a_keras_model_ranks_modes():
    net = model(seed=1)
    predictions = relaxlib_tf.advise(net, np.ones((8, 6), np.float32), show=False)
    assert [p.samples_per_s for p in predictions] == sorted((p.samples_per_s for p in predictions), reverse=True)
    assert {"allreduce", "dear", "async"} <= {p.mode for p in predictions}


def test_keras_optimizer_records_eager_steps():
    """step_stats() of the current Keras optimizer: one record per step after the first, each with
    at least the all-reduce's bytes of the model's 36 floats."""
    keras_model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(keras_model(np.ones((2, 8), np.float32)))
        optimizer.apply_gradients(zip(tape.gradient(loss, keras_model.trainable_variables),
                                      keras_model.trainable_variables))
    records = relaxlib_tf.step_stats()
    assert len(records) == 2 and all(r["bytes_sent"] >= 2 * (SIZE - 1) * 36 * 4 // SIZE for r in records)
