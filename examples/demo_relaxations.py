"""`make demo`: the digits MLP trained on 4 ranks with each relaxation in turn, side by side.

Part 1: each mode is its own relaxrun job of examples/torch_digits.py; the all-reduce baseline
shows its epochs, the others report one line, and a table compares them. On this tiny model a
step takes well under a millisecond and shared memory is fast, so the table shows what each mode
sends and what it does to accuracy, not what it saves in time.

Part 2, the trade-off: a wider, deeper MLP (2.3 MB of gradients per step) trained again with
every mode and with torch DDP, the ranks now in network namespaces behind kernel-shaped
200 Mbit/s links (root only; otherwise the demo says why it skips this part). Communication
dominates there, and the table gives each mode's samples/s against all-reduce and DDP beside its
test accuracy; a PNG plots accuracy against throughput. `relaxrun --advise` and
docs/which-relaxation.md say which mode pays off on your own model and network.

    python examples/demo_relaxations.py [--np 4] [--epochs 6] [--modes allreduce,dear,async]
                                        [--link-mbit 200 | --link-mbit 0 (skip part 2)] [--plot PNG]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from relaxlib_launch.mpirun_command import free_port, mpirun_environment

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WIDE_MODEL = ["--hidden", "512", "--depth", "3"]  # 563,722 parameters: 2.3 MB of float32 gradients
MODES = ("allreduce", "dear", "compressed-fp16", "compressed-uint8", "compressed-sign", "decentralized-ring",
         "decentralized-random", "partial-static", "partial-smart", "async")
WHAT = {"allreduce": "exact: gradients averaged every step (the baseline)",
        "dear": "exact: all-reduce split into reduce-scatter + all-gather around the step",
        "compressed-fp16": "gradients sent as float16",
        "compressed-uint8": "8 bits per element, error feedback",
        "compressed-sign": ("1 bit per element + its step scale's statistics, error feedback; 2 points behind at this "
                            "large step (lr 0.2, momentum 0.9)"),
        "decentralized-ring": "models averaged with ring neighbours",
        "decentralized-random": "models averaged with a random peer",
        "partial-static": "models averaged in fixed groups of 2",
        "partial-smart": "random groups of ranks that are ready (stragglers)",
        "async": "models averaged by a background thread",
        "ddp": "torch DistributedDataParallel over gloo (for comparison)"}


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


def print_accuracy_table(results: dict[str, dict | None]) -> None:
    print(f"\n{'mode':<22} {'test acc':>8} {'loss':>7} {'kB sent/step':>12} {'ms/step':>8}  what it does")
    for mode, r in results.items():
        if r is None:
            print(f"{mode:<22} {'failed':>8}")
            continue
        print(f"{mode:<22} {r['test_accuracy']:>8.3f} {r['final_loss']:>7.4f} {r['kb_sent_per_step']:>12.1f} "
              f"{r['ms_per_step']:>8.2f}  {WHAT[mode]}")



def run_shaped(modes: list[str], args: argparse.Namespace, workdir: Path) -> dict[str, dict | None] | None:
    """Part 2: every mode (and DDP) on the wide model behind shaped links; None if not possible here."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from netem import ShapedNetwork, require_privileges
    try:
        require_privileges()
    except RuntimeError as exc:
        print(f"\nPart 2 (a slow link) skipped: {exc}. Run `make demo` as root to see it.")
        return None
    print(f"\nPart 2: 2.3 MB of gradients per step, {args.np} ranks behind "
          f"{args.link_mbit:g} Mbit/s links (network namespaces, tc tbf)", flush=True)
    results: dict[str, dict | None] = {}
    with ShapedNetwork(args.np, bandwidth_mbit=args.link_mbit) as net:
        for mode in ["ddp"] + modes:
            summary = workdir / f"shaped-{mode}.json"
            env = mpirun_environment(PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                                     MASTER_ADDR=net.addresses[0], MASTER_PORT=str(free_port()),
                                     GLOO_SOCKET_IFNAME="eth0")  # the hostname resolves to a namespace's loopback
            exported = ["MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"]
            command = net.mpirun_command(args.np, export=exported, env=env) + [
                sys.executable, str(HERE / "torch_digits.py"), "--epochs", str(args.epochs), "--algorithm", mode,
                "--summary", str(summary), *WIDE_MODEL]
            code = net.run(command, env=env, timeout=900, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            results[mode] = json.loads(summary.read_text()) if code == 0 and summary.exists() else None
            r = results[mode]
            print(f"{mode:<22} " + (f"{r['samples_per_sec']:7.1f} samples/s per rank  test acc {r['test_accuracy']:.3f}"
                                    if r else f"failed (exit {code})"), flush=True)
    return results


def print_tradeoff(results: dict[str, dict | None], args: argparse.Namespace) -> None:
    base, ddp = results.get("allreduce"), results.get("ddp")
    print(f"\n{'mode':<22} {'test acc':>8} {'samples/s':>9} {'vs all-reduce':>13} {'vs DDP':>7}  "
          f"({args.np} ranks, {args.link_mbit:g} Mbit/s links, samples/s per rank)")
    for mode, r in results.items():
        if r is None:
            print(f"{mode:<22} {'failed':>8}")
            continue
        vs_base = f"{r['samples_per_sec'] / base['samples_per_sec']:.2f}x" if base else "-"
        vs_ddp = f"{r['samples_per_sec'] / ddp['samples_per_sec']:.2f}x" if ddp else "-"
        print(f"{mode:<22} {r['test_accuracy']:>8.3f} {r['samples_per_sec']:>9.1f} {vs_base:>13} {vs_ddp:>7}")


def plot_tradeoff(results: dict[str, dict | None], args: argparse.Namespace) -> None:
    """Accuracy against throughput, one point per mode."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, r in results.items():
        if r is None:
            continue
        ax.scatter(r["samples_per_sec"], r["test_accuracy"], color="black" if mode in ("ddp", "allreduce") else "C0")
        ax.annotate(mode, (r["samples_per_sec"], r["test_accuracy"]), fontsize=7,
                    xytext=(4, -10 if mode == "ddp" else 3), textcoords="offset points")  # ddp sits by allreduce
    ax.set_xscale("log")
    ax.set_xlabel(f"samples/s per rank ({args.np} ranks, {args.link_mbit:g} Mbit/s links, log scale)")
    ax.set_ylabel("test accuracy (digits)")
    ax.set_title("What each relaxation trades: accuracy against throughput")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    plt.close(fig)
    print(f"\nwrote {args.plot}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--link-mbit", type=float, default=200.0, help="part 2's link rate; 0 skips part 2")
    parser.add_argument("--plot", default="relaxlib-demo-tradeoff.png", help="part 2's PNG")
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    with tempfile.TemporaryDirectory(prefix="relaxlib-demo-") as tmp:
        results = {mode: run_mode(mode, args, Path(tmp)) for mode in modes}
        print_accuracy_table(results)
        shaped = run_shaped(modes, args, Path(tmp)) if args.link_mbit > 0 else None
    if shaped:
        print_tradeoff(shaped, args)
        plot_tradeoff(shaped, args)
    print("\nModel-averaging modes (decentralized, partial, async) report the mean model after "
          "average_now(). Which mode pays off where: docs/which-relaxation.md; on your own model: "
          "relaxrun --advise -np 4 python train.py")
    ok = all(r is not None for r in results.values()) and all(r is not None for r in (shaped or {}).values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
