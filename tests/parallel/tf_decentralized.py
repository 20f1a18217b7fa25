"""Model-averaging algorithms with the Keras 3 DistributedOptimizer on real ranks: one step of
each mixing matches numpy (in model.fit, i.e. tf.function + py_function, and in an eager loop),
ranks stopping at different steps join, async averaging converges to one model, and digits
trains. Launched by tests/test_tf_parallel.py with 3 ranks.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_digits

import relaxlib_tf.keras as hvd
from relaxlib import groups
from relaxlib.algorithms import AsyncModelAverage, DeAR, Decentralized, PartialAllReduce

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


def model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])


def flat(net: keras.Model) -> np.ndarray:
    return np.concatenate([w.numpy().reshape(-1) for w in net.trainable_weights])


def everyone(values: np.ndarray) -> list[np.ndarray]:
    return hvd.allgather_object(values)


def one_step_with_zero_lr(algorithm, use_fit: bool) -> tuple[list[np.ndarray], np.ndarray]:
    """Every rank starts from its own weights; returns (all ranks' weights before, mine after)."""
    net = model(seed=10 + RANK)
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.0), algorithm=algorithm)
    before = everyone(flat(net))
    x, y = np.ones((2, 4), np.float32), np.zeros((2, 2), np.float32)
    if use_fit:
        net.compile(optimizer=optimizer, loss="mse")
        net.fit(x, y, batch_size=2, epochs=1, verbose=0)
    else:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(net(x) - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
    return before, flat(net)


@pytest.mark.parametrize("use_fit", [True, False], ids=["fit", "eager"])
def test_ring_step_mixes_with_both_neighbours(use_fit):
    before, after = one_step_with_zero_lr(Decentralized(topology="ring"), use_fit)
    left, right = before[(RANK - 1) % SIZE], before[(RANK + 1) % SIZE]
    expected = (before[RANK] + left + right) / 3 if SIZE > 2 else (before[RANK] + 2 * left) / 3
    np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("use_fit", [True, False], ids=["fit", "eager"])
def test_static_groups_average_within_the_group(use_fit):
    before, after = one_step_with_zero_lr(PartialAllReduce(group_size=2, generator="static"), use_fit)
    members = groups.group_of(RANK, groups.deterministic_groups("static", 0, SIZE, 2, 0))
    np.testing.assert_allclose(after, np.mean([before[m] for m in members], axis=0), rtol=1e-5, atol=1e-6)


def test_ranks_stopping_at_different_steps_join_and_average():
    net = model(seed=20 + RANK)
    algorithm = Decentralized(topology="ring")
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), algorithm=algorithm)
    x = np.random.default_rng(RANK).normal(size=(4, 4)).astype(np.float32)
    for _ in range(3 + 2 * RANK):  # rank r runs 3 + 2r steps
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(net(x)))
        optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
    assert optimizer.join() == 3 + 2 * (SIZE - 1) - 1
    algorithm.average_now()
    assert algorithm.consensus_distance() == pytest.approx(0.0, abs=1e-6)
    weights = everyone(flat(net))
    np.testing.assert_allclose(weights[RANK], weights[0], rtol=1e-6)


def test_async_averaging_converges_to_one_model():
    net = model(seed=30 + RANK)
    algorithm = AsyncModelAverage(sync_interval_ms=5)
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.0), algorithm=algorithm)
    x, y = np.ones((2, 4), np.float32), np.zeros((2, 2), np.float32)
    net.compile(optimizer=optimizer, loss="mse")
    net.fit(x, y, batch_size=2, epochs=1, verbose=0)
    start = algorithm.consensus_distance()
    for _ in range(20):
        net.fit(x, y, batch_size=2, epochs=1, verbose=0)
    algorithm.pause()
    algorithm_distance = algorithm.consensus_distance()
    assert algorithm.averagings > 0 and algorithm_distance < 0.5 * start
    algorithm.average_now()
    assert algorithm.consensus_distance() == pytest.approx(0.0, abs=1e-6)


def test_decentralized_ring_trains_digits_in_fit():
    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target
    x_train, y_train, x_test, y_test = x[:1400], y[:1400], x[1400:], y[1400:]
    keras.utils.set_random_seed(RANK)  # every rank starts from its own weights
    net = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    algorithm = Decentralized(topology="ring")
    net.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9), algorithm=algorithm),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    net.fit(x_train[RANK::SIZE], y_train[RANK::SIZE], batch_size=16, epochs=4, shuffle=False, verbose=0)
    net.optimizer.join()
    algorithm.average_now()
    _, accuracy = net.evaluate(x_test, y_test, verbose=0)
    assert accuracy > 0.85


def test_unsupported_algorithms_are_named():
    with pytest.raises(NotImplementedError, match="DeAR"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), algorithm=DeAR())
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), algorithm=Decentralized(), backward_passes_per_step=2)
