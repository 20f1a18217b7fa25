"""An idle rank's tick: training steps with the tick held at the cycle time (1 ms, as before the
adaptive tick) against the default (doubling up to ``RELAX_IDLE_TICK_MAX``, 5 ms), alternated.

    python benchmarks/idle_tick.py --np 4 --bandwidth 200 --reps 2

While a rank waits in a negotiation round for a peer that is still computing, the peer's engine
answers each round on its tick; every such round costs every member CPU (over TCP a few tens of
microseconds each), which ranks sharing cores take from the framework. Each job is one
benchmarks/train.py run (the transformer language model, AdamW, synthetic text); the report gives
medians over repetitions of the step time, the engine's rounds per step and CPU per step, per
mode and tick. Writes benchmarks/results/idle_tick_np<N>[_<B>mbit].json and a PNG.
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

import powersgd_reference  # noqa: E402  (benchmarks/ is not a package)

RESULTS = Path(__file__).resolve().parent / "results"
TICKS = {"tick 1 ms": "1", "adaptive (default)": None}


def run_job(mode: str, tick: str | None, args: argparse.Namespace) -> dict:
    """One train.py job with RELAX_IDLE_TICK_MAX set to ``tick`` (None: the default)."""
    os.environ.pop("RELAX_IDLE_TICK_MAX", None)
    if tick is not None:
        os.environ["RELAX_IDLE_TICK_MAX"] = tick
    try:
        report = powersgd_reference.train_report(mode, args)
    finally:
        os.environ.pop("RELAX_IDLE_TICK_MAX", None)
    rank0 = report["raw"]["ranks"][0]
    steps = len(rank0["step_end_seconds"])
    return {"step_s": report["step_seconds_median"], "rounds_per_step": rank0["engine"]["rounds"] / steps,
            "cpu_s_per_step": rank0["cpu_seconds_per_step"]}


def plot(summary: dict, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = list(summary["modes"])
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.38
    for i, tick in enumerate(TICKS):
        ax.bar([m + (i - 0.5) * width for m in range(len(modes))],
               [1e3 * summary["modes"][mode][tick]["step_s"] for mode in modes], width, label=tick)
    ax.set_xticks(range(len(modes)), modes)
    ax.set_ylabel("step time (ms, median)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Runs the alternated jobs, writes the JSON and PNG, prints the speed-ups."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--bandwidth", type=float, help="Mbit/s per rank link (shaped; needs root)")
    parser.add_argument("--modes", default="powersgd-4,allreduce", help="train.py modes")
    parser.add_argument("--iters", type=int, default=10, help="timed iterations of 2 steps per job")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    args.model, args.lr = "transformer", 1e-3
    jobs = [(mode, tick) for mode in args.modes.split(",") for tick in TICKS]
    runs: dict[tuple[str, str], list[dict]] = {job: [] for job in jobs}
    started = time.perf_counter()
    for rep in range(args.reps):
        for mode, tick in (jobs if rep % 2 == 0 else list(reversed(jobs))):  # alternate the order
            runs[(mode, tick)].append(run_job(mode, TICKS[tick], args))
            print(f"  rep {rep} {mode:12} {tick:18} {runs[(mode, tick)][-1]}", flush=True)
    summary: dict = {"modes": {}}
    for (mode, tick), rs in runs.items():
        summary["modes"].setdefault(mode, {})[tick] = {
            key: statistics.median(r[key] for r in rs) for key in ("step_s", "rounds_per_step", "cpu_s_per_step")}
        summary["modes"][mode][tick]["runs"] = rs
    for ticks in summary["modes"].values():
        ticks["speedup"] = ticks["tick 1 ms"]["step_s"] / ticks["adaptive (default)"]["step_s"]
    link = f"{args.bandwidth:g} Mbit/s links" if args.bandwidth else "shared memory"
    summary["settings"] = {"np": args.np, "link": link, "model": "transformer", "iters": args.iters,
                           "reps": args.reps, "seconds": round(time.perf_counter() - started, 1),
                           "date": time.strftime("%Y-%m-%d")}
    suffix = f"_{int(args.bandwidth)}mbit" if args.bandwidth else ""
    out = args.out or RESULTS / f"idle_tick_np{args.np}{suffix}.json"
    out.write_text(json.dumps(summary, indent=1))
    plot(summary, out.with_suffix(".png"), f"idle tick: 1 ms against adaptive, transformer, {args.np} ranks, {link}")
    for mode, ticks in summary["modes"].items():
        print(f"{mode}: {ticks['speedup']:.2f}x with the adaptive tick "
              f"({ticks['tick 1 ms']['rounds_per_step']:.0f} -> {ticks['adaptive (default)']['rounds_per_step']:.0f} "
              "rounds per step)")
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
