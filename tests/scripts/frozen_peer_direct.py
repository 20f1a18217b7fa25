"""A neighbour that never takes part in the direct lane's exchange, while its process and engine
run on (it sleeps instead of submitting: hung in its own code, or on another schedule).

Ranks 0 and 1 average with every other rank; rank 2 never submits its side. Their neighbour
average must fail naming rank 2 within RELAX_OP_TIMEOUT, on the direct lane; the silence is then
noted process-wide, so a later all-reduce fails at once with the same reason instead of waiting
for a rank whose part never comes. Each of ranks 0 and 1 prints ``DIRECT-SILENCE-OK`` and exits
non-zero (mpirun then ends rank 2).
"""

import sys
import time

import torch

import relaxlib
import relaxlib_torch as hvd
from relaxlib_torch.relaxed import neighbor_average

hvd.init()
away = hvd.size() - 1
x = torch.ones(4)
hvd.allreduce(x, name="direct.warmup")  # every rank is in
if hvd.rank() == away:
    print(f"RANK {away} STAYS AWAY", flush=True)
    time.sleep(120)  # its engine answers every round meanwhile; mpirun ends it once the others fail
    sys.exit(4)
peers = [r for r in range(hvd.size()) if r != hvd.rank()]
try:
    neighbor_average(x, peers, [1.0 / hvd.size()] * len(peers), 1.0 / hvd.size(), name="direct.neighbours")
    raise SystemExit("expected an error naming the rank that stayed away")
except relaxlib.RelaxError as exc:
    print(f"ERROR: {type(exc).__name__}: {exc}", flush=True)
    where = "during neighbor_average 'direct.neighbours' on the direct lane"
    assert f"rank {away} did not answer within RELAX_OP_TIMEOUT=3 s {where}" in str(exc), str(exc)
try:
    hvd.allreduce(x, name="direct.after")  # the job is over: fails at once, with the same reason
    raise SystemExit("expected the engine to stop once the lane noted the silent rank")
except relaxlib.RelaxError as exc:
    print(f"LATER: {type(exc).__name__}: {exc}", flush=True)
    assert f"rank {away} did not answer" in str(exc), str(exc)
print("DIRECT-SILENCE-OK", flush=True)
sys.exit(3)
