"""relaxlib's PowerSGD beside the reference implementation, torch DDP with its own ``powerSGD_hook``
(gloo), on the same model, seed, ranks and link, in one run, alternated: step time and the loss
after the same steps, at approximation ranks 1, 2 and 4, with plain all-reduce and plain DDP as
the baselines.

    python benchmarks/powersgd_reference.py --np 4 --bandwidth 200 --reps 3
    python benchmarks/powersgd_reference.py --np 2 --model mlp --ranks 1,4 --reps 1   # quick look

Each job is one benchmarks/train.py run (the transformer language model by default, AdamW,
synthetic text); jobs of a repetition run in turn, repetitions alternate the order, and the
report gives medians over repetitions. A job that fails (torch 2.13's gloo aborted one DDP-hook job
of eleven on 2026-12-04) is listed under ``failed_jobs`` and the run goes on. Writes
benchmarks/results/powersgd_reference_np<N>[_<B>mbit].json and a PNG of step time against final loss.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train  # noqa: E402  (benchmarks/ is not a package)
import train_matrix  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def jobs(ranks: list[int]) -> list[str]:
    """The modes of one repetition: baselines, then each rank's pair (relaxlib, DDP's hook)."""
    out = ["allreduce", "ddp"]
    for r in ranks:
        out += [f"powersgd-{r}", f"ddp-powersgd-{r}"]
    return out


def train_report(mode: str, args: argparse.Namespace) -> dict:
    """One train.py job of ``mode`` on ``args.model`` with AdamW (``args``: np, iters, lr,
    bandwidth): train.py's report."""
    argv = train.mode_arguments(mode) + train_matrix.model_arguments(args.model) + [
        "--np", str(args.np), "--num-iters", str(args.iters), "--num-warmup-batches", "2", "--optimizer", "adamw",
        "--lr", str(args.lr), "--quiet", "--out", "/dev/null"]
    if args.bandwidth:
        argv += ["--bandwidth", str(args.bandwidth)]
    return train.run(train.parse_args(argv))


def run_job(mode: str, args: argparse.Namespace) -> dict:
    """One train.py job: median step seconds and the mean loss over ranks of the last steps."""
    report = train_report(mode, args)
    tail = [statistics.mean(r["losses"][-args.loss_steps:]) for r in report["raw"]["ranks"]]
    return {"step_s": report["step_seconds_median"], "final_loss": statistics.mean(tail),
            "steps": len(report["raw"]["ranks"][0]["losses"])}


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Medians per mode, and each PowerSGD rank's speed against DDP's hook at the same rank."""
    modes = {mode: {"step_s": statistics.median(r["step_s"] for r in rs),
                    "final_loss": statistics.median(r["final_loss"] for r in rs), "runs": rs}
             for mode, rs in runs.items() if rs}
    pairs = {}
    for mode in modes:
        if mode.startswith("powersgd-"):
            reference = modes.get(f"ddp-{mode}")
            if reference:
                pairs[mode] = {"speed_vs_ddp_hook": reference["step_s"] / modes[mode]["step_s"],
                               "loss_minus_ddp_hook": modes[mode]["final_loss"] - reference["final_loss"]}
    return {"modes": modes, "pairs": pairs}


def plot(summary: dict, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, m in summary["modes"].items():
        marker = "s" if mode.startswith("ddp") else "o"
        ax.scatter(1e3 * m["step_s"], m["final_loss"], marker=marker)
        below = mode.startswith("ddp")  # the peers' labels under their points: DDP sits on all-reduce
        ax.annotate(mode, (1e3 * m["step_s"], m["final_loss"]), fontsize=8, xytext=(4, -10 if below else 3),
                    textcoords="offset points")
    ax.set_xlabel("step time (ms, median)")
    ax.set_ylabel("loss after the same steps")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--bandwidth", type=float, help="Mbit/s per rank link (shaped; needs root)")
    parser.add_argument("--ranks", default="1,2,4", help="approximation ranks")
    parser.add_argument("--model", default="transformer", choices=["transformer", "mlp"])
    parser.add_argument("--iters", type=int, default=10, help="timed iterations of 2 steps per job")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--loss-steps", type=int, default=4, help="final loss: the mean of this many last steps")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    modes = jobs([int(r) for r in args.ranks.split(",")])
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    failed: list[dict] = []
    started = time.perf_counter()
    for rep in range(args.reps):
        for mode in (modes if rep % 2 == 0 else list(reversed(modes))):  # alternate the order
            try:
                runs[mode].append(run_job(mode, args))
            except RuntimeError as error:  # one failed job (of either library) is recorded, not fatal
                failed.append({"rep": rep, "mode": mode, "error": str(error)})
                print(f"  rep {rep} {mode:18} FAILED: {error}", flush=True)
                continue
            print(f"  rep {rep} {mode:18} {runs[mode][-1]}", flush=True)
    summary = summarize(runs)
    summary["failed_jobs"] = failed
    link = f"{args.bandwidth:g} Mbit/s links" if args.bandwidth else "shared memory"
    summary["settings"] = {"np": args.np, "link": link, "model": args.model, "iters": args.iters, "reps": args.reps,
                           "lr": args.lr, "optimizer": "adamw", "seconds": round(time.perf_counter() - started, 1),
                           "date": time.strftime("%Y-%m-%d")}
    suffix = f"_{int(args.bandwidth)}mbit" if args.bandwidth else ""
    out = args.out or RESULTS / f"powersgd_reference_np{args.np}{suffix}.json"
    out.write_text(json.dumps(summary, indent=1))
    plot(summary, out.with_suffix(".png"), f"PowerSGD: relaxlib vs DDP's powerSGD_hook, {args.model}, "
                                           f"{args.np} ranks, {link}")
    for mode, pair in summary["pairs"].items():
        print(f"{mode}: {pair['speed_vs_ddp_hook']:.2f}x DDP hook's speed, loss {pair['loss_minus_ddp_hook']:+.3f}")
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
