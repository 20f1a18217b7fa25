"""Compression for TensorFlow/Keras on real ranks: relaxlib_tf.compressed_allreduce against the
numpy model of compressed scatter-reduce (bitwise, with error feedback across steps), and the
Keras DistributedOptimizer running CompressedScatterReduce and OneBitAdam: the SGD step taken over
exactly as torch's rule (fp16 equals all-reduce), digits trained with 1-bit compression, and
algorithms the Keras context cannot run refused by naming what they lack."""

import keras
import keras_digits
import numpy as np
import pytest
import tensorflow as tf
from compression_model import Model, inputs

import relaxlib
import relaxlib_tf as hvd
from relaxlib import direct
from relaxlib.algorithms import Algorithm, CompressedScatterReduce, DeAR, OneBitAdam

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


@pytest.mark.parametrize("codec", ["uint8", "sign", "fp16"])
@pytest.mark.parametrize("feedback", [True, False])
def test_compressed_allreduce_matches_the_numpy_model_bitwise(codec, feedback):
    count = 1031
    model = Model(codec, count, feedback, SIZE)
    state = hvd.ErrorFeedback(count) if feedback else None
    for step in range(3):
        xs = [inputs(step, count, r) for r in range(SIZE)]
        out = hvd.compressed_allreduce(tf.constant(xs[RANK]), codec=codec, state=state, name=f"tf.{codec}.{feedback}")
        np.testing.assert_array_equal(out.numpy(), model.step(xs))
        if feedback:
            np.testing.assert_array_equal(state.worker.numpy(), model.worker[RANK])
            np.testing.assert_array_equal(state.owner.numpy(), model.owner[RANK])


def test_in_tf_function_with_a_checkpointed_state(tmp_path):
    """The op runs inside tf.function (no py_function) with its residuals in variables; a
    checkpoint restores them, and the resumed run continues bitwise where it left off."""
    count = 257
    model = Model("sign", count, True, SIZE)
    state = hvd.ErrorFeedback(count)

    @tf.function
    def step(x):
        return hvd.compressed_allreduce(x, codec="sign", state=state, name="tf.function.sign")

    for s in range(2):
        xs = [inputs(s, count, r) for r in range(SIZE)]
        np.testing.assert_array_equal(step(tf.constant(xs[RANK])).numpy(), model.step(xs))
    path = tf.train.Checkpoint(state=state).write(str(tmp_path / f"ef{RANK}"))
    resumed = hvd.ErrorFeedback(count)
    tf.train.Checkpoint(state=resumed).read(path).assert_consumed()
    np.testing.assert_array_equal(resumed.worker.numpy(), model.worker[RANK])
    xs = [inputs(2, count, r) for r in range(SIZE)]
    out = hvd.compressed_allreduce(tf.constant(xs[RANK]), codec="sign", state=resumed, name="tf.function.sign")
    np.testing.assert_array_equal(out.numpy(), model.step(xs))


def test_gradient_is_the_all_reduce_of_the_incoming_gradient():
    x = tf.Variable(tf.ones(6) * (RANK + 1))
    with tf.GradientTape() as tape:
        y = hvd.compressed_allreduce(x, codec="uint8", op=hvd.Sum, name="grad.check")
        loss = tf.reduce_sum(y * float(RANK + 1))
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), np.full(6, SIZE * (SIZE + 1) / 2))


def test_compressed_allreduce_keeps_the_shape_and_refuses_bad_input():
    out = hvd.compressed_allreduce(tf.ones((3, 4)) * (RANK + 1), codec="fp16", op=hvd.Sum)
    assert out.shape == (3, 4)
    np.testing.assert_allclose(out.numpy(), np.full((3, 4), SIZE * (SIZE + 1) / 2))
    with pytest.raises(TypeError, match="float32"):
        hvd.compressed_allreduce(tf.ones(4, tf.float64))
    with pytest.raises(ValueError, match="holds 5 elements"):
        hvd.compressed_allreduce(tf.ones(4), state=hvd.ErrorFeedback(5))


def test_ranks_that_disagree_all_fail():
    """A codec that differs between ranks, or a residual of the wrong size on one rank only, fails
    the op on every rank with a message naming the problem (the others do not wait)."""
    codec = "sign" if RANK == 0 else "uint8"
    with pytest.raises(tf.errors.OpError, match="Mismatched compressed_allreduce codecs"):
        hvd.compressed_allreduce(tf.ones(8), codec=codec, name="disagree.codec")
    worker = tf.zeros([3 if RANK == 0 else 8])
    short = r"worker residual \(worker_error\) holds 12 bytes but the operation needs 32 bytes"  # the core's rule
    with pytest.raises(tf.errors.OpError, match=short):
        hvd.mpi_ops._ops.relaxlib_compressed_allreduce(tf.ones(8), worker, tf.zeros([8 // SIZE]),
                                                       tf.constant("disagree.residual"), codec=3, reduce_op=0)
    out = hvd.compressed_allreduce(tf.ones(8), codec="fp16", name="after.disagreement")  # still in step
    np.testing.assert_array_equal(out.numpy(), np.ones(8))


def dense_model(seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])


def train(algorithm, optimizer, epochs: int, use_fit: bool = False, seed: int = 0):
    """Trains a small MLP on this rank's half of digits; returns (model, test accuracy)."""
    mine_x, mine_y, test_x, test_y = keras_digits.digits(RANK, SIZE)
    net = dense_model(seed)
    hvd.broadcast_variables(net.variables, root_rank=0)
    opt = hvd.DistributedOptimizer(optimizer, algorithm=algorithm)
    keras_digits.run(net, opt, mine_x, mine_y, epochs, use_fit)
    accuracy = float(np.mean(np.argmax(net(test_x).numpy(), axis=1) == test_y))
    return net, accuracy, opt


@pytest.mark.parametrize("codec, momentum", [("uint8", 0.0), ("uint8", 0.9), ("fp16", 0.9)])
def test_a_custom_loop_compresses_the_gradients_where_they_lie_with_the_flattened_bits(monkeypatch, codec, momentum):
    """Eager Keras steps hand the core each gradient's host memory (and the learning rate as the
    operation's prescale) instead of a flattened copy: the same weights, bit for bit."""
    laid = []
    original = direct.flat_compressed_allreduce_async

    def recording(src, *args, **kwargs):
        laid.append(isinstance(src, list))
        return original(src, *args, **kwargs)

    def run():
        algorithm = CompressedScatterReduce(codec, fusion_mb=0.002)
        return train(algorithm, keras.optimizers.SGD(0.05, momentum=momentum), epochs=1)

    monkeypatch.setattr(direct, "flat_compressed_allreduce_async", recording)
    in_place, _, opt = run()
    # uint8 compresses SGD's step: without momentum the gradients themselves are read where they
    # lie, with momentum its flat buffer (the gradients added in); fp16 compresses the gradients
    assert opt._relax_bound == "host" and laid and all(laid) == (codec == "fp16" or not momentum), laid
    monkeypatch.setattr(CompressedScatterReduce, "_start_in_place", lambda *args: None)
    flattened, _, _ = run()
    for mine, theirs in zip(in_place.get_weights(), flattened.get_weights()):
        np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize("use_fit", [False, True])
def test_fp16_sgd_steps_equal_all_reduce(use_fit):
    """fp16 is exact on these values' sums only up to rounding: compare with all-reduce closely."""
    reference, _, _ = train(None, keras.optimizers.SGD(0.05, momentum=0.9), epochs=1, use_fit=use_fit)
    algorithm = CompressedScatterReduce(codec="fp16")
    net, _, opt = train(algorithm, keras.optimizers.SGD(0.05, momentum=0.9), epochs=1, use_fit=use_fit)
    assert not algorithm.compresses_updates()  # fp16 is near exact: the gradient is compressed
    assert opt._relax_bound == ("graph" if use_fit else "host")  # fit traces it as TF ops
    for mine, theirs in zip(net.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(mine, theirs, atol=2e-3)
    batches = -(-1200 // SIZE // 32) if use_fit else 1200 // SIZE // 32  # fit also runs the last partial batch
    assert int(opt.iterations.numpy()) == batches


@pytest.mark.parametrize("use_fit", [False, True])
def test_sign_compresses_the_sgd_step_and_trains_digits(use_fit):
    reference_net, reference, _ = train(None, keras.optimizers.SGD(0.05, momentum=0.9), epochs=4, use_fit=use_fit)
    algorithm = CompressedScatterReduce(codec="sign")
    net, accuracy, opt = train(algorithm, keras.optimizers.SGD(0.05, momentum=0.9), epochs=4, use_fit=use_fit)
    assert algorithm.compresses_updates()  # Keras SGD taken over with torch's rule
    assert opt._relax_bound == ("graph" if use_fit else "host")  # momentum and residuals in TF variables
    batches = -(-1200 // SIZE // 32) if use_fit else 1200 // SIZE // 32
    assert int(opt.iterations.numpy()) == 4 * batches  # counted although Keras did not apply
    assert accuracy >= reference - 0.02, (accuracy, reference)
    weights = hvd.allgather_object([w.sum() for w in net.get_weights()])
    assert all(np.allclose(w, weights[0]) for w in weights)  # every rank holds the same model


@pytest.mark.parametrize("use_fit", [False, True])
def test_uint8_with_adam_compresses_gradients(use_fit):
    _, reference, _ = train(None, keras.optimizers.Adam(0.005), epochs=3, use_fit=use_fit)
    algorithm = CompressedScatterReduce(codec="uint8", fusion_mb=4096 / (1 << 20))  # several buckets
    _, accuracy, opt = train(algorithm, keras.optimizers.Adam(0.005), epochs=3, use_fit=use_fit)
    assert not algorithm.compresses_updates()
    assert len(algorithm._buckets) > 1
    assert opt._relax_bound == ("graph" if use_fit else "host")
    # the residuals (host arrays, or TF variables when traced) are saved and restored as arrays
    saved = algorithm.state_dict()["error_feedback"]
    assert all(isinstance(m["worker"], np.ndarray) and np.any(m["worker"]) for m in saved)
    algorithm.load_state_dict({"error_feedback": [{k: 0 * v for k, v in m.items()} for m in saved]})
    assert not any(np.any(m["worker"]) for m in algorithm.state_dict()["error_feedback"])
    batches = -(-1200 // SIZE // 32) if use_fit else 1200 // SIZE // 32
    assert int(opt.iterations.numpy()) == 3 * batches  # Adam's step count: one per step, not per bucket
    assert accuracy >= reference - 0.02, (accuracy, reference)


def test_traced_sgd_steps_follow_a_learning_rate_changed_between_steps():
    """The traced step reads the learning rate each step (callbacks and schedules change it): at
    lr 0, without error feedback, the compressed SGD step is exactly zero and the model stays."""
    algorithm = CompressedScatterReduce(codec="uint8", error_feedback=False)
    net, _, opt = train(algorithm, keras.optimizers.SGD(0.05, momentum=0.9), epochs=1, use_fit=True)
    assert algorithm.compresses_updates() and opt._relax_bound == "graph"
    before = net.get_weights()
    opt.learning_rate.assign(0.0)
    mine_x, mine_y, _, _ = keras_digits.digits(RANK, SIZE)
    net.fit(mine_x, mine_y, batch_size=keras_digits.BATCH, epochs=1, verbose=0, shuffle=False)
    keras_digits.run(net, opt, mine_x, mine_y, epochs=1, use_fit=False)  # eagerly: the same TF ops and state
    for still, was in zip(net.get_weights(), before):
        np.testing.assert_array_equal(still, was)
    assert opt._relax_bound == "graph"


def test_one_bit_adam_trains_digits():
    _, reference, _ = train(None, keras.optimizers.Adam(0.005), epochs=4)
    algorithm = OneBitAdam(warmup_steps=20)
    _, accuracy, opt = train(algorithm, keras.optimizers.Adam(0.005), epochs=4)
    assert algorithm.compressing(opt._relax_context)
    assert accuracy >= reference - 0.03, (accuracy, reference)


def test_hierarchical_compression_trains_digits():
    """Full precision within each node, compressed between node leaders, broadcast back: one node
    here (every rank local), so the leaders' set has one member and the node mean is what is
    compressed."""
    _, reference, _ = train(None, keras.optimizers.SGD(0.05, momentum=0.9), epochs=4)
    net, accuracy, _ = train(CompressedScatterReduce(codec="uint8", hierarchical=True),
                             keras.optimizers.SGD(0.05, momentum=0.9), epochs=4)
    assert accuracy >= reference - 0.02, (accuracy, reference)
    sums = hvd.allgather_object([float(w.sum()) for w in net.get_weights()])
    assert all(np.allclose(s, sums[0]) for s in sums)


def test_what_keras_cannot_run_is_named():
    class PerLayer(Algorithm):  # needs forward hooks, which Keras does not have
        def requirements(self):
            return frozenset({"forward_hooks"})

    with pytest.raises(NotImplementedError, match="PerLayer needs hooks before each module's forward"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), algorithm=PerLayer())

    class Plain(Algorithm):  # uses nothing optional: accepted
        def step(self, ctx):
            ctx.apply_update([p.index for p in ctx.parameters()], ctx.snapshot())

    hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), algorithm=Plain())


def tape_steps(algorithm, steps: int = 3, traced: bool = False) -> list[list[np.ndarray]]:
    """Gradients the tape returns over ``steps`` steps of a small model (the same weights every
    step, this rank's own inputs per step)."""
    net = dense_model()
    mine_x, mine_y, _, _ = keras_digits.digits(RANK, SIZE)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def gradients(x, y):
        with hvd.DistributedGradientTape(tf.GradientTape(), algorithm=algorithm) as tape:
            value = loss(y, net(x))
        return tape.gradient(value, net.trainable_variables)

    run = tf.function(gradients) if traced else gradients
    return [[g.numpy() for g in run(mine_x[32 * s:32 * (s + 1)], mine_y[32 * s:32 * (s + 1)])] for s in range(steps)]


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf.function"])
def test_tape_compresses_gradients_with_error_feedback_across_steps(traced):
    """DistributedGradientTape(algorithm=CompressedScatterReduce("uint8")) returns what
    relaxlib_tf.compressed_allreduce (checked against numpy above) gives the flat gradients
    (last layer first, one bucket) with one error-feedback state carried across the steps."""
    got = tape_steps(CompressedScatterReduce("uint8"), traced=traced)
    net = dense_model()
    mine_x, mine_y, _, _ = keras_digits.digits(RANK, SIZE)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = net.trainable_variables
    state = hvd.ErrorFeedback(sum(int(np.prod(v.shape)) for v in variables))
    for s, gradients in enumerate(got):
        with tf.GradientTape() as tape:
            value = loss(mine_y[32 * s:32 * (s + 1)], net(mine_x[32 * s:32 * (s + 1)]))
        own = tape.gradient(value, variables)
        flat = tf.concat([tf.reshape(g, [-1]) for g in reversed(own)], axis=0)
        averaged = hvd.compressed_allreduce(flat, codec="uint8", state=state, name=f"tape.reference.{s}").numpy()
        offset = 0
        for v, g in reversed(list(zip(variables, gradients))):
            n = int(np.prod(v.shape))
            np.testing.assert_array_equal(g, averaged[offset:offset + n].reshape(v.shape), err_msg=f"step {s}")
            offset += n


def test_tape_with_dear_returns_the_averaged_gradients():
    for mine, theirs in zip(tape_steps(DeAR(fusion_mb=1024 / (1 << 20)), steps=2), tape_steps(None, steps=2)):
        for a, b in zip(mine, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_tape_refuses_algorithms_that_write_the_weights():
    for algorithm in (OneBitAdam(), CompressedScatterReduce("sign", compress="update")):
        with pytest.raises(NotImplementedError, match="writing the parameters.*DistributedGradientTape"):
            hvd.DistributedGradientTape(tf.GradientTape(), algorithm=algorithm)
    with pytest.raises(ValueError, match="leave op, compression"):
        hvd.DistributedGradientTape(tf.GradientTape(), algorithm=CompressedScatterReduce(), op=hvd.Sum)
    algorithm = CompressedScatterReduce("fp16")
    tape_steps(algorithm, steps=1)
    with tf.GradientTape() as tape:  # other sources than the algorithm was set up with
        value = tf.reduce_sum(tf.Variable(tf.ones(3)) * 2.0)
    with pytest.raises(ValueError, match="one algorithm object per set of sources"):
        hvd.DistributedGradientTape(tape, algorithm=algorithm).gradient(value, [tf.Variable(tf.ones(3))])


@pytest.mark.parametrize("codec, hierarchical", [("sign", False), ("uint8", False), ("sign", True)])
def test_skipping_a_batch_that_failed_the_step_gives_the_run_without_it(codec, hierarchical):
    """As in torch: the step that refused one rank's NaN leaves nothing behind (eager steps), and
    with hierarchy the error names that rank on every rank too."""
    mine_x, mine_y, _, _ = keras_digits.digits(RANK, SIZE)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def run(steps, bad_step=None):
        net = dense_model()
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9),
                                       algorithm=CompressedScatterReduce(codec, hierarchical=hierarchical))
        for step in steps:
            x = mine_x[step * 32:(step + 1) * 32].copy()
            if step == bad_step and RANK == SIZE - 1:
                x[0, 0] = np.nan
            with tf.GradientTape() as tape:
                value = loss(mine_y[step * 32:(step + 1) * 32], net(x))
            grads = tape.gradient(value, net.trainable_variables)
            if step != bad_step:
                opt.apply(grads, net.trainable_variables)
                continue
            with pytest.raises(relaxlib.InvalidArgumentError, match=f"non-finite values .* rank {SIZE - 1}"):
                opt.apply(grads, net.trainable_variables)
        return net.get_weights()

    skipped = run(range(6), bad_step=3)
    reference = run([0, 1, 2, 4, 5])
    for mine, theirs in zip(skipped, reference):
        np.testing.assert_array_equal(mine, theirs)


def test_a_traced_step_with_hierarchy_fails_on_every_rank_and_they_go_on_in_step():
    """``fit`` traces the step, so no host code can pass a node leader's failure on to the rest
    of its node: the leaders' all-reduce gives NaN instead, and every rank's step fails on it.
    Before, the other ranks waited for the leader's broadcast for good (no deadlock detection
    inside tf.function) once the program caught the error and went on."""
    mine_x, mine_y, _, _ = keras_digits.digits(RANK, SIZE)
    x = mine_x[:128].copy()
    if RANK == SIZE - 1:
        x[40, 0] = np.nan
    net = dense_model()
    net.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9),
                                                   algorithm=CompressedScatterReduce("sign", hierarchical=True)),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(tf.errors.InvalidArgumentError, match="between node leaders failed: non-finite values"):
        net.fit(x, mine_y[:128], batch_size=32, epochs=1, shuffle=False, verbose=0)
    total = hvd.allreduce(tf.constant([float(RANK)]), op=hvd.Sum, name="after_the_failed_fit")
    assert float(total[0]) == sum(range(SIZE))


def test_the_tape_with_hierarchy_names_the_rank_with_a_nan_on_every_rank():
    """The tape's eager step runs TF ops, whose failures are TF errors, not relaxlib's: the node
    leaders' all-reduce must still pass its failure on, and every rank name the NaN's rank."""
    net = dense_model()
    mine_x, mine_y, _, _ = keras_digits.digits(RANK, SIZE)
    x = mine_x[:32].copy()
    if RANK == SIZE - 1:
        x[3, 0] = np.nan
    algorithm = CompressedScatterReduce("uint8", compress="gradient", hierarchical=True)
    with hvd.DistributedGradientTape(tf.GradientTape(), algorithm=algorithm) as tape:
        value = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(mine_y[:32], net(x))
    with pytest.raises(relaxlib.InvalidArgumentError, match=f"non-finite values .* rank {SIZE - 1};"):
        tape.gradient(value, net.trainable_variables)
