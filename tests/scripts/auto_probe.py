"""relaxrun --auto probe: trains a small model with DistributedOptimizer(algorithm=None) and
reports on rank 0 which algorithm (and codec/topology/generator) the optimizer ran."""

import torch

import relaxlib_torch as hvd

hvd.init()
torch.manual_seed(hvd.rank())
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters(), model=model)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for _ in range(12):
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
if hasattr(optimizer, "flush"):
    optimizer.flush()
algorithm = optimizer.algorithm
detail = next((getattr(algorithm, a) for a in ("codec", "topology", "generator") if getattr(algorithm, a, None)), "")
if hvd.rank() == 0:
    print(f"probe ran {algorithm.name} {detail}".rstrip(), flush=True)
