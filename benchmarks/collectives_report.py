"""Results of benchmarks/collectives.py: medians over jobs, paired ratios between libraries,
the issue's performance targets, the nccl-tests style table and the bus-bandwidth plot."""

from __future__ import annotations

import statistics
from pathlib import Path

# Open MPI with copy-in/copy-out shared memory instead of CMA single copy, its faster setting on
# this VM (the one relaxlib picks for its own MPI traffic, RELAX_SHM_SINGLE_COPY in
# docs/performance.md): a comparison against MPI at its best here, not only at its defaults.
MPI_SAME_TRANSPORT = "mpi@OMPI_MCA_btl_vader_single_copy_mechanism=none"
OPS = ("allreduce", "reduce_scatter", "allgather", "compressed_fp16", "compressed_uint8", "compressed_sign",
       "grouped_allreduce")
DEFAULT_OPS = OPS[:3]
BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "allgather": lambda n: (n - 1) / n}
for _codec in ("fp16", "uint8", "sign"):  # effective busbw: over the uncompressed size
    BUS_FACTOR[f"compressed_{_codec}"] = BUS_FACTOR["allreduce"]
GROUP_PARTS = 8  # grouped_allreduce: the buffer as this many tensors, all-reduced as one group
BUS_FACTOR["grouped_allreduce"] = BUS_FACTOR["allreduce"]
MiB = 1 << 20


def aggregate(runs: dict[str, list[dict]], np_: int) -> list[dict]:
    rows = []
    for lib, lib_runs in runs.items():
        samples: dict[tuple[str, int], list[float]] = {}
        errors: dict[tuple[str, int], str] = {}
        for run in lib_runs:
            for r in run["results"]:
                key = (r["op"], r["size"])
                if r.get("time_us") is None:
                    errors[key] = r.get("error", "failed")
                else:
                    samples.setdefault(key, []).append(r["time_us"])
        for key in sorted(set(samples) | set(errors), key=lambda k: (OPS.index(k[0]), k[1])):
            op, size = key
            row = {"library": lib, "op": op, "size": size, "count": size // 4, "dtype": "float32"}
            if key in samples:
                t = statistics.median(samples[key])
                algbw = size / (t * 1e-6) / 1e9
                row.update(time_us=t, time_us_runs=samples[key], algbw=algbw, busbw=algbw * BUS_FACTOR[op](np_))
                wire = [r.get("wire_bytes_per_rank") for run in lib_runs for r in run["results"]
                        if (r["op"], r["size"]) == key and r.get("wire_bytes_per_rank") is not None]
                if wire:
                    row["wire_bytes_per_rank"] = statistics.median(wire)
                    row["wire_bytes_formula"] = wire_formula(op, size, np_)
            else:
                row.update(time_us=None, error=errors[key])
            rows.append(row)
    return rows


def wire_formula(op: str, size: int, n: int) -> float:
    """Bytes each rank sends for one operation on `size` bytes of float32, by docs/architecture.md's formulas:
    all-reduce 2(n-1)/n * 4P; compressed: the same over the encoded chunks (+4-byte marker per part)."""
    from relaxlib.compression import chunk_wire_bytes
    count = size // 4
    if op in ("allreduce", "grouped_allreduce"):
        return 2 * (n - 1) / n * size
    if op in ("reduce_scatter", "allgather"):
        return (n - 1) / n * size
    codec = op.split("_", 1)[1]
    return 2 * (n - 1) * chunk_wire_bytes(codec, count, n, 0)


def lookup(rows: list[dict], lib: str, op: str, size: int) -> dict | None:
    return next((r for r in rows if r["library"] == lib and r["op"] == op and r["size"] == size), None)


def ratio(rows, op, size, peer="mpi", ours_name="relaxlib") -> float | None:
    """Median over repetitions of relaxlib's busbw / peer's busbw in adjacent jobs."""
    ours, theirs = lookup(rows, ours_name, op, size), lookup(rows, peer, op, size)
    if not ours or not theirs or not ours.get("time_us_runs") or not theirs.get("time_us_runs"):
        return None
    pairs = [t / o for o, t in zip(ours["time_us_runs"], theirs["time_us_runs"])]
    return statistics.median(pairs)


def evaluate_targets(rows: list[dict], sizes: list[int]) -> list[dict]:
    """The issue's performance targets, each with the measured figures and whether it is met."""
    def check(name, op, chosen, threshold, peer="mpi"):
        ratios = {str(s): ratio(rows, op, s, peer) for s in chosen if s in sizes}
        values = [v for v in ratios.values() if v is not None]
        measured = any(r["library"] == peer for r in rows)  # None: the peer was not in this run
        result = {"target": name, "ratios": ratios, "threshold": threshold,
                  "met": (bool(values) and all(v >= threshold for v in values)) if measured else None}
        if peer == "mpi" and any(r["library"] == MPI_SAME_TRANSPORT for r in rows):
            # not part of the target: the same comparison against MPI with copy-in/copy-out
            result["ratios_vs_mpi_same_transport"] = {str(s): ratio(rows, op, s, MPI_SAME_TRANSPORT)
                                                      for s in chosen if s in sizes}
        return result

    targets = [
        check("allreduce busbw >= 0.9x MPI from 1 to 16 MiB", "allreduce", [MiB, 4 * MiB, 16 * MiB], 0.9),
        check("allreduce busbw >= 1.5x MPI at 64 and 256 MiB", "allreduce", [64 * MiB, 256 * MiB], 1.5),
        check("reduce_scatter busbw clearly above MPI's (>= 1.2x) from 1 MiB", "reduce_scatter",
              [s for s in sizes if s >= MiB], 1.2),
    ]
    for op in DEFAULT_OPS:
        targets.append(check(f"{op} ahead of gloo everywhere", op, sizes, 1.0, peer="gloo"))
    small = lookup(rows, "relaxlib", "allreduce", 4096)
    targets.append({"target": "lone 4 KiB allreduce <= 100 us", "time_us": small and small.get("time_us"),
                    "met": bool(small and small.get("time_us") and small["time_us"] <= 100)})
    return targets


def comparisons(libs: list[str]) -> list[tuple[str, str, str]]:
    """(ours, peer, column label) of the ratio columns: relaxlib/mpi (and /horovod), or for TensorFlow runs
    relaxlib-tf against MPI and against relaxlib_torch."""
    if "relaxlib-tf" in libs:
        pairs = [("relaxlib-tf", "mpi", "tf/mpi"), ("relaxlib-tf", MPI_SAME_TRANSPORT, "tf/mpi-same-shm"),
                 ("relaxlib-tf", "relaxlib", "tf/torch")]
    else:
        pairs = [("relaxlib", "mpi", "relax/mpi"), ("relaxlib", MPI_SAME_TRANSPORT, "relax/mpi-same-shm"),
                 ("relaxlib", "horovod", "relax/horovod")]
    return [p for p in pairs if p[0] in libs and p[1] in libs] or [("relaxlib", "mpi", "relax/mpi")]


def ratio_table(rows: list[dict], libs: list[str], sizes: list[int]) -> dict:
    """{"ours/peer": {op: {size: median paired busbw ratio}}} for every comparison column."""
    table = {}
    for ours, peer, _ in comparisons(libs):
        table[f"{ours}/{peer}"] = {op: {str(s): ratio(rows, op, s, peer, ours) for s in sizes}
                                   for op in OPS if any(r["op"] == op for r in rows)}
    return table


def print_table(rows: list[dict], libs: list[str], np_: int) -> None:
    columns = comparisons(libs)
    ours_lib = columns[0][0]
    for op in OPS:
        op_rows = [r for r in rows if r["op"] == op]
        if not op_rows:
            continue
        print(f"\n# {op}, {np_} ranks (median of runs; algbw/busbw in GB/s)")
        header = f"{'size':>12} {'count':>10} {'dtype':>8}"
        for lib in libs:
            header += f" | {lib + ' time_us':>18} {'algbw':>7} {'busbw':>7}"
        print(header + "".join(f" | {label:>9}" for _, _, label in columns))
        for size in sorted({r["size"] for r in op_rows}):
            line = f"{size:>12} {size // 4:>10} {'float32':>8}"
            for lib in libs:
                r = lookup(rows, lib, op, size)
                if r and r.get("time_us"):
                    line += f" | {r['time_us']:>18.1f} {r['algbw']:>7.2f} {r['busbw']:>7.2f}"
                else:
                    line += f" | {'n/a':>18} {'':>7} {'':>7}"
            for ours_name, peer, _ in columns:
                rr = ratio(rows, op, size, peer, ours_name)
                line += f" | {rr:9.2f}" if rr else " |       n/a"
            ours = lookup(rows, ours_lib, op, size)
            wire = ""
            if ours and ours.get("wire_bytes_per_rank") is not None:
                wire = (f" | wire {ours['wire_bytes_per_rank'] / 1e6:8.3f} MB/rank "
                        f"(formula {ours['wire_bytes_formula'] / 1e6:8.3f})")
            print(line + wire)
    labels = ", ".join(label for _, _, label in columns)
    print(f"\n({labels}: median of paired busbw ratios of adjacent jobs)")


def aggregate_overhead(runs: dict[str, list[dict]]) -> dict:
    """Per variant: the median over jobs of the per-job median microseconds (variants of a
    library run with a setting, e.g. relaxlib-tf@TF_NUM_INTEROP_THREADS=1, carry it in their key)."""
    out = {}
    for lib, lib_runs in runs.items():
        setting = lib.partition("@")[2]
        for run in lib_runs:
            for variant, value in run.get("overhead", {}).items():
                key = f"{variant} @{setting}" if setting else variant
                entry = out.setdefault(key, {"library": lib, "median_us_runs": []})
                entry["median_us_runs"].append(value["median_us"])
    for entry in out.values():
        entry["median_us"] = statistics.median(entry["median_us_runs"])
    return out


def print_overhead(overhead: dict) -> None:
    if not overhead:
        return
    print("\n# op overhead: one 1-element float32 Sum allreduce (median us per op over jobs; max over ranks)")
    for variant, entry in overhead.items():
        runs = ", ".join(f"{v:.1f}" for v in entry["median_us_runs"])
        print(f"{variant:>34}: {entry['median_us']:8.1f} us   (jobs: {runs})")


def plot(rows: list[dict], libs: list[str], np_: int, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    ops = [op for op in OPS if any(r["op"] == op for r in rows)]
    fig, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 4), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, op in zip(axes, ops):
        for lib in libs:
            pts = sorted((r["size"], r["busbw"]) for r in rows if r["library"] == lib and r["op"] == op
                         and r.get("busbw"))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{op} ({np_} ranks)")
        ax.set_xlabel("size (bytes)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("bus bandwidth (GB/s)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_targets(targets: list[dict]) -> None:
    """One line per target (met / MISSED with its figures), and the same comparison against MPI
    with copy-in/copy-out shared memory where that peer ran."""
    print()
    for t in targets:
        figures = t.get("ratios") or {"time_us": t.get("time_us")}
        shown = ", ".join(f"{k}: {v:.2f}" if isinstance(v, float) else f"{k}: {v}" for k, v in figures.items())
        verdict = "not measured" if t["met"] is None else "met" if t["met"] else "MISSED"
        print(f"[{verdict}] {t['target']}  ({shown})")
        same = {k: v for k, v in t.get("ratios_vs_mpi_same_transport", {}).items() if v is not None}
        if same:
            verdict = "holds" if all(v >= t["threshold"] for v in same.values()) else "MISSED"
            print(f"      against MPI with copy-in/copy-out shared memory: {verdict}  ("
                  + ", ".join(f"{k}: {v:.2f}" for k, v in same.items()) + ")")
