"""One algorithm, both frameworks: the same algorithm object drives relaxlib_torch's and the Keras
DistributedOptimizer from the same initial weights with the same gradients on every rank, and
the parameters agree after several steps.

The "model" is the linear loss L(w) = sum_k <w_k, g_k>, whose gradient is g_k exactly (bitwise)
in both frameworks, with g drawn per (rank, step): what differs between the runs is only the
binding (hooks, flattening, contexts, optimizer glue), which is what this suite is about. Where
the algorithm takes the step itself (compressed SGD steps, 1-bit Adam) the frameworks agree bit
for bit; where the wrapped optimizer applies it (torch.optim.SGD vs keras.optimizers.SGD) they
agree to float32 rounding. Launched by tests/test_tf_parallel.py with 2, 3 and 4 ranks (3: chunks of
uneven length, and an average that is no power of two).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import relaxlib_tf.keras as keras_hvd
import relaxlib_torch as torch_hvd
from relaxlib.algorithms import (
    AllReduce,
    CompressedScatterReduce,
    DeAR,
    Decentralized,
    OneBitAdam,
    PartialAllReduce,
)
from relaxlib.algorithms.local_updates import DiLoCo, LocalSGD
from relaxlib.algorithms.powersgd import PowerSGD
from relaxlib.algorithms.topk import TopK
from relaxlib_tf.context import KerasContext
from relaxlib_tf.graph_context import KerasGraphContext
from relaxlib_torch.context import TorchContext

torch_hvd.init()
RANK, SIZE = torch_hvd.rank(), torch_hvd.size()
SHAPES = [(5, 3), (3,), (3, 2), (7,)]
STEPS = 6


def initial_weights() -> list[np.ndarray]:
    rng = np.random.default_rng(7)  # the same on every rank
    return [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]


def gradients(step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(100 * step + RANK)
    return [(rng.standard_normal(shape) * (1 + i)).astype(np.float32) for i, shape in enumerate(SHAPES)]


class Linear(torch.nn.Module):
    """One parameter w; forward(g) = <w, g> (a module, so that DeAR's forward hooks see it)."""

    def __init__(self, weight: np.ndarray) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.from_numpy(weight.copy()))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        return (self.w * g).sum()


def run_torch(algorithm, optimizer: str) -> list[np.ndarray]:
    model = torch.nn.ModuleList(Linear(w) for w in initial_weights())
    params = [layer.w for layer in model]
    inner = torch.optim.SGD(params, lr=0.05, momentum=0.9) if optimizer == "sgd" else torch.optim.Adam(params, lr=0.01)
    opt = torch_hvd.DistributedOptimizer(inner, named_parameters=[(f"w{i}", p) for i, p in enumerate(params)],
                                         algorithm=algorithm, model=model if algorithm.needs_model else None)
    for step in range(STEPS):
        opt.zero_grad()
        loss = sum(layer(torch.from_numpy(g)) for layer, g in zip(model, gradients(step)))
        loss.backward()
        opt.step()
    opt.flush()  # DeAR applies the last step's update before the next forward
    if hasattr(algorithm, "average_now"):
        algorithm.average_now()
    return [p.detach().numpy().copy() for p in params]


def run_keras(algorithm, optimizer: str, traced: bool = False) -> tuple[list[np.ndarray], str | None]:
    """(final parameters, how the algorithm ran: eagerly "host", traced "graph" or
    "py_function"). ``traced``: each step inside tf.function (a traceable algorithm becomes TF
    ops, others run in a py_function)."""
    variables = [tf.Variable(w.copy()) for w in initial_weights()]
    inner = keras.optimizers.SGD(0.05, momentum=0.9) if optimizer == "sgd" else keras.optimizers.Adam(0.01)
    opt = keras_hvd.DistributedOptimizer(inner, algorithm=algorithm)

    def step(grads):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(v * g) for v, g in zip(variables, grads)])
        opt.apply(tape.gradient(loss, variables), variables)

    run = tf.function(step) if traced else step
    for s in range(STEPS):
        run([tf.constant(g) for g in gradients(s)])
    opt.flush()
    if hasattr(algorithm, "average_now"):
        algorithm.average_now()
    return [v.numpy() for v in variables], opt._relax_in_fit if traced else opt._relax_bound


CASES = {
    "allreduce": (lambda: AllReduce(), "sgd", False),
    "dear": (lambda: DeAR(fusion_mb=64 / (1 << 20)), "sgd", False),  # 64-byte buckets: several per model
    "dear-adam": (lambda: DeAR(fusion_mb=64 / (1 << 20)), "adam", False),
    "compressed-fp16": (lambda: CompressedScatterReduce("fp16"), "sgd", False),
    "compressed-uint8": (lambda: CompressedScatterReduce("uint8"), "sgd", True),
    "compressed-sign": (lambda: CompressedScatterReduce("sign"), "sgd", True),
    "compressed-uint8-adam": (lambda: CompressedScatterReduce("uint8"), "adam", False),
    "compressed-sign-hierarchical": (lambda: CompressedScatterReduce("sign", hierarchical=True), "sgd", True),
    # (the sign codec's default per-element step scale, in each case above, turned off)
    "compressed-sign-unscaled": (lambda: CompressedScatterReduce("sign", step_scale="none"), "sgd", True),
    "onebit-adam": (lambda: OneBitAdam(warmup_steps=3), "adam", True),
    "decentralized-ring": (lambda: Decentralized(topology="ring"), "sgd", False),
    "decentralized-ring-uint8": (lambda: Decentralized(topology="ring", codec="uint8"), "sgd", False),
    "partial-static": (lambda: PartialAllReduce(generator="static"), "sgd", False),
    "decentralized-random": (lambda: Decentralized(topology="random"), "sgd", False),  # a fresh matching per step
    "partial-random": (lambda: PartialAllReduce(generator="random"), "sgd", False),  # a fresh partition per step
    # (5, 3) and (3, 2) compressed (min_compression_rate=1), the vectors exact; numpy's and torch's
    # matrix products round differently, so the frameworks agree to float tolerance
    "powersgd": (lambda: PowerSGD(rank=1, start_iter=2, min_compression_rate=1), "sgd", False),
    "powersgd-adam": (lambda: PowerSGD(rank=2, start_iter=0, min_compression_rate=1), "adam", False),
    "topk": (lambda: TopK(density=0.3), "sgd", False),  # 30 %: each parameter keeps a few elements
    # SGD's gradients sparsified (its momentum after the average)
    "topk-gradient": (lambda: TopK(density=0.3, compress="gradient"), "sgd", False),
    "topk-adam": (lambda: TopK(density=0.1), "adam", False),
    "local-sgd": (lambda: LocalSGD(sync_every=2), "sgd", False),
    "diloco-streaming": (lambda: DiLoCo(sync_every=4, fragments=2, delay=1, mixing=0.5), "sgd", False),
    "diloco-topk": (lambda: DiLoCo(sync_every=4, codec="topk", density=0.2), "sgd", False),
}
# what Keras traces into tf.function as TF ops (the others run there in a py_function on host arrays)
IN_GRAPH = {"dear", "dear-adam", "compressed-fp16", "compressed-uint8", "compressed-sign", "compressed-uint8-adam",
            "compressed-sign-hierarchical", "compressed-sign-unscaled", "decentralized-ring",
            "decentralized-ring-uint8", "decentralized-random", "partial-static", "partial-random"}


# what Keras traces around the wrapped optimizer's update, the algorithm's halves on host arrays
SPLIT = {"local-sgd", "diloco-streaming", "diloco-topk"}
# Keras eager and traced agree to one float32 rounding only: PowerSGD on 4 ranks as two nodes
# (seen once in a full suite run, 1 ulp in 7 of 15 elements; bitwise when rerun alone). Likely
# cause, not verified: its several small all-reduces per step fuse differently from run to run,
# which moves elements between ring chunks and so changes their summation order.
EAGER_TRACED_ROUNDING = {"powersgd"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_and_keras_end_with_the_same_parameters(case):
    factory, optimizer, bitwise = CASES[case]
    torch_weights = run_torch(factory(), optimizer)
    keras_runs, bound = {}, {}
    for how in ("eager", "traced"):
        keras_runs[how], bound[how] = run_keras(factory(), optimizer, traced=how == "traced")
    if case != "allreduce":  # (AllReduce() is the Keras optimizer's own path: no context)
        expected = "graph" if case in IN_GRAPH else "split" if case in SPLIT else "py_function"
        assert bound == {"eager": "host", "traced": expected}, bound
    for i, (eager, traced) in enumerate(zip(keras_runs["eager"], keras_runs["traced"])):
        # TF ops and host arrays reach the same core collectives with the same buffers
        message = f"{case}: Keras eager vs traced, parameter {i}"
        if case in EAGER_TRACED_ROUNDING:
            np.testing.assert_allclose(eager, traced, rtol=1e-6, atol=1e-7, err_msg=message)
        else:
            np.testing.assert_array_equal(eager, traced, err_msg=message)
    start = initial_weights()
    for how, keras_weights in keras_runs.items():
        for i, (mine, theirs, before) in enumerate(zip(torch_weights, keras_weights, start)):
            assert not np.array_equal(mine, before), f"{case}: parameter {i} never moved"
            message = f"{case}, Keras {how}: parameter {i}"
            if bitwise:
                np.testing.assert_array_equal(mine, theirs, err_msg=message)
            else:
                np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6, err_msg=message)


def test_every_binding_takes_correctly_rounded_square_roots():
    """Algorithms that take their own step (1-bit Adam) use ``ctx.sqrt``; torch's own CPU sqrt is
    one ulp off for part of the float32 inputs, which made torch and Keras differ by one ulp."""
    values = np.abs(np.random.default_rng(3).standard_normal(100_000)).astype(np.float32)
    exact = np.sqrt(values.astype(np.float64)).astype(np.float32)  # double rounding is exact for sqrt
    roots = {
        "torch": TorchContext.sqrt(object.__new__(TorchContext), torch.from_numpy(values)).numpy(),
        "Keras host": KerasContext.sqrt(object.__new__(KerasContext), values),
        "Keras graph": KerasGraphContext.sqrt(object.__new__(KerasGraphContext), tf.constant(values)).numpy(),
    }
    for binding, root in roots.items():
        np.testing.assert_array_equal(root, exact, err_msg=binding)
