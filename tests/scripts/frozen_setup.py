"""A rank freezes itself (SIGSTOP) inside a set-up exchange (tests/scripts/freeze_in_setup.c,
preloaded, chooses the rank and the MPI call); every other rank must get an error naming it
instead of waiting in that exchange forever.

Framework-neutral (relaxlib only), so no framework's import time counts.
``init``: the rank stops in relaxlib's start (init(): communicator duplication, host names); the
others' init() must raise. ``ring`` / ``shm``: it stops in the set-up of the TCP ring or of the
shared-memory segment (run by the engine after init()); the others' next request (a process set's
creation, negotiated by the engine) must raise. ``process_set``: it stops once it starts creating
a process set (the shim is armed right before); the others' add_process_set() must raise.
``group_service``: it stops in the group generator's start (armed right before); the others'
start_group_service() must raise.
Each other rank prints ``SETUP-ERROR-OK`` once the error named the frozen rank and a later
request failed with the same reason, then exits non-zero without waiting for the frozen rank
(MPI_Finalize is skipped; the test's launcher ends the job) once every other unfrozen rank did
(tests/rank_site/rank_reports.py).
"""

import ctypes
import os
import sys

from rank_reports import wait_for_the_others

import relaxlib
from relaxlib.direct import start_group_service
from relaxlib.process_sets import add_process_set

mode = sys.argv[1]
frozen = int(os.environ["RELAX_TEST_FREEZE_RANK"])
expected = f"rank {frozen} did not answer within RELAX_OP_TIMEOUT="


def check(exc: Exception) -> None:
    """Prints the error and checks it names the frozen rank."""
    print(f"ERROR: {type(exc).__name__}: {exc}", flush=True)
    assert expected in str(exc), str(exc)


try:
    relaxlib.init()
    if mode == "process_set" and relaxlib.rank() == frozen:
        ctypes.CDLL(None).relax_test_freeze_arm()  # the shim: freeze in the next listed call
    if mode == "group_service":
        if relaxlib.rank() == frozen:
            ctypes.CDLL(None).relax_test_freeze_arm()
        start_group_service(2, 1, 10.0)
    else:
        add_process_set([0, frozen])
    raise SystemExit("expected an error naming the frozen rank")
except relaxlib.RelaxError as exc:
    check(exc)
if mode != "init":  # after init() failed there is no engine to ask
    try:
        add_process_set([1, frozen])  # every later request fails at once, with the same reason
        raise SystemExit("expected the engine to stay stopped")
    except relaxlib.RelaxError as exc:
        check(exc)
print("SETUP-ERROR-OK", flush=True)
wait_for_the_others(relaxlib.rank())  # every unfrozen rank reported before any exits non-zero
sys.exit(3)  # a failed job: mpirun must end it, the frozen rank included
