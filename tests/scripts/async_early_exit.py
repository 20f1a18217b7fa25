"""Async model averaging, nobody calls join() or average_now(): rank 1 runs out of steps first and
exits while rank 0 keeps training. Rank 0 must finish its steps without error, and its averaging
rounds go on with rank 1 until rank 0 exits too."""

import sys
import time

import torch

import relaxlib_torch as hvd
from relaxlib.algorithms import AsyncModelAverage

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
algorithm = AsyncModelAverage(sync_interval_ms=1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters(), algorithm=algorithm, model=model)
steps = 5 if hvd.rank() == 1 else 60
for _ in range(steps):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
    time.sleep(0.005)
print(f"RANK {hvd.rank()} TRAINED {steps} averagings {algorithm.averagings}", flush=True)
sys.exit(0)  # shutdown at exit: rank 1 waits there until rank 0 has paused averaging too
