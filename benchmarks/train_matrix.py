"""Training-speed matrix: every mode beside torch DDP (gloo) over links × ranks × models, with each
mode's limit from relaxlib.perfmodel.

    python benchmarks/train_matrix.py                       # the whole matrix (long: hours)
    python benchmarks/train_matrix.py --links 200,1000 --np 2 --models sleep --reps 3

Every cell (link, ranks, model) runs each mode as its own benchmarks/train.py job; the modes
alternate (the order reverses on every other repetition) and the report quotes the median of
the repetitions with their spread. Links: ``shm`` (one node, shared memory) or a rate in Mbit/s,
which runs the ranks in network namespaces behind kernel-shaped TCP links (root only, see
netem.py). Models: ``sleep`` (8 layers of 1 MiB of gradients whose forward and backward sleep
40 / 80 ms: communication competes for nothing) and ``mlp`` (8 real 512-wide layers: 8 MiB of
gradients whose compute competes with communication for the 2 cores).

For every mode the report gives the **limit**: the step time relaxlib.perfmodel predicts for that
mode if communication cost only its wire time at the link's rate (α = 0, codecs free) and
overlapped as the mode allows, with the compute of the cell measured without communication (a ``none`` job, each
rank alone, run beside the modes). ``limit_ratio`` = measured
step / limit (1.0 = nothing lost), ``vs_ddp`` = DDP's step / the mode's step (> 1: faster than
DDP). ``--horovod DIR`` (a Horovod install, tests/horovod_suites/README.md) adds Horovod's own
DistributedOptimizer as the mode ``horovod`` to every cell. Writes JSON and a PNG (two heat maps)
to benchmarks/results/train_matrix.{json,png} or --out.
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

RESULTS = Path(__file__).resolve().parent / "results"
SLEEP = {"layers": 8, "width": 262144, "forward_ms": 40.0, "backward_ms": 80.0}  # 8 × 1 MiB
MLP = {"layers": 8, "width": 512}  # 8 × (512·512 + 512) float32 ≈ 8 MiB
# bench_models.TinyLM's defaults (6.9 M parameters, 27 MB of gradients), 8 sequences of 64 tokens per rank
TRANSFORMER = {"batch_size": 8, "seq_len": 64, "vocab": 4096, "d_model": 256, "lm_layers": 6}
MODEL_SPECS = {"sleep": SLEEP, "mlp": MLP, "transformer": TRANSFORMER}
UNSHAPED_BYTES_PER_S = 1e15  # shared memory: the limit is the compute alone


def registered_modes() -> list[str]:
    """The advisor's modes (relaxlib.algorithms.modes) plus torch DDP."""
    from relaxlib.algorithms import modes
    return [mode.name for mode in modes.registered()] + ["ddp"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", type=lambda s: s.split(","), help="default: every advisor mode and ddp")
    parser.add_argument("--links", type=lambda s: s.split(","), default=["shm", "10000", "1000", "200"])
    parser.add_argument("--np", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    parser.add_argument("--models", type=lambda s: s.split(","), default=["sleep", "mlp"],
                        help="sleep, mlp, transformer (a small causal language model)")
    parser.add_argument("--horovod", metavar="DIR", help="a Horovod install: adds the peer mode 'horovod'")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--iters", type=int, default=6, help="timed iterations per job (2 batches each)")
    parser.add_argument("--out", type=Path, default=RESULTS / "train_matrix.json")
    parser.add_argument("--markdown", action="store_true",
                        help="only print --out's cells as markdown tables (for docs/performance.md)")
    parser.add_argument("--append", action="store_true",
                        help="keep the cells already in --out (a cell measured again replaces its old entry)")
    args = parser.parse_args(argv)
    args.modes = args.modes or registered_modes()
    if "ddp" not in args.modes:
        args.modes.append("ddp")  # every cell is compared with DDP
    if args.horovod and "horovod" not in args.modes:
        args.modes.append("horovod")
    if "horovod" in args.modes and not args.horovod:
        parser.error("the mode 'horovod' needs --horovod DIR")
    return args


def model_arguments(model: str) -> list[str]:
    spec = MODEL_SPECS[model]
    out = ["--model", model]
    for key, value in spec.items():
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


def run_job(mode: str, link: str, np_: int, model: str, iters: int, horovod: str | None = None,
            mode_args: list[str] | None = None) -> dict:
    """One train.py job; returns its median step, samples/s per worker and compute time.
    ``mode_args``: train.py's arguments for the mode, where its name does not say them all."""
    argv = (mode_args or train.mode_arguments(mode)) + model_arguments(model) + [
        "--np", str(np_), "--num-iters", str(iters), "--quiet", "--out", "/dev/null"]
    if mode == "horovod":
        argv += ["--horovod", horovod]
    if link != "shm":
        argv += ["--bandwidth", link]
    report = train.run(train.parse_args(argv))
    compute = statistics.median(r["forward_backward_seconds"] for r in report["raw"]["ranks"])
    return {"step_s": report["step_seconds_median"], "samples_per_sec": report["samples_per_sec_per_worker"],
            "compute_s": compute}


def layer_bytes(model: str) -> list[float]:
    """Float32 gradient bytes per parameter tensor, in forward order."""
    if model == "sleep":
        return [4.0 * SLEEP["width"]] * SLEEP["layers"]
    if model == "transformer":
        from bench_models import TinyLM
        spec = TRANSFORMER
        lm = TinyLM(spec["vocab"], spec["d_model"], spec["lm_layers"], seq_len=spec["seq_len"])
        return [4.0 * p.numel() for p in lm.parameters()]
    return [4.0 * (MLP["width"] ** 2 + MLP["width"])] * MLP["layers"]


def limit_step(mode: str, link: str, np_: int, model: str, compute_s: float) -> float | None:
    """The mode's perfmodel step with wire time only (α = 0, free codecs) at the link's rate."""
    if mode in train.PEERS or mode == "allreduce-negotiated":
        mode = "allreduce"  # DDP's and Horovod's limit is all-reduce's
    from relaxlib import compression, perfmodel
    from relaxlib.algorithms import modes
    registered = {m.name: m for m in modes.registered()}
    if mode not in registered:
        return None
    bandwidth = UNSHAPED_BYTES_PER_S if link == "shm" else float(link) * 1e6 / 8
    work = perfmodel.Workload(ranks=np_, alpha_s=0.0, bandwidth_bytes_per_s=bandwidth,
                              buckets=list(reversed(layer_bytes(model))),
                              forward_s=compute_s / 3, backward_s=2 * compute_s / 3,
                              batch=MODEL_SPECS[model].get("batch_size", 32),
                              codec_bytes_per_s={name: 1e18 for name in compression.CODECS})
    return registered[mode].prediction(work).step_s


def run_cell(args, link: str, np_: int, model: str) -> dict:
    jobs = args.modes + ["none"]  # none: the compute without communication, for the limits
    runs: dict[str, list[dict]] = {mode: [] for mode in jobs}
    for rep in range(args.reps):
        order = jobs if rep % 2 == 0 else list(reversed(jobs))
        for mode in order:
            for attempt in range(2):  # one retry: a launch in namespaces fails now and then
                try:
                    runs[mode].append(run_job(mode, link, np_, model, args.iters, args.horovod))
                    break
                except Exception as exc:  # a failed job is reported, not dropped
                    runs[mode].append({"error": f"attempt {attempt + 1}: {exc}"})
            print(f"  {link:>5} np{np_} {model:5} {mode:22} {runs[mode][-1]}", flush=True)
    alone = [r["compute_s"] for r in runs.pop("none") if "error" not in r]
    compute = statistics.median(alone) if alone else None
    cell: dict = {"link": link, "np": np_, "model": model, "measured": time.strftime("%Y-%m-%d"),
                  "compute_alone_s": compute, "modes": {}}
    for mode, results in runs.items():
        ok = [r for r in results if "error" not in r]
        if not ok:
            cell["modes"][mode] = {"errors": [r["error"] for r in results]}
            continue
        steps = [r["step_s"] for r in ok]
        limit = limit_step(mode, link, np_, model, compute) if compute else None
        cell["modes"][mode] = {
            "step_s": statistics.median(steps), "step_s_spread": [min(steps), max(steps)],
            "samples_per_sec": statistics.median(r["samples_per_sec"] for r in ok),
            "compute_s": statistics.median(r["compute_s"] for r in ok), "limit_step_s": limit,
            "limit_ratio": statistics.median(steps) / limit if limit else None,
            "runs": len(ok), "errors": [r["error"] for r in results if "error" in r]}
    ddp = cell["modes"].get("ddp", {}).get("step_s")
    for entry in cell["modes"].values():
        if ddp and "step_s" in entry:
            entry["vs_ddp"] = ddp / entry["step_s"]
    return cell


def plot(report: dict, path: Path) -> None:
    """Two heat maps: speed against DDP, and measured step against the mode's limit."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cells = report["cells"]
    modes = report["config"]["modes"]
    columns = [f"{c['link']}\nnp{c['np']} {c['model']}" for c in cells]
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.2 * len(cells)) * 2, 0.45 * len(modes) + 2))
    for ax, key, title, cmap in ((axes[0], "vs_ddp", "DDP step / mode step (>1: faster than DDP)", "RdYlGn"),
                                 (axes[1], "limit_ratio", "mode step / its wire-time limit", "YlOrRd")):
        grid = np.array([[c["modes"].get(m, {}).get(key) or np.nan for c in cells] for m in modes], dtype=float)
        image = ax.imshow(grid, cmap=cmap, aspect="auto",
                          vmin=0.5 if key == "vs_ddp" else 1.0, vmax=2.0 if key == "vs_ddp" else 3.0)
        for i in range(len(modes)):
            for j in range(len(cells)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(cells)), columns, fontsize=7)
        ax.set_yticks(range(len(modes)), modes, fontsize=8)
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cell_order(cell: dict) -> tuple:
    """Shared memory first, then links from fast to slow; ranks; models."""
    link = float("inf") if cell["link"] == "shm" else float(cell["link"])
    return (-link, cell["np"], cell["model"])


def save(args, cells: list[dict], started: float) -> dict:
    """Writes the report so far (after every cell: a long run interrupted keeps what it measured)."""
    cells = sorted(cells, key=cell_order)
    config = {k: v for k, v in vars(args).items() if k not in ("out", "append")}
    config["modes"] = list(dict.fromkeys(m for c in cells for m in c["modes"]))
    report = {"benchmark": "train_matrix", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "seconds": round(time.time() - started), "config": config,
              "models": MODEL_SPECS, "cells": cells}
    report["targets"] = targets(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    plot(report, args.out.with_suffix(".png"))
    return report


def allreduce_wire_s(cell: dict) -> float:
    """A ring all-reduce's wire time for the cell's gradients at its link's rate (0 on shared memory)."""
    if cell["link"] == "shm":
        return 0.0
    n = cell["np"]
    return 2 * (n - 1) / n * sum(layer_bytes(cell["model"])) / (float(cell["link"]) * 1e6 / 8)


def targets(report: dict) -> list[dict]:
    """The training-speed targets, each with the cells it covers, their figures and whether all
    hold: all-reduce at least DDP's speed everywhere and within 1.05x of the compute where that
    is all there is (shared memory); every compressed mode within 1.15x of its limit where the
    link is the bottleneck (1 Gbit/s and slower); DeAR within 1.05x of its limit everywhere, at
    most 2 % slower than all-reduce where communication hides behind backward (its wire time
    shorter than backward, taken as 2/3 of the compute), and 1.15x faster where the all-reduce's
    wire time is about forward + backward (2/3 to 1.5x the compute)."""
    def figure(cell: dict, mode: str, key: str) -> float | None:
        return cell["modes"].get(mode, {}).get(key)

    def label(cell: dict) -> str:
        return f"{cell['model']} {cell['link']} np{cell['np']}"

    def check(name: str, rows: list[tuple[str, float | None]], holds) -> dict:
        figures = {where: round(value, 3) if value is not None else None for where, value in rows}
        met = all(value is not None and holds(value) for _, value in rows) if rows else None  # None: no such cell
        return {"target": name, "figures": figures, "met": met}

    def dear_speedup(cell: dict) -> float | None:
        allreduce, dear = figure(cell, "allreduce", "step_s"), figure(cell, "dear", "step_s")
        return allreduce / dear if allreduce and dear else None

    cells = report["cells"]
    out = [
        check("all-reduce at least as fast as DDP in every cell (DDP step / all-reduce step >= 1.0)",
              [(label(c), figure(c, "allreduce", "vs_ddp")) for c in cells], lambda v: v >= 1.0),
        check("all-reduce within 1.05x of the compute alone on shared memory (step / limit)",
              [(label(c), figure(c, "allreduce", "limit_ratio")) for c in cells if c["link"] == "shm"],
              lambda v: v <= 1.05),
    ]
    link_bound = [c for c in cells if c["link"] != "shm" and float(c["link"]) <= 1000]
    compressed = [m for m in report["config"]["modes"] if m.startswith("compressed-")]
    out.append(check("compressed modes within 1.15x of their limit at 1 Gbit/s and below (step / limit)",
                     [(f"{m} {label(c)}", figure(c, m, "limit_ratio")) for c in link_bound for m in compressed
                      if m in c["modes"]],  # (cells measured without the compressed modes: the transformer's)
                     lambda v: v <= 1.15))
    out.append(check("DeAR within 1.05x of its limit in every cell (step / limit)",
                     [(label(c), figure(c, "dear", "limit_ratio")) for c in cells], lambda v: v <= 1.05))
    hidden = [c for c in cells if c.get("compute_alone_s") and allreduce_wire_s(c) < 2 * c["compute_alone_s"] / 3]
    out.append(check("DeAR at most 2 % slower than all-reduce where communication hides (all-reduce step / DeAR step)",
                     [(label(c), dear_speedup(c)) for c in hidden], lambda v: v >= 0.98))
    balanced = [c for c in cells if c["link"] != "shm" and c.get("compute_alone_s")
                and 2 / 3 <= allreduce_wire_s(c) / c["compute_alone_s"] <= 1.5]
    out.append(check("DeAR at least 1.15x faster than all-reduce where communication ~ forward + backward "
                     "(all-reduce step / DeAR step where the all-reduce's wire time is 2/3 to 1.5x the compute)",
                     [(label(c), dear_speedup(c)) for c in balanced], lambda v: v >= 1.15))
    return out


def markdown(report: dict) -> str:
    """One table per model: a row per mode, per cell its samples/s per rank, DDP's step / its step
    and its step / its limit."""
    out = []
    for model in dict.fromkeys(c["model"] for c in report["cells"]):
        cells = [c for c in report["cells"] if c["model"] == model]
        heads = [("shared memory" if c["link"] == "shm" else f"{float(c['link']) / 1000:g} Gbit/s")
                 + f", {c['np']} ranks" for c in cells]
        out.append(f"**{model}** (samples/s per rank · × DDP · measured / limit)\n")
        out.append("| mode | " + " | ".join(heads) + " |")
        out.append("| --- |" + " --- |" * len(cells))
        for mode in [m for m in report["config"]["modes"] if any(m in c["modes"] for c in cells)]:
            row = []
            for c in cells:
                e = c["modes"].get(mode, {})
                if "step_s" not in e:
                    row.append("failed" if mode in c["modes"] else "")
                    continue
                limit = f"{e['limit_ratio']:.2f}" if e.get("limit_ratio") else "-"
                vs_ddp = f"{e['vs_ddp']:.2f}" if e.get("vs_ddp") else "-"
                row.append(f"{e['samples_per_sec']:.0f} · {vs_ddp} · {limit}")
            out.append(f"| {mode} | " + " | ".join(row) + " |")
        out.append("")
    out.append("| target | met | figures |")
    out.append("| --- | --- | --- |")
    for t in targets(report):
        figures = ", ".join(f"{where} {value:.3f}" if value is not None else f"{where} failed"
                            for where, value in t["figures"].items())
        verdict = {True: "met", False: "missed", None: "no such cell"}[t["met"]]
        out.append(f"| {t['target']} | {verdict} | {figures} |")
    return "\n".join(out)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.out.read_text())))
        return
    started = time.time()
    cells = []
    if args.append and args.out.exists():
        cells = json.loads(args.out.read_text())["cells"]
    for link in args.links:
        for np_ in args.np:
            for model in args.models:
                cell = run_cell(args, link, np_, model)
                cells = [c for c in cells if (c["link"], c["np"], c["model"]) != (link, np_, model)] + [cell]
                save(args, cells, started)
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    for cell in cells:
        print(f"{cell['link']} np{cell['np']} {cell['model']}:")
        for mode, entry in cell["modes"].items():
            if "step_s" not in entry:
                print(f"  {mode:22} failed: {entry['errors'][0][:80]}")
                continue
            limit = f"{entry['limit_ratio']:.2f}" if entry["limit_ratio"] else "-"
            print(f"  {mode:22} {entry['samples_per_sec']:7.1f} samples/s  step {1e3 * entry['step_s']:7.1f} ms "
                  f"vs DDP {entry.get('vs_ddp', 0):.2f}  / limit {limit}")


if __name__ == "__main__":
    main()
