"""Model-averaging algorithms with the Keras 3 DistributedOptimizer on real ranks: one step of
each mixing matches numpy (in model.fit, i.e. traced into tf.function, and in an eager loop),
ranks stopping at different steps join, async averaging converges to one model, and digits
trains; and the averaging primitives as TF ops (eager and tf.function). Launched by
tests/test_tf_parallel.py with 3 ranks.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_digits

import relaxlib_tf
import relaxlib_tf.keras as hvd
from relaxlib import direct, groups, topology
from relaxlib.algorithms import AsyncModelAverage, Decentralized, PartialAllReduce
from relaxlib.direct import Buffer

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
def test_random_matching_pairs_ranks_and_leaves_the_odd_one_alone(use_fit):
    """With 3 ranks one rank sits each step out: in fit its traced step takes the no-average branch."""
    before, after = one_step_with_zero_lr(Decentralized(topology="random"), use_fit)
    row = topology.neighbors("random", RANK, SIZE, 0, 0)
    expected = row.self_weight * before[RANK] + sum(w * before[p] for p, w in zip(row.peers, row.weights))
    np.testing.assert_allclose(after, expected if row.peers else before[RANK], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("use_fit", [True, False], ids=["fit", "eager"])
def test_compressed_ring_estimates_checkpoint_and_restore(use_fit):
    """CHOCO's estimates (TF variables when fit traced the step, host arrays otherwise) come out
    of state_dict() as copies and go back in with load_state_dict()."""
    algorithm = Decentralized(topology="ring", codec="uint8")
    one_step_with_zero_lr(algorithm, use_fit)
    saved = algorithm.state_dict()
    own, theirs = (np.asarray(e) for e in saved["estimates"])
    assert np.any(own) and np.any(theirs) and saved["last_step"] == 0
    algorithm.load_state_dict({"estimates": [np.zeros_like(own), np.zeros_like(theirs)], "last_step": 5})
    assert not any(np.any(np.asarray(e)) for e in algorithm.state_dict()["estimates"])
    assert np.any(np.asarray(saved["estimates"][0]))  # the checkpoint is a copy: restoring zeros left it
    assert algorithm.state_dict()["last_step"] == 5


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
    assert optimizer._relax_in_fit == "split"  # the Keras update in the graph, without the thread's lock
    start = algorithm.consensus_distance()
    for _ in range(20):
        net.fit(x, y, batch_size=2, epochs=1, verbose=0)
    algorithm.pause()
    algorithm_distance = algorithm.consensus_distance()
    assert algorithm.averagings > 0 and algorithm_distance < 0.5 * start
    algorithm.average_now()
    assert algorithm.consensus_distance() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("make", [lambda: Decentralized(topology="ring"), lambda: PartialAllReduce(generator="smart"),
                                  lambda: AsyncModelAverage(sync_interval_ms=1)], ids=["ring", "smart", "async"])
def test_model_averaging_trains_digits_in_fit(make):
    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target
    x_train, y_train, x_test, y_test = x[:1400], y[:1400], x[1400:], y[1400:]
    keras.utils.set_random_seed(RANK)  # every rank starts from its own weights
    net = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    algorithm = make()
    net.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9), algorithm=algorithm),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    net.fit(x_train[RANK::SIZE], y_train[RANK::SIZE], batch_size=16, epochs=4, shuffle=False, verbose=0)
    net.optimizer.join()  # eagerly, with the context fit set the algorithm up with (TF ops unless async)
    assert algorithm.consensus_distance() > 0  # each rank started from its own weights
    algorithm.average_now()
    assert algorithm.consensus_distance() == pytest.approx(0.0, abs=1e-6)
    _, accuracy = net.evaluate(x_test, y_test, verbose=0)
    if isinstance(algorithm, AsyncModelAverage):
        # How often the background thread averages depends on the machine's load (100-185 times
        # here, 0.87-0.89 accuracy; averaging once, with a 1000 s interval, gives 0.83): it must have
        # averaged during fit, and the model must be useful.
        assert algorithm.averagings >= 10
        assert accuracy > 0.8
    else:
        assert accuracy > 0.85


def train_ring(steps_per_execution: int | None, epochs: int = 2) -> tuple[np.ndarray, hvd.DistributedOptimizer]:
    """Digits with ring averaging, each rank from its own weights, in model.fit with
    ``steps_per_execution`` or (None) in an eager loop over fit's batches: (weights, optimizer)."""
    digits = load_digits()
    x, y = (digits.data[:1200][RANK::SIZE] / 16.0).astype(np.float32), digits.target[:1200][RANK::SIZE]
    keras.utils.set_random_seed(RANK)
    net = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9), algorithm=Decentralized(topology="ring"))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if steps_per_execution is not None:
        net.compile(optimizer=opt, loss=loss, steps_per_execution=steps_per_execution)
        net.fit(x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0)
        return flat(net), opt
    for _ in range(epochs):
        for start in range(0, len(x), 16):  # fit's batches, the last one partial
            with tf.GradientTape() as tape:
                value = loss(y[start:start + 16], net(x[start:start + 16]))
            opt.apply(tape.gradient(value, net.trainable_variables), net.trainable_variables)
    return flat(net), opt


def test_fit_averages_around_a_traced_update_in_order():
    """In fit the averaging step is traced: who averages is decided on host every step, the copy
    of the weights, the neighbour average and the Keras update are ops of the graph. Every step's
    copy of the weights precedes its update and its average follows it, also when Keras loops four
    steps in one function (steps_per_execution=4): the same weights as an eager loop, bitwise."""
    traced, opt = train_ring(steps_per_execution=1)
    assert opt._relax_in_fit == "graph"
    np.testing.assert_array_equal(train_ring(steps_per_execution=4)[0], traced)
    np.testing.assert_array_equal(train_ring(steps_per_execution=None)[0], traced)


def test_unsupported_settings_are_named():
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), algorithm=Decentralized(), backward_passes_per_step=2)


# ---- the averaging primitives as TF ops ----

LEFT, RIGHT = (RANK - 1) % SIZE, (RANK + 1) % SIZE


@pytest.mark.parametrize("in_function", [False, True])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_neighbor_average_op_mixes_with_both_neighbours(in_function, dtype):
    x = tf.constant(np.arange(6) + 10.0 * RANK, dtype)

    def average(value):
        return relaxlib_tf.neighbor_average(value, [LEFT, RIGHT], [1 / 3, 1 / 3], 1 / 3, name=f"ring.op.{dtype.name}")

    out = (tf.function(average) if in_function else average)(x)
    expected = sum(np.arange(6) + 10.0 * r for r in (LEFT, RANK, RIGHT)) / 3
    assert out.dtype == dtype and out.shape == x.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_compressed_neighbor_average_op_equals_the_host_path_and_updates_the_estimates():
    """CHOCO through the op (estimates in variables) against the core's host-array path on the
    same inputs and estimates: identical results and estimates, bit for bit, over three steps."""
    count, peers, weights = 50, [LEFT, RIGHT], [1 / 3, 1 / 3]
    own = tf.Variable(tf.zeros([count])), tf.Variable(tf.zeros([2 * count]))
    host_own, host_peers = np.zeros(count, np.float32), np.zeros(2 * count, np.float32)
    for step in range(3):
        x = np.random.default_rng(10 * step + RANK).standard_normal(count).astype(np.float32)
        out = relaxlib_tf.neighbor_average(tf.constant(x), peers, weights, 1 / 3, name=f"choco.op.{step}",
                                           codec="uint8", estimates=own, consensus_step=0.8)
        result = np.empty_like(x)
        direct.neighbor_average_async(Buffer.of(x), Buffer.of(result), f"choco.host.{step}", peers, weights, 1 / 3,
                                      codec="uint8", estimate_self=Buffer.of(host_own),
                                      estimate_peers=Buffer.of(host_peers), consensus_step=0.8).wait()
        np.testing.assert_array_equal(out.numpy(), result)
        np.testing.assert_array_equal(own[0].numpy(), host_own)
        np.testing.assert_array_equal(own[1].numpy(), host_peers)
    assert np.abs(host_own).sum() > 0  # the estimates moved


@pytest.mark.parametrize("in_function", [False, True])
def test_partial_allreduce_op_averages_within_the_group_only(in_function):
    group = [0, 1] if RANK < 2 else [2]
    x = tf.fill([3], float(RANK + 1))
    def call(value):
        return relaxlib_tf.partial_allreduce(value, group, name="group.op")

    out = (tf.function(call) if in_function else call)(x)
    expected = 1.5 if RANK < 2 else 3.0
    np.testing.assert_allclose(out.numpy(), np.full(3, expected))


def test_averaging_ops_refuse_bad_arguments():
    with pytest.raises(ValueError, match="2 ranks but 1 weights"):
        relaxlib_tf.neighbor_average(tf.ones(2), [LEFT, RIGHT], [0.5], 0.5, name="bad.weights")
    with pytest.raises(tf.errors.InvalidArgumentError, match="vectors of one length"):
        relaxlib_tf.mpi_ops._ops.relaxlib_group_average(tf.ones(2), tf.constant([RANK], tf.int32),
                                                        tf.constant([0.5, 0.5], tf.float64), tf.constant("bad.group"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a member of its group"):
        relaxlib_tf.partial_allreduce(tf.ones(2), [(RANK + 1) % SIZE], name="not.mine")
