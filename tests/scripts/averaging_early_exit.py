"""A model-averaging mode, nobody calls join() or average_now(): rank 1 runs out of data first
(5 steps against 40) and exits while the others keep training; with `crash`, rank 1 fails with an
uncaught exception instead. A clean exit must let the others finish (shutdown at exit joins
rank 1, which serves their remaining steps); a crash must end the job, never hang it. With
`crash-caught` the others catch the error that rank 1's crash gives them and end normally: their
shutdown at exit must not wait to serve a rank that is gone.

    mpirun -np N python averaging_early_exit.py MODE [crash | crash-caught]
"""

import sys
import time

import torch

import relaxlib_torch as hvd
from relaxlib.auto import algorithm_for

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
algorithm = algorithm_for(sys.argv[1])
crash = len(sys.argv) > 2 and sys.argv[2].startswith("crash")
caught = crash and sys.argv[2] == "crash-caught"
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters(), algorithm=algorithm, model=model)
steps = 5 if hvd.rank() == 1 else 40
try:
    for step in range(steps):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
        if crash:
            hvd.allreduce(torch.ones(1), name=f"metric.{step}")  # the others block here once rank 1 is gone
        time.sleep(0.005)
except Exception as error:
    if not caught or hvd.rank() == 1:
        raise
    print(f"RANK {hvd.rank()} CAUGHT {type(error).__name__}", flush=True)
    sys.exit(0)
if crash and hvd.rank() == 1:
    raise RuntimeError("rank 1 fails")
print(f"RANK {hvd.rank()} TRAINED {steps}", flush=True)
