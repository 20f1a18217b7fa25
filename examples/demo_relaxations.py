"""`make demo`: one model trained on 4 ranks with each relaxation in turn, beside torch DDP, where the
link is the bottleneck, so that each relaxation shows what it is for.

The model is a wide MLP on scikit-learn's digits (2.3 MB of float32 gradients per step, a step of
compute far shorter than its all-reduce). As root, the ranks run in network namespaces behind
kernel-shaped 200 Mbit/s links (tc tbf): communication dominates, as on a thin cloud link. Without
root they run over shared memory and the demo says so (then compression saves little time).

Each mode is its own job (relaxrun -np 4 ... examples/torch_digits.py); the table gives its test
accuracy, samples/s per rank and its speed against DDP, and a PNG plots accuracy against throughput
with DDP as the reference. Modes that average models instead of gradients (decentralized, partial,
async) reach a different model than all-reduce: the table says what each trades.

    python examples/demo_relaxations.py [--np 4] [--epochs 5] [--modes allreduce,dear,...]
                                        [--link-mbit 200 | --link-mbit 0 (shared memory)] [--plot PNG]
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
         "partial-smart", "async")
REFERENCE = "ddp"
# What each mode trades, in a few words (the table's last column).
WHAT = {"ddp": "torch DDP over gloo: the reference",
        "allreduce": "exact: gradients averaged every step",
        "dear": "exact: reduce-scatter + all-gather around the step",
        "compressed-fp16": "half the bytes; fp16 rounding",
        "compressed-uint8": "a quarter of the bytes; error feedback",
        "compressed-sign": "1/32 of the bytes; error feedback",
        "decentralized-ring": "models averaged with ring neighbours",
        "partial-smart": "models averaged in groups of ready ranks",
        "async": "models averaged by a background thread"}


def job_command(mode: str, args: argparse.Namespace, summary: Path) -> list[str]:
    """The training script's arguments for one mode."""
    return [sys.executable, str(HERE / "torch_digits.py"), "--epochs", str(args.epochs), "--algorithm", mode,
            "--summary", str(summary), *WIDE_MODEL]


def run_local(mode: str, args: argparse.Namespace, workdir: Path) -> dict | None:
    """One relaxrun job over shared memory; rank 0's summary, or None if it failed."""
    summary = workdir / f"{mode}.json"
    env = dict(os.environ, MASTER_PORT=str(free_port()))
    command = [sys.executable, "-m", "relaxlib_launch.relaxrun", "-np", str(args.np), *job_command(mode, args, summary)]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if done.returncode != 0 or not summary.exists():
        print(f"{mode}: failed (exit {done.returncode})\n{done.stdout[-3000:]}", flush=True)
        return None
    return json.loads(summary.read_text())


def run_all(modes: list[str], args: argparse.Namespace, workdir: Path) -> tuple[dict[str, dict | None], str]:
    """Every mode (DDP first), behind shaped links when this process may create them; and the setting's name."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from netem import ShapedNetwork, require_privileges

    results: dict[str, dict | None] = {}
    if args.link_mbit > 0:
        try:
            require_privileges()
        except RuntimeError as exc:
            print(f"No shaped links ({exc}): the ranks share memory, so compression saves little time here.")
        else:
            setting = f"{args.np} ranks, {args.link_mbit:g} Mbit/s links"
            print(f"{setting} (network namespaces, tc tbf); 2.3 MB of gradients per step", flush=True)
            with ShapedNetwork(args.np, bandwidth_mbit=args.link_mbit) as net:
                for mode in [REFERENCE, *modes]:
                    summary = workdir / f"shaped-{mode}.json"
                    env = mpirun_environment(PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                                             MASTER_ADDR=net.addresses[0], MASTER_PORT=str(free_port()),
                                             GLOO_SOCKET_IFNAME="eth0")  # the host name is a namespace's loopback
                    command = net.mpirun_command(args.np, export=["MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"],
                                                 env=env) + job_command(mode, args, summary)
                    code = net.run(command, env=env, timeout=900, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.STDOUT)
                    results[mode] = json.loads(summary.read_text()) if code == 0 and summary.exists() else None
                    print_progress(mode, results[mode], code)
            return results, setting
    setting = f"{args.np} ranks, shared memory"
    for mode in [REFERENCE, *modes]:
        results[mode] = run_local(mode, args, workdir)
        print_progress(mode, results[mode], 0)
    return results, setting


def print_progress(mode: str, result: dict | None, code: int) -> None:
    print(f"  {mode:<20} " + (f"{result['samples_per_sec']:7.1f} samples/s per rank, test acc "
                              f"{result['test_accuracy']:.3f}" if result else f"failed (exit {code})"), flush=True)


def print_table(results: dict[str, dict | None], setting: str) -> None:
    """Accuracy, throughput and speed against DDP, one line per mode."""
    ddp = results.get(REFERENCE)
    print(f"\n{'mode':<20} {'test acc':>8} {'samples/s':>9} {'vs DDP':>7}  what it trades   ({setting}; "
          "samples/s per rank)")
    for mode, r in results.items():
        if r is None:
            print(f"{mode:<20} {'failed':>8}")
            continue
        vs_ddp = f"{r['samples_per_sec'] / ddp['samples_per_sec']:.2f}x" if ddp else "-"
        print(f"{mode:<20} {r['test_accuracy']:>8.3f} {r['samples_per_sec']:>9.1f} {vs_ddp:>7}  {WHAT[mode]}")


def plot(results: dict[str, dict | None], setting: str, path: str) -> None:
    """Accuracy against throughput: one marker per mode in a legend (no labels on the points to overlap),
    DDP's throughput and accuracy as dashed reference lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    markers = "sPoD^v<>*XpH"
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for index, (mode, r) in enumerate(results.items()):
        if r is None:
            continue
        ax.scatter(r["samples_per_sec"], r["test_accuracy"], s=70, marker=markers[index % len(markers)],
                   color="black" if mode == REFERENCE else f"C{index % 10}", label=f"{mode}: {WHAT[mode]}")
    ddp = results.get(REFERENCE)
    if ddp:
        ax.axvline(ddp["samples_per_sec"], color="black", linestyle="--", linewidth=0.8)
        ax.axhline(ddp["test_accuracy"], color="black", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(f"samples/s per rank (log scale); {setting}")
    ax.set_ylabel("test accuracy (digits)")
    ax.set_title("Each relaxation against DDP: right of the dashed line is faster")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(f"\nwrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--link-mbit", type=float, default=200.0, help="link rate as root; 0: shared memory")
    parser.add_argument("--plot", default="relaxlib-demo-tradeoff.png")
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    with tempfile.TemporaryDirectory(prefix="relaxlib-demo-") as tmp:
        results, setting = run_all(modes, args, Path(tmp))
    print_table(results, setting)
    plot(results, setting, args.plot)
    print("\nWhich relaxation pays on YOUR model and network: run your own training script under the advisor,\n"
          f"    relaxrun --advise -np {args.np} python your_train.py\n"
          "and read docs/which-relaxation.md for each mode's trade-off.")
    return 0 if all(r is not None for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
