"""DeAR in the Keras DistributedOptimizer on real ranks: bucketed reduce-scatter and all-gather
through the core (host arrays in a custom loop, TF ops traced into model.fit's train function),
the step applied by the wrapped Keras optimizer in one call. Trained on digits,
the weights equal all-reduce's bit for bit (custom loop and model.fit, SGD with momentum and Adam
with global-norm clipping, whose norm must span every bucket), also while DeAR tunes its bucket
size; a model that differs between ranks fails on every rank with the mismatch named."""

import keras
import keras_digits
import numpy as np
import pytest
import tensorflow as tf

import relaxlib
import relaxlib_tf as hvd
from relaxlib import direct
from relaxlib.algorithms import DeAR

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
SMALL_BUCKETS_MB = 2048 / (1 << 20)  # 2 KiB: the MLP's biases and kernels fall into several buckets

OPTIMIZERS = {
    "sgd-momentum": lambda: keras.optimizers.SGD(0.05, momentum=0.9),
    "adam-global-clipnorm": lambda: keras.optimizers.Adam(0.005, global_clipnorm=0.5),
}


def train(algorithm, optimizer, use_fit: bool, epochs: int = 1):
    """A small MLP trained on this rank's share of digits; returns (model, optimizer)."""
    x, y, _, _ = keras_digits.digits(RANK, SIZE)
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                            keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)])
    opt = hvd.DistributedOptimizer(optimizer, algorithm=algorithm)
    keras_digits.run(net, opt, x, y, epochs, use_fit)
    return net, opt


def assert_same_weights(net, reference) -> None:
    for i, (mine, theirs) in enumerate(zip(net.get_weights(), reference.get_weights())):
        np.testing.assert_array_equal(mine, theirs, err_msg=f"weight {i}")


@pytest.mark.parametrize("use_fit", [False, True])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_dear_trains_exactly_as_all_reduce(optimizer, use_fit):
    reference, reference_opt = train(None, OPTIMIZERS[optimizer](), use_fit)
    algorithm = DeAR(fusion_mb=SMALL_BUCKETS_MB)
    net, opt = train(algorithm, OPTIMIZERS[optimizer](), use_fit)
    assert len(algorithm.buckets) >= 3, algorithm.buckets
    assert not np.array_equal(net.get_weights()[0], train(None, OPTIMIZERS[optimizer](), use_fit, epochs=0)[0]
                              .get_weights()[0]), "training did not move the weights"
    assert_same_weights(net, reference)
    assert int(opt.iterations.numpy()) == int(reference_opt.iterations.numpy())  # one Keras step per step
    # model.fit traces DeAR's step into the train function as TF ops; a custom loop runs it eagerly
    assert opt._relax_bound == ("graph" if use_fit else "host")


def test_a_custom_loop_reduce_scatters_the_gradients_where_they_lie(monkeypatch):
    """Eager Keras steps hand the core each gradient's host memory, not a flattened copy, and
    still train exactly as all-reduce."""
    laid = []
    original = direct.flat_reducescatter_async

    def recording(src, *args, **kwargs):
        laid.append(isinstance(src, list))
        return original(src, *args, **kwargs)

    monkeypatch.setattr(direct, "flat_reducescatter_async", recording)
    reference, _ = train(None, OPTIMIZERS["sgd-momentum"](), use_fit=False)
    net, opt = train(DeAR(fusion_mb=SMALL_BUCKETS_MB), OPTIMIZERS["sgd-momentum"](), use_fit=False)
    assert opt._relax_bound == "host" and laid and all(laid), laid
    assert_same_weights(net, reference)


def test_dear_traced_into_several_steps_per_execution_stays_exact():
    """compile(steps_per_execution=4): Keras traces a loop of four train steps into one function,
    so DeAR's ops (same names every step) run four times per call."""
    results = []
    for algorithm in (None, DeAR(fusion_mb=SMALL_BUCKETS_MB)):
        x, y, _, _ = keras_digits.digits(RANK, SIZE)
        keras.utils.set_random_seed(0)
        net = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
        opt = hvd.DistributedOptimizer(OPTIMIZERS["adam-global-clipnorm"](), algorithm=algorithm)
        net.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    steps_per_execution=4)
        net.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False)
        results.append((net, int(opt.iterations.numpy())))
    (reference, reference_steps), (net, steps) = results
    assert steps == reference_steps
    assert_same_weights(net, reference)


def test_dear_tuning_its_bucket_size_stays_exact():
    """Re-bucketing between trials finishes the step first: nothing is lost or applied twice."""
    reference, _ = train(None, OPTIMIZERS["sgd-momentum"](), use_fit=False)
    algorithm = DeAR(tune=True, tune_trials=3, tune_steps=3)
    net, _ = train(algorithm, OPTIMIZERS["sgd-momentum"](), use_fit=False)
    assert algorithm.chosen_fusion_mb is not None
    assert_same_weights(net, reference)


@pytest.mark.parametrize("traced", [False, True])
def test_a_model_that_differs_between_ranks_fails_on_every_rank(traced):
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(5 + RANK)])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), algorithm=DeAR())

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(net(tf.ones((2, 8))))
        opt.apply(tape.gradient(loss, net.trainable_variables), net.trainable_variables)

    error = tf.errors.OpError if traced else relaxlib.MismatchError
    with pytest.raises(error, match="Mismatched reducescatter shapes for 'dear.rs.0'"):
        (tf.function(step) if traced else step)()
    out = hvd.allreduce(tf.ones(3), name=f"dear.after.mismatch.{traced}")  # the job goes on
    np.testing.assert_array_equal(out.numpy(), np.ones(3))
