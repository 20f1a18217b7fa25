"""Throughput with one straggler: 4 ranks, the last one slowed 1x/2x/3x/5x (its sleep-calibrated
compute takes that much longer), every model-averaging mode against all-reduce and DDP.

Model: 8 sleep layers (forward 40 ms, backward 80 ms per step, 1 MB of parameters each). Ranks
report their own samples/sec; the figure of merit is the total over the 4 ranks, relative to the
same mode without a straggler; averagings per step tell how often each rank actually mixed
its model with a peer (modes that do not wait may average less). Expected: lock-step modes
(all-reduce, DDP, and partial all-reduce with static or random groups, decentralized over a
ring) fall towards 1/k, the slow rank setting everyone's
pace; smart partial all-reduce and async averaging stay near (3 + 1/k)/4.

    python benchmarks/straggler_sweep.py            (~10 minutes)
    python benchmarks/straggler_sweep.py --bandwidth 1000 --factors 1 --out-name shaped_link

Writes benchmarks/results/straggler_sweep.json and .png (or --out-name).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
COMMON = ["--np", "4", "--model", "sleep", "--layers", "8", "--width", "262144", "--forward-ms", "40",
          "--backward-ms", "80", "--num-warmup-batches", "3", "--num-batches-per-iter", "2", "--quiet"]
MODES = ("allreduce", "ddp", "decentralized-ring", "decentralized-random", "partial-static", "partial-random",
         "partial-smart", "async")


def total_rate(extra: list[str]) -> tuple[float, list[float], list[float | None]]:
    """(total samples/s, per-rank samples/s, per-rank averagings per step) of one run."""
    report = train.run(train.parse_args(COMMON + extra + ["--out", "/tmp/relax_straggler_run.json"]))
    return (report["samples_per_sec_total"], report["per_rank_samples_per_sec"],
            report["per_rank_averagings_per_step"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--factors", default="1,2,3,5", help="slowdowns of the last rank")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--num-iters", type=int, default=6)
    parser.add_argument("--bandwidth", type=float, help="Mbit/s per rank link (shaped; needs root)")
    parser.add_argument("--out-name", default="straggler_sweep")
    args = parser.parse_args()
    factors = [float(f) for f in args.factors.split(",")]
    modes = args.modes.split(",")
    extra = ["--num-iters", str(args.num_iters)] + (["--bandwidth", str(args.bandwidth)] if args.bandwidth else [])
    rows = []
    for factor in factors:
        for mode in modes:
            straggle = ["--straggler", f"3:{factor:g}"] if factor != 1 else []
            runs = [total_rate(train.mode_arguments(mode) + straggle + extra) for _ in range(args.reps)]
            total = statistics.median(r[0] for r in runs)
            _, per_rank, averagings = runs[len(runs) // 2]
            rows.append({"mode": mode, "slowdown": factor, "samples_per_sec_total": total,
                         "per_rank_samples_per_sec": per_rank, "per_rank_averagings_per_step": averagings})
            mixing = "" if averagings[0] is None else "  averagings/step " + " ".join(f"{a:.2f}" for a in averagings)
            print(f"slowdown {factor:g}x  {mode:22s} total {total:7.1f} samples/s  per rank "
                  + " ".join(f"{x:.1f}" for x in per_rank) + mixing, flush=True)
    base = {r["mode"]: r["samples_per_sec_total"] for r in rows if r["slowdown"] == factors[0]}
    for r in rows:
        k = r["slowdown"]
        r["relative_to_no_straggler"] = r["samples_per_sec_total"] / base[r["mode"]] if factors[0] == 1 else None
        r["expected_lock_step"] = 1 / k
        r["expected_straggler_free"] = (3 + 1 / k) / 4
    report = {"benchmark": "straggler_sweep", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "config": {"ranks": 4, "straggler_rank": 3, "bandwidth_mbit": args.bandwidth, "common": COMMON,
                         "num_iters": args.num_iters, "reps": args.reps},
              "rows": rows}
    print_table(rows, factors, modes)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out_name}.json").write_text(json.dumps(report, indent=1))
    if len(factors) > 1 and factors[0] == 1:
        plot(rows, factors, modes, RESULTS / f"{args.out_name}.png")


def print_table(rows: list[dict], factors: list[float], modes: list[str]) -> None:
    print("\ntotal samples/s relative to the same mode without a straggler")
    print(f"{'mode':22s}" + "".join(f"{f:>9g}x" for f in factors))
    for mode in modes:
        cells = [next(r for r in rows if r["mode"] == mode and r["slowdown"] == f) for f in factors]
        print(f"{mode:22s}" + "".join(f"{c['relative_to_no_straggler'] or 0:10.2f}" for c in cells))
    print(f"{'expected lock-step 1/k':22s}" + "".join(f"{1 / f:10.2f}" for f in factors))
    print(f"{'expected (3+1/k)/4':22s}" + "".join(f"{(3 + 1 / f) / 4:10.2f}" for f in factors))


def plot(rows: list[dict], factors: list[float], modes: list[str], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode in modes:
        ys = [next(r for r in rows if r["mode"] == mode and r["slowdown"] == f)["relative_to_no_straggler"]
              for f in factors]
        ax.plot(factors, ys, marker="o", label=mode)
    ax.plot(factors, [1 / f for f in factors], "k:", label="1/k (lock step)")
    ax.plot(factors, [(3 + 1 / f) / 4 for f in factors], "k--", label="(3+1/k)/4 (straggler-free)")
    ax.set_xlabel("slowdown k of one rank (of 4)")
    ax.set_ylabel("total throughput / throughput without straggler")
    ax.set_ylim(0, 1.15)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
