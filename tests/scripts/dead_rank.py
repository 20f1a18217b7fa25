"""Rank 1 kills itself with SIGKILL; the job must end (non-zero), not hang.

``training`` (default): mid-training, between steps. ``compressed-parts``: while compressed
all-reduces of chunks in several parts run back to back (between nodes pipelined: run with
RELAX_SHM_COLLECTIVES=off), so the peer dies inside the part exchange. ``ring-allreduce``:
while 16 MiB all-reduces run back to back on the ring (between nodes, with RELAX_LOCAL_SIZE=1:
over the TCP ring's sockets), so the peer dies inside a ring step. ``ring-grouped``: the same
with groups of 4 tensors, which the ring reads and writes where they lie. ``scaled-sign``: training with
1-bit compression and its step scale, whose statistics are averaged inside each bucket's
operation, so the peer dies inside one. ``dear``: DeAR training, whose reduce-scatters read the
gradients where they lie (over the TCP ring with RELAX_LOCAL_SIZE=1), so the peer dies inside a
reduce-scatter or all-gather. ``uint8-in-place``: uint8 training with SGD's momentum, whose
compressed all-reduces read the gradients where they lie (between nodes with RELAX_LOCAL_SIZE=1),
so the peer dies inside one. ``fast-path``: steps of three all-reduces, the peer dying 0.3 s after the
fast path took them over (engine_fast_path.cc), inside a bucket's all-reduce or between buckets.
"""

import os
import signal
import sys
import threading

import torch

import relaxlib_torch as hvd
from relaxlib import compression


def train_until_killed(model, opt) -> None:
    """Trains on random batches; rank 1 is killed 0.2 s into its fourth step."""
    for step in range(100_000):
        if step == 3 and hvd.rank() == 1:
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()
        opt.zero_grad()
        model(torch.randn(8, 512)).sum().backward()
        opt.step()


hvd.init()
mode = sys.argv[1] if len(sys.argv) > 1 else "training"
if mode == "compressed-parts":
    count = hvd.size() * (3 * (1 << 19) + 1)  # chunks of 4 parts
    assert len(compression.part_counts(count, hvd.size(), hvd.rank())) == 4
    state = hvd.ErrorFeedback(count)
    x = torch.randn(count)
    hvd.compressed_allreduce(x, codec="uint8", state=state, name="dead.parts")  # both ranks are in
    if hvd.rank() == 1:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
    for _ in range(100_000):
        hvd.compressed_allreduce(x, codec="uint8", state=state, name="dead.parts")
elif mode == "ring-allreduce":
    x = torch.randn(4 << 20)
    hvd.allreduce(x, name="dead.ring")  # both ranks are in
    if hvd.rank() == 1:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
    for _ in range(100_000):
        hvd.allreduce(x, name="dead.ring")
elif mode == "ring-grouped":
    group = [torch.randn(1 << 20) for _ in range(4)]
    hvd.grouped_allreduce_(group, name="dead.grouped")  # both ranks are in
    if hvd.rank() == 1:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
    for _ in range(100_000):
        hvd.grouped_allreduce_(group, name="dead.grouped")
elif mode == "scaled-sign":
    from relaxlib.algorithms import CompressedScatterReduce
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), algorithm=CompressedScatterReduce(
        "sign", fusion_mb=0.5), named_parameters=model.named_parameters())
    train_until_killed(model, opt)
elif mode == "uint8-in-place":
    from relaxlib.algorithms import CompressedScatterReduce
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                   algorithm=CompressedScatterReduce("uint8", fusion_mb=1),
                                   named_parameters=model.named_parameters())
    train_until_killed(model, opt)
elif mode == "dear":
    from relaxlib.algorithms import DeAR
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), algorithm=DeAR(fusion_mb=1),
                                   model=model, named_parameters=model.named_parameters())
    train_until_killed(model, opt)
elif mode == "fast-path":
    tensors = [torch.randn(n) for n in (1 << 16, 1 << 17, 1 << 18)]
    armed = None
    for _ in range(100_000):
        handles = [hvd.allreduce_async_(t, name=f"dead.fast.{i}") for i, t in enumerate(tensors)]
        for handle in handles:
            hvd.synchronize(handle)
        # The steps that follow run on the fast path (a bucket that ran did so on every rank).
        if hvd.rank() == 1 and not armed and hvd.engine_stats()["fast_path_buckets"] > 0:
            print("FAST PATH ON", flush=True)
            armed = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL))
            armed.start()
else:
    model = torch.nn.Linear(32, 4)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    for step in range(10_000):
        if step == 5 and hvd.rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        model(torch.randn(8, 32)).sum().backward()
        opt.step()
