"""Writing your own relaxation: periodic model averaging (the simplest local SGD) in 25 lines, one
object for PyTorch and Keras. (The built-in, with an outer optimizer, compression and streaming,
is relaxlib.algorithms.LocalSGD / DiLoCo.)

Each rank applies its own gradients every step and the ranks average their *weights* every
`period` steps: `period` times less communication than all-reduce, at some cost in accuracy.
It uses only the public algorithm interface, so it needs no change to relaxlib, and nothing
framework-specific, so both bindings run it unchanged.

    relaxrun -np 4 python examples/custom_algorithm.py                     # PyTorch
    relaxrun -np 4 python examples/custom_algorithm.py --framework keras   # Keras 3
"""

import argparse

import numpy as np
from sklearn.datasets import load_digits

from relaxlib.algorithms import Algorithm


class PeriodicAverage(Algorithm):
    """Local steps; every `period` steps the weights are averaged over the ranks."""

    name = "periodic_average"

    def __init__(self, period: int = 4) -> None:
        self.period = period

    def step(self, ctx) -> None:
        everything = [p.index for p in ctx.parameters()]
        ctx.apply_update(everything, ctx.snapshot())          # local update with own gradients
        if (ctx.step_count + 1) % self.period == 0:
            weights = ctx.flatten_params(everything)
            averaged = ctx.comm.wait(ctx.comm.allreduce_async(weights, name="periodic_average.weights"))
            ctx.set_params_from_flat(everything, averaged)

    def flush(self, ctx) -> None:                             # end of training: one final average
        everything = [p.index for p in ctx.parameters()]
        weights = ctx.flatten_params(everything)
        averaged = ctx.comm.wait(ctx.comm.allreduce_async(weights, name="periodic_average.final"))
        ctx.set_params_from_flat(everything, averaged)


def shard(rank: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    return (digits.data[rank::size] / 16).astype(np.float32), digits.target[rank::size]


def train_torch() -> tuple[int, float]:
    import torch

    import relaxlib_torch as hvd

    hvd.init()
    x, y = (torch.from_numpy(a) for a in shard(hvd.rank(), hvd.size()))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters(), algorithm=PeriodicAverage(period=4))
    for _ in range(10):
        for start in range(0, len(x), 32):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[start:start + 32]), y[start:start + 32]).backward()
            optimizer.step()
    optimizer.flush()
    return hvd.rank(), (model(x).argmax(1) == y).float().mean().item()


def train_keras() -> tuple[int, float]:
    import keras

    import relaxlib_tf.keras as hvd

    hvd.init()
    x, y = shard(hvd.rank(), hvd.size())
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), algorithm=PeriodicAverage(period=4))
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=32, epochs=10, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    optimizer.flush()
    return hvd.rank(), float(np.mean(np.argmax(model(x).numpy(), axis=1) == y))


def main() -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=["torch", "keras"], default="torch")
    args = parser.parse_args()
    rank, accuracy = train_torch() if args.framework == "torch" else train_keras()
    if rank == 0:
        print(f"PeriodicAverage(period=4), {args.framework}: accuracy on this rank's shard after 10 epochs: "
              f"{accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main()
