"""The last rank freezes itself (SIGSTOP) while the others go on: they must get an error naming it.

``allreduce``: the frozen rank stops after a first all-reduce everyone ran, so the others' next
all-reduce waits in its negotiation round for a rank that never answers. Each other rank prints
``FROZEN-ERROR-OK`` once that all-reduce raised an error naming the frozen rank and a later
request fails too, then exits without waiting for the frozen rank (the test's launcher ends it).
``neighbour``: first a neighbour average (direct lane) with every other rank, which must fail
naming the frozen rank, then the same as ``allreduce``.
"""

import os
import signal
import sys

import torch

import relaxlib
import relaxlib_torch as hvd

hvd.init()
mode = sys.argv[1] if len(sys.argv) > 1 else "allreduce"
frozen = hvd.size() - 1
x = torch.ones(4)
hvd.allreduce(x, name="frozen.warmup")  # every rank is in
if hvd.rank() == frozen:
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
sys.exit(3)  # a failed job: mpirun must end it, the frozen rank included
