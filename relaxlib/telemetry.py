"""Per-step telemetry of one rank: compute, communication and wait time, bytes sent and received.

The framework's distributed optimizer calls ``begin_step()`` when ``step()`` is entered and
``end_step()`` when it returns. Per step:

- ``compute_s``: from the previous step's end to this step's start (forward, backward, data, ...);
- ``wait_s``: inside ``step()`` (waiting for communication and applying the update);
- ``comm_s``: time the core spent executing collectives and averages in that interval (it
  overlaps compute; ``comm_s > wait_s`` means communication was partly hidden);
- ``negotiation_s``: core time agreeing with peers on what to run (includes waiting for
  slower ranks);
- ``bytes_sent`` / ``bytes_received``: payload this rank moved.
"""

from __future__ import annotations

import collections
import os
import statistics
import time

from relaxlib import basics

FIELDS = ("compute_s", "wait_s", "comm_s", "negotiation_s", "bytes_sent", "bytes_received")


class StepTelemetry:
    """Records the last ``capacity`` steps of one optimizer."""

    def __init__(self, capacity: int = 1000) -> None:
        self._records: collections.deque[dict] = collections.deque(maxlen=capacity)
        self._step = 0
        self._last_end: float | None = None
        self._last_stats: dict | None = None
        self._begin: float | None = None
        self.advise_at = advisor_steps()  # relaxrun --advise: steps to observe first (0: never)

    def __len__(self) -> int:
        return len(self._records)

    def begin_step(self) -> None:
        """``step()`` was entered."""
        self._begin = time.perf_counter()

    def end_step(self) -> None:
        """``step()`` returns: records the step (the first one only sets the baseline)."""
        now = time.perf_counter()
        stats = basics.engine_stats()
        if self._last_end is not None and self._begin is not None and self._last_stats is not None:
            previous = self._last_stats
            self._records.append({
                "step": self._step,
                "compute_s": max(0.0, self._begin - self._last_end),
                "wait_s": now - self._begin,
                "comm_s": (stats["execution_ns"] - previous["execution_ns"]) / 1e9,
                "negotiation_s": (stats["negotiation_ns"] - previous["negotiation_ns"]) / 1e9,
                "bytes_sent": stats["bytes_sent"] - previous["bytes_sent"],
                "bytes_received": stats["bytes_received"] - previous["bytes_received"],
            })
        self._step += 1
        self._last_end, self._last_stats, self._begin = now, stats, None

    def records(self, last: int | None = None) -> list[dict]:
        """The recorded steps, oldest first (the ``last`` ones if given)."""
        records = list(self._records)
        return records[-last:] if last else records

    def summary(self, last: int | None = None) -> dict:
        """Median of every field over the recorded steps (and their number)."""
        records = self.records(last)
        if not records:
            return {"steps": 0}
        return {"steps": len(records), **{f: statistics.median(r[f] for r in records) for f in FIELDS}}


def advisor_steps() -> int:
    """Steps ``relaxrun --advise`` asked to observe before advising (RELAX_ADVISE; 0: not asked)."""
    try:
        return max(0, int(os.environ.get("RELAX_ADVISE", "0")))
    except ValueError:
        return 0


_current: StepTelemetry | None = None


def current() -> StepTelemetry | None:
    """The telemetry of the most recently created distributed optimizer in this process."""
    return _current


def new_recorder(capacity: int = 1000) -> StepTelemetry:
    """A recorder for a new distributed optimizer; it becomes what ``step_stats()`` reports."""
    global _current
    _current = StepTelemetry(capacity)
    return _current


def step_stats(last: int | None = None) -> list[dict]:
    """Per-step records of this rank's current distributed optimizer (see the module doc)."""
    return _current.records(last) if _current is not None else []
