"""Markdown tables rendered from the committed benchmark results (benchmarks/results/*.json).

Each public function takes the result file's stem (and options as strings, since pages call
them through ``<!-- generated: name arg ... -->`` markers, see hooks.py) and returns Markdown:
a caption saying when, where and how the figures were measured, then the table. No figure is
copied by hand; rerunning a benchmark and committing its JSON updates the page.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def load(stem: str) -> dict:
    """The JSON of benchmarks/results/<stem>.json."""
    path = RESULTS / f"{stem}.json"
    if not path.exists():
        raise FileNotFoundError(f"docs: no benchmark result {path} (named by a generated block)")
    return json.loads(path.read_text())


def size_text(size: int | str) -> str:
    """4096 -> '4 KiB', 1048576 -> '1 MiB'."""
    size = int(size)
    for suffix, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {suffix}"
    return f"{size} B"


def _caption(data: dict, stem: str) -> str:
    where = ", ".join(str(x) for x in (data.get("host"), f"{data['cpus']} cores" if data.get("cpus") else None,
                                       data.get("mpi")) if x)
    parts = [f"`benchmarks/results/{stem}.json`", f"measured {data.get('date', '(undated)')}"]
    if where:
        parts.append(where)
    return "*" + "; ".join(parts) + ".*\n\n"


def collectives(stem: str) -> str:
    """Paired bus-bandwidth ratios (relaxlib / peer, above 1: relaxlib faster) per operation and size."""
    data = load(stem)
    out = [_caption(data, stem),
           f"{data.get('np')} ranks, {data.get('link', 'shared memory')}; {data.get('method', '')}\n"]
    for pair, ops in data.get("ratios", {}).items():
        sizes = sorted({int(s) for per_op in ops.values() for s, r in per_op.items() if r is not None})
        if not sizes:
            continue
        out.append(f"\n**{pair}** (busbw ratio)\n")
        out.append("| op | " + " | ".join(size_text(s) for s in sizes) + " |")
        out.append("| --- |" + " --- |" * len(sizes))
        for op, per_size in ops.items():
            cells = [f"{per_size[str(s)]:.2f}×" if per_size.get(str(s)) else "–" for s in sizes]
            out.append(f"| {op} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def collective_times(stem: str) -> str:
    """Median time per operation and size, one column per library (milliseconds)."""
    data = load(stem)
    rows = data["results"]
    sizes = sorted({r["size"] for r in rows})
    out = [_caption(data, stem), f"{data.get('np')} ranks, {data.get('link', '')}; median ms per operation\n",
           "| library | op | " + " | ".join(size_text(s) for s in sizes) + " |",
           "| --- | --- |" + " --- |" * len(sizes)]
    keys = list(dict.fromkeys((r["library"], r["op"]) for r in rows))
    for lib, op in keys:
        cells = []
        for s in sizes:
            r = next((r for r in rows if (r["library"], r["op"], r["size"]) == (lib, op, s)), None)
            cells.append(f"{r['time_us'] / 1000:.2f}" if r and r.get("time_us") else "–")
        out.append(f"| {lib} | {op} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _link_text(link: str) -> str:
    return "shared memory" if link == "shm" else f"{float(link) / 1000:g} Gbit/s"


def train_matrix(stem: str = "train_matrix") -> str:
    """Per model: a row per mode, per cell samples/s per rank and speed relative to torch DDP."""
    data = load(stem)
    out = [f"*`benchmarks/results/{stem}.json`, measured {data.get('date')}; "
           f"{data['config'].get('reps')} runs per cell, {data['config'].get('iters')} iterations each.*\n"]
    for model in dict.fromkeys(c["model"] for c in data["cells"]):
        cells = [c for c in data["cells"] if c["model"] == model]
        heads = [f"{_link_text(c['link'])}, {c['np']} ranks" for c in cells]
        out.append(f"\n**{model} model**: samples/s per rank · × DDP\n")
        out.append("| mode | " + " | ".join(heads) + " |")
        out.append("| --- |" + " --- |" * len(cells))
        for mode in data["config"]["modes"]:
            row = []
            for c in cells:
                e = c["modes"].get(mode, {}) if isinstance(c["modes"], dict) else {}
                if "samples_per_sec" not in e:
                    row.append("failed" if e else "–")
                    continue
                row.append(f"{e['samples_per_sec']:.0f} · {e['vs_ddp']:.2f}×" if e.get("vs_ddp")
                           else f"{e['samples_per_sec']:.0f}")
            out.append(f"| {mode} | " + " | ".join(row) + " |")
    out.append("\n**Targets** (figures: ratio per cell)\n")
    out.append("| target | met | worst cell |")
    out.append("| --- | --- | --- |")
    for t in data.get("targets", []):
        figures = {k: v for k, v in t.get("figures", {}).items() if v is not None}
        worst = min(figures.items(), key=lambda kv: kv[1]) if figures else None
        verdict = {True: "met", False: "missed", None: "no such cell"}[t.get("met")]
        out.append(f"| {t['target']} | {verdict} | {f'{worst[0]}: {worst[1]:.3f}' if worst else '–'} |")
    return "\n".join(out) + "\n"


def convergence(stem: str = "convergence_grid") -> str:
    """Per mode over the converged cells: within its bound, median and worst difference to the reference."""
    data = load(stem)
    settings = data.get("settings", {})
    bounds = {}
    for target in data.get("targets", {}).values():
        for mode in target.get("modes", []):
            if "bound_points" in target:
                bounds.setdefault(mode, target["bound_points"])
    grid = ", ".join(f"{k} {v}" for k, v in settings.items() if k in ("np", "models", "lrs", "momenta", "seeds",
                                                                         "epochs", "shards"))
    out = [f"*`benchmarks/results/{stem}.json`; grid: {grid}. Δ = mean test accuracy (points) minus "
           "the reference's (all-reduce; Adam for 1-bit Adam) over the seeds; converged cells are those "
           f"where the reference reaches {settings.get('converged_if_reference_at_least', 80)} %.*\n",
           "| mode | bound (points) | converged cells | within bound | median Δ | worst Δ (cell) |",
           "| --- | --- | --- | --- | --- | --- |"]
    for mode in dict.fromkeys(c["mode"] for c in data["cells"]):
        mine = [c for c in data["cells"] if c["mode"] == mode and c.get("converged")]
        if not mine or mode == mine[0].get("reference"):
            continue
        deltas = [c["delta"] if c.get("delta") is not None else float("-inf") for c in mine]
        bound = bounds.get(mode)
        within = "–" if bound is None else f"{sum(d >= -bound for d in deltas)} / {len(mine)}"
        worst = min(mine, key=lambda c: c["delta"] if c.get("delta") is not None else float("-inf"))
        where = f"{worst['model']}, {worst['ranks']} ranks, lr {worst['lr']:g}, momentum {worst['momentum']:g}"
        worst_text = "failed" if worst.get("delta") is None else f"{worst['delta']:+.2f}"
        out.append(f"| {mode} | {'–' if bound is None else f'{bound:g}'} | {len(mine)} | {within} | "
                   f"{statistics.median(deltas):+.2f} | {worst_text} ({where}) |")
    return "\n".join(out) + "\n"


def straggler(stem: str = "straggler_sweep") -> str:
    """Throughput relative to the same mode without a straggler, per mode and straggler slowdown."""
    data = load(stem)
    config = data.get("config", {})
    rows = data["rows"]
    slowdowns = sorted({r["slowdown"] for r in rows})
    link = f"{config['bandwidth_mbit']} Mbit/s links" if config.get("bandwidth_mbit") else "shared memory"
    out = [f"*`benchmarks/results/{stem}.json`, measured {data.get('date')}; {config.get('ranks')} ranks, "
           f"rank {config.get('straggler_rank')} slowed down, {link}. Throughput relative to the mode "
           "without a straggler; the last row is the bound of a straggler-free mode.*\n",
           "| mode | " + " | ".join(f"{s:g}× slow" for s in slowdowns) + " |",
           "| --- |" + " --- |" * len(slowdowns)]
    for mode in dict.fromkeys(r["mode"] for r in rows):
        cells = []
        for s in slowdowns:
            r = next((r for r in rows if r["mode"] == mode and r["slowdown"] == s), None)
            cells.append(f"{r['relative_to_no_straggler']:.2f}" if r and r.get("relative_to_no_straggler") else "–")
        out.append(f"| {mode} | " + " | ".join(cells) + " |")
    bound = {r["slowdown"]: r.get("expected_straggler_free") for r in rows}
    out.append("| *straggler-free bound* | " + " | ".join(f"{bound[s]:.2f}" if bound.get(s) else "–"
                                                         for s in slowdowns) + " |")
    return "\n".join(out) + "\n"


def dear_sweep(stem: str = "dear_sweep") -> str:
    """DeAR's step against all-reduce's over a bandwidth sweep, measured and predicted."""
    data = load(stem)
    out = [f"*`benchmarks/results/{stem}.json`, measured {data.get('date')}; 2 ranks, "
           f"{data['model'].get('layers')} layers, step times in ms.*\n",
           "| link | comm / forward | all-reduce step | DeAR step | speed-up | predicted | limit |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for p in data["points"]:
        out.append(f"| {p['bandwidth_mbit']:g} Mbit/s | {p['comm_to_forward']:.2f} | {p['allreduce_step'] * 1e3:.1f} | "
                   f"{p['dear_step'] * 1e3:.1f} | {p['speedup']:.2f}× | {p['predicted_speedup']:.2f}× | "
                   f"{p['limit_speedup']:.2f}× |")
    t = data.get("tuning")
    if t:
        out.append(f"\nBucket tuning at {t['bandwidth_mbit']} Mbit/s: {t['default_fusion_mb']} MB buckets "
                   f"{t['default_step'] * 1e3:.1f} ms per step, tuned ({t['tuned_fusion_mb']:.2f} MB) "
                   f"{t['tuned_step'] * 1e3:.1f} ms ({t['default_step'] / t['tuned_step']:.2f}×).")
    return "\n".join(out) + "\n"


def codecs(stem: str = "codecs") -> str:
    """Encode / decode throughput per codec against memcpy and against the same codec in torch ops."""
    data = load(stem)
    out = [f"*`benchmarks/results/{stem}.json`, measured {data.get('date')}; {data.get('input_mib')} MiB "
           f"input, {data.get('threads')} threads, memcpy {data.get('memcpy_gbps', 0):.1f} GB/s.*\n",
           "| codec | compression | encode GB/s | decode GB/s | torch encode GB/s | torch decode GB/s |",
           "| --- | --- | --- | --- | --- | --- |"]
    items = data["codecs"] if isinstance(data["codecs"], list) else list(data["codecs"].values())
    for c in items:
        nums = [f"{c[key]:.1f}" if c.get(key) is not None else "–"
                for key in ("encode_gbps", "decode_gbps", "torch_encode_gbps", "torch_decode_gbps")]
        out.append(f"| {c['codec']} | {c['compression_ratio']:.1f}× | " + " | ".join(nums) + " |")
    return "\n".join(out) + "\n"


def mode_map(stem: str = "validate_model") -> str:
    """Total samples/s per mode and setting, with the performance model's prediction and the
    measurement (ms per step of the fastest rank), and the model's error summary."""
    data = load(stem)
    points = data["points"]
    settings = list(dict.fromkeys((p["bandwidth_mbit"], p["straggler"]) for p in points))

    def head(bandwidth, straggler):
        link = f"{bandwidth / 1000:g} Gbit/s" if bandwidth >= 1000 else f"{bandwidth:g} Mbit/s"
        if straggler:
            rank, factor = str(straggler).split(":")
            link += f", rank {rank} {factor}× slow"
        return link

    out = [f"*`benchmarks/results/{stem}.json`, measured {data.get('date')}; {data.get('ranks')} ranks. "
           "Total samples/s (predicted / measured ms per step).*\n",
           "| mode | " + " | ".join(head(*s) for s in settings) + " |",
           "| --- |" + " --- |" * len(settings)]
    for mode in dict.fromkeys(p["mode"] for p in points):
        cells = []
        for s in settings:
            p = next((p for p in points if p["mode"] == mode and (p["bandwidth_mbit"], p["straggler"]) == s), None)
            cells.append(f"{p['measured_samples_per_s']:.0f} ({p['predicted'] * 1e3:.0f} / {p['measured'] * 1e3:.0f})"
                         if p and p.get("measured") else "–")
        out.append(f"| {mode} | " + " | ".join(cells) + " |")
    summary = data.get("summary", {})
    if summary:
        errors = ", ".join(f"{m} {e * 100:.0f} %" for m, e in sorted(summary.get("error_by_mode", {}).items(),
                                                                      key=lambda kv: kv[1]))
        out.append(f"\nMedian prediction error {summary['median_abs_error'] * 100:.0f} % "
                   f"(target {summary.get('target_median_abs_error', 0) * 100:.0f} %); per mode: {errors}.")
        picks = summary.get("picks_without_async", [])
        if picks:
            def pick_text(p):
                best = "" if p["pick"] == p["best"] else f" (best {p['best']}, {p['pick_over_best']:.2f} of it)"
                return f"{head(p['bandwidth_mbit'], p['straggler'])}: {p['pick']}{best}"
            text = "; ".join(pick_text(p) for p in picks)
            out.append(f"The advisor's first pick, async left out: {text}.")
    return "\n".join(out) + "\n"


def framework_steps(stem: str = "framework_steps") -> str:
    """Step time per mode in PyTorch and in Keras (same model, same core), and what relaxlib adds."""
    data = load(stem)
    model = data.get("model", {})
    out = [f"*`benchmarks/results/{stem}.json`, measured {data.get('date')}; {data.get('np')} ranks, "
           f"{data.get('link')}; MLP {model.get('hidden_layers')} × {model.get('width')}, batch "
           f"{model.get('batch_per_rank')} per rank; median ms per step of {data.get('reps')} alternated jobs.*\n",
           "| mode | torch ms/step | Keras ms/step | Keras / torch | relaxlib adds to torch | relaxlib adds to Keras |",
           "| --- | --- | --- | --- | --- | --- |"]

    def ms(value):
        return f"{value:.1f}" if value is not None else "–"

    for r in data["results"]:
        out.append(f"| {r['mode']} | {ms(r.get('torch_ms'))} | {ms(r.get('keras_ms'))} | "
                   f"{r['keras_over_torch']:.2f} | {ms(r.get('torch_added_ms'))} | {ms(r.get('keras_added_ms'))} |")
    return "\n".join(out) + "\n"


def keras_synthetic(stem: str = "keras_synthetic") -> str:
    """Samples/s per worker for relaxlib, MultiWorkerMirroredStrategy and plain Keras, 1 and N workers."""
    data = load(stem)
    config = data.get("config", {})
    n = config.get("np", 2)
    out = [f"*`benchmarks/results/{stem}.json`, measured {data.get('date')}; {config.get('model')} model, "
           f"{data.get('model_parameters', 0) / 1e6:.1f} M parameters, batch {config.get('batch_size')} per worker, "
           f"TensorFlow {data.get('tensorflow')}, Keras {data.get('keras')}.*\n",
           f"| mode | 1 worker (samples/s) | {n} workers (samples/s per worker) | scaling efficiency |",
           "| --- | --- | --- | --- |"]
    for mode, r in data["results"].items():
        one, many = r.get("np1") or {}, r.get(f"np{n}") or {}

        def rate(entry):
            value = entry.get("samples_per_sec_per_worker")
            return f"{value:.0f} ± {entry.get('samples_per_sec_per_worker_conf95', 0):.0f}" if value else "failed"

        efficiency = f"{r['scaling_efficiency'] * 100:.0f} %" if r.get("scaling_efficiency") else "–"
        out.append(f"| {mode} | {rate(one) if one else '–'} | {rate(many) if many else '–'} | {efficiency} |")
    for mode, note in data.get("notes", {}).items():
        out.append(f"\n*{mode}*: {note}")
    return "\n".join(out) + "\n"


def op_overhead(stem: str = "collectives_tf_np2") -> str:
    """Median microseconds per one-element all-reduce through each path."""
    data = load(stem)
    out = [f"*`benchmarks/results/{stem}.json`, measured {data.get('date')}; {data.get('overhead_method', '')}.*\n",
           "| path | µs per op |", "| --- | --- |"]
    for path, entry in data.get("overhead_us", {}).items():
        out.append(f"| {path} | {entry['median_us']:.1f} |")
    return "\n".join(out) + "\n"
