"""LocalSGD / DiLoCo: the same algorithm object in torch and in Keras (eager, and traced as in
``model.fit``) ends with the same parameters, from the same initial weights and the same
gradients per rank and step (the linear loss of tests/parallel/conformance.py, whose gradient is
exact in both frameworks). Launched with 3 ranks by tests/test_local_updates.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import relaxlib_tf.keras as keras_hvd
import relaxlib_torch as torch_hvd
from relaxlib.algorithms.local_updates import DiLoCo, LocalSGD

torch_hvd.init()
RANK = torch_hvd.rank()
SHAPES = [(5, 3), (3,), (3, 2), (7,)]
STEPS = 7


def initial_weights() -> list[np.ndarray]:
    rng = np.random.default_rng(7)  # the same on every rank
    return [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]


def gradients(step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(100 * step + RANK)
    return [(rng.standard_normal(shape) * (1 + i)).astype(np.float32) for i, shape in enumerate(SHAPES)]


def run_torch(algorithm) -> list[np.ndarray]:
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in initial_weights()]
    opt = torch_hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.05, momentum=0.9),
                                         named_parameters=[(f"w{i}", p) for i, p in enumerate(params)],
                                         algorithm=algorithm)
    for step in range(STEPS):
        opt.zero_grad()
        sum((p * torch.from_numpy(g)).sum() for p, g in zip(params, gradients(step))).backward()
        opt.step()
    opt.flush()
    return [p.detach().numpy().copy() for p in params]


def run_keras(algorithm, traced: bool) -> tuple[list[np.ndarray], object]:
    variables = [tf.Variable(w.copy()) for w in initial_weights()]
    opt = keras_hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9), algorithm=algorithm)

    def step(grads):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(v * g) for v, g in zip(variables, grads)])
        opt.apply(tape.gradient(loss, variables), variables)

    run = tf.function(step) if traced else step
    for s in range(STEPS):
        run([tf.constant(g) for g in gradients(s)])
    opt.flush()
    return [v.numpy() for v in variables], opt._relax_in_fit if traced else opt._relax_bound


CASES = {
    "local-sgd": lambda: LocalSGD(sync_every=2),
    "diloco": lambda: DiLoCo(sync_every=3),
    "diloco-streaming": lambda: DiLoCo(sync_every=4, fragments=2, delay=1, mixing=0.5),
    "diloco-streaming-topk": lambda: DiLoCo(sync_every=4, fragments=2, delay=1, mixing=0.5, codec="topk", density=0.2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_and_keras_end_with_the_same_parameters(case):
    torch_weights = run_torch(CASES[case]())
    start = initial_weights()
    for traced in (False, True):
        keras_weights, how = run_keras(CASES[case](), traced)
        assert str(how) == ("split" if traced else "host"), how  # traced: the Keras update stays in the graph
        for i, (mine, theirs, before) in enumerate(zip(torch_weights, keras_weights, start)):
            assert not np.array_equal(mine, before), f"{case}: parameter {i} never moved"
            np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{case}, Keras {'traced' if traced else 'eager'}: parameter {i}")


def test_keras_fit_with_compressed_outer_gradients():
    """model.fit with DiLoCo and a uint8 outer gradient (error feedback on host arrays): the
    Keras update stays in the traced step, every rank holds the same weights after each sync."""
    keras.utils.set_random_seed(RANK)  # different initial weights: the anchor is rank 0's
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    algorithm = DiLoCo(sync_every=3, codec="uint8")
    optimizer = keras_hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9), algorithm=algorithm)
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(RANK)  # each rank its own data
    x, y = rng.standard_normal((24, 8)).astype(np.float32), rng.standard_normal((24, 4)).astype(np.float32)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)  # 6 steps: syncs after 3 and 6
    assert str(optimizer._relax_in_fit) == "split"
    assert (algorithm.inner_steps, algorithm.syncs) == (6, 2)
    assert algorithm.state_dict()["error_feedback"][0] is not None
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    rows = torch_hvd.allgather(torch.from_numpy(weights).reshape(1, -1)).numpy()
    assert np.isfinite(rows).all()
    for rank in range(1, len(rows)):
        np.testing.assert_array_equal(rows[rank], rows[0], err_msg=f"rank {rank} differs from rank 0 after a sync")
