"""`make demo`: one model trained on 4 ranks with each relaxation in turn, beside torch DDP, where the
link is the bottleneck, each in a setting where it does what it is for.

The model is a wide MLP on scikit-learn's digits (2.3 MB of float32 gradients per step, a step of
compute far shorter than its all-reduce). As root, the ranks run in network namespaces behind
kernel-shaped 200 Mbit/s links (tc tbf): communication dominates, as on a thin cloud link. The
smart-groups rows run with one rank's link slowed further (a straggler on the network), next to
all-reduce on that same network. Without root the ranks run over shared memory and the demo says so
(then compression saves little time and no link is slow).

Each row is its own job (``mpirun -np 4 ... examples/torch_digits.py``; the data split is written once
and read by every rank). DeAR runs only when asked (``--modes dear``): this model's backward is too
short to hide any communication behind, so its row would only show all-reduce's speed. The table gives each mode's
learning rate, epochs, test accuracy and the points it gives up against DDP, samples/s per rank
and its speed against DDP, and what it trades; a PNG plots accuracy against throughput with DDP as
the reference. Modes that average models instead of gradients reach a different model than
all-reduce: the table says what each trades, and which settings differ from DDP's.

    python examples/demo_relaxations.py [--np 4] [--epochs 4] [--modes allreduce,dear,...]
                                        [--link-mbit 200 | --link-mbit 0 (shared memory)] [--plot PNG]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from relaxlib_launch.mpirun_command import free_port, mpirun_environment

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WIDE_MODEL = ["--hidden", "512", "--depth", "3"]  # 563,722 parameters: 2.3 MB of float32 gradients
REFERENCE = "ddp"
BASE_LR = 0.05  # torch_digits.py scales it by the number of ranks
SLOW_FACTOR = 4  # the slow-link rows: the last rank's link at 1/4 of the others'


@dataclass(frozen=True)
class Row:
    """One job of the demo: a mode (torch_digits.py --algorithm), its settings and what it trades."""

    mode: str
    what: str
    lr: float = BASE_LR
    epoch_factor: int = 1  # epochs: this many times --epochs
    slow_link: bool = False  # the last rank's link SLOW_FACTOR times slower (as root)
    default: bool = True  # in the rows run without --modes

    @property
    def name(self) -> str:
        """The row's name in the table: the mode, marked when it runs behind the slow link."""
        return f"{self.mode}+slow" if self.slow_link else self.mode


# Every row's settings are DDP's unless the row says otherwise; each averaging row carries the one
# change that lets it do what it is for (and the table prints it).
ROWS = (
    Row("ddp", "torch DDP over gloo: the reference"),
    Row("allreduce", "exact: gradients averaged every step"),
    # (not by default: a backward of ~1 ms leaves DeAR nothing to overlap, so it only adds a job)
    Row("dear", "exact; overlaps comm with compute: none to overlap here", default=False),
    Row("compressed-fp16", "half the bytes; fp16 rounding"),
    Row("compressed-uint8", "a quarter of the bytes; error feedback"),
    Row("compressed-sign", "1/32 of the bytes; error feedback"),
    Row("decentralized-random", "models averaged in random pairs: 1 model sent/step", epoch_factor=2),
    Row("async", "models averaged in the background, ~every 10 steps", epoch_factor=2),
    Row("allreduce", "exact, held back by the slow link", slow_link=True),
    Row("partial-smart", "models averaged in groups of ready ranks", epoch_factor=2, slow_link=True),
)
MODES = tuple(dict.fromkeys(row.mode for row in ROWS if row.mode != REFERENCE))
DEFAULT_MODES = tuple(dict.fromkeys(row.mode for row in ROWS if row.mode != REFERENCE and row.default))


def job_command(row: Row, args: argparse.Namespace, summary: Path) -> list[str]:
    """The training script's arguments for one row."""
    return [sys.executable, str(HERE / "torch_digits.py"), "--epochs", str(args.epochs * row.epoch_factor),
            "--algorithm", row.mode, "--lr", str(row.lr), "--summary", str(summary), "--data", str(args.data),
            *WIDE_MODEL]


def read_summary(summary: Path, code: int) -> dict | None:
    """Rank 0's summary of a job, or None if the job failed."""
    return json.loads(summary.read_text()) if code == 0 and summary.exists() else None


def run_local(row: Row, args: argparse.Namespace, workdir: Path) -> dict | None:
    """One relaxrun job over shared memory; rank 0's summary, or None if it failed."""
    summary = workdir / f"{row.name}.json"
    env = dict(os.environ, MASTER_PORT=str(free_port()))
    command = [sys.executable, "-m", "relaxlib_launch.relaxrun", "-np", str(args.np), *job_command(row, args, summary)]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if done.returncode != 0:
        print(f"{row.name}: failed (exit {done.returncode})\n{done.stdout[-3000:]}", flush=True)
    return read_summary(summary, done.returncode)


def shape_link(net, rank: int, mbit: float) -> None:
    """Sets one rank's link (both directions) to ``mbit`` Mbit/s, the others' shaping as it is."""
    rate_bytes = mbit * 1e6 / 8
    burst = max(net.mtu * 8, int(rate_bytes * 0.002))  # 2 ms of traffic, as ShapedNetwork does
    for prefix, dev in ((["ip", "netns", "exec", net.namespaces[rank]], "eth0"), ([], net.host_links[rank])):
        subprocess.run([*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
                        "burst", str(burst), "latency", "50ms"], check=True, capture_output=True)


def run_shaped(rows: list[Row], args: argparse.Namespace, workdir: Path) -> dict[str, dict | None]:
    """Every row behind shaped links (the slow-link rows last, with the last rank's link slowed)."""
    from netem import ShapedNetwork

    results: dict[str, dict | None] = {}
    with ShapedNetwork(args.np, bandwidth_mbit=args.link_mbit) as net:
        slowed = False
        for row in sorted(rows, key=lambda r: r.slow_link):  # stable: the given order within each link setting
            if row.slow_link and not slowed:
                shape_link(net, args.np - 1, args.link_mbit / SLOW_FACTOR)
                slowed = True
            summary = workdir / f"shaped-{row.name}.json"
            env = mpirun_environment(PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                                     MASTER_ADDR=net.addresses[0], MASTER_PORT=str(free_port()),
                                     GLOO_SOCKET_IFNAME="eth0")  # the host name is a namespace's loopback
            command = net.mpirun_command(args.np, export=["MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"],
                                         env=env) + job_command(row, args, summary)
            code = net.run(command, env=env, timeout=900, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            results[row.name] = read_summary(summary, code)
            print_progress(row, results[row.name], code)
    return {row.name: results[row.name] for row in rows}


def run_all(rows: list[Row], args: argparse.Namespace,
            workdir: Path) -> tuple[list[Row], dict[str, dict | None], str]:
    """Every row (DDP first), behind shaped links when this process may create them: the rows run (without
    slow links over shared memory), their results by name and the setting's name."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from netem import require_privileges

    if args.link_mbit > 0:
        try:
            require_privileges()
        except RuntimeError as exc:
            print(f"No shaped links ({exc}): the ranks share memory, so compression saves little time here.")
        else:
            setting = f"{args.np} ranks, {args.link_mbit:g} Mbit/s links"
            print(f"{setting} (network namespaces, tc tbf); 2.3 MB of gradients per step; +slow rows: "
                  f"rank {args.np - 1}'s link at {args.link_mbit / SLOW_FACTOR:g} Mbit/s", flush=True)
            return rows, run_shaped(rows, args, workdir), setting
    setting = f"{args.np} ranks, shared memory"
    # No link to slow: the slow-link rows run like the others (all-reduce's once).
    rows = [replace(row, slow_link=False) for row in rows if not (row.slow_link and row.mode == "allreduce")]
    results = {}
    for row in rows:
        results[row.name] = run_local(row, args, workdir)
        print_progress(row, results[row.name], 0)
    return rows, results, setting


def print_progress(row: Row, result: dict | None, code: int) -> None:
    print(f"  {row.name:<22} " + (f"{result['samples_per_sec']:7.1f} samples/s per rank, test acc "
                                  f"{result['test_accuracy']:.3f}" if result else f"failed (exit {code})"),
          flush=True)


def print_table(rows: list[Row], results: dict[str, dict | None], setting: str, args: argparse.Namespace) -> None:
    """Accuracy, its points against DDP, throughput and speed against DDP, one line per row."""
    ddp = results.get(REFERENCE)
    print(f"\n{'mode':<22} {'test acc':>8} {'vs DDP':>7} {'samples/s':>9} {'vs DDP':>7} {'lr':>5} {'epochs':>6} "
          f"{'time':>5}  what it trades   ({setting}; samples/s per rank; lr before scaling by ranks; time: "
          "training time against DDP's, epochs / speed)")
    for row in rows:
        r = results.get(row.name)
        if r is None:
            if row.name in results:
                print(f"{row.name:<22} {'failed':>8}")
            continue
        points = f"{(r['test_accuracy'] - ddp['test_accuracy']) * 100:+.1f}pt" if ddp else "-"
        speed = f"{r['samples_per_sec'] / ddp['samples_per_sec']:.2f}x" if ddp else "-"
        time = f"{row.epoch_factor * ddp['samples_per_sec'] / r['samples_per_sec']:.2f}" if ddp else "-"
        what = row.what
        slow_allreduce = results.get(Row("allreduce", "", slow_link=True).name)
        if row.slow_link and row.mode != "allreduce" and slow_allreduce:  # its fair reference: the same network
            speedup = r["samples_per_sec"] / slow_allreduce["samples_per_sec"]
            what += f"; {speedup:.2f}x allreduce+slow's speed, {row.epoch_factor / speedup:.2f} its time"
        print(f"{row.name:<22} {r['test_accuracy']:>8.3f} {points:>7} {r['samples_per_sec']:>9.1f} {speed:>7} "
              f"{row.lr:>5g} {args.epochs * row.epoch_factor:>6} {time:>5}  {what}")


def plot(rows: list[Row], results: dict[str, dict | None], setting: str, path: str) -> None:
    """Accuracy against throughput: one hollow marker per row, named in a legend (no labels on the
    points to overlap; hollow, so a marker on top of another leaves it visible), DDP's throughput and
    accuracy as dashed reference lines, plain numbers on the log axis."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    markers = "o^sDvP<>X*hp"
    fig, ax = plt.subplots(figsize=(9, 4.8))
    shown = [row for row in rows if results.get(row.name)]
    for index, row in enumerate(shown):
        r = results[row.name]
        color = "black" if row.mode == REFERENCE else f"C{index % 10}"
        more = f" ({row.epoch_factor}x epochs)" if row.epoch_factor > 1 else ""
        ax.scatter(r["samples_per_sec"], r["test_accuracy"], s=110 - 6 * index, marker=markers[index % len(markers)],
                   facecolors="none", edgecolors=color, linewidths=1.6, label=f"{row.name}: {row.what}{more}")
    ddp = results.get(REFERENCE)
    if ddp:
        ax.axvline(ddp["samples_per_sec"], color="black", linestyle="--", linewidth=0.8)
        ax.axhline(ddp["test_accuracy"], color="black", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.margins(x=0.12, y=0.1)  # no marker on the frame, and a labelled tick beyond the fastest
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"samples/s per rank (log scale); {setting}")
    ax.set_ylabel("test accuracy (digits)")
    ax.set_title("Each relaxation against DDP (dashed): right is faster, up is more accurate", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, labelspacing=1.1)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(f"\nwrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=4, help="DDP's epochs (a row may run a multiple)")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES),
                        help=f"rows to run besides DDP, by mode, from {', '.join(MODES)}")
    parser.add_argument("--link-mbit", type=float, default=200.0, help="link rate as root; 0: shared memory")
    parser.add_argument("--plot", default="relaxlib-demo-tradeoff.png")
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    rows = [row for row in ROWS if row.mode == REFERENCE or row.mode in modes]
    with tempfile.TemporaryDirectory(prefix="relaxlib-demo-") as tmp:
        # The split once, here: every rank of every row then reads it instead of importing scikit-learn.
        sys.path.insert(0, str(HERE))
        from torch_digits import save_split

        args.data = Path(tmp) / "digits.npz"
        save_split(str(args.data), seed=0)
        rows, results, setting = run_all(rows, args, Path(tmp))
    print_table(rows, results, setting, args)
    plot(rows, results, setting, args.plot)
    print("\nWhich relaxation pays on YOUR model and network: run your own training script under the advisor,\n"
          f"    relaxrun --advise -np {args.np} python your_train.py\n"
          "and read docs/which-relaxation.md for each mode's trade-off.")
    return 0 if all(r is not None for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
