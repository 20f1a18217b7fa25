"""Keras 3 synthetic training benchmark in the style of Horovod's tensorflow2_synthetic_benchmark:
one fixed random batch per step, a number of warm-up batches, then timed iterations of several
batches. Reports samples/sec per worker (mean +- 1.96 sigma over iterations), the total over
workers and the scaling efficiency against the same mode on one worker, for

    relaxlib-fit    model.fit with relaxlib_tf.keras.DistributedOptimizer (+ broadcast callback)
    relaxlib-step   a tf.function train step: GradientTape, then DistributedOptimizer.apply_gradients
    mwms-fit        model.fit under tf.distribute.MultiWorkerMirroredStrategy
    mwms-step       a tf.function step under MultiWorkerMirroredStrategy (strategy.run)
    keras-fit       plain Keras, no distribution: the reference for both
    keras-step      plain tf.function step, no distribution
                    (on np workers: np independent copies, no communication: what the cores allow)

relaxlib modes run under mpirun; MWMS modes run one process per worker, started by this script
with its own TF_CONFIG (localhost ports). Every process runs TensorFlow with --threads intra-op
threads, so one worker alone uses as many cores as each worker of a job. Scaling efficiency is
given against the same mode on one worker and against plain Keras (keras-fit / keras-step).

    python benchmarks/keras_synthetic.py --np 2 --reps 3
    python benchmarks/keras_synthetic.py --np 2 --modes relaxlib-step,mwms-step --model conv

Writes benchmarks/results/keras_synthetic.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from relaxlib_launch.mpirun_command import free_port, mpirun_argv, mpirun_environment

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
MODES = ("relaxlib-fit", "relaxlib-step", "mwms-fit", "mwms-step", "keras-fit", "keras-step")
PLAIN = ("keras-fit", "keras-step")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=2, help="workers of the distributed runs")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {','.join(MODES)}")
    parser.add_argument("--model", default="mlp", choices=["mlp", "conv"],
                        help="mlp: 1024-wide dense layers; conv: a small CIFAR-sized conv net")
    parser.add_argument("--layers", type=int, default=4, help="mlp: hidden layers")
    parser.add_argument("--width", type=int, default=1024, help="mlp: input and hidden width")
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--num-warmup-batches", type=int, default=10)
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow intra-op threads per worker")
    parser.add_argument("--reps", type=int, default=3, help="jobs per mode and size (alternated); medians reported")
    parser.add_argument("--no-scaling", action="store_true", help="skip the one-worker runs")
    parser.add_argument("--timeout", type=float, default=150, help="seconds per job")
    parser.add_argument("--out", help="JSON report path")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--result-dir", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---- worker ---------------------------------------------------------------------------------

def build_model(args):
    import keras
    if args.model == "mlp":
        layers = [keras.Input((args.width,))]
        layers += [keras.layers.Dense(args.width, activation="relu") for _ in range(args.layers)]
        return keras.Sequential(layers + [keras.layers.Dense(10)])
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ])


def synthetic_batch(args, rows: int):
    import numpy as np
    rng = np.random.default_rng(0)
    shape = (rows, args.width) if args.model == "mlp" else (rows, 32, 32, 3)
    return rng.random(shape, dtype=np.float32), rng.integers(0, 10, rows).astype(np.int64)


def make_clock():
    """A Keras callback recording the end time of every training batch (in ``.ends``)."""
    import keras

    class BatchClock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends: list[float] = []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())

    return BatchClock()


def rates_from_clock(args, start: float, ends: list[float]) -> list[float]:
    """samples/sec of each timed iteration from batch end times (the warm-up batches come first)."""
    marks = [ends[args.num_warmup_batches - 1] if args.num_warmup_batches else start]
    marks += [ends[args.num_warmup_batches + (i + 1) * args.num_batches_per_iter - 1] for i in range(args.num_iters)]
    return [args.batch_size * args.num_batches_per_iter / (b - a) for a, b in zip(marks, marks[1:])]


def timed_steps(args, step) -> list[float]:
    """Horovod's loop: warm-up batches, then num_iters timings of num_batches_per_iter steps."""
    for _ in range(args.num_warmup_batches):
        step()
    rates = []
    for _ in range(args.num_iters):
        start = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            loss = step()
        float(loss)  # the step's result is ready: every queued step has run
        rates.append(args.batch_size * args.num_batches_per_iter / (time.perf_counter() - start))
    return rates


class _NoDistribution:
    """Stands in for relaxlib_tf.keras in the plain Keras modes: one worker, no communication."""

    class callbacks:
        @staticmethod
        def BroadcastGlobalVariablesCallback(root_rank):
            import keras
            return keras.callbacks.Callback()

    init = barrier = staticmethod(lambda: None)
    rank = staticmethod(lambda: 0)
    size = staticmethod(lambda: 1)
    DistributedOptimizer = staticmethod(lambda optimizer: optimizer)
    broadcast_variables = staticmethod(lambda variables, root_rank: None)


def run_relaxlib(args) -> tuple[int, int, list[float]]:
    """relaxlib-fit / relaxlib-step, and the plain keras-fit / keras-step (same code, no library)."""
    import keras
    import tensorflow as tf

    if args.mode.startswith("keras"):
        hvd = _NoDistribution
    else:
        import relaxlib_tf.keras as hvd
    hvd.init()
    keras.utils.set_random_seed(hvd.rank())
    model = build_model(args)
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = synthetic_batch(args, args.batch_size)
    total_batches = args.num_warmup_batches + args.num_iters * args.num_batches_per_iter
    if args.mode.endswith("-fit"):
        model.compile(optimizer=optimizer, loss=loss_fn)
        data = tf.data.Dataset.from_tensors((x, y)).repeat()
        clock = make_clock()
        hvd.barrier()
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=total_batches, epochs=1, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), clock])
        return hvd.rank(), hvd.size(), rates_from_clock(args, start, clock.ends)
    optimizer.build(model.trainable_variables)
    hvd.broadcast_variables(model.variables + optimizer.variables, root_rank=0)
    xt, yt = tf.constant(x), tf.constant(y)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(yt, model(xt, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces the gradients
        return loss

    hvd.barrier()
    return hvd.rank(), hvd.size(), timed_steps(args, step)


def run_mwms(args) -> tuple[int, int, list[float]]:
    import keras
    import tensorflow as tf
    keras.config.disable_traceback_filtering()  # a failure's traceback then names Keras' own frames
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    size = strategy.num_replicas_in_sync
    keras.utils.set_random_seed(rank)
    x, y = synthetic_batch(args, args.batch_size * size)
    with strategy.scope():
        model = build_model(args)
        optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    total_batches = args.num_warmup_batches + args.num_iters * args.num_batches_per_iter
    if args.mode == "mwms-fit":
        with strategy.scope():
            model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        data = tf.data.Dataset.from_tensors((x, y)).repeat().with_options(options)  # global batch, rebatched
        clock = make_clock()
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=total_batches, epochs=1, verbose=0, callbacks=[clock])
        return rank, size, rates_from_clock(args, start, clock.ends)
    with strategy.scope():
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    xt, yt = tf.constant(x[:args.batch_size]), tf.constant(y[:args.batch_size])
    global_batch = args.batch_size * size

    @tf.function
    def step():
        def replica_step():
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(yt, model(xt, training=True)), global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces (sum) the gradients
            return loss
        return strategy.reduce("SUM", strategy.run(replica_step), axis=None)

    return rank, size, timed_steps(args, step)


def run_worker(args) -> None:
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    rank, size, info = None, None, {}
    try:
        rank, size, rates = run_mwms(args) if args.mode.startswith("mwms") else run_relaxlib(args)
        info = {"samples_per_sec": rates}
    except Exception as exc:  # recorded in the report: the benchmark says what did not run
        lines = str(exc).strip().splitlines() or [""]
        message = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"  # long tensor reprs cut out
        frames = traceback.extract_tb(exc.__traceback__)
        info = {"error": f"{type(exc).__name__}: {message}"[:1000],
                "traceback": [f"{'/'.join(Path(f.filename).parts[-3:])}:{f.lineno} in {f.name}" for f in frames]}
    if args.mode in PLAIN:
        rank = int(os.environ.get("KERAS_SYNTHETIC_COPY", "0"))
    if rank is None:
        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", json.loads(os.environ.get("TF_CONFIG", "{}"))
                                  .get("task", {}).get("index", 0)))
    info.update(rank=rank, size=size)
    Path(args.result_dir, f"rank{rank}.json").write_text(json.dumps(info))


# ---- driver ---------------------------------------------------------------------------------


def worker_argv(args, mode: str, result_dir: str) -> list[str]:
    argv = [sys.executable, __file__, "--worker", "--mode", mode, "--result-dir", result_dir]
    for key in ("model", "layers", "width", "batch_size", "num_warmup_batches", "num_batches_per_iter", "num_iters",
                "threads"):
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    return argv


def launch(args, mode: str, np_: int, result_dir: str) -> tuple[int, str]:
    """Runs one job; returns (exit code, tail of its output)."""
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               TF_CPP_MIN_LOG_LEVEL="2")
    if mode.startswith("relaxlib"):
        try:
            proc = subprocess.run(mpirun_argv(np_, worker_argv(args, mode, result_dir), oversubscribe=True),
                                  env=mpirun_environment(env), capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return -1, f"timed out after {args.timeout:g} s"
        return proc.returncode, (proc.stdout + proc.stderr)[-3000:]
    workers = [f"localhost:{free_port()}" for _ in range(np_)]
    procs = []
    for index in range(np_):
        worker_env = {k: v for k, v in env.items() if not k.startswith(("OMPI_", "PMIX_"))}
        if mode in PLAIN:  # independent copies
            worker_env["KERAS_SYNTHETIC_COPY"] = str(index)
        else:
            worker_env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                                  "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(worker_argv(args, mode, result_dir), env=worker_env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    deadline, code, output = time.monotonic() + args.timeout, 0, ""
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            output += out[-1500:]
            code = code or proc.returncode
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            return -1, f"timed out after {args.timeout:g} s"
    return code, output


def run_job(args, mode: str, np_: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        code, output = launch(args, mode, np_, tmp)
        wall = time.perf_counter() - started
        ranks = [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("rank*.json"))]
    errors = sorted({r["error"] for r in ranks if "error" in r})
    job = {"mode": mode, "np": np_, "exit_code": code, "wall_seconds": wall, "ranks": ranks}
    if errors or code != 0 or len(ranks) != np_ or any("samples_per_sec" not in r for r in ranks):
        job["error"] = errors[0] if errors else f"exit code {code}: {output.strip()[-1500:]}"
        return job
    all_rates = [x for r in ranks for x in r["samples_per_sec"]]
    job.update(samples_per_sec_per_worker=statistics.mean(all_rates),
               samples_per_sec_per_worker_conf95=1.96 * statistics.stdev(all_rates) if len(all_rates) > 1 else 0.0,
               samples_per_sec_total=sum(statistics.mean(r["samples_per_sec"]) for r in ranks))
    return job


def summarize(jobs: list[dict]) -> dict:
    good = [j for j in jobs if "error" not in j]
    if not good:
        return {"error": jobs[0].get("error") if jobs else "not run", "jobs_ok": 0, "jobs": len(jobs)}
    median = statistics.median
    return {"samples_per_sec_per_worker": median([j["samples_per_sec_per_worker"] for j in good]),
            "samples_per_sec_per_worker_conf95": median([j["samples_per_sec_per_worker_conf95"] for j in good]),
            "samples_per_sec_total": median([j["samples_per_sec_total"] for j in good]),
            "per_job_samples_per_sec_per_worker": [j["samples_per_sec_per_worker"] for j in good],
            "jobs_ok": len(good), "jobs": len(jobs)}


def params_of(args) -> int:
    if args.model == "mlp":
        w = args.width
        return args.layers * (w * w + w) + w * 10 + 10
    return 3 * 3 * 3 * 32 + 32 + 3 * 3 * 32 * 64 + 64 + 3 * 3 * 64 * 128 + 128 + 8 * 8 * 128 * 256 + 256 + 2570


def main() -> None:
    args = parse_args()
    if args.worker:
        run_worker(args)
        return
    modes = args.modes.split(",")
    sizes = [args.np] if args.no_scaling or args.np == 1 else [1, args.np]
    plan = [(m, n) for n in sizes for m in modes]
    jobs: dict[str, list[dict]] = {f"{m}@np{n}": [] for m, n in plan}
    for rep in range(args.reps):
        order = plan
        for mode, np_ in (order if rep % 2 == 0 else list(reversed(order))):
            if mode == "mwms-fit" and jobs[f"{mode}@np{np_}"] and "error" in jobs[f"{mode}@np{np_}"][0]:
                continue  # a mode that failed once fails again: the error is recorded
            print(f"run {rep + 1}/{args.reps}: {mode} on {np_} worker(s)", flush=True)
            job = run_job(args, mode, np_)
            jobs[f"{mode}@np{np_}"].append(job)
            if "error" in job:
                print(f"  failed: {job['error'].splitlines()[0][:300]}")
            else:
                print(f"  {job['samples_per_sec_per_worker']:.1f} +-{job['samples_per_sec_per_worker_conf95']:.1f} "
                      f"samples/sec per worker, total {job['samples_per_sec_total']:.1f} ({job['wall_seconds']:.0f} s)",
                      flush=True)
    results = {}
    for mode in modes:
        entry = {n: summarize(jobs[f"{mode}@np{n}"]) for m, n in plan if m == mode}
        row = {"mode": mode, **{f"np{n}": e for n, e in entry.items()}}
        multi, single = entry.get(args.np), entry.get(1)
        plain_mode = "keras-fit" if mode.endswith("-fit") else "keras-step"
        plain = summarize(jobs[f"{plain_mode}@np1"]) if f"{plain_mode}@np1" in jobs else None
        if args.np > 1 and multi and "error" not in multi:
            if single and "error" not in single:
                alone = single["samples_per_sec_per_worker"]
                row["scaling_efficiency"] = multi["samples_per_sec_total"] / (args.np * alone)
            if plain and "error" not in plain and mode not in PLAIN:
                row["scaling_efficiency_vs_plain_keras"] = (multi["samples_per_sec_total"]
                                                            / (args.np * plain["samples_per_sec_per_worker"]))
        results[mode] = row
    print_report(args, results, sizes)
    import keras
    import tensorflow as tf
    report = {
        "benchmark": "keras_synthetic", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
        "cpus": os.cpu_count(), "tensorflow": tf.__version__, "keras": keras.__version__,
        "config": {k: v for k, v in vars(args).items() if k not in ("worker", "mode", "result_dir")},
        "model_parameters": params_of(args), "gradient_bytes": 4 * params_of(args),
        "method": "per job: samples/sec per worker = mean over every worker's timed iterations (+- 1.96 sigma), "
                  "total = sum of the workers' means; per mode: median over jobs (modes alternated); scaling "
                  "efficiency = total on np workers / (np * per-worker rate of the same mode on 1 worker); "
                  "_vs_plain_keras: the same against keras-fit / keras-step (no distribution at all); "
                  "keras-* on np workers: np independent copies without communication (the cores' ceiling). "
                  "fit modes time iterations from on_train_batch_end; step modes as Horovod's benchmark.",
        "results": results, "jobs": jobs,
    }
    failed_fit = results.get("mwms-fit", {}).get(f"np{args.np}", {})
    if "PerReplica" in failed_fit.get("error", ""):
        report["notes"] = {"mwms-fit": "Keras 3 model.fit under MultiWorkerMirroredStrategy with more than one worker "
                                       "fails in the TensorFlow trainer's _maybe_symbolic_build (strategy.reduce of "
                                       "the first distributed batch); known upstream as keras-team/keras#20585 and "
                                       "tensorflow/tensorflow#72388. mwms-step (strategy.run in a tf.function) works."}
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = Path(args.out) if args.out else RESULTS / "keras_synthetic.json"
    out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {out}")


def print_report(args, results: dict, sizes: list[int]) -> None:
    print(f"\nModel: {args.model} ({params_of(args) / 1e6:.2f} M parameters), batch size {args.batch_size} per worker, "
          f"{args.threads} intra-op thread(s) per worker")
    for mode, row in results.items():
        parts = []
        for n in sizes:
            entry = row.get(f"np{n}")
            if entry is None:
                continue
            if "error" in entry:
                parts.append(f"np{n}: FAILED ({entry['error'].splitlines()[0][:160]})")
            else:
                parts.append(f"np{n}: {entry['samples_per_sec_per_worker']:.1f} "
                             f"+-{entry['samples_per_sec_per_worker_conf95']:.1f}/worker, "
                             f"total {entry['samples_per_sec_total']:.1f}")
        eff = f", scaling efficiency {100 * row['scaling_efficiency']:.1f}%" if "scaling_efficiency" in row else ""
        if "scaling_efficiency_vs_plain_keras" in row:
            eff += f" ({100 * row['scaling_efficiency_vs_plain_keras']:.1f}% vs plain Keras)"
        print(f"{mode:>14}: " + "; ".join(parts) + eff)


if __name__ == "__main__":
    main()
