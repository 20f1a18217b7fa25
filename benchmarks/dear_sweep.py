"""DeAR against all-reduce as the ratio of communication to forward time grows.

Model: 8 sleep-calibrated layers (forward 40 ms, backward 80 ms per step, 1 MB of parameters
each), 2 ranks, MPI over TCP with each rank's link shaped by tc tbf. The bandwidth sets the
all-reduce time t_ar, measured by a run without compute. The DeAR paper's model predicts

    t_allreduce = t_ff + max(t_bp, t_ar)
    t_dear      = max(t_ff, t_ag) + max(t_bp, t_rs)          (t_rs = t_ag = t_ar / 2)

so DeAR saves nothing while t_ar is hidden by backward, then more as t_ar grows, up to one
forward time. That model treats each phase as one block; relaxlib.perfmodel's **limit** runs the
buckets through the link one after another (wire time only, at the shaped rate, with the compute
measured alone), which adds what a per-bucket pipeline cannot hide: the first layer's
reduce-scatter after backward, the first all-gather before forward, the last layer's forward.
Each point reports both, and measured / limit. Also compares the tuned bucket size with the
default (25 MB: one bucket).

    python benchmarks/dear_sweep.py            (root: shapes links; ~9 minutes)

Writes benchmarks/results/dear_sweep.json and .png.
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
LAYERS, PARAMS_PER_LAYER = 8, 262144
COMMON = ["--np", "2", "--model", "sleep", "--layers", str(LAYERS), "--width", str(PARAMS_PER_LAYER),
          "--forward-ms", "40", "--backward-ms", "80", "--num-warmup-batches", "3", "--num-batches-per-iter", "2",
          "--quiet"]


def step_seconds(extra: list[str]) -> tuple[float, dict]:
    report = train.run(train.parse_args(COMMON + extra + ["--out", "/tmp/relax_dear_sweep_run.json"]))
    return report["step_seconds_median"], report


def predict(t_ff: float, t_bp: float, t_ar: float) -> tuple[float, float]:
    """The DeAR paper's (all-reduce, DeAR) step times."""
    return t_ff + max(t_bp, t_ar), max(t_ff, t_ar / 2) + max(t_bp, t_ar / 2)


def limits(compute_s: float, bandwidth_mbit: float) -> tuple[float, float]:
    """relaxlib.perfmodel's (all-reduce, DeAR) steps for this model: per-layer buckets through a
    link of the shaped rate with wire time only, the measured compute split 1:2 as configured."""
    from relaxlib import perfmodel
    work = perfmodel.Workload(ranks=2, alpha_s=0.0, bandwidth_bytes_per_s=bandwidth_mbit * 1e6 / 8,
                              buckets=[4.0 * PARAMS_PER_LAYER] * LAYERS, forward_s=compute_s / 3,
                              backward_s=2 * compute_s / 3)
    return perfmodel.predict_allreduce(work).step_s, perfmodel.predict_dear(work).step_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bandwidths", default="4000,2000,1000,750,500,400,330,250", help="Mbit/s per link")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--num-iters", type=int, default=6)
    args = parser.parse_args()
    iters = ["--num-iters", str(args.num_iters)]
    t_ff, t_bp = 0.040, 0.080
    compute_alone, _ = step_seconds(["--algorithm", "none", "--np", "1"] + iters)
    points = []
    for bandwidth in [float(b) for b in args.bandwidths.split(",")]:
        link = ["--bandwidth", str(bandwidth)]
        runs = {"comm_only": [], "allreduce": [], "dear": []}
        jobs = {"comm_only": ["--algorithm", "allreduce", "--forward-ms", "0", "--backward-ms", "0"],
                "allreduce": ["--algorithm", "allreduce"], "dear": ["--algorithm", "dear", "--fusion-mb", "1"]}
        for rep in range(args.reps):
            for job in (list(jobs) if rep % 2 == 0 else list(reversed(jobs))):  # alternated
                runs[job].append(step_seconds(jobs[job] + link + iters)[0])
        t_ar = statistics.median(runs["comm_only"])
        measured_ar, measured_dear = statistics.median(runs["allreduce"]), statistics.median(runs["dear"])
        predicted_ar, predicted_dear = predict(t_ff, t_bp, t_ar)
        limit_ar, limit_dear = limits(compute_alone, bandwidth)
        point = {"bandwidth_mbit": bandwidth, "t_ar": t_ar, "comm_to_forward": t_ar / t_ff,
                 "allreduce_step": measured_ar, "dear_step": measured_dear, "runs": runs,
                 "speedup": measured_ar / measured_dear, "saved_ms": 1000 * (measured_ar - measured_dear),
                 "predicted_allreduce_step": predicted_ar, "predicted_dear_step": predicted_dear,
                 "predicted_speedup": predicted_ar / predicted_dear,
                 "predicted_saved_ms": 1000 * (predicted_ar - predicted_dear),
                 "limit_allreduce_step": limit_ar, "limit_dear_step": limit_dear,
                 "limit_speedup": limit_ar / limit_dear, "allreduce_over_limit": measured_ar / limit_ar,
                 "dear_over_limit": measured_dear / limit_dear}
        points.append(point)
        print(f"{bandwidth:6.0f} Mbit/s  t_ar/t_ff {point['comm_to_forward']:5.2f}  "
              f"all-reduce {measured_ar * 1000:6.1f} ms"
              f"  DeAR {measured_dear * 1000:6.1f} ms  speedup {point['speedup']:.3f} (model "
              f"{point['predicted_speedup']:.3f})  saved {point['saved_ms']:5.1f} ms (model "
              f"{point['predicted_saved_ms']:5.1f})  limit {point['limit_speedup']:.3f}, DeAR / limit "
              f"{point['dear_over_limit']:.3f}, all-reduce / limit {point['allreduce_over_limit']:.3f}", flush=True)

    tune_link = ["--bandwidth", "1000", "--num-iters", "28"]
    default_step, _ = step_seconds(["--algorithm", "dear", "--fusion-mb", "25"] + tune_link)
    tuned_step, tuned_report = step_seconds(["--algorithm", "dear", "--fusion-mb", "25", "--tune"] + tune_link)
    chosen = tuned_report["raw"]["ranks"][0]["tuned_fusion_mb"]
    chosen_step, _ = step_seconds(["--algorithm", "dear", "--fusion-mb", str(chosen or 25)] + tune_link[:2] + iters)
    tuning = {"bandwidth_mbit": 1000, "default_fusion_mb": 25, "default_step": default_step,
              "tuned_fusion_mb": chosen, "tuned_step": chosen_step,
              "step_during_tuning_run": tuned_step}
    print(f"tuning at 1000 Mbit/s: default 25 MB -> {default_step * 1000:.1f} ms/step; tuned {chosen:.1f} MB -> "
          f"{chosen_step * 1000:.1f} ms/step")

    errors = [abs(p["dear_step"] - p["predicted_dear_step"]) / p["dear_step"] for p in points]
    limit_errors = [abs(p["dear_over_limit"] - 1) for p in points]
    report = {"benchmark": "dear_sweep", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "model": {"layers": LAYERS, "params_per_layer": PARAMS_PER_LAYER, "t_ff": t_ff, "t_bp": t_bp,
                        "measured_step_alone": compute_alone},
              "points": points, "tuning": tuning,
              "median_abs_error_dear_model": statistics.median(errors),
              "median_abs_error_dear_limit": statistics.median(limit_errors)}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "dear_sweep.json"
    out.write_text(json.dumps(report, indent=1))
    plot(points, out.with_suffix(".png"))
    print(f"wrote {out}")


def plot(points: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = [p["comm_to_forward"] for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(x, [p["speedup"] for p in points], "o-", label="measured")
    left.plot(x, [p["predicted_speedup"] for p in points], "s--", label="model (DeAR paper)")
    left.plot(x, [p["limit_speedup"] for p in points], "^:", label="limit (perfmodel, per-bucket pipeline)")
    left.set_ylabel("DeAR speedup over all-reduce")
    right.plot(x, [p["saved_ms"] for p in points], "o-", label="measured")
    right.plot(x, [p["predicted_saved_ms"] for p in points], "s--", label="model")
    right.plot(x, [1000 * (p["limit_allreduce_step"] - p["limit_dear_step"]) for p in points], "^:", label="limit")
    right.axhline(40, color="gray", linestyle=":", label="one forward pass (40 ms)")
    right.set_ylabel("time saved per step (ms)")
    for ax in (left, right):
        ax.set_xlabel("t_allreduce / t_forward (link bandwidth swept)")
        ax.set_xscale("log")
        ax.set_xticks([0.5, 1, 2, 3, 4, 5, 7], ["0.5", "1", "2", "3", "4", "5", "7"])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("DeAR vs all-reduce, 2 ranks, tc-tbf shaped links, sleep-calibrated layers")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
