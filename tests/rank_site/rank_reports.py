"""For rank processes of the suite whose job is meant to fail: each reports, then waits for the others.

Open MPI 5 ends a job as soon as one rank exits non-zero, so a rank that failed first could kill the
others before they print the error the test checks on every rank. A test sets
``RELAX_TEST_DONE_DIR`` (an empty folder) and ``RELAX_TEST_EXPECTED`` (how many ranks report); each
rank calls ``wait_for_the_others`` after printing its report. Files, not MPI: MPI may be unusable.
"""

from __future__ import annotations

import os
import time


def wait_for_the_others(rank: int, limit_s: float = 60.0) -> None:
    """Marks ``rank`` as reported and waits (at most ``limit_s``) until every expected rank did;
    at once when the test set no folder."""
    folder = os.environ.get("RELAX_TEST_DONE_DIR")
    if not folder:
        return
    open(os.path.join(folder, f"rank{rank}"), "w").close()
    expected = int(os.environ.get("RELAX_TEST_EXPECTED", "0"))
    deadline = time.monotonic() + limit_s
    while len(os.listdir(folder)) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
