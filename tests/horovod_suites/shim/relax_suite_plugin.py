"""pytest plugin (``-p relax_suite_plugin``) loaded on every rank by run_suites.py.

Each rank appends one JSON line per event to ``$RELAX_SUITE_RESULTS/rank<R>.jsonl`` and flushes it
at once, so the outcome of every finished test survives a rank that is killed later (a hang, an
abort of the whole job): ``start`` when a test begins, ``report`` per phase (setup/call/teardown)
with the outcome and the first line of the error, ``finish`` at the end of the session. It also
refuses to run when ``import horovod`` does not resolve to the shim (e.g. a real Horovod source
tree on sys.path), unless ``RELAX_SUITE_REFERENCE=1`` (run_suites.py ``--reference``: Horovod
itself is measured on purpose). SIGUSR1 makes a rank write every thread's Python stack to
``rank<R>.stacks`` (faulthandler, which works while the main thread is blocked in C), so
run_suites.py can say where a hung job stood before it kills it.

With ``RELAX_SUITE_ALIGN=1`` (run_suites.py ``--align-tests``) every rank calls ``join()`` before
each test once relaxlib is initialized. A test that fails on some ranks only (an assertion on the
rank's own block) otherwise leaves the ranks in different tests for the rest of the job; joining
lets the ranks still inside the old test finish it (their remaining collectives complete or fail
as they do beside a joined rank) and realigns the numbering of unnamed operations, so each test
starts together, as in per-test mode, without an mpirun per test.
"""

import faulthandler
import json
import os
import signal
import sys
import time

_out = None
_stacks = None


def _rank():
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def _write(record):
    if _out is not None:
        record["t"] = round(time.time(), 3)
        _out.write(json.dumps(record) + "\n")
        _out.flush()


def first_error_line(report):
    """The exception line of a failed report (``E   ...``), else the last non-empty line."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    text = getattr(report, "longreprtext", "") or str(report.longrepr or "")
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("E "):
            return line[1:].strip()
    return lines[-1].strip() if lines else ""


def pytest_configure(config):
    global _out
    directory = os.environ.get("RELAX_SUITE_RESULTS")
    if directory:
        os.makedirs(directory, exist_ok=True)
        _out = open(os.path.join(directory, f"rank{_rank()}.jsonl"), "a", buffering=1)
        _write({"event": "configure", "rank": _rank(), "pid": os.getpid()})
        global _stacks
        _stacks = open(os.path.join(directory, f"rank{_rank()}.stacks"), "w")
        faulthandler.register(signal.SIGUSR1, file=_stacks, all_threads=True)


def pytest_collection_finish(session):
    horovod = sys.modules.get("horovod")
    reference = os.environ.get("RELAX_SUITE_REFERENCE") == "1"
    if horovod is not None and not reference and not getattr(horovod, "SHIM_MARKER", False):
        raise RuntimeError(f"'import horovod' found {horovod.__file__}, not the relaxlib shim: "
                           "run from a directory that does not contain a horovod/ package")
    _write({"event": "collected", "count": len(session.items)})


def pytest_runtest_logstart(nodeid, location):
    _write({"event": "start", "nodeid": nodeid})


def _align_ranks():
    """join() on every rank before a test, in whichever framework binding the suite imported
    (Horovod's own with ``RELAX_SUITE_REFERENCE=1``)."""
    if os.environ.get("RELAX_SUITE_REFERENCE") == "1":
        binding = sys.modules.get("horovod.torch") or sys.modules.get("horovod.tensorflow")
        if binding is None or not binding.is_initialized():
            return
    else:
        import relaxlib.basics as basics

        if not basics.is_initialized():
            return
        binding = sys.modules.get("relaxlib_torch") or sys.modules.get("relaxlib_tf")
        if binding is None:
            return
    started = time.time()
    try:
        binding.join()
        _write({"event": "aligned", "seconds": round(time.time() - started, 3)})
    except Exception as exc:  # noqa: BLE001 - a rank that shut relaxlib down cannot join; the test says so
        _write({"event": "align-failed", "message": str(exc)[:300]})


def pytest_runtest_setup(item):
    if os.environ.get("RELAX_SUITE_ALIGN") == "1":
        _align_ranks()


def pytest_runtest_logreport(report):
    context = getattr(report, "context", None)            # pytest's subtests: TF's graph_mode / eager_mode
    _write({"event": "report", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "subtest": getattr(context, "msg", None) if context is not None else None,
            "message": "" if report.passed else first_error_line(report)[:500],
            "duration": round(report.duration, 3),
            "longrepr": (getattr(report, "longreprtext", "") or "")[-6000:] if report.failed else ""})


def pytest_sessionfinish(session, exitstatus):
    _write({"event": "finish", "exitstatus": int(exitstatus)})
