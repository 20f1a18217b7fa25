"""Launching real MPI ranks from tests: every multi-rank test goes through ``run_ranks``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rank_results import RESULTS_DIR_VARIABLE, RankResults, failure_lines, read_rank_results

from relaxlib_launch.mpirun_command import mpirun_argv, mpirun_environment

REPO = Path(__file__).resolve().parent.parent


@dataclass
class RankRun:
    """Outcome of one mpirun: exit code and each rank's captured output."""

    returncode: int
    outputs: list[str]
    launcher_output: str
    timed_out: bool
    results: list[RankResults] | None = None  # each rank's pytest results (run_pytest_on_ranks only)

    def failures(self, module: str | None = None) -> list[str]:
        """"rank R: <inner test> — <message>" for each inner test that failed (in ``module`` if given)."""
        return [] if self.results is None else failure_lines(self.results, module, timed_out=self.timed_out)

    def report(self, module: str | None = None) -> str:
        """The failing inner tests rank by rank first, then all output rank by rank, for assertion messages."""
        parts = [f"mpirun exit code {self.returncode}{' (TIMED OUT)' if self.timed_out else ''}"]
        failed = self.failures(module)
        if failed:
            parts += ["--- failed on ranks ---", *failed]
        parts += ["--- mpirun ---", self.launcher_output[-4000:]]
        for rank, text in enumerate(self.outputs):
            parts += [f"--- rank {rank} ---", text[-8000:]]
        return "\n".join(parts)

    def check(self, module: str | None = None) -> None:
        """Fails (naming rank and inner test first) unless every rank passed; with ``module``, only its tests'
        failures count (other modules of a shared launch answer for theirs), but a job that failed with no
        inner test to blame (a crash at exit, say) fails every module."""
        assert not self.failures(module), self.report(module)
        assert self.returncode == 0 or self.failures(), self.report()


def mpirun_prefix(np: int, extra_args: list[str] | None = None) -> list[str]:
    """mpirun with the options every test launch needs on this kind of machine."""
    return mpirun_argv(np, oversubscribe=True, extra_args=extra_args or [])


def rank_output_files(out_dir: Path, rank: int) -> list[Path]:
    """The files ``mpirun --output-filename <out_dir>/rank`` wrote for ``rank``, stdout first.

    Open MPI 4 makes a folder per rank (``rank/1/rank.N/stdout``, ``.../stderr``); Open MPI 5
    (PRRTE) writes ``rank.<job>@1.N.out`` and ``.err`` instead. (Its ``--output dir=`` form, which
    would give folders again, loses ranks' stdout in 5.0.11: PMIX_ERR_EXISTS.)
    """
    return [*out_dir.glob(f"rank/*/rank.{rank}/stdout"), *out_dir.glob(f"rank.*.{rank}.out"),
            *out_dir.glob(f"rank/*/rank.{rank}/stderr"), *out_dir.glob(f"rank.*.{rank}.err")]


def _log_launch(np: int, argv: list[str], seconds: float) -> None:
    """One line per launch (test, ranks, seconds, what ran) into $RELAX_TEST_LAUNCH_LOG when it is set: where
    the suite's time goes (rank start-up dominates on 2 cores, so the number of launches is what counts)."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    what = " ".join(Path(a).name if "/" in a else a for a in argv if a.startswith("/") or not a.startswith("-"))
    _log_lines([f"{seconds:7.1f}s np={np} {test} :: {what[:300]}"])


def _log_lines(lines: list[str]) -> None:
    log = os.environ.get("RELAX_TEST_LAUNCH_LOG")
    if log:
        with open(log, "a") as out:
            out.write("".join(line + "\n" for line in lines))


def run_ranks(np: int, argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 300,
              mpi_args: list[str] | None = None) -> RankRun:
    """Runs ``argv`` on ``np`` ranks; kills the whole job if it outlives ``timeout`` seconds."""
    full_env = mpirun_environment(PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                                  PYTHONUNBUFFERED="1",
                                  RELAX_STALL_CHECK_TIME=os.environ.get("RELAX_STALL_CHECK_TIME", "20"))
    full_env.update(env or {})
    with tempfile.TemporaryDirectory(prefix="relax-ranks-") as out_dir:
        cmd = mpirun_prefix(np, mpi_args) + ["--output-filename", str(Path(out_dir) / "rank")] + argv
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        timed_out = False
        try:
            launcher_output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            launcher_output, _ = proc.communicate()
        outputs = ["\n".join(f.read_text(errors="replace") for f in rank_output_files(Path(out_dir), rank))
                   for rank in range(np)]
    _log_launch(np, argv, time.monotonic() - started)
    return RankRun(proc.returncode, outputs, launcher_output or "", timed_out)


def run_pytest_on_ranks(np: int, modules: str | list[str], *, env: dict[str, str] | None = None,
                        timeout: float = 600, per_test_timeout: int = 120) -> RankRun:
    """Runs tests/parallel modules under one pytest on every rank (each rank asserts its own results).

    One launch for several modules saves each rank's start (importing TensorFlow or torch takes seconds
    per rank). The result carries every rank's inner test results (``RankRun.failures``).
    """
    modules = [modules] if isinstance(modules, str) else list(modules)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short", "--color=no",
            f"--timeout={per_test_timeout}", *(str(REPO / "tests" / "parallel" / m) for m in modules)]
    with tempfile.TemporaryDirectory(prefix="relax-results-") as results_dir:
        run = run_ranks(np, argv, env={**(env or {}), RESULTS_DIR_VARIABLE: results_dir}, timeout=timeout)
        run.results = read_rank_results(results_dir, np)
    if run.results and run.results[0].seconds:
        inner = run.results[0].seconds
        slowest = sorted(inner.items(), key=lambda item: -item[1])[:8]
        _log_lines([f"    {sum(inner.values()):7.1f}s in {len(inner)} inner tests on rank 0, the slowest:",
                    *(f"    {seconds:7.1f}s {nodeid.split('/')[-1]}" for nodeid, seconds in slowest)])
    return run
