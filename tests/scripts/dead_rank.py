"""Rank 1 kills itself with SIGKILL mid-training; the job must end (non-zero), not hang."""

import os
import signal

import torch

import relaxlib_torch as hvd

hvd.init()
model = torch.nn.Linear(32, 4)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters())
for step in range(10_000):
    if step == 5 and hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    model(torch.randn(8, 32)).sum().backward()
    opt.step()
