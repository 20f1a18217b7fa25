"""One job of the elastic soak (benchmarks/elastic_soak.py): an MLP on scikit-learn's digits,
trained with hvd.elastic.run while the driver SIGKILLs ranks from outside.

Each rank prints ``READY <world rank> <pid>`` once training runs, ``RESET {json}`` after every
reset (time, new size, the batch it resumes from and the batches it had done beyond that commit)
and ``DONE {json}`` at the end (batches, test accuracy, a digest of the parameters).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import numpy as np
import torch
from sklearn.datasets import load_digits

import relaxlib_torch as hvd


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--commit-every", type=int, default=10)
    parser.add_argument("--compute-ms", type=float, default=20, help="sleep per batch, standing in for compute")
    args = parser.parse_args()
    hvd.init()
    world_rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", hvd.rank()))
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    order = np.random.default_rng(0).permutation(len(x))
    train, test = order[:1400], order[1400:]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, batch=0)
    progress = {"batch": 0}

    def on_reset() -> None:
        print("RESET " + json.dumps({"t": time.time(), "world": world_rank, "size": hvd.size(),
                                     "resumes_at": state.batch, "redone": progress["batch"] - state.batch}),
              flush=True)
        progress["batch"] = state.batch

    state.register_reset_callbacks([on_reset])
    print(f"READY {world_rank} {os.getpid()}", flush=True)

    @hvd.elastic.run
    def fit(state) -> None:
        while state.batch < args.batches:
            rng = np.random.default_rng(1000 * state.batch + hvd.rank())
            index = train[rng.integers(0, len(train), 32)]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[index]), y[index]).backward()
            time.sleep(args.compute_ms / 1000)
            optimizer.step()
            state.batch += 1
            progress["batch"] = max(progress["batch"], state.batch)
            if state.batch % args.commit_every == 0:
                state.commit()

    fit(state)
    with torch.no_grad():
        accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
    print("DONE " + json.dumps({"world": world_rank, "size": hvd.size(), "batch": state.batch,
                                "accuracy": accuracy, "digest": digest}), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
