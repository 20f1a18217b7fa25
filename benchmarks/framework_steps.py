"""One algorithm, both frameworks, timed: the step time of every advisor mode in PyTorch and in
Keras 3 on the same MLP, batch and ranks, the ratio
Keras / torch, and what relaxlib adds to each framework's own step ('local': no relaxlib).
Each (framework, mode) runs in its own mpirun job, the jobs alternate, and the
report quotes medians over jobs of the median step time (max over ranks).

    python benchmarks/framework_steps.py --np 2 --reps 3
    python benchmarks/framework_steps.py --np 2 --reps 2 --width 512 --bandwidth 1000   (root)

By default the ranks share this machine's memory: the figures say what each binding adds around
the same core. ``--bandwidth`` (Mbit/s per rank link) runs every job in network namespaces behind
``tc tbf`` (benchmarks/netem.py), so communication costs what it would on that link. Writes
benchmarks/results/framework_steps.json (framework_steps_<bandwidth>mbit.json; or --out).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from relaxlib_launch.mpirun_command import mpirun_argv, mpirun_environment

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MODES = ("local", "allreduce", "dear", "compressed-fp16", "compressed-uint8", "compressed-sign", "decentralized-ring",
         "decentralized-random", "partial-static", "async")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated advisor modes; 'local': the framework's own optimizer, no relaxlib")
    parser.add_argument("--width", type=int, default=1024, help="MLP input and hidden width")
    parser.add_argument("--layers", type=int, default=3, help="MLP hidden layers")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3, help="jobs per (framework, mode), alternated")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per job")
    parser.add_argument("--bandwidth", type=float, help="Mbit/s per rank link (shaped; needs root)")
    parser.add_argument("--out", help="JSON report path")
    parser.add_argument("--worker", choices=["torch", "keras"], help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---- workers: the same model, data and algorithm in each framework ----------------------------

def batch(args):
    import numpy as np
    rng = np.random.default_rng(0)
    return rng.random((args.batch_size, args.width), dtype=np.float32), rng.integers(0, 10, args.batch_size)


def torch_step_times(args) -> tuple[int, list[float]]:
    import torch

    import relaxlib_torch as hvd
    from relaxlib.algorithms import modes

    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(0)
    layers = [torch.nn.Linear(args.width, args.width) for _ in range(args.layers)]
    model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.ReLU())],
                                torch.nn.Linear(args.width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.mode != "local":
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             algorithm=modes.get(args.mode).algorithm(), model=model)
    x, y = (torch.from_numpy(a) for a in batch(args))
    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    return hvd.rank(), [max(t) for t in zip(*hvd.allgather_object(times))]


def keras_step_times(args) -> tuple[int, list[float]]:
    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import relaxlib_tf.keras as hvd
    from relaxlib.algorithms import modes

    hvd.init()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((args.width,))]
                             + [keras.layers.Dense(args.width, activation="relu") for _ in range(args.layers)]
                             + [keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    if args.mode != "local":
        optimizer = hvd.DistributedOptimizer(optimizer, algorithm=modes.get(args.mode).algorithm())
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = (tf.constant(a) for a in batch(args))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return loss

    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        float(step())
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    return hvd.rank(), [max(t) for t in zip(*hvd.allgather_object(times))]


def worker(args) -> None:
    rank, times = torch_step_times(args) if args.worker == "torch" else keras_step_times(args)
    if rank == 0:
        Path(args.result).write_text(json.dumps({"step_s": statistics.median(times)}))


# ---- driver ----------------------------------------------------------------------------------

def run_job(args, framework: str, mode: str) -> float | None:
    """Median step time of one job (seconds), or None when it failed (printed)."""
    with tempfile.TemporaryDirectory(prefix="relax-steps-") as tmp:
        result = Path(tmp) / "result.json"
        argv = [sys.executable, __file__, "--worker", framework, "--mode", mode, "--result", str(result),
                "--width", str(args.width), "--layers", str(args.layers), "--batch-size", str(args.batch_size),
                "--warmup", str(args.warmup), "--steps", str(args.steps)]
        env = mpirun_environment(TF_CPP_MIN_LOG_LEVEL="3")
        log = Path(tmp) / "job.log"
        try:
            with log.open("w") as out:
                code = launch(args, argv, env, out)
        except subprocess.TimeoutExpired:
            print(f"{framework} {mode}: timed out after {args.timeout} s")
            return None
        if code != 0 or not result.exists():
            print(f"{framework} {mode}: failed\n{log.read_text()[-4000:]}")
            return None
        return json.loads(result.read_text())["step_s"]


def launch(args, argv: list[str], env: dict, out) -> int:
    """Runs one job's ranks, on this machine or (``--bandwidth``) on shaped links; returns the exit code."""
    if not args.bandwidth:
        return subprocess.run(mpirun_argv(args.np, argv, oversubscribe=True), env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=args.timeout).returncode
    from netem import ShapedNetwork

    with ShapedNetwork(args.np, bandwidth_mbit=args.bandwidth) as net:
        command = net.mpirun_command(args.np, export=["TF_CPP_MIN_LOG_LEVEL"], env=env) + argv
        return net.run(command, timeout=args.timeout, env=env, stdout=out, stderr=subprocess.STDOUT)


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    modes = [m for m in args.modes.split(",") if m]
    runs: dict[tuple[str, str], list[float]] = {}
    for rep in range(args.reps):
        for mode in modes:
            for framework in ("torch", "keras") if rep % 2 == 0 else ("keras", "torch"):
                seconds = run_job(args, framework, mode)
                if seconds is not None:
                    runs.setdefault((framework, mode), []).append(seconds)
                    print(f"rep {rep}: {framework:5s} {mode:22s} {1e3 * seconds:8.2f} ms/step", flush=True)
    rows = []
    for mode in modes:
        torch_runs, keras_runs = runs.get(("torch", mode), []), runs.get(("keras", mode), [])
        row = {"mode": mode, "torch_ms_runs": [1e3 * s for s in torch_runs],
               "keras_ms_runs": [1e3 * s for s in keras_runs]}
        if torch_runs and keras_runs:
            row["torch_ms"] = 1e3 * statistics.median(torch_runs)
            row["keras_ms"] = 1e3 * statistics.median(keras_runs)
            row["keras_over_torch"] = statistics.median(k / t for k, t in zip(keras_runs, torch_runs))
        rows.append(row)
    local = next((row for row in rows if row["mode"] == "local" and "torch_ms" in row), None)
    for row in rows:  # what relaxlib adds to each framework's own step
        if local and "torch_ms" in row and row is not local:
            row["torch_added_ms"] = row["torch_ms"] - local["torch_ms"]
            row["keras_added_ms"] = row["keras_ms"] - local["keras_ms"]
    print(f"\n{'mode':22s} {'torch ms':>9s} {'keras ms':>9s} {'keras/torch':>12s} {'+torch ms':>10s} "
          f"{'+keras ms':>10s}")
    for row in rows:
        if "keras_over_torch" not in row:
            print(f"{row['mode']:22s} {'failed':>9s}")
            continue
        added = (f"{row['torch_added_ms']:10.2f} {row['keras_added_ms']:10.2f}" if "torch_added_ms" in row else "")
        print(f"{row['mode']:22s} {row['torch_ms']:9.2f} {row['keras_ms']:9.2f} {row['keras_over_torch']:12.2f} "
              f"{added}")
    report = {"benchmark": "framework_steps", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
              "np": args.np, "reps": args.reps,
              "link": f"{args.bandwidth:g} Mbit/s per rank (tc tbf)" if args.bandwidth
              else "shared memory (one machine)",
              "model": {"kind": "mlp", "width": args.width, "hidden_layers": args.layers,
                        "batch_per_rank": args.batch_size},
              "method": "each (framework, mode) in its own mpirun job, alternated; step time = median over steps "
                        "of the slowest rank's step; keras_over_torch = median of paired job ratios",
              "threads": "1 intra-op thread per rank in both frameworks", "results": rows}
    suffix = f"_{int(args.bandwidth)}mbit" if args.bandwidth else ""
    out = Path(args.out) if args.out else RESULTS / f"framework_steps{suffix}.json"
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
