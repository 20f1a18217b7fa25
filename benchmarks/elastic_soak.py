"""Elastic soak: many jobs of 4 ranks, a random live rank SIGKILLed (or, with ``--fault freeze``,
frozen with SIGSTOP) every few seconds until one is left, and what survived
(benchmarks/elastic_soak_worker.py trains an MLP on digits).

Reports kills, recoveries (every survivor logged a reset), hangs (jobs past their timeout), lost
commits (a survivor that did not finish every batch, or survivors that disagree), batches redone
per kill, recovery time (from the kill to the last survivor's reset callback: detection, the
shrink and a fresh engine) as median and max, and final test accuracy against uninterrupted 4-rank
jobs. Writes benchmarks/results/elastic_soak.json and .png (``--plot-only`` redraws the PNG).

    python benchmarks/elastic_soak.py --jobs 17     # 3 kills each: 51 kills
    python benchmarks/elastic_soak.py --jobs 17 --fault freeze --interval 2 5 --timeout 240 \
        --out benchmarks/results/elastic_soak_freeze.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "benchmarks" / "elastic_soak_worker.py"


def run_job(np: int, kills: int, interval: tuple[float, float], seed: int, timeout: float,
            fault: signal.Signals = signal.SIGKILL) -> dict:
    """One job: ``kills`` faults (``fault``: SIGKILL, or SIGSTOP to freeze) of random live ranks,
    ``interval`` seconds apart (uniform). The job runs in its own session, which is killed whole
    when it outlives ``timeout`` (mpirun's daemon and frozen ranks with it)."""
    rng = random.Random(seed)
    command = [sys.executable, "-m", "relaxlib_launch.relaxrun", "-np", str(np), "--min-np", "1",
               sys.executable, str(WORKER)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO,
                               start_new_session=True)
    pids, killed, resets, done = {}, [], [], []
    ready = threading.Event()

    def killer() -> None:
        ready.wait(timeout)
        for _ in range(kills):
            time.sleep(rng.uniform(*interval))
            live = [rank for rank in pids if rank not in {k["world"] for k in killed}]
            if process.poll() is not None or len(live) <= 1:
                return
            victim = rng.choice(live)
            try:
                os.kill(pids[victim], fault)
            except ProcessLookupError:
                continue
            killed.append({"world": victim, "t": time.time()})

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    timer = threading.Timer(timeout, _kill_session, (process,))
    timer.start()
    for line in process.stdout:
        if line.startswith("READY "):
            _, rank, pid = line.split()
            pids[int(rank)] = int(pid)
            if len(pids) == np:
                ready.set()
        elif line.startswith("RESET "):
            resets.append(json.loads(line[6:]))
        elif line.startswith("DONE "):
            done.append(json.loads(line[5:]))
    rc = process.wait()
    hung = timer.finished.is_set()  # anything of the job alive at its timeout
    timer.cancel()
    for pid in pids.values():  # a frozen rank nobody evicted would outlive the job
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    thread.join(1)
    recovery = [t for t in (recovery_seconds(np, index, k["t"], resets) for index, k in enumerate(killed))
                if t is not None]
    return {"seed": seed, "returncode": rc, "hung": hung, "kills": len(killed), "recoveries": len(recovery),
            "recovery_s": recovery, "redone_batches": [r["redone"] for r in resets],
            "survivors": len(done), "finished_all": bool(done) and all(d["batch"] == done[0]["batch"] for d in done),
            "agree": len({d["digest"] for d in done}) == 1, "accuracy": done[0]["accuracy"] if done else None,
            "batches": done[0]["batch"] if done else None,
            "faults_t": [k["t"] for k in killed], "resets": resets}


def recovery_seconds(np: int, index: int, at: float, resets: list[dict]) -> float | None:
    """Seconds from the ``index``-th fault (0-based, at time ``at``) to the last survivor's reset of
    the first world formed after it without that rank (of at most ``np - index - 1`` ranks: faults
    that come before the survivors recover are dealt with in one reset), or None if none was."""
    after = [r for r in resets if r["t"] >= at and r["size"] <= np - index - 1]
    if not after:
        return None
    size = min(after, key=lambda r: r["t"])["size"]
    members = sorted(r["t"] for r in after if r["size"] == size)
    return members[size - 1] - at if len(members) >= size else None


def _kill_session(process: subprocess.Popen) -> None:
    """SIGKILL to every process of the job's session (relaxrun, mpirun, prted, the ranks)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def plot(results: dict, path: Path) -> None:
    """Recovery times (histogram) and final test accuracy of the soak's jobs against uninterrupted ones."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    summary = results["summary"]
    fault = "freeze" if summary.get("fault") == "freeze" else "kill"
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.hist([t for j in results["jobs"] for t in j["recovery_s"]], bins=20, color="tab:blue")
    left.set_xlabel(f"recovery time: {fault} to the last survivor's reset (s)")
    left.set_ylabel(f"{fault}s")
    left.set_title(f"{summary['kills']} {fault}s, {summary['recoveries']} recoveries, {summary['hangs']} hangs, "
                   f"{summary['lost_commits']} lost commits", fontsize=9)
    killed = [j["accuracy"] for j in results["jobs"] if j["accuracy"] is not None]
    whole = [b["accuracy"] for b in results["baselines"] if b["accuracy"] is not None]
    faulted = "frozen" if fault == "freeze" else "killed"
    per_job = summary["kills"] // max(1, summary["jobs"])
    right.boxplot([whole, killed], tick_labels=["uninterrupted", f"{per_job} ranks {faulted}\nper job"])
    right.set_ylabel("test accuracy (digits)")
    right.set_title(f"same batches; the {faulted} jobs end on one rank, so see fewer samples", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=17)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--baselines", type=int, default=3, help="uninterrupted jobs for the accuracy reference")
    parser.add_argument("--interval", type=float, nargs=2, default=(1.0, 2.5), help="seconds between kills")
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--faults", type=int, default=None, help="faults per job (default: np - 1, down to one rank)")
    parser.add_argument("--fault", choices=("kill", "freeze"), default="kill",
                        help="kill: SIGKILL; freeze: SIGSTOP (the survivors must evict the frozen rank)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "elastic_soak.json")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from the JSON")
    args = parser.parse_args()
    if args.plot_only:
        plot(json.loads(args.out.read_text()), args.out.with_suffix(".png"))
        return
    jobs, baselines = [], []
    for index in range(max(args.jobs, args.baselines)):  # alternated: a baseline job between kill jobs
        if index < args.baselines:
            baselines.append(run_job(args.np, 0, tuple(args.interval), 10_000 + index, args.timeout))
        if index < args.jobs:
            faults = args.np - 1 if args.faults is None else args.faults
            jobs.append(run_job(args.np, faults, tuple(args.interval), index, args.timeout,
                                signal.SIGKILL if args.fault == "kill" else signal.SIGSTOP))
            j = jobs[-1]
            print(f"job {index}: kills {j['kills']}, recoveries {j['recoveries']}, survivors {j['survivors']}, "
                  f"rc {j['returncode']}, accuracy {j['accuracy']}", flush=True)
    recovery = [t for j in jobs for t in j["recovery_s"]]
    summary = {
        "fault": args.fault,
        "jobs": len(jobs), "kills": sum(j["kills"] for j in jobs), "recoveries": sum(j["recoveries"] for j in jobs),
        "hangs": sum(j["hung"] for j in jobs),
        "lost_commits": sum(1 for j in jobs if not (j["finished_all"] and j["agree"] and j["returncode"] == 0)),
        "recovery_s_median": statistics.median(recovery) if recovery else None,
        "recovery_s_max": max(recovery) if recovery else None,
        "redone_batches_median": statistics.median([b for j in jobs for b in j["redone_batches"]] or [0]),
        "accuracy_median": statistics.median([j["accuracy"] for j in jobs if j["accuracy"] is not None] or [0]),
        "uninterrupted_accuracy_median": statistics.median([b["accuracy"] for b in baselines
                                                            if b["accuracy"] is not None] or [0]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results = {"summary": summary, "jobs": jobs, "baselines": baselines}
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out.with_suffix(".png"))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
