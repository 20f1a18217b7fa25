"""Rank 1 runs out of data first and exits: on its way out it serves the relaxed averaging of the
ranks still training. When those then call a collective that needs every rank, it must fail with
ShutdownError naming rank 1 instead of waiting for a rank that will never submit it.

    finished_rank_collective.py <mode>      (a model-averaging mode: decentralized-ring, partial-static)
"""

import sys

import torch

import relaxlib
import relaxlib_torch as hvd
from relaxlib.algorithms import modes

hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters(),
                                     algorithm=modes.get(sys.argv[1]).algorithm(), model=model)
steps = 4 if hvd.rank() == 1 else 10
for _ in range(steps):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(torch.randn(16, 20)), torch.randint(0, 10, (16,))).backward()
    optimizer.step()
if hvd.rank() == 1:
    print("RANK-1-FINISHED", flush=True)  # exits: shutdown() serves the others' remaining steps
else:
    try:
        hvd.allreduce(torch.ones(1), name="after-training")
        raise SystemExit("the collective completed without rank 1")
    except relaxlib.ShutdownError as exc:
        assert "'after-training'" in str(exc) and "ranks [1] finished training" in str(exc), str(exc)
        print("FINISHED-RANK-ERROR-OK", flush=True)
