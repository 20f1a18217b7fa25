"""`make demo`: the digits MLP trained on 4 ranks with each relaxation in turn, side by side.

Each mode is its own relaxrun job of examples/torch_digits.py; the all-reduce baseline shows its
epochs, the others report one line, and a table compares them at the end. On this tiny model
every step takes well under a millisecond of compute, so the table shows what each mode sends
and what it does to accuracy more than what it saves in time: `relaxrun --advise` and
docs/which-relaxation.md say which mode pays off on your model and network.

    python examples/demo_relaxations.py [--np 4] [--epochs 6] [--modes allreduce,dear,async]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("allreduce", "dear", "compressed-fp16", "compressed-uint8", "compressed-sign", "decentralized-ring",
         "decentralized-random", "partial-static", "partial-smart", "async")
WHAT = {"allreduce": "exact: gradients averaged every step (the baseline)",
        "dear": "exact: all-reduce split into reduce-scatter + all-gather around the step",
        "compressed-fp16": "gradients sent as float16",
        "compressed-uint8": "8 bits per element, error feedback",
        "compressed-sign": "1 bit per element, error feedback; trails at this large step (lr 0.2, momentum 0.9)",
        "decentralized-ring": "models averaged with ring neighbours",
        "decentralized-random": "models averaged with a random peer",
        "partial-static": "models averaged in fixed groups of 2",
        "partial-smart": "groups of whoever is ready (stragglers)",
        "async": "models averaged by a background thread"}


def run_mode(mode: str, args: argparse.Namespace, workdir: Path) -> dict | None:
    """One relaxrun job; returns rank 0's summary, or None (and prints why) if it failed."""
    summary = workdir / f"{mode}.json"
    command = [sys.executable, "-m", "relaxlib_launch.relaxrun", "-np", str(args.np), sys.executable,
               str(HERE / "torch_digits.py"), "--epochs", str(args.epochs), "--algorithm", mode,
               "--summary", str(summary)]
    verbose = mode == "allreduce"
    done = subprocess.run(command, stdout=None if verbose else subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0 or not summary.exists():
        print(f"{mode}: failed (exit {done.returncode})\n{done.stdout or ''}", flush=True)
        return None
    result = json.loads(summary.read_text())
    if not verbose:
        print(f"{mode:<22} test acc {result['test_accuracy']:.3f}  loss {result['final_loss']:.4f}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    with tempfile.TemporaryDirectory(prefix="relaxlib-demo-") as tmp:
        results = {mode: run_mode(mode, args, Path(tmp)) for mode in modes}
    print(f"\n{'mode':<22} {'test acc':>8} {'loss':>7} {'kB sent/step':>12} {'ms/step':>8}  what it does")
    for mode, r in results.items():
        if r is None:
            print(f"{mode:<22} {'failed':>8}")
            continue
        print(f"{mode:<22} {r['test_accuracy']:>8.3f} {r['final_loss']:>7.4f} {r['kb_sent_per_step']:>12.1f} "
              f"{r['ms_per_step']:>8.2f}  {WHAT[mode]}")
    print("\nModel-averaging modes (decentralized, partial, async) report the mean model after "
          "average_now(). Which mode pays off where: docs/which-relaxation.md; on your own model: "
          "relaxrun --advise -np 4 python train.py")
    return 0 if all(r is not None for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
