"""The last rank freezes itself (SIGSTOP) while the others go on: they must get an error naming it.

``allreduce``: the frozen rank stops after a first all-reduce everyone ran, so the others' next
all-reduce waits in its negotiation round for a rank that never answers. Each other rank prints
``FROZEN-ERROR-OK`` once that all-reduce raised an error naming the frozen rank and a later
request fails too, then exits without waiting for the frozen rank (the test's launcher ends it).
``neighbour``: first a neighbour average (direct lane) with every other rank, which must fail
naming the frozen rank, then the same as ``allreduce``.
``ring``: the frozen rank stops in the middle of a large all-reduce's TCP ring transfer (run with
every rank its own node): it submits the all-reduce in place and stops as soon as the first
element it reduces changes, i.e. once the transfer is under way. The others' all-reduce must fail
naming it, then the same as ``allreduce``.
``fast-path``: the ranks run steps of three all-reduces until the fast path runs them without
negotiation (engine_fast_path.cc); the frozen rank then stops, and the others' next step waits
inside a bucket's all-reduce.
``inside``: every rank runs the all-reduce ``frozen.allreduce`` of FREEZE_COUNT elements, and the
frozen rank stops on entering MPI's own all-reduce for it (tests/scripts/freeze_in_allreduce.c,
preloaded); the others wait inside that collective.
"""

import os
import signal
import sys
import time

import torch

import relaxlib
import relaxlib_torch as hvd

hvd.init()
mode = sys.argv[1] if len(sys.argv) > 1 else "allreduce"
frozen = hvd.size() - 1
FREEZE_COUNT = 1031  # (the shim's RELAX_TEST_FREEZE_COUNT: no other all-reduce has this size)
RING_COUNT = 16 << 20  # 64 MiB: a ring step of many milliseconds, long enough to stop in
x = torch.ones(4)
hvd.allreduce(x, name="frozen.warmup")  # every rank is in
if mode == "ring":
    x = torch.ones(RING_COUNT)
    handle = hvd.allreduce_async_(x, op=hvd.Sum, name="frozen.allreduce")
    if hvd.rank() == frozen:
        # The ring's first step reduces block (rank - 2) mod size into x where it lies (ring_reduce_scatter).
        n = hvd.size()
        counts = [RING_COUNT // n + (1 if i < RING_COUNT % n else 0) for i in range(n)]
        first = sum(counts[:(frozen - 2) % n])
        while x[first].item() == 1.0 and not hvd.poll(handle):
            pass
        print(f"RANK {frozen} FREEZES mid-transfer (done: {hvd.poll(handle)})", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        sys.exit(4)
if mode == "fast-path":
    tensors = [torch.ones(n) for n in (1000, 2000, 3000)]

    def fast_path_step():
        """One cycle of the schedule the fast path learns: three all-reduces submitted, then waited for."""
        handles = [hvd.allreduce_async_(t, name=f"frozen.fast.{i}") for i, t in enumerate(tensors)]
        for handle in handles:
            hvd.synchronize(handle)

    for _ in range(50):  # a step that ran on the fast path did so on every rank
        fast_path_step()
        if hvd.engine_stats()["fast_path_buckets"] > 0:
            break
    else:
        raise SystemExit("the fast path never engaged")
if mode == "inside":
    x = torch.ones(FREEZE_COUNT)  # the frozen rank stops inside the all-reduce below (the shim)
elif hvd.rank() == frozen:
    print(f"RANK {frozen} FREEZES", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    sys.exit(4)  # continued by the launcher ending the job (it sends SIGCONT before SIGTERM)
if mode == "neighbour":  # the direct lane: an average with every other rank, the frozen one included
    from relaxlib_torch.relaxed import neighbor_average
    peers = [r for r in range(hvd.size()) if r != hvd.rank()]
    try:
        neighbor_average(x, peers, [1.0 / hvd.size()] * len(peers), 1.0 / hvd.size(), name="frozen.neighbours")
        raise SystemExit("expected an error naming the frozen rank")
    except relaxlib.RelaxError as exc:
        print(f"ERROR: {type(exc).__name__}: {exc}", flush=True)
        # (the direct lane's own limit, or the engine's: its idle rounds wait on the frozen rank too)
        assert f"rank {frozen} did not take part" in str(exc) or f"rank {frozen} did not answer" in str(exc), str(exc)
try:
    if mode == "ring":
        hvd.synchronize(handle)
    elif mode == "fast-path":  # the others' next step waits inside a bucket's all-reduce
        fast_path_step()
    else:
        hvd.allreduce(x, name="frozen.allreduce")
    raise SystemExit("expected an error naming the frozen rank")
except relaxlib.RelaxError as exc:
    print(f"ERROR: {type(exc).__name__}: {exc}", flush=True)
    assert f"rank {frozen} did not answer" in str(exc), str(exc)
    assert "RELAX_OP_TIMEOUT=" in str(exc), str(exc)
try:
    hvd.allreduce(x, name="frozen.after")  # every later request fails at once, with the same reason
    raise SystemExit("expected the engine to stay stopped")
except relaxlib.RelaxError as exc:
    assert f"rank {frozen} did not answer" in str(exc), str(exc)
print("FROZEN-ERROR-OK", flush=True)
# The first rank to exit makes the launcher end the job, and it thaws the frozen rank (SIGCONT before
# SIGTERM), whose engine then times out too and answers any silence report still listening: the
# listener would hear every peer and name them all. Reports start within a timeout of each other,
# so after one timeout every other rank's report has ended.
time.sleep(float(os.environ.get("RELAX_OP_TIMEOUT", "3")))
sys.exit(3)  # a failed job: mpirun must end it, the frozen rank included
