"""Per-rank test results of a pytest run under mpirun, so a failure names the inner test and the rank.

Each rank's pytest (tests/conftest.py registers ``RankResultsPlugin`` when ``RELAX_RANK_RESULTS`` names a
folder) appends one JSON line per event to ``rank<N>.jsonl`` there, flushed as it goes: the test it starts,
each failed phase or finished test, and the end of the session. Written as it happens, a rank that crashes
or hangs still shows which test it was in. ``read_rank_results`` turns the files back into
``RankResults`` for the launching test.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

RESULTS_DIR_VARIABLE = "RELAX_RANK_RESULTS"


def current_rank() -> int:
    """This process's rank in its MPI job (Open MPI or a PMI launcher), 0 outside one."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def _crash_message(report) -> str:
    """The first line of a failed report's exception and where it was raised (the rest is in the rank's output)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        first = ((crash.message or "").strip().splitlines() or ["failed"])[0]
        return f"{first[:600]} ({Path(crash.path).name}:{crash.lineno})"
    text = str(report.longrepr or "").strip().splitlines()
    last = text[-1].strip() if text else "failed"
    return (last[1:].strip() if last.startswith("E ") else last)[:600]  # pytest's "E   " error-line prefix


class RankResultsPlugin:
    """Writes this rank's test events to ``<folder>/rank<N>.jsonl`` as they happen."""

    def __init__(self, folder: str | os.PathLike, rank: int | None = None):
        self.path = Path(folder) / f"rank{current_rank() if rank is None else rank}.jsonl"
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole session

    def _write(self, **event) -> None:
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()

    def pytest_runtest_logstart(self, nodeid, location):
        """Records the test this rank enters (the last one named if the rank never returns)."""
        self._write(event="start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report):
        """Records a failed setup/call/teardown, and the outcome of every test's call."""
        if report.failed:
            self._write(event="result", nodeid=report.nodeid, when=report.when, outcome="failed",
                        message=_crash_message(report))
        elif report.when == "call" or (report.when == "setup" and report.skipped):
            self._write(event="result", nodeid=report.nodeid, when=report.when, outcome=report.outcome,
                        seconds=round(report.duration, 3))

    def pytest_collectreport(self, report):
        """A module that fails to import or collect is a failure of its own."""
        if report.failed:
            self._write(event="result", nodeid=report.nodeid or "<collection>", when="collect", outcome="failed",
                        message=_crash_message(report))

    def pytest_sessionfinish(self, session, exitstatus):
        """Marks the rank's session as finished (a rank without it died or was killed)."""
        self._write(event="finish", exitstatus=int(exitstatus))
        self._file.close()


@dataclass
class RankResults:
    """What one rank's pytest recorded."""

    rank: int
    outcomes: dict[str, str] = field(default_factory=dict)        # nodeid -> passed / failed / skipped
    failures: list[tuple[str, str]] = field(default_factory=list)  # (nodeid, message), in order
    started: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)        # nodeid -> time its call took
    exitstatus: int | None = None                                  # None: the session never finished

    @property
    def unfinished_test(self) -> str | None:
        """The test this rank started last without reporting its call, if it never finished its session."""
        if self.exitstatus is not None or not self.started:
            return None
        last = self.started[-1]
        return None if last in self.outcomes else last


def read_rank_results(folder: str | os.PathLike, np: int) -> list[RankResults]:
    """Each rank's results from the files ``RankResultsPlugin`` wrote (empty ones for ranks that wrote none)."""
    results = []
    for rank in range(np):
        res = RankResults(rank)
        path = Path(folder) / f"rank{rank}.jsonl"
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill
                continue
            if event.get("event") == "start":
                res.started.append(event["nodeid"])
            elif event.get("event") == "result":
                nodeid = event["nodeid"]
                if event["outcome"] == "failed":
                    res.failures.append((nodeid, event.get("message", "")))
                    res.outcomes[nodeid] = "failed"
                else:
                    res.outcomes.setdefault(nodeid, event["outcome"])
                    if "seconds" in event:
                        res.seconds[nodeid] = event["seconds"]
            elif event.get("event") == "finish":
                res.exitstatus = event["exitstatus"]
        results.append(res)
    return results


def _in_module(nodeid: str, module: str | None) -> bool:
    return module is None or nodeid.split("::")[0].endswith("/" + module) or nodeid.split("::")[0] == module


def failure_lines(results: list[RankResults], module: str | None = None, *, timed_out: bool = False) -> list[str]:
    """One line per problem, "rank R: <test> — <message>", limited to ``module`` when given.

    Also a rank that never finished (naming the test it was in), and a rank that ran no test of
    ``module`` at all: a module whose tests did not run has not passed.
    """
    lines = []
    for res in results:
        for nodeid, message in res.failures:
            if _in_module(nodeid, module):
                lines.append(f"rank {res.rank}: {nodeid} — {message}")
        unfinished = res.unfinished_test
        if unfinished is not None and _in_module(unfinished, module):
            how = "killed at the timeout" if timed_out else "the rank ended"
            lines.append(f"rank {res.rank}: {unfinished} — did not finish ({how} inside it)")
        elif res.exitstatus is None and res.started and _in_module(res.started[-1], module):
            lines.append(f"rank {res.rank}: ended after {res.started[-1]} without finishing its pytest session")
        ran = [n for n in res.outcomes if _in_module(n, module)]
        if not ran and not any(_in_module(n, module) for n, _ in res.failures) and unfinished is None:
            where = f"of {module} " if module else ""
            state = "" if res.exitstatus is not None else " (its session never finished)"
            lines.append(f"rank {res.rank}: no test {where}ran{state}")
    return lines
