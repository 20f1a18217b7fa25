"""Validates relaxlib.perfmodel (and the advisor's pick) against measurements: every mode on 4
ranks behind tbf-shaped links at several bandwidths, plus one straggler setting.

For each setting the model is calibrated the way the advisor does it: α and bandwidth from
timed all-reduces (bucket-sized and large; α of DeAR's steps from a bucket-sized reduce-scatter),
the exchange bandwidth from a pairwise model exchange, each codec's effective throughput from a
compressed all-reduce of the model, all on the same shaped launch; compute time from the
all-reduce run's own telemetry (one third forward, two thirds backward). Prediction and
measurement are seconds per step of the fastest rank (for lock-step modes: of every rank).

    python benchmarks/validate_model.py            (root; ~12 minutes)

Writes benchmarks/results/validate_model.json ({"points": [{mode, bandwidth_mbit, straggler,
predicted, measured}, ...], "summary": ...}) and validate_model.png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from relaxlib_launch.mpirun_command import mpirun_environment

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
RANKS, LAYERS, LAYER_BYTES, BATCH = 4, 8, 1 << 20, 32
COMMON = ["--np", str(RANKS), "--model", "sleep", "--layers", str(LAYERS), "--width", str(LAYER_BYTES // 4),
          "--forward-ms", "40", "--backward-ms", "80", "--batch-size", str(BATCH), "--num-warmup-batches", "3",
          "--num-batches-per-iter", "2", "--num-iters", "5", "--quiet"]
MODES = ("allreduce", "dear", "compressed-uint8", "compressed-sign", "decentralized-ring", "decentralized-random",
         "partial-static", "partial-smart", "async")  # perfmodel names
SETTINGS = [(200.0, None), (1000.0, None), (5000.0, None), (1000.0, "3:3")]


def calibrate_worker(out: str) -> None:
    """Runs on every rank of the shaped launch: the advisor's network calibration."""
    import relaxlib
    from relaxlib import calibration
    relaxlib.init()
    network = calibration.measure_network(reps=5, bucket_bytes=LAYER_BYTES, exchange_bytes=LAYERS * LAYER_BYTES)
    codecs = calibration.measure_compressed(network, LAYERS * LAYER_BYTES)  # as the advisor does
    if relaxlib.rank() == 0:
        Path(out).write_text(json.dumps({**vars(network), "codecs": codecs}))


def calibrate_network(bandwidth: float) -> dict:
    from netem import ShapedNetwork
    env = mpirun_environment(PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    with tempfile.TemporaryDirectory() as tmp, ShapedNetwork(RANKS, bandwidth_mbit=bandwidth) as net:
        out = os.path.join(tmp, "network.json")
        os.environ["PYTHONPATH"] = env["PYTHONPATH"]
        code = net.run(net.mpirun_command(RANKS, export=["PYTHONPATH"]) +
                       [sys.executable, __file__, "--calibrate-worker", out], env=env, timeout=600)
        if code != 0:
            raise RuntimeError(f"calibration run failed with exit code {code}")
        return json.loads(Path(out).read_text())


def measure(mode: str, bandwidth: float, straggler: str | None) -> dict:
    extra = train.mode_arguments(mode) + ["--bandwidth", str(bandwidth), "--out", "/tmp/relax_validate_run.json"]
    if straggler:
        extra += ["--straggler", straggler]
    report = train.run(train.parse_args(COMMON + extra))
    fastest = max(report["per_rank_samples_per_sec"])
    compute = [r["forward_backward_seconds"] for r in report["raw"]["ranks"]]
    return {"seconds_per_step": BATCH / fastest, "samples_per_s_total": report["samples_per_sec_total"],
            "compute_s": compute}


def predict(network: dict, codecs: dict, compute: list[float]) -> dict:
    from relaxlib import perfmodel
    fastest = min(compute)
    workload = perfmodel.Workload(
        ranks=RANKS, alpha_s=network["alpha_s"], bandwidth_bytes_per_s=network["bandwidth_bytes_per_s"],
        buckets=[float(LAYER_BYTES)] * LAYERS, forward_s=fastest / 3, backward_s=2 * fastest / 3, batch=BATCH,
        slowdown=[c / fastest for c in compute], codec_bytes_per_s=codecs,
        reduce_scatter_alpha_s=network["reduce_scatter_alpha_s"], exchange_bytes_per_s=network["exchange_bytes_per_s"])
    return {p.mode: p for p in perfmodel.predict_all(workload, codecs=("uint8", "sign"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--calibrate-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.calibrate_worker:
        calibrate_worker(args.calibrate_worker)
        return
    modes = args.modes.split(",")
    points = []
    for bandwidth, straggler in SETTINGS:
        network = calibrate_network(bandwidth)
        codecs = network["codecs"]
        measured = {"allreduce": measure("allreduce", bandwidth, straggler)}
        predictions = predict(network, codecs, measured["allreduce"]["compute_s"])
        for mode in modes:
            if mode not in measured:
                measured[mode] = measure(mode, bandwidth, straggler)
            p = predictions[mode]
            points.append({"mode": mode, "bandwidth_mbit": bandwidth, "straggler": straggler,
                           "predicted": p.step_s, "measured": measured[mode]["seconds_per_step"],
                           "predicted_samples_per_s": p.samples_per_s,
                           "measured_samples_per_s": measured[mode]["samples_per_s_total"],
                           "network": network})
            print(f"{bandwidth:6.0f} Mbit/s {straggler or '-':4s} {mode:22s} predicted {1e3 * p.step_s:7.1f} ms  "
                  f"measured {1e3 * points[-1]['measured']:7.1f} ms", flush=True)
    summary = summarize(points, modes)
    print(json.dumps({k: v for k, v in summary.items() if not k.startswith("picks")}, indent=1))
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "validate_model", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "ranks": RANKS,
              "points": points, "summary": summary}
    (RESULTS / "validate_model.json").write_text(json.dumps(report, indent=1))
    plot(points, RESULTS / "validate_model.png")


def picks(points: list[dict], exclude: tuple[str, ...] = ()) -> list[dict]:
    """Per setting: the mode the model ranks fastest against the measured fastest, among the
    modes not excluded, and the measured throughput of the pick relative to the best."""
    out = []
    for key in dict.fromkeys((p["bandwidth_mbit"], p["straggler"]) for p in points):
        cell = [p for p in points if (p["bandwidth_mbit"], p["straggler"]) == key and p["mode"] not in exclude]
        if not cell:  # (--modes left nothing to choose from here)
            continue
        pick = max(cell, key=lambda p: p["predicted_samples_per_s"])
        best = max(cell, key=lambda p: p["measured_samples_per_s"])
        out.append({"bandwidth_mbit": key[0], "straggler": key[1], "pick": pick["mode"], "best": best["mode"],
                    "pick_over_best": pick["measured_samples_per_s"] / best["measured_samples_per_s"]})
    return out


def summarize(points: list[dict], modes: list[str]) -> dict:
    """Prediction error and the advisor's picks: among all modes, and without the modes that are
    fast because they average less often (async, then smart groups too)."""
    errors = [abs(p["predicted"] - p["measured"]) / p["measured"] for p in points]
    summary = {"median_abs_error": statistics.median(errors), "target_median_abs_error": 0.15,
               "target_picks_within_10pct": 0.8,
               "error_by_mode": {m: statistics.median(e for p, e in zip(points, errors) if p["mode"] == m)
                                 for m in modes}}
    for label, exclude in (("all_modes", ()), ("without_async", ("async",)),
                           ("without_async_and_smart", ("async", "partial-smart"))):
        chosen = picks(points, exclude)
        if not chosen:
            continue
        summary[f"picks_within_10pct_{label}"] = sum(c["pick_over_best"] >= 0.9 for c in chosen) / len(chosen)
        summary[f"picks_{label}"] = chosen
    return summary


def plot(points: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 6))
    for mode in dict.fromkeys(p["mode"] for p in points):
        mine = [p for p in points if p["mode"] == mode]
        ax.scatter([1e3 * p["measured"] for p in mine], [1e3 * p["predicted"] for p in mine], label=mode, s=22)
    top = 1e3 * max(max(p["measured"], p["predicted"]) for p in points) * 1.05
    ax.plot([0, top], [0, top], "k:", lw=1)
    ax.plot([0, top], [0, 1.15 * top], "k--", lw=0.6)
    ax.plot([0, top], [0, 0.85 * top], "k--", lw=0.6, label="±15 %")
    ax.set_xlabel("measured ms per step (fastest rank)")
    ax.set_ylabel("predicted ms per step")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
