"""Convergence grid: every relaxation against all-reduce over learning rate x momentum x model x ranks.

One cell trains a model on scikit-learn's digits (half for training, sharded over the ranks; the
other half for testing) from the same initial weights on every rank, and reports the final test
accuracy. Each mode is compared with all-reduce at the same cell (1-bit Adam with Adam under
all-reduce, the momentum column then being Adam's beta1 and the learning rate a tenth of the
column's). Model-averaging modes are measured after their final exact average (average_now).
``compressed-sign-gradient`` is the ablation of the default: 1-bit gradients with error feedback and
SGD's momentum applied after the average (compress="gradient"), instead of compressing each rank's
momentum step; ``topk-1-gradient`` is the same ablation for Top-K 1 %. ``compressed-sign-unscaled``
is the ablation of the per-element step scale the sign codec has by default (step_scale="none",
relaxlib.algorithms.step_scale).

    python benchmarks/convergence_grid.py                      # the whole grid, 2 and 4 ranks
    python benchmarks/convergence_grid.py --np 4 --models mlp --modes allreduce,compressed-sign
    python benchmarks/convergence_grid.py --dataset synthetic --models mlp,deep-mlp   # held out

``--dataset synthetic`` and the model ``deep-mlp`` are a problem and a model no setting was
chosen on: a check that what the digits grid shows carries over. ``wide-mlp`` (64-512-512-512-10)
is the demo's second model, where the 1-bit codec is least settled. ``narrow-mlp`` (64-32-10) is
where a step scale frozen after a warm-up (an earlier design) went stale in short runs:

    python benchmarks/convergence_grid.py --np 2 --models narrow-mlp --lrs 0.05 --momenta 0.9 \
        --seeds 10 --batch 32 --epochs 4 --modes allreduce,compressed-sign,compressed-sign-unscaled

Writes benchmarks/results/convergence_grid.json (every cell, the targets met or missed, the
worst cell per mode) and convergence_grid.png (a heat map of the accuracy difference).
Each rank count runs as one job (one mpirun), the cells one after another inside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from relaxlib_launch.mpirun_command import mpirun_environment

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MODELS = ("mlp", "conv")  # the default grid
EXTRA_MODELS = ("deep-mlp", "narrow-mlp", "wide-mlp")  # on request (--models)
LRS = (0.01, 0.03, 0.05, 0.1)
MOMENTA = (0.0, 0.9)
ADAM_LR_FACTOR = 0.1  # Adam's cells run at a tenth of the column's learning rate
MODES = ("allreduce", "dear", "compressed-fp16", "compressed-uint8", "compressed-sign", "compressed-sign-noef",
         "compressed-sign-unscaled", "compressed-sign-gradient", "compressed-sign-floor-0.3",
         "adam", "onebit-adam", "decentralized-ring", "decentralized-random", "decentralized-ring-uint8",
         "partial-static", "partial-random", "partial-smart", "async",
         "powersgd-1", "powersgd-2", "powersgd-4", "topk-1", "topk-10", "topk-1-gradient",
         "local-2", "local-8", "local-32", "diloco-2", "diloco-8", "diloco-32")
# Measured after a final exact average of the ranks' models; H = 2, 8, 32 steps between syncs.
LOCAL_UPDATES = ("local-2", "local-8", "local-32", "diloco-2", "diloco-8", "diloco-32")
REFERENCE = {"onebit-adam": "adam", "adam": "adam"}  # every other mode is compared with allreduce
AVERAGING = ("decentralized-ring", "decentralized-random", "decentralized-ring-uint8", "partial-static",
             "partial-random", "partial-smart", "async")
# per target (docs/compression.md): (bound in accuracy points below the reference, modes)
TARGETS = {
    "exact": (0.2, ("dear", "compressed-fp16")),
    "compressed with error feedback": (1.0, ("compressed-uint8", "compressed-sign")),
    "1-bit Adam": (1.0, ("onebit-adam",)),
    "model averaging after average_now": (2.0, AVERAGING),
    "low rank with error feedback (rank 2-4)": (1.0, ("powersgd-2", "powersgd-4")),
    "Top-K 1 % with error feedback": (1.0, ("topk-1",)),
    "local updates after a final average": (2.0, LOCAL_UPDATES),
}
CONVERGED = 80.0  # a reference below this accuracy (%) did not converge: its cell binds no target


# ---------------------------------------------------------------- worker (runs on every rank)

def build_model(name: str):
    import torch
    if name == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    if name == "deep-mlp":  # not in the default grid: a held-out model
        return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 10))
    if name == "wide-mlp":  # not in the default grid: the demo's second model, 563,722 parameters
        layers, width = [], 64
        for _ in range(3):
            layers += [torch.nn.Linear(width, 512), torch.nn.ReLU()]
            width = 512
        return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
    if name == "narrow-mlp":  # not in the default grid: where a frozen step scale goes stale
        return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    return torch.nn.Sequential(  # the digits as 1x8x8 images
        torch.nn.Unflatten(1, (1, 8, 8)),
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(32 * 4 * 4, 10))


def build_algorithm(mode: str):
    from relaxlib import algorithms
    from relaxlib.auto import algorithm_for
    if mode in ("allreduce", "adam"):
        return None
    if mode == "compressed-sign-noef":
        return algorithms.CompressedScatterReduce("sign", error_feedback=False)
    if mode == "compressed-sign-unscaled":  # without the per-element step scale (relaxlib.algorithms.step_scale)
        return algorithms.CompressedScatterReduce("sign", step_scale="none")
    if mode == "compressed-sign-floor-0.3":  # a larger floor under each element's scale
        return algorithms.CompressedScatterReduce("sign", scale_floor=0.3)
    if mode == "compressed-sign-gradient":  # error feedback on the gradient, momentum after the average
        return algorithms.CompressedScatterReduce("sign", compress="gradient")
    if mode == "onebit-adam":
        return algorithms.OneBitAdam(warmup_steps=20)
    if mode == "decentralized-ring-uint8":  # low precision (CHOCO); fixed neighbours only
        return algorithms.Decentralized("ring", codec="uint8")
    if mode == "async":
        return algorithms.AsyncModelAverage(sync_interval_ms=1)
    if mode == "local-only":  # control: local SGD, the models averaged once, after training
        return algorithms.Decentralized("ring", period=2**62)
    if mode.startswith("powersgd-"):  # compressing from step 10 (the cells are 200-450 steps long)
        return algorithms.PowerSGD(rank=int(mode.split("-")[1]), start_iter=10)
    if mode.startswith("topk-") and mode.endswith("-gradient"):  # ablation: momentum after the sparse average
        return algorithms.TopK(density=float(mode.split("-")[1]) / 100, compress="gradient")
    if mode.startswith("topk-"):  # SGD's own steps sparsified (compress="auto" with SGD)
        return algorithms.TopK(density=float(mode.split("-")[1]) / 100)
    if mode.startswith("local-"):  # plain model averaging every H steps
        return algorithms.LocalSGD(sync_every=int(mode.split("-")[1]))
    if mode.startswith("diloco-"):  # outer SGD, Nesterov 0.9, lr 0.7
        return algorithms.DiLoCo(sync_every=int(mode.split("-")[1]))
    return algorithm_for(mode)


EPOCHS, BATCH = 8, 16  # defaults of a cell: epochs, samples per rank and step


def shard(x, y, rank: int, size: int, by_label: bool = False):
    """This rank's share of the training set: every size-th sample (each rank sees every class),
    or, ``by_label``, the rank-th of ``size`` contiguous slices of the set sorted by label (each
    rank sees only a few classes: a model is good only if the ranks' models were mixed)."""
    import torch
    if not by_label:
        return x[rank::size], y[rank::size]
    rows = torch.argsort(y, stable=True).tensor_split(size)[rank]
    return x[rows], y[rows]


def run_cell(hvd, data, cell: dict, epochs: int = EPOCHS, batch: int = BATCH) -> dict:
    """Trains one cell; returns its test accuracy (%) and final training loss, or the error.
    Optional cell keys: ``shards="by-label"`` (see ``shard``) and ``compute_ms``, a pause after
    each backward pass that stands for a larger model's compute (the digits models take about
    0.5 ms a step, less than a round of async averaging on 4 ranks sharing 2 cores)."""
    import torch

    from relaxlib.algorithms import ModelAveraging
    x_train, y_train, x_test, y_test = data
    torch.manual_seed(cell["seed"])  # same initial weights on every rank
    model = build_model(cell["model"])
    if cell["mode"] in ("adam", "onebit-adam"):
        base = torch.optim.Adam(model.parameters(), lr=cell["lr"] * ADAM_LR_FACTOR, betas=(cell["momentum"], 0.999))
    else:
        base = torch.optim.SGD(model.parameters(), lr=cell["lr"], momentum=cell["momentum"])
    algorithm = build_algorithm(cell["mode"])
    optimizer = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(), algorithm=algorithm,
                                         model=model)
    x_local, y_local = shard(x_train, y_train, hvd.rank(), hvd.size(), cell.get("shards") == "by-label")
    steps = min(hvd.allgather_object(len(x_local) // batch, name="grid.steps"))  # (by-label shards differ by 1)
    compute_s = cell.get("compute_ms", 0) / 1000
    loss = torch.tensor(0.0)
    try:
        for epoch in range(epochs):
            order = torch.randperm(len(x_local), generator=torch.Generator().manual_seed(1000 * epoch + hvd.rank()))
            for step in range(steps):
                rows = order[step * batch:(step + 1) * batch]
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x_local[rows]), y_local[rows])
                loss.backward()
                if compute_s:
                    time.sleep(compute_s)
                optimizer.step()
        if isinstance(algorithm, ModelAveraging):
            optimizer.join()
            algorithm.average_now()
        elif hasattr(optimizer, "flush"):
            optimizer.flush()
        if cell["mode"] in LOCAL_UPDATES:  # the ranks' models since the last sync, averaged once
            with torch.no_grad():
                for i, p in enumerate(model.parameters()):
                    p.copy_(hvd.allreduce(p.detach(), name=f"grid.final.{i}"))
    except Exception as error:  # a diverged cell (non-finite gradients) fails on every rank alike
        return {"accuracy": None, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"}
    finally:
        if hasattr(optimizer, "close"):
            optimizer.close()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item() * 100
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    # every rank must hold the same model at the end (a check, not a measurement)
    spread = hvd.allreduce(flat, op=hvd.Max, name="grid.max") - hvd.allreduce(flat, op=hvd.Min, name="grid.min")
    return {"accuracy": accuracy, "final_loss": float(loss.detach()), "ranks_agree": bool(spread.abs().max() == 0)}


def load_data(dataset: str = "digits"):
    """(x_train, y_train, x_test, y_test), a stratified half each: scikit-learn's digits scaled to
    [0, 1], or ``"synthetic"``, a held-out problem of the same shape (64 features, 10 classes;
    make_classification, fixed seed) for checking that a choice made on digits carries over."""
    import torch
    from sklearn.datasets import load_digits, make_classification
    from sklearn.model_selection import train_test_split
    if dataset == "synthetic":
        features, labels = make_classification(n_samples=3600, n_features=64, n_informative=24, n_redundant=8,
                                               n_classes=10, n_clusters_per_class=1, class_sep=2.0,
                                               random_state=7)
        features = (features - features.mean(0)) / features.std(0) / 3  # digits' spread (standard deviation 0.3-0.4)
        x = torch.tensor(features, dtype=torch.float32)
        y = torch.tensor(labels)
    else:
        digits = load_digits()
        x = torch.tensor(digits.data, dtype=torch.float32) / 16
        y = torch.tensor(digits.target)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.5, random_state=0, stratify=y)
    return x_train, y_train, x_test, y_test


def worker(args: argparse.Namespace) -> int:
    import torch

    import relaxlib_torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    data = load_data(args.dataset)
    cells = json.loads(Path(args.cells).read_text())
    with open(args.out, "a") if hvd.rank() == 0 else open(os.devnull, "w") as out:
        for number, cell in enumerate(cells, 1):
            start = time.perf_counter()
            result = run_cell(hvd, data, cell, args.epochs, args.batch)
            result.update(cell, ranks=hvd.size(), seconds=round(time.perf_counter() - start, 3))
            out.write(json.dumps(result) + "\n")
            out.flush()
            if hvd.rank() == 0 and (number % 25 == 0 or number == len(cells)):
                print(f"  {hvd.size()} ranks: {number}/{len(cells)} cells", flush=True)
    return 0


# ---------------------------------------------------------------- driver

def cells_for(args: argparse.Namespace) -> list[dict]:
    options = {"compute_ms": args.compute_ms, "shards": args.shards}
    return [{"model": model, "mode": mode, "lr": lr, "momentum": momentum, "seed": seed, **options}
            for model in args.models for lr in args.lrs for momentum in args.momenta
            for seed in range(args.seeds) for mode in args.modes]


def run_ranks(np_: int, cells: list[dict], args: argparse.Namespace, workdir: Path) -> list[dict]:
    """One mpirun job for every cell at ``np_`` ranks; returns rank 0's records."""
    cells_file, out_file = workdir / f"cells{np_}.json", workdir / f"out{np_}.jsonl"
    cells_file.write_text(json.dumps(cells))
    command = [sys.executable, "-m", "relaxlib_launch.relaxrun", "-np", str(np_), sys.executable, __file__,
               "--worker", "--cells", str(cells_file), "--out", str(out_file), "--epochs", str(args.epochs),
               "--batch", str(args.batch), "--dataset", args.dataset]
    try:
        subprocess.run(command, env=mpirun_environment(), timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"{np_} ranks: the job did not finish within {args.timeout} s; keeping the cells it finished")
    if not out_file.exists():
        return []
    return [json.loads(line) for line in out_file.read_text().splitlines() if line.strip()]


def mean_accuracy(records: list[dict]) -> float | None:
    values = [r["accuracy"] for r in records]
    return None if any(v is None or math.isnan(v) for v in values) else statistics.fmean(values)


def paired_standard_error(mine: list[dict], reference: list[dict]) -> float | None:
    """Standard error of the mean difference to the reference over the seeds both ran (each
    seed's difference pairs runs from the same initial weights), or None under two seeds."""
    ref_by_seed = {r["seed"]: r["accuracy"] for r in reference}
    diffs = [r["accuracy"] - ref_by_seed[r["seed"]] for r in mine
             if r["accuracy"] is not None and ref_by_seed.get(r["seed"]) is not None]
    return statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) >= 2 else None


def summarize(records: list[dict]) -> dict:
    """Per cell (model, ranks, lr, momentum): each mode's accuracy (mean over seeds), its
    difference to the reference and that difference's paired standard error over the seeds; per
    target: the cells that bind it, the misses, the worst cell."""
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in records:
        key = (r["model"], r["ranks"], r["lr"], r["momentum"])
        groups.setdefault(key, {}).setdefault(r["mode"], []).append(r)
    cells = []
    for (model, ranks, lr, momentum), by_mode in sorted(groups.items()):
        accuracy = {mode: mean_accuracy(rs) for mode, rs in by_mode.items()}
        for mode, acc in accuracy.items():
            reference = REFERENCE.get(mode, "allreduce")
            ref = accuracy.get(reference)
            errors = sorted({r["error"] for r in by_mode[mode] if r.get("error")})
            cells.append({"model": model, "ranks": ranks, "lr": lr, "momentum": momentum, "mode": mode,
                          "accuracy": acc, "reference": reference, "reference_accuracy": ref,
                          "delta": None if acc is None or ref is None else acc - ref,
                          "delta_se": paired_standard_error(by_mode[mode], by_mode.get(reference, [])),
                          "seed_accuracies": {r["seed"]: r["accuracy"] for r in by_mode[mode]},
                          "converged": ref is not None and ref >= CONVERGED,
                          "ranks_agree": all(r.get("ranks_agree", True) for r in by_mode[mode]),
                          "errors": errors})
    targets = {}
    for target, (bound, modes) in TARGETS.items():
        binding = [c for c in cells if c["mode"] in modes and c["converged"]]
        misses = [c for c in binding if c["delta"] is None or c["delta"] < -bound]
        targets[target] = {"bound_points": bound, "modes": list(modes), "cells": len(binding),
                           "missed": len(misses), "met": not misses and bool(binding),
                           "misses": [{k: c[k] for k in ("model", "ranks", "lr", "momentum", "mode", "accuracy",
                                                         "reference_accuracy", "delta")} for c in misses]}
    sign = {(c["model"], c["ranks"], c["lr"], c["momentum"]): c for c in cells if c["mode"] == "compressed-sign"}
    noef = {(c["model"], c["ranks"], c["lr"], c["momentum"]): c for c in cells if c["mode"] == "compressed-sign-noef"}
    worse = [k for k in sign if k in noef and (sign[k]["accuracy"] or 0) < (noef[k]["accuracy"] or 0)]
    # (with the all-reduce's accuracy: where 1-bit steps without error feedback beat all-reduce
    # itself, error feedback, which makes the steps track all-reduce's, cannot match them)
    targets["sign with error feedback never worse than without"] = {
        "cells": len(set(sign) & set(noef)), "missed": len(worse), "met": not worse,
        "misses": [dict(zip(("model", "ranks", "lr", "momentum"), k), ef=sign[k]["accuracy"],
                        no_ef=noef[k]["accuracy"], allreduce=sign[k]["reference_accuracy"]) for k in worse]}
    worst = {}
    for mode in sorted({c["mode"] for c in cells}):
        mine = [c for c in cells if c["mode"] == mode and c["converged"] and c["delta"] is not None]
        failed = [c for c in cells if c["mode"] == mode and c["accuracy"] is None]
        if mine:
            w = min(mine, key=lambda c: c["delta"])
            worst[mode] = {k: w[k] for k in ("model", "ranks", "lr", "momentum", "accuracy", "reference_accuracy",
                                             "delta")}
        if failed:
            worst.setdefault(mode, {})["failed_cells"] = len(failed)
    return {"cells": cells, "targets": targets, "worst_cell_per_mode": worst}


def plot(summary: dict, path: Path) -> None:
    """Heat map: rows = modes, columns = (model, ranks, momentum, lr); colour = points vs the reference."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    cells = summary["cells"]
    modes = [m for m in MODES if any(c["mode"] == m for c in cells)]
    columns = sorted({(c["model"], c["ranks"], c["momentum"], c["lr"]) for c in cells})
    grid = np.full((len(modes), len(columns)), np.nan)
    text = [["" for _ in columns] for _ in modes]
    for c in cells:
        i, j = modes.index(c["mode"]), columns.index((c["model"], c["ranks"], c["momentum"], c["lr"]))
        if c["accuracy"] is None:
            text[i][j] = "x"
        elif c["mode"] in ("allreduce", "adam"):
            text[i][j] = f"{c['accuracy']:.0f}"
        else:
            grid[i, j] = c["delta"]
            text[i][j] = f"{c['delta']:+.1f}"
    fig, ax = plt.subplots(figsize=(max(8, 0.62 * len(columns)), 0.42 * len(modes) + 2.2))
    image = ax.imshow(np.clip(grid, -10, 10), cmap="RdYlGn", vmin=-10, vmax=10, aspect="auto")
    for i in range(len(modes)):
        for j in range(len(columns)):
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(modes)), modes, fontsize=7)
    ax.set_xticks(range(len(columns)), [f"{m} n{r}\nmom {mo:g} lr {lr:g}" for m, r, mo, lr in columns],
                  rotation=90, fontsize=6)
    ax.set_title("test accuracy minus the reference's (points); all-reduce / Adam rows: their accuracy (%)",
                 fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.02, pad=0.01)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bound_of(mode: str) -> float | None:
    return next((bound for bound, modes in TARGETS.values() if mode in modes), None)


def markdown_table(summary: dict) -> str:
    """Per mode over the converged cells: how many, how many within the mode's bound, the median
    and the worst difference to the reference (the table docs/compression.md quotes)."""
    lines = ["| mode | reference | bound (pts) | converged cells | within bound | median Δ | worst Δ (cell) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for mode in MODES:
        mine = [c for c in summary["cells"] if c["mode"] == mode and c["converged"]]
        if not mine or mode in ("allreduce", "adam"):
            continue
        deltas = [c["delta"] if c["delta"] is not None else -math.inf for c in mine]
        bound = bound_of(mode)
        within = "–" if bound is None else f"{sum(d >= -bound for d in deltas)} / {len(mine)}"
        worst = min(mine, key=lambda c: c["delta"] if c["delta"] is not None else -math.inf)
        where = f"{worst['model']} n{worst['ranks']} lr {worst['lr']:g} mom {worst['momentum']:g}"
        worst_text = "failed" if worst["delta"] is None else f"{worst['delta']:+.1f}"
        lines.append(f"| {mode} | {mine[0]['reference']} | {'–' if bound is None else f'{bound:g}'} | {len(mine)} | "
                     f"{within} | {statistics.median(deltas):+.1f} | {worst_text} ({where}) |")
    return "\n".join(lines)


def print_report(summary: dict) -> None:
    for target, t in summary["targets"].items():
        state = ("no converged cell" if not t["cells"] else
                 f"met in all {t['cells']} cells" if t["met"] else f"MISSED in {t['missed']} of {t['cells']} cells")
        print(f"{target:<52} {state}")
        for m in t["misses"][:12]:
            print(f"    {m}")
    print("\n" + markdown_table(summary))


def parse_list(text: str, kind=float) -> list:
    return [kind(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", default="2,4", help="rank counts, one job each")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--lrs", default=",".join(map(str, LRS)))
    parser.add_argument("--momenta", default=",".join(map(str, MOMENTA)))
    parser.add_argument("--seeds", type=int, default=3, help="initializations per cell (accuracies averaged)")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--batch", type=int, default=BATCH, help="per rank")
    parser.add_argument("--compute-ms", type=float, default=0.0,
                        help="pause after each backward pass, standing for a larger model's compute")
    parser.add_argument("--shards", choices=("strided", "by-label"), default="strided",
                        help="training data per rank: every size-th sample, or a slice of the set sorted by label")
    parser.add_argument("--dataset", choices=("digits", "synthetic"), default="digits",
                        help="digits, or a held-out synthetic problem of the same shape")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per job")
    parser.add_argument("--out", type=Path, default=RESULTS / "convergence_grid.json")
    parser.add_argument("--records", help="summarize these runs' records (comma-separated .jsonl files, as the "
                                          "rank jobs write them) instead of running cells")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cells", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.out = str(args.out)
        return worker(args)
    args.models = parse_list(args.models, str)
    args.modes = parse_list(args.modes, str)
    unknown = sorted(set(args.modes) - set(MODES)) + sorted(set(args.models) - set(MODELS) - set(EXTRA_MODELS))
    if unknown:
        parser.error(f"unknown modes or models: {unknown}")
    for needed, by in (("allreduce", set(args.modes) - {"adam", "onebit-adam"}), ("adam", {"onebit-adam"})):
        if set(args.modes) & by and needed not in args.modes:
            args.modes.insert(0, needed)  # the reference runs in every cell that needs it
    args.lrs, args.momenta = parse_list(args.lrs), parse_list(args.momenta)
    cells = cells_for(args)
    records = []
    started = time.perf_counter()
    if args.records:
        records = [json.loads(line) for path in parse_list(args.records, Path)
                   for line in path.read_text().splitlines() if line.strip()]
    else:
        with tempfile.TemporaryDirectory(prefix="relaxlib-grid-") as tmp:
            for np_ in parse_list(args.np, int):
                print(f"{np_} ranks: {len(cells)} cells", flush=True)
                records += run_ranks(np_, cells, args, Path(tmp))
    summary = summarize(records)
    summary["settings"] = {"np": parse_list(args.np, int), "models": args.models, "lrs": args.lrs,
                           "momenta": args.momenta, "seeds": args.seeds, "epochs": args.epochs,
                           "batch_per_rank": args.batch, "data": f"{args.dataset}, half train (sharded), half test",
                           "shards": args.shards, "compute_ms_per_step": args.compute_ms,
                           "adam_lr_factor": ADAM_LR_FACTOR, "converged_if_reference_at_least": CONVERGED,
                           "seconds": round(time.perf_counter() - started, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    plot(summary, args.out.with_suffix(".png"))
    print_report(summary)
    print(f"\n{len(records)} runs in {summary['settings']['seconds']:.0f} s; wrote {args.out} and "
          f"{args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
