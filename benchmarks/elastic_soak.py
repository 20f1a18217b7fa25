"""Elastic soak: many jobs of 4 ranks, a random live rank SIGKILLed every few seconds until one is
left, and what survived (benchmarks/elastic_soak_worker.py trains an MLP on digits).

Reports kills, recoveries (every survivor logged a reset), hangs (jobs past their timeout), lost
commits (a survivor that did not finish every batch, or survivors that disagree), batches redone
per kill, recovery time (from the kill to the last survivor's reset callback: detection, the
shrink and a fresh engine) as median and max, and final test accuracy against uninterrupted 4-rank
jobs. Writes benchmarks/results/elastic_soak.json and .png (``--plot-only`` redraws the PNG).

    python benchmarks/elastic_soak.py --jobs 17     # 3 kills each: 51 kills
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


def run_job(np: int, kills: int, interval: tuple[float, float], seed: int, timeout: float) -> dict:
    """One job: ``kills`` SIGKILLs of random live ranks, ``interval`` seconds apart (uniform)."""
    rng = random.Random(seed)
    command = [sys.executable, "-m", "relaxlib_launch.relaxrun", "-np", str(np), "--min-np", "1",
               sys.executable, str(WORKER)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
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
                os.kill(pids[victim], signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append({"world": victim, "t": time.time()})

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    timer = threading.Timer(timeout, process.kill)
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
    hung = timer.finished.is_set() and rc != 0
    timer.cancel()
    thread.join(1)
    recovery = []
    for k in killed:  # time from a kill to the last survivor's reset that followed it
        after = [r["t"] for r in resets if r["t"] >= k["t"]]
        later_kills = [o["t"] for o in killed if o["t"] > k["t"]]
        if later_kills:
            after = [t for t in after if t < min(later_kills)]
        survivors = np - len([o for o in killed if o["t"] <= k["t"]])
        if len(after) >= survivors:
            recovery.append(sorted(after)[survivors - 1] - k["t"])
    return {"seed": seed, "returncode": rc, "hung": hung, "kills": len(killed), "recoveries": len(recovery),
            "recovery_s": recovery, "redone_batches": [r["redone"] for r in resets],
            "survivors": len(done), "finished_all": bool(done) and all(d["batch"] == done[0]["batch"] for d in done),
            "agree": len({d["digest"] for d in done}) == 1, "accuracy": done[0]["accuracy"] if done else None,
            "batches": done[0]["batch"] if done else None}


def plot(results: dict, path: Path) -> None:
    """Recovery times (histogram) and final test accuracy of the soak's jobs against uninterrupted ones."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    summary = results["summary"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.hist([t for j in results["jobs"] for t in j["recovery_s"]], bins=20, color="tab:blue")
    left.set_xlabel("recovery time: kill to the last survivor's reset (s)")
    left.set_ylabel("kills")
    left.set_title(f"{summary['kills']} kills, {summary['recoveries']} recoveries, {summary['hangs']} hangs, "
                   f"{summary['lost_commits']} lost commits", fontsize=9)
    killed = [j["accuracy"] for j in results["jobs"] if j["accuracy"] is not None]
    whole = [b["accuracy"] for b in results["baselines"] if b["accuracy"] is not None]
    right.boxplot([whole, killed], tick_labels=["uninterrupted\n(4 ranks)", "3 ranks killed\n(4 -> 1)"])
    right.set_ylabel("test accuracy (digits)")
    right.set_title("same batches; the killed jobs end on one rank, so see fewer samples", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=17)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--baselines", type=int, default=3, help="uninterrupted jobs for the accuracy reference")
    parser.add_argument("--interval", type=float, nargs=2, default=(1.0, 2.5), help="seconds between kills")
    parser.add_argument("--timeout", type=float, default=180)
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
            jobs.append(run_job(args.np, args.np - 1, tuple(args.interval), index, args.timeout))
            j = jobs[-1]
            print(f"job {index}: kills {j['kills']}, recoveries {j['recoveries']}, survivors {j['survivors']}, "
                  f"rc {j['returncode']}, accuracy {j['accuracy']}", flush=True)
    recovery = [t for j in jobs for t in j["recovery_s"]]
    summary = {
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
