"""Local updates on a small language model: loss against wall time and against tokens for all-reduce,
DiLoCo at several H, streaming DiLoCo with compressed outer gradients, and torch DDP, on ranks behind
kernel-shaped links (issue #55's comparison).

    python benchmarks/local_updates_lm.py --np 4 --bandwidth 200 --steps 300 --rounds 2

Each mode trains ``bench_models.TinyLM`` on ``SyntheticText`` with AdamW (every rank its own shard of
the token stream, the same seed) through benchmarks/train.py; rounds alternate the modes' order. The
loss of a step is the mean over ranks of their batches' losses, smoothed over ``--window`` steps. The
targets are computed against all-reduce's smoothed final loss: the tokens and the wall time each
mode needs to reach it (a mode that never does is listed with its own final loss). Writes JSON and a
PNG (loss against wall time and against tokens, medians over rounds) to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train  # noqa: E402 - benchmarks/ on the path above

RESULTS = Path(__file__).resolve().parent / "results"
# Modes that train.mode_arguments does not name: streaming DiLoCo (H x fragments, outer codec).
STREAMING = {"streaming-32x4-uint8": ["--algorithm", "diloco", "--sync-every", "32", "--fragments", "4",
                                      "--outer-codec", "uint8"]}
KNOWN = ("allreduce", "ddp", "diloco-<H>", *STREAMING)


def mode_argv(mode: str) -> list[str]:
    """train.py's arguments selecting ``mode`` (``allreduce``, ``ddp``, ``diloco-32``, or a STREAMING name)."""
    if mode in STREAMING:
        return STREAMING[mode]
    if mode not in ("allreduce", "ddp") and not (mode.startswith("diloco-") and mode[7:].isdigit()):
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(KNOWN)}")
    return train.mode_arguments(mode)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--bandwidth", type=float, help="Mbit/s per rank link (shaped; needs root)")
    parser.add_argument("--modes", default="allreduce,ddp,diloco-8,diloco-32",
                        help=f"comma-separated, from {', '.join(KNOWN)}")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs per mode, order alternated")
    parser.add_argument("--window", type=int, default=20, help="steps the loss is smoothed over")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW's (the inner) learning rate")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per rank and step")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--lm-layers", type=int, default=4)
    parser.add_argument("--out", help="JSON path (default: results/local_updates_lm_np<N>[_<B>mbit].json)")
    args = parser.parse_args(argv)
    for mode in args.modes.split(","):
        try:
            mode_argv(mode)
        except ValueError as error:
            parser.error(str(error))
    if args.steps < args.window:
        parser.error(f"--steps ({args.steps}) must be at least --window ({args.window})")
    return args


def train_argv(args, mode: str) -> list[str]:
    """benchmarks/train.py's arguments for one run of ``mode``: every step timed and its loss kept."""
    return [*mode_argv(mode), "--np", str(args.np), "--model", "transformer", "--optimizer", "adamw",
            "--lr", str(args.lr), "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
            "--vocab", str(args.vocab), "--d-model", str(args.d_model), "--lm-layers", str(args.lm_layers),
            "--num-warmup-batches", "0", "--num-batches-per-iter", "1", "--num-iters", str(args.steps),
            "--quiet", *(["--bandwidth", str(args.bandwidth)] if args.bandwidth else [])]


def smoothed(values: list[float], window: int) -> list[float]:
    """Trailing mean over ``window`` values (shorter at the start)."""
    return [statistics.fmean(values[max(0, i + 1 - window):i + 1]) for i in range(len(values))]


def curve(report: dict, window: int) -> dict:
    """A run's loss per step (mean over ranks, smoothed) and wall time per step (the slowest rank)."""
    ranks = report["raw"]["ranks"]
    loss = [statistics.fmean(r["losses"][i] for r in ranks) for i in range(len(ranks[0]["losses"]))]
    wall = [max(r["step_end_seconds"][i] for r in ranks) for i in range(len(loss))]
    return {"loss": smoothed(loss, window), "wall_seconds": wall}


def reach(run: dict, target: float) -> tuple[int | None, float | None]:
    """(steps, seconds) after which the run's smoothed loss first is at or below ``target``."""
    for step, (loss, wall) in enumerate(zip(run["loss"], run["wall_seconds"])):
        if loss <= target:
            return step + 1, wall
    return None, None


def summarize(args, runs: dict[str, list[dict]]) -> dict:
    """Per mode: median final loss, step time, and tokens / wall time to reach all-reduce's final loss."""
    tokens_per_step = args.np * args.batch_size * args.seq_len
    baseline = runs.get("allreduce")
    target = statistics.median(r["loss"][-1] for r in baseline) if baseline else None
    base_wall = statistics.median(r["wall_seconds"][-1] for r in baseline) if baseline else None
    out = {}
    for mode, mode_runs in runs.items():
        row = {"final_loss": statistics.median(r["loss"][-1] for r in mode_runs),
               "seconds_per_step": statistics.median(r["wall_seconds"][-1] / len(r["wall_seconds"]) for r in mode_runs),
               "runs": len(mode_runs)}
        if target is not None:
            reached = [reach(r, target) for r in mode_runs]
            if all(steps is not None for steps, _ in reached):
                steps = statistics.median(s for s, _ in reached)
                seconds = statistics.median(w for _, w in reached)
                row.update(tokens_to_allreduce_loss=steps * tokens_per_step,
                           tokens_vs_allreduce=steps / args.steps, seconds_to_allreduce_loss=seconds,
                           wall_vs_allreduce=seconds / base_wall)
            else:
                row.update(tokens_to_allreduce_loss=None, reached_in_runs=sum(s is not None for s, _ in reached))
        out[mode] = row
    return {"allreduce_final_loss": target, "tokens_per_step": tokens_per_step, "modes": out}


def plot(runs: dict[str, list[dict]], args, path: Path) -> None:
    """Loss against wall time and against tokens, the first run of each mode."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (by_time, by_tokens) = plt.subplots(1, 2, figsize=(11, 4))
    tokens_per_step = args.np * args.batch_size * args.seq_len
    for mode, mode_runs in runs.items():
        run = mode_runs[0]
        by_time.plot(run["wall_seconds"], run["loss"], label=mode)
        by_tokens.plot([tokens_per_step * (i + 1) / 1e6 for i in range(len(run["loss"]))], run["loss"], label=mode)
    link = f"{args.bandwidth:g} Mbit/s links" if args.bandwidth else "shared memory"
    by_time.set(xlabel="wall time (s)", ylabel=f"training loss (mean of {args.window} steps)",
                title=f"{args.np} ranks, {link}")
    by_tokens.set(xlabel="tokens (millions, all ranks)", title="same runs against tokens")
    by_time.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Runs every mode ``--rounds`` times (order alternated), then writes the JSON and the PNG."""
    args = parse_args()
    modes = args.modes.split(",")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    out = Path(args.out) if args.out else RESULTS / (
        f"local_updates_lm_np{args.np}" + (f"_{int(args.bandwidth)}mbit" if args.bandwidth else "") + ".json")
    with tempfile.TemporaryDirectory() as scratch:  # train.py's own report of each run
        for round_ in range(args.rounds):
            for mode in (modes if round_ % 2 == 0 else modes[::-1]):
                report = train.run(train.parse_args(train_argv(args, mode) + ["--out", f"{scratch}/run.json"]))
                runs[mode].append(curve(report, args.window))
                print(f"round {round_ + 1} {mode}: final loss {runs[mode][-1]['loss'][-1]:.3f}, "
                      f"{runs[mode][-1]['wall_seconds'][-1]:.1f} s", flush=True)
    report = {"benchmark": "local_updates_lm", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "config": vars(args),
              **summarize(args, runs), "runs": runs}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    plot(runs, args, out.with_suffix(".png"))
    for mode, row in report["modes"].items():
        print(mode, json.dumps(row))


if __name__ == "__main__":
    main()
