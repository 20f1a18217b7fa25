"""What RELAX_HEAP_KEEP_MB's default buys in training: each mode as its own benchmarks/train.py job
with the setting on (64) and off (0), alternated (the order reverses every other repetition),
2 ranks on shared memory, the 8 x 512 MLP. torch DDP does not start relaxlib; it runs with and
without the same glibc settings given through glibc's own variables, to show what they do to a
library that keeps its buffers. Writes benchmarks/results/heap_keep.json (or --out).

    python benchmarks/heap_keep.py --reps 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train  # noqa: E402  (benchmarks/ is not a package)
import train_matrix  # noqa: E402
from train_matrix import MLP  # noqa: E402

MODES = {  # label: train.py arguments
    "compressed-sign": ["--algorithm", "compressed", "--codec", "sign"],
    "compressed-sign-unscaled": ["--algorithm", "compressed", "--codec", "sign", "--step-scale", "none"],
    "allreduce": ["--algorithm", "allreduce"],
    "ddp": ["--algorithm", "ddp"],
}
# The environment of each setting: relaxlib's variable, or for DDP glibc's equivalents.
SETTINGS = {
    "on": {"RELAX_HEAP_KEEP_MB": "64", "ddp": {"MALLOC_MMAP_THRESHOLD_": str(32 << 20),
                                               "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}},
    "off": {"RELAX_HEAP_KEEP_MB": "0", "ddp": {}},
}


def run_job(mode: str, setting: str, iters: int) -> dict:
    """One train.py job of ``mode`` under ``setting``; returns its median step and samples/s."""
    env = SETTINGS[setting]["ddp"] if mode == "ddp" else {"RELAX_HEAP_KEEP_MB": SETTINGS[setting]["RELAX_HEAP_KEEP_MB"]}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # train.py's mpirun passes this process's environment to the local ranks
    try:
        return train_matrix.run_job(mode, "shm", 2, "mlp", iters, mode_args=MODES[mode])
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", type=lambda s: s.split(","), default=list(MODES))
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--iters", type=int, default=8, help="timed iterations per job (2 batches each)")
    parser.add_argument("--out", type=Path, default=train.RESULTS / "heap_keep.json")
    args = parser.parse_args(argv)
    runs: dict[str, dict[str, list[dict]]] = {m: {"on": [], "off": []} for m in args.modes}
    failures = {m: {"on": 0, "off": 0} for m in args.modes}
    for rep in range(args.reps):
        order = [(m, s) for m in args.modes for s in ("on", "off")]
        for mode, setting in order if rep % 2 == 0 else reversed(order):
            try:
                result = run_job(mode, setting, args.iters)
            except RuntimeError as exc:  # counted, not retried: a job that crashes is a result too
                failures[mode][setting] += 1
                print(f"rep {rep} {mode:<26} {setting:<3} failed: {exc}", flush=True)
                continue
            runs[mode][setting].append(result)
            print(f"rep {rep} {mode:<26} {setting:<3} {result['samples_per_sec']:8.1f} samples/s per rank", flush=True)
    summary = {m: {s: {"samples_per_sec_median": statistics.median(r["samples_per_sec"] for r in runs[m][s]),
                       "samples_per_sec_range": [min(r["samples_per_sec"] for r in runs[m][s]),
                                                 max(r["samples_per_sec"] for r in runs[m][s])],
                       "step_ms_median": 1e3 * statistics.median(r["step_s"] for r in runs[m][s]),
                       "failed_jobs": failures[m][s]}
                   for s in ("on", "off") if runs[m][s]} for m in args.modes}
    report = {"benchmark": "heap_keep", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "np": 2, "link": "shm",
              "model": f"mlp {MLP['layers']} x {MLP['width']}", "reps": args.reps, "summary": summary, "runs": runs}
    args.out.write_text(json.dumps(report, indent=1))
    for mode, by_setting in summary.items():
        print(f"{mode:<26} " + "  ".join(f"{s} {r['samples_per_sec_median']:8.1f} ({r['failed_jobs']} failed)"
                                         for s, r in by_setting.items()) + " samples/s per rank, medians")


if __name__ == "__main__":
    main()
