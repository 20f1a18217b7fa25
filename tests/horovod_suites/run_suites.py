#!/usr/bin/env python
"""Runs Horovod's own parallel test suites against relaxlib through the import shim in ./shim.

    python tests/horovod_suites/run_suites.py --horovod /work/horovod --suite torch --np 2 --mode per-test

Horovod is not part of this repository: fetch it and check out v0.28.1 anywhere outside the repo,
then point ``--horovod`` at that work tree. ``job`` mode runs one ``mpirun -np N python -m pytest
<suite>``; ``per-test`` mode collects the test ids once and runs one mpirun per test (slower, but
one failing or hanging test cannot disturb the others). Every rank records each test's outcome
(shim/relax_suite_plugin.py); a test passes only if it passes on every rank, and a test skipped on
every rank is not applicable. See README.md in this directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIM = HERE / "shim"
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests"))
from mpi_launch import mpirun_prefix  # noqa: E402

SUITES = {"torch": "test/parallel/test_torch.py", "tensorflow": "test/parallel/test_tensorflow.py"}
STARTUP_SECONDS = {"torch": 30, "tensorflow": 60}     # import + init allowance per mpirun, per-test mode


def build_env(results_dir: Path, args, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Every rank's environment: the shim first on the path (or, with ``--reference``, a real
    Horovod install before it), the plugin's result directory, and ``--env`` settings."""
    env = dict(os.environ)
    first = [args.reference] if args.reference else []
    env.update({
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "PYTHONPATH": os.pathsep.join(first + [str(SHIM), str(REPO)] +
                                      ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "TF_CPP_MIN_LOG_LEVEL": env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        "RELAX_STALL_CHECK_TIME": env.get("RELAX_STALL_CHECK_TIME", "20"),   # as tests/mpi_launch.py
        "RELAX_SUITE_RESULTS": str(results_dir),
        "RELAX_SUITE_REFERENCE": "1" if args.reference else "",
    })
    for item in list(args.env) + list(extra):
        key, _, value = item.partition("=")
        env[key] = value
    return env


def pytest_args(args) -> list[str]:
    # -s: the engine's own warnings (stalls, mismatches) reach the per-rank output files as they
    # happen, instead of being held by pytest until a test ends (a hung test never ends).
    cmd = [args.python, "-m", "pytest", "-p", "relax_suite_plugin", "-p", "no:cacheprovider", "-q", "-rfE", "-s",
           "--tb=short", "--color=no", f"--timeout={args.timeout}", f"--timeout-method={args.timeout_method}"]
    return cmd


def run_mpirun(cmd: list[str], cwd: Path, env: dict, timeout: float) -> tuple[int | None, bool, float, str]:
    """Runs one mpirun in its own process group; kills the group after ``timeout`` seconds."""
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        dump_rank_stacks(proc.pid)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    return proc.returncode, timed_out, time.time() - start, out or ""


def dump_rank_stacks(session: int) -> None:
    """Asks every rank of a hung job (the pytest processes in mpirun's session) for its Python stacks."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            sid = int(stat.rsplit(")", 1)[1].split()[3])  # state ppid pgrp session
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if sid == session and b"relax_suite_plugin" in cmdline:
            pids.append(int(entry.name))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    if pids:
        time.sleep(3)


def hung_where(stacks_file: Path, suite_file: str) -> str:
    """From a faulthandler dump: the innermost frame of the thread running pytest, and the test's line."""
    if not stacks_file.exists():
        return ""
    blocks = stacks_file.read_text(errors="replace").split("\n\n")
    for block in blocks:
        lines = [line.strip() for line in block.splitlines() if line.strip().startswith("File ")]
        if any("_pytest" in line for line in lines):
            test_line = next((line for line in lines if suite_file in line), "")
            inner = lines[0] if lines else ""
            return f"blocked at {inner}" + (f" (from {test_line})" if test_line and test_line != inner else "")
    return ""


def short_id(nodeid: str) -> str:
    """``test/parallel/test_torch.py::TorchTests::test_x`` -> ``TorchTests::test_x``."""
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def read_rank_records(results_dir: Path, np_: int) -> list[list[dict]]:
    ranks = []
    for rank in range(np_):
        path = results_dir / f"rank{rank}.jsonl"
        records = []
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    pass          # a line cut by a kill
        ranks.append(records)
    return ranks


def rank_outcomes(records: list[dict], died: str, where: str = "") -> dict[str, dict]:
    """Per test of one rank: status passed / failed / skipped / <died> (started, never finished)."""
    tests: dict[str, dict] = {}
    for rec in records:
        if rec.get("event") == "start":
            tests.setdefault(short_id(rec["nodeid"]), {"reports": []})
        elif rec.get("event") == "report":
            tests.setdefault(short_id(rec["nodeid"]), {"reports": []})["reports"].append(rec)
    result = {}
    for test, info in tests.items():
        reports = info["reports"]
        failed = [r for r in reports if r["outcome"] == "failed"]
        finished = any(r["when"] == "teardown" for r in reports)
        never_finished = f"started but never finished ({died})" + (f"; {where}" if where else "")
        if failed:
            parts: list[str] = []                 # one message per failing phase / subtest (TF: graph_mode, eager_mode)
            for rep in failed:
                label = rep.get("subtest") or ("" if rep["when"] == "call" else f"in {rep['when']}")
                text = (f"[{label}] " if label else "") + rep["message"]
                if text not in parts:
                    parts.append(text)
            if not finished:
                parts.append(never_finished)
            result[test] = {"status": "failed", "message": " | ".join(parts),
                            "failed_subtests": sorted({r["subtest"] for r in failed if r.get("subtest")}),
                            "longrepr": "\n----\n".join(r.get("longrepr", "") for r in failed)[-12000:]}
            continue
        if not finished and not any(r["outcome"] == "skipped" for r in reports):
            result[test] = {"status": died, "message": never_finished}
            continue
        calls = [r for r in reports if r["when"] == "call"]
        # TensorFlow's run_in_graph_and_eager_modes runs a test as two subtests (graph_mode,
        # eager_mode) and the test itself then "passes" even when both subtests skipped: judge by
        # the subtests. Records without the "subtest" field: every call report but the last one.
        subtests = [r for r in calls if r.get("subtest")] or calls[:-1]
        judged = subtests or calls
        if any(r["outcome"] == "passed" for r in judged):
            result[test] = {"status": "passed"}
            skipped_parts = [r for r in subtests if r["outcome"] == "skipped"]
            if skipped_parts:
                result[test]["note"] = "; ".join(f"[{r.get('subtest') or 'subtest'}] {r['message']}"
                                                 for r in skipped_parts)
        elif any(r["outcome"] == "skipped" for r in reports):
            reason = next(r["message"] for r in reports if r["outcome"] == "skipped")
            result[test] = {"status": "skipped", "message": reason}
        else:
            result[test] = {"status": died, "message": never_finished}
    return result


def outcomes_of(directory: Path, np_: int, timed_out: bool, suite_file: str) -> list[dict]:
    """Every rank's per-test outcomes from the records one mpirun left in ``directory``."""
    return [rank_outcomes(records, "hung" if timed_out else "crashed",
                          hung_where(directory / f"rank{i}.stacks", suite_file) if timed_out else "")
            for i, records in enumerate(read_rank_records(directory, np_))]


def merge_ranks(test: str, per_rank: list[dict]) -> dict:
    """One test over all ranks: passes only if it passed on every rank."""
    statuses = [r.get(test, {"status": "not run"})["status"] for r in per_rank]
    ranks = {str(i): r.get(test, {"status": "not run"}) for i, r in enumerate(per_rank)}
    if all(s == "passed" for s in statuses):
        status = "passed"
    elif all(s == "skipped" for s in statuses):
        status = "skipped"
    elif all(s == "not run" for s in statuses):
        status = "not run"
    elif "failed" in statuses:
        status = "failed"
    elif "hung" in statuses:
        status = "hung"
    elif "crashed" in statuses:
        status = "crashed"
    elif set(statuses) <= {"passed", "skipped"}:
        status = "mixed"            # skipped on some ranks only: counted as not passed
    else:
        status = "not run"
    messages = []
    order = sorted(range(len(statuses)), key=lambda i: "ShutdownError" in ranks[str(i)].get("message", ""))
    for i in order:          # a rank's own error first, its peers' "rank N shut down" after
        s = statuses[i]
        msg = ranks[str(i)].get("message")
        if s not in ("passed", "skipped") and msg and msg not in [m for _, m in messages]:
            messages.append((i, msg))
    return {"status": status, "ranks": ranks,
            "message": "; ".join(f"rank {i}: {m}" for i, m in messages) if messages else
            (ranks["0"].get("message", "") if status == "skipped" else "")}


def collect(args, suite: str) -> list[str]:
    suite_path = Path(args.horovod) / SUITES[suite]
    env = build_env(Path(args.out) / "collect", args)
    env.pop("RELAX_SUITE_RESULTS")
    cmd = [args.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(suite_path)]
    if args.k:
        cmd += ["-k", args.k]
    proc = subprocess.run(cmd, cwd=suite_path.parent, env=env, capture_output=True, text=True, timeout=300)
    ids = [short_id(line.strip()) for line in proc.stdout.splitlines() if "::" in line]
    if not ids:
        raise SystemExit(f"collecting {suite_path} found no tests:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return ids


def run_job(args, suite: str, np_: int) -> dict:
    suite_path = Path(args.horovod) / SUITES[suite]
    mode = "job-aligned" if args.align_tests else "job"
    out_dir = Path(args.out) / f"{suite}-np{np_}-{mode}"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    env = build_env(out_dir, args, ("RELAX_SUITE_ALIGN=1",) if args.align_tests else ())
    cmd = mpirun_prefix(np_) + ["--output-filename", str(out_dir / "output")] + pytest_args(args) + \
        [str(suite_path)] + (["-k", args.k] if args.k else [])
    print(f"$ {' '.join(cmd)}    (cwd {suite_path.parent}; outer timeout {args.job_timeout}s)", flush=True)
    rc, timed_out, elapsed, launcher = run_mpirun(cmd, suite_path.parent, env, args.job_timeout)
    (out_dir / "mpirun.log").write_text(launcher)
    if timed_out:
        print(f"!! mpirun outlived its timeout of {args.job_timeout}s: the job hung and was killed", flush=True)
    per_rank = outcomes_of(out_dir, np_, timed_out, suite_path.name)
    finished = [any(rec.get("event") == "finish" for rec in r) for r in read_rank_records(out_dir, np_)]
    try:
        ids = collect(args, suite)
    except Exception as exc:  # noqa: BLE001 - fall back to the tests the ranks saw
        print(f"(collection failed: {exc}); using the tests the ranks reported", flush=True)
        ids = sorted({t for r in per_rank for t in r})
    tests = {t: merge_ranks(t, per_rank) for t in ids}
    return {"suite": suite, "np": np_, "mode": mode, "command": cmd, "returncode": rc, "timed_out": timed_out,
            "elapsed_s": round(elapsed, 1), "ranks_finished": finished, "output_dir": str(out_dir), "tests": tests}


def run_per_test(args, suite: str, np_: int) -> dict:
    suite_path = Path(args.horovod) / SUITES[suite]
    out_dir = Path(args.out) / f"{suite}-np{np_}-per-test"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    ids = collect(args, suite)
    print(f"{suite} np{np_} per-test: {len(ids)} tests collected", flush=True)
    timeout = args.timeout + STARTUP_SECONDS[suite]
    tests = {}
    start = time.time()
    for index, test in enumerate(ids):
        test_dir = out_dir / f"{index:03d}"
        for attempt in range(args.retries + 1):
            shutil.rmtree(test_dir, ignore_errors=True)
            test_dir.mkdir()
            env = build_env(test_dir, args)
            cmd = mpirun_prefix(np_) + ["--output-filename", str(test_dir / "output")] + pytest_args(args) + \
                [f"{suite_path}::{test}"]
            if index == 0 and attempt == 0:
                print(f"$ {' '.join(cmd)}    (cwd {suite_path.parent}; outer timeout {timeout}s)", flush=True)
            rc, timed_out, elapsed, launcher = run_mpirun(cmd, suite_path.parent, env, timeout)
            (test_dir / "mpirun.log").write_text(launcher)
            merged = merge_ranks(test, outcomes_of(test_dir, np_, timed_out, suite_path.name))
            if merged["status"] != "not run":
                break
            # Never started: typically an import error while the project is being rebuilt under us.
            errors = [line[1:].strip() for line in launcher.splitlines() if line.startswith("E ")]
            merged["message"] = (f"mpirun {'timed out' if timed_out else f'exited {rc}'} before the test started: "
                                 + (errors[-1] if errors else (launcher.strip().splitlines() or [""])[-1])[:300])
            if attempt < args.retries:
                print(f"    {test} did not start ({merged['message'][:200]}); retrying in {args.retry_wait}s",
                      flush=True)
                time.sleep(args.retry_wait)
        merged.update({"returncode": rc, "timed_out": timed_out, "elapsed_s": round(elapsed, 1),
                       "output_dir": str(test_dir)})
        tests[test] = merged
        if merged["status"] in ("passed", "skipped"):
            shutil.rmtree(test_dir / "output", ignore_errors=True)
        print(f"[{index + 1}/{len(ids)}] {merged['status']:8s} {elapsed:5.1f}s {test}"
              + (f"  -- {merged['message'][:200]}" if merged["status"] not in ("passed", "skipped") else ""),
              flush=True)
    return {"suite": suite, "np": np_, "mode": "per-test", "command_template": cmd[:-1] + ["<suite>::<test>"],
            "elapsed_s": round(time.time() - start, 1), "output_dir": str(out_dir), "tests": tests}


def summarize(run: dict) -> dict:
    counts: dict[str, int] = {}
    for info in run["tests"].values():
        counts[info["status"]] = counts.get(info["status"], 0) + 1
    applicable = len(run["tests"]) - counts.get("skipped", 0)
    run["summary"] = {"passed": counts.get("passed", 0), "applicable": applicable, "total": len(run["tests"]),
                      "counts": counts}
    return run


def print_run(run: dict) -> None:
    s = run["summary"]
    others = "".join(f"; {n} {k}" for k, n in sorted(s["counts"].items()) if k != "passed")
    print(f"\n{run['suite']} np{run['np']} {run['mode']}: {s['passed']} / {s['applicable']} passed "
          f"({s['total']} tests{others}; {run['elapsed_s']}s)")
    if run.get("timed_out"):
        print("  the job hung and was killed by the outer timeout")
    not_run = [t for t, i in run["tests"].items() if i["status"] == "not run"]
    for test, info in run["tests"].items():
        if info["status"] not in ("passed", "skipped", "not run"):
            print(f"  {info['status'].upper():7s} {test}: {info['message'][:300]}")
    if not_run:
        print(f"  NOT RUN ({len(not_run)}): {', '.join(not_run[:8])}{' ...' if len(not_run) > 8 else ''}")


def compare(ours_path: str, reference_path: str) -> int:
    """Prints, for every (suite, ranks) both stored --json results hold, the tests one passes and
    the other does not; returns 1 if relaxlib (the first) fails a test the reference passes."""
    ours, reference = (json.loads(Path(p).read_text()) for p in (ours_path, reference_path))
    regressions = 0
    for theirs in reference["runs"]:
        for run in ours["runs"]:
            if (run["suite"], run["np"]) != (theirs["suite"], theirs["np"]):
                continue
            ours_passed = {t for t, i in run["tests"].items() if i["status"] == "passed"}
            their_passed = {t for t, i in theirs["tests"].items() if i["status"] == "passed"}
            only_theirs = sorted(their_passed - ours_passed)
            only_ours = sorted(ours_passed - their_passed)
            regressions += len(only_theirs)
            print(f"\n{run['suite']} np{run['np']}: {run['mode']} {len(ours_passed)} passed against "
                  f"{theirs['mode']} {len(their_passed)} ({reference.get('against', reference_path)})")
            for test in only_theirs:
                print(f"  ONLY THE REFERENCE PASSES {test}: {run['tests'].get(test, {}).get('status', 'absent')}, "
                      f"{run['tests'].get(test, {}).get('message', '')[:200]}")
            for test in only_ours:
                print(f"  only relaxlib passes {test}: {theirs['tests'].get(test, {}).get('status', 'absent')}, "
                      f"{theirs['tests'].get(test, {}).get('message', '')[:200]}")
    return 1 if regressions else 0


def rescore(run: dict) -> dict:
    """Recomputes a stored run's outcomes from the per-rank records it left in its output dirs."""
    np_, suite_file = run["np"], Path(SUITES[run["suite"]]).name
    if run["mode"].startswith("job"):
        per_rank = outcomes_of(Path(run["output_dir"]), np_, bool(run.get("timed_out")), suite_file)
        run["tests"] = {t: merge_ranks(t, per_rank) for t in run["tests"]}
        return run
    for test, old in list(run["tests"].items()):
        merged = merge_ranks(test, outcomes_of(Path(old["output_dir"]), np_, old.get("timed_out", False), suite_file))
        if merged["status"] == "not run":
            merged["message"] = old.get("message", "")
        merged.update({k: old[k] for k in ("returncode", "timed_out", "elapsed_s", "output_dir") if k in old})
        run["tests"][test] = merged
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--horovod", required=True, help="Horovod v0.28.1 work tree (outside this repo)")
    parser.add_argument("--suite", choices=["torch", "tensorflow", "both"], default="torch")
    parser.add_argument("--np", type=int, action="append", help="ranks (repeatable; default 2)")
    parser.add_argument("--mode", choices=["job", "per-test", "both"], default="per-test")
    parser.add_argument("--timeout", type=int, default=60, help="pytest-timeout seconds per test")
    parser.add_argument("--timeout-method", choices=["signal", "thread"], default="signal")
    parser.add_argument("--job-timeout", type=int, default=3600, help="outer seconds on a whole-suite mpirun")
    parser.add_argument("--json", help="write every result to this JSON file")
    parser.add_argument("-k", help="pytest -k expression")
    parser.add_argument("--align-tests", action="store_true",
                        help="job mode: every rank calls join() before each test (shim/relax_suite_plugin.py), so "
                             "a test failing on some ranks only cannot leave the ranks in different tests")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for every rank (repeatable)")
    parser.add_argument("--out", default="/tmp/horovod_suites", help="raw outputs (per rank) go here")
    parser.add_argument("--reference", metavar="DIR", help="run the suites against Horovod itself, installed in DIR "
                        "(e.g. pip install --target DIR horovod), instead of relaxlib: the baseline on this machine")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--retries", type=int, default=2, help="per-test mode: reruns of a test whose mpirun "
                        "failed before the test started (e.g. an import error during a rebuild)")
    parser.add_argument("--retry-wait", type=int, default=60, help="seconds before such a rerun")
    parser.add_argument("--rescore", metavar="JSON", help="run nothing: re-read the per-rank records of a stored "
                        "--json result (its output dirs must still exist) and print (and --json) it again")
    parser.add_argument("--compare", nargs=2, metavar=("OURS_JSON", "REFERENCE_JSON"),
                        help="run nothing: list the tests that one stored --json result passes and the other "
                             "does not (e.g. relaxlib against a --reference run); exit 1 if the reference passes "
                             "a test relaxlib fails")
    if "--rescore" in sys.argv or "--compare" in sys.argv:      # --horovod is not needed then
        for action in parser._actions:
            action.required = False
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.rescore:
        stored = json.loads(Path(args.rescore).read_text())
        stored["runs"] = [summarize(rescore(run)) for run in stored["runs"]]
        if args.json:
            Path(args.json).write_text(json.dumps(stored, indent=1))
        for run in stored["runs"]:
            print_run(run)
        return 0
    args.horovod = str(Path(args.horovod).resolve())
    if (Path(args.horovod).resolve() == REPO) or REPO in Path(args.horovod).resolve().parents:
        parser.error("--horovod must be outside this repository")
    if args.reference:
        args.reference = str(Path(args.reference).resolve())
        if not (Path(args.reference) / "horovod").is_dir():
            parser.error(f"--reference {args.reference} holds no horovod package")
    print(f"against: {args.reference or 'relaxlib (shim)'}", flush=True)
    suites = ["torch", "tensorflow"] if args.suite == "both" else [args.suite]
    modes = ["per-test", "job"] if args.mode == "both" else [args.mode]
    runs = []
    for suite in suites:
        if not (Path(args.horovod) / SUITES[suite]).exists():
            parser.error(f"{Path(args.horovod) / SUITES[suite]} does not exist")
        for np_ in args.np or [2]:
            for mode in modes:
                run = summarize(run_per_test(args, suite, np_) if mode == "per-test" else run_job(args, suite, np_))
                print_run(run)
                runs.append(run)
                if args.json:
                    stored = {"horovod": args.horovod, "against": args.reference or "relaxlib", "runs": runs}
                    Path(args.json).write_text(json.dumps(stored, indent=1))
    print("\nSUMMARY")
    for run in runs:
        s = run["summary"]
        print(f"{run['suite']} np{run['np']} {run['mode']}: {s['passed']} / {s['applicable']}")
    return 0 if all(r["summary"]["passed"] == r["summary"]["applicable"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
