"""Data-parallel training of a small MLP on scikit-learn's digits (ships offline).

Run with:  relaxrun -np 4 python examples/torch_digits.py [--epochs 8] [--algorithm dear]
(or plain mpirun). Rank 0 prints a progress bar and per-epoch loss/accuracy. ``--algorithm``
takes the advisor's mode names (allreduce, dear, compressed-uint8, decentralized-ring, async, ...),
or ``ddp``: torch's own DistributedDataParallel over gloo, for comparison (relaxlib then only
averages the per-epoch metrics). ``--hidden`` / ``--depth`` widen and deepen the MLP so that
communication, not compute, dominates a step (what `make demo` does behind a slow link).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

import relaxlib_torch as hvd
from relaxlib.algorithms import ModelAveraging
from relaxlib.auto import algorithm_for


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="scaled by the number of ranks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=128, help="width of the hidden layers")
    parser.add_argument("--depth", type=int, default=1, help="number of hidden layers")
    parser.add_argument("--algorithm", default="allreduce",
                        help="allreduce, dear, compressed-{fp16,uint8,sign}, decentralized-{ring,random}, "
                             "partial-{static,random,smart}, async, or ddp (torch DDP over gloo)")
    parser.add_argument("--summary", help="rank 0 writes a JSON summary of the run here")
    parser.add_argument("--data", help="an .npz written by save_split() (the split of --seed), read instead of "
                                       "importing scikit-learn in every rank")
    return parser.parse_args()


SPLIT_KEYS = ("x_train", "x_test", "y_train", "y_test")


def split_digits(seed: int) -> dict[str, np.ndarray]:
    """scikit-learn's digits, pixels scaled to [0, 1], split 80/20 (stratified by ``seed``)."""
    from sklearn.datasets import load_digits  # here: importing scikit-learn costs each rank ~1.7 s of CPU
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    parts = train_test_split(digits.data.astype(np.float32) / 16.0, digits.target.astype(np.int64),
                             test_size=0.2, random_state=seed, stratify=digits.target)
    return dict(zip(SPLIT_KEYS, parts))


def save_split(path: str, seed: int) -> None:
    """Writes the split of ``seed`` to ``path`` (.npz) for ``--data``."""
    np.savez(path, **split_digits(seed))


def load_data(seed: int, path: str | None = None):
    """(x_train, x_test, y_train, y_test) as tensors: from ``path`` (save_split) or computed."""
    if path:
        with np.load(path) as saved:
            split = {key: saved[key] for key in SPLIT_KEYS}
    else:
        split = split_digits(seed)
    return tuple(torch.from_numpy(split[key]) for key in SPLIT_KEYS)


def progress_bar(done: int, total: int, width: int = 24) -> str:
    """A text bar; one line per epoch, because mpirun forwards rank output line by line."""
    filled = int(width * done / max(total, 1))
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def make_model(hidden: int, depth: int) -> torch.nn.Module:
    """64 pixels -> ``depth`` ReLU layers of ``hidden`` units -> 10 classes."""
    layers, width = [], 64
    for _ in range(depth):
        layers += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        width = hidden
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def wrap_ddp(model: torch.nn.Module) -> torch.nn.Module:
    """torch DDP over gloo on the same ranks (MASTER_ADDR / MASTER_PORT from the environment)."""
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("gloo", rank=hvd.rank(), world_size=hvd.size())
    return torch.nn.parallel.DistributedDataParallel(model)


def main() -> None:
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed + hvd.rank())  # different init per rank: broadcast fixes it
    x_train, x_test, y_train, y_test = load_data(args.seed, args.data)
    x_local, y_local = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    model = make_model(args.hidden, args.depth)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    algorithm = None
    if args.algorithm == "ddp":
        model = wrap_ddp(model)
    else:
        algorithm = algorithm_for(args.algorithm)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             algorithm=algorithm, model=model)

    steps = len(x_local) // args.batch_size
    if hvd.rank() == 0:
        print(f"relaxlib demo: {hvd.size()} ranks, {len(x_train)} training digits, "
              f"{steps} steps/epoch of {args.batch_size} per rank, {args.algorithm}")
    epoch_seconds = []
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        order = torch.randperm(len(x_local), generator=torch.Generator().manual_seed(epoch * 100 + hvd.rank()))
        total_loss = 0.0
        for step in range(steps):
            batch = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x_local[batch]), y_local[batch])
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
        mean_loss = hvd.allreduce(torch.tensor(total_loss / steps), name="epoch_loss").item()
        train_acc = hvd.allreduce(torch.tensor(accuracy(model, x_local, y_local)), name="train_acc").item()
        test_acc = accuracy(model, x_test, y_test)
        epoch_seconds.append(time.perf_counter() - start)
        if hvd.rank() == 0:
            print(f"epoch {progress_bar(epoch, args.epochs)}  loss {mean_loss:.4f}  train acc {train_acc:.3f}  "
                  f"test acc {test_acc:.3f}  ({epoch_seconds[-1]:.2f} s)", flush=True)
    if isinstance(algorithm, ModelAveraging):
        algorithm.average_now()  # the models differ until now: report the mean model
        test_acc = accuracy(model, x_test, y_test)
    records = hvd.step_stats()
    if hvd.rank() == 0:
        print(f"final test accuracy {test_acc:.3f}")
    if hvd.rank() == 0 and args.summary:
        ms_per_step = statistics.median(epoch_seconds) / steps * 1e3
        kb_sent = sum(r["bytes_sent"] for r in records) / len(records) / 1e3 if records else None
        with open(args.summary, "w") as out:
            json.dump({"algorithm": args.algorithm, "ranks": hvd.size(), "final_loss": mean_loss,
                       "test_accuracy": test_acc, "ms_per_step": ms_per_step,
                       "samples_per_sec": args.batch_size / ms_per_step * 1e3,
                       "kb_sent_per_step": kb_sent}, out)


if __name__ == "__main__":
    main()
