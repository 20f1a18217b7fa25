"""Collective micro-benchmark: relaxlib beside MPI's own collectives (mpi4py) and torch.distributed
gloo, in nccl-tests columns (size count dtype time_us algbw busbw).

Each library runs in its own mpirun job (their background threads would otherwise compete
for the cores and distort each other), the jobs alternate, and the table quotes medians.
Ratios between libraries are medians of *paired* ratios (job i of one library against the
adjacent job i of the other), which cancels the slow drift of a shared or virtual machine.
Within one node relaxlib's collectives run through its own shared-memory segment; its remaining
MPI traffic uses Open MPI's shared memory in copy-in/copy-out mode on a virtual machine (see
docs/performance.md). The extra peer "mpi@OMPI_MCA_btl_vader_single_copy_mechanism=none" is MPI
in that mode, its faster setting on this VM, beside MPI with its defaults. ``--horovod DIR`` adds
Horovod itself (``horovod.torch`` installed in DIR; tests/horovod_suites/README.md builds it).

    python benchmarks/collectives.py --np 2 --reps 3
    python benchmarks/collectives.py --framework tf --np 2 --reps 3 --max-bytes 64M

Writes benchmarks/results/collectives_np<N>.json and a PNG of bus bandwidth per size.
--framework tf measures relaxlib's TensorFlow ops on eager tf tensors ("relaxlib-tf") beside
relaxlib_torch and MPI (collectives_tf_np<N>.json), plus the op overhead: the median time of a
1-element float32 allreduce through relaxlib_tf (eager, and in a tf.function: one call per op,
and 100 chained ops in one call), relaxlib_torch and a bare MPI_Allreduce.
grouped_allreduce cuts the buffer into 8 tensors, all-reduced as one fused group by relaxlib (and
Horovod), one by one by the peers.
busbw = algbw * 2(n-1)/n for allreduce and algbw * (n-1)/n for reduce_scatter / allgather,
where `size` is the full (unscattered) buffer, as nccl-tests defines them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from relaxlib_launch.mpirun_command import free_port, mpirun_argv, mpirun_environment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collectives_report import (  # noqa: E402
    DEFAULT_OPS,
    GROUP_PARTS,
    MPI_SAME_TRANSPORT,
    OPS,
    MiB,
    aggregate,
    aggregate_overhead,
    evaluate_targets,
    plot,
    print_overhead,
    print_table,
    print_targets,
    ratio_table,
)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
LIBRARIES = ("relaxlib", "mpi", MPI_SAME_TRANSPORT, "gloo")
TF_LIBRARIES = ("relaxlib-tf", "relaxlib", "mpi", MPI_SAME_TRANSPORT)
WORKERS = LIBRARIES + ("relaxlib-tf", "horovod")
HOROVOD_NOT_MEASURED = "0.28.1 does not build against torch 2.13 unpatched (ENVIRONMENT.md); pass --horovod DIR"
OVERHEAD_CALLS = 3000  # timed 1-element allreduces per variant (after 200 warm-up calls)
OVERHEAD_LOOP = 100    # chained allreduces in one tf.function call


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def default_sizes(low: int, high: int) -> list[int]:
    sizes, s = [], low
    while s <= high:
        sizes.append(s)
        s *= 4
    return sizes


# ---- worker: runs under mpirun, one library per job -----------------------------------------

class Library:
    """One library's collectives on float32 torch tensors (numpy views for mpi4py; eager tf
    tensors for relaxlib-tf, which does not import torch)."""

    def __init__(self, name: str, port: int) -> None:
        self.name = name
        if name == "relaxlib-tf":
            import tensorflow as tf

            import relaxlib_tf as hvd
            hvd.init()
            self.tf, self.hvd, self.rank, self.size = tf, hvd, hvd.rank(), hvd.size()
            return
        import torch
        self.torch = torch
        if name in ("relaxlib", "horovod"):  # Horovod itself from the install --horovod puts on the path
            hvd = importlib.import_module("relaxlib_torch" if name == "relaxlib" else "horovod.torch")
            hvd.init()
            self.hvd, self.rank, self.size = hvd, hvd.rank(), hvd.size()
        elif name == "mpi":
            from mpi4py import MPI
            self.MPI, self.comm = MPI, MPI.COMM_WORLD
            self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        elif name == "gloo":
            import torch.distributed as dist
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ["MASTER_PORT"] = str(port)
            self.rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
            self.size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
            dist.init_process_group("gloo", rank=self.rank, world_size=self.size)
            self.dist = dist
        else:
            raise ValueError(name)

    def bytes_sent(self) -> float | None:
        """Bytes this rank's collectives sent so far (relaxlib's engine counts them)."""
        return self.hvd.engine_stats()["bytes_sent"] if self.name.startswith("relaxlib") else None

    def barrier(self) -> None:
        if self.name.startswith("relaxlib") or self.name == "horovod":
            self.hvd.barrier()
        elif self.name == "mpi":
            self.comm.Barrier()
        else:
            self.dist.barrier()

    def max_over_ranks(self, value: float) -> float:
        if self.name == "relaxlib-tf":
            t = self.tf.constant([value], dtype=self.tf.float64)
            return float(self.hvd.allreduce(t, op=self.hvd.Max, name="bench.max").numpy()[0])
        t = self.torch.tensor([value], dtype=self.torch.float64)
        if self.name in ("relaxlib", "horovod"):
            return self.hvd.allreduce(t, op=self.hvd.Max, name="bench.max").item()
        if self.name == "mpi":
            return self.comm.allreduce(value, op=self.MPI.MAX)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.item()

    def operation(self, op: str, count: int):
        """A zero-argument callable running `op` once on `count` float32 elements (full buffer)."""
        if self.name == "relaxlib-tf":
            return self.tf_operation(op, count)
        torch, n = self.torch, self.size
        full = torch.ones(count, dtype=torch.float32)
        chunk = torch.ones(count // n, dtype=torch.float32)
        parts = [torch.ones(part, dtype=torch.float32) for part in
                 [count // GROUP_PARTS + (1 if i < count % GROUP_PARTS else 0) for i in range(GROUP_PARTS)]]
        if op == "grouped_allreduce":  # relaxlib and Horovod fuse the group; the peers reduce each tensor
            if self.name in ("relaxlib", "horovod"):
                return lambda: self.hvd.grouped_allreduce_(parts, op=self.hvd.Sum, name="bench.grouped")
            if self.name == "mpi":
                arrays = [p.numpy() for p in parts]
                return lambda: [self.comm.Allreduce(self.MPI.IN_PLACE, a) for a in arrays]
            return lambda: [self.dist.all_reduce(p) for p in parts]
        if op.startswith("compressed_"):
            if self.name != "relaxlib":
                raise NotImplementedError(f"{self.name} has no compressed all-reduce")
            codec = op.split("_", 1)[1]
            state = self.hvd.ErrorFeedback(count)
            return lambda: self.hvd.compressed_allreduce(full, codec=codec, state=state, name=f"bench.{op}")
        if self.name in ("relaxlib", "horovod"):
            hvd = self.hvd
            return {"allreduce": lambda: hvd.allreduce_(full, op=hvd.Sum, name="bench.allreduce"),
                    "reduce_scatter": lambda: hvd.reducescatter(full, op=hvd.Sum, name="bench.reduce_scatter"),
                    "allgather": lambda: hvd.allgather(chunk, name="bench.allgather")}[op]
        if self.name == "mpi":
            comm, MPI = self.comm, self.MPI
            fa, ca = full.numpy(), chunk.numpy()
            return {"allreduce": lambda: comm.Allreduce(MPI.IN_PLACE, fa),
                    "reduce_scatter": lambda: comm.Reduce_scatter_block(fa, ca),
                    "allgather": lambda: comm.Allgather(ca, fa)}[op]
        dist = self.dist
        return {"allreduce": lambda: dist.all_reduce(full),
                "reduce_scatter": lambda: dist.reduce_scatter_tensor(chunk, full),
                "allgather": lambda: dist.all_gather_into_tensor(full, chunk)}[op]

    def tf_operation(self, op: str, count: int):
        """relaxlib_tf's op on eager tf tensors. TensorFlow has no in-place collectives: every call
        returns a new output tensor (eager execution is synchronous, so the call returns when the
        asynchronous kernel has completed)."""
        tf, hvd = self.tf, self.hvd
        if op.startswith("compressed_") or op == "grouped_allreduce":
            raise NotImplementedError(f"relaxlib_tf's {op} is not measured here")
        full = tf.ones([count], dtype=tf.float32)
        chunk = tf.ones([count // self.size], dtype=tf.float32)
        return {"allreduce": lambda: hvd.allreduce(full, op=hvd.Sum, name="bench.allreduce"),
                "reduce_scatter": lambda: hvd.reducescatter(full, op=hvd.Sum, name="bench.reduce_scatter"),
                "allgather": lambda: hvd.allgather(chunk, name="bench.allgather")}[op]

    def overhead_variants(self) -> dict:
        """Zero-argument callables, each one 1-element float32 Sum allreduce (the tf.function loop
        variant: OVERHEAD_LOOP chained allreduces in one call)."""
        if self.name == "relaxlib-tf":
            tf, hvd = self.tf, self.hvd
            x = tf.zeros([1], dtype=tf.float32)

            @tf.function
            def one(t):
                return hvd.allreduce(t, op=hvd.Sum, name="bench.overhead.function")

            @tf.function
            def noop(t):
                return t + 1.0

            @tf.function
            def chained(t):
                for _ in tf.range(OVERHEAD_LOOP):
                    t = hvd.allreduce(t, op=hvd.Sum, name="bench.overhead.loop")
                return t

            return {"tf_eager": lambda: hvd.allreduce(x, op=hvd.Sum, name="bench.overhead.eager"),
                    "tf_function": lambda: one(x),
                    f"tf_function_loop{OVERHEAD_LOOP}": lambda: chained(x),
                    "tf_function_noop (no collective)": lambda: noop(x)}
        if self.name in ("relaxlib", "horovod"):
            hvd, t = self.hvd, self.torch.zeros(1, dtype=self.torch.float32)
            prefix = "horovod_" if self.name == "horovod" else ""  # variants are keyed by name across libraries
            return {f"{prefix}torch": lambda: hvd.allreduce(t, op=hvd.Sum, name="bench.overhead.torch"),
                    f"{prefix}torch_inplace": lambda: hvd.allreduce_(t, op=hvd.Sum, name="bench.overhead.torch_")}
        if self.name == "mpi":
            comm, MPI, a = self.comm, self.MPI, self.torch.zeros(1, dtype=self.torch.float32).numpy()
            return {"mpi4py": lambda: comm.Allreduce(MPI.IN_PLACE, a)}
        return {}


def measure_overhead(lib: Library) -> dict:
    """Per variant: median (and 10th/90th percentile) microseconds per call over OVERHEAD_CALLS
    individually timed calls, the largest median over ranks."""
    out = {}
    for variant, fn in lib.overhead_variants().items():
        per_call = OVERHEAD_LOOP if variant.startswith("tf_function_loop") else 1
        calls = OVERHEAD_CALLS // per_call
        for _ in range(max(2, 200 // per_call)):
            fn()
        lib.barrier()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) / per_call * 1e6)
        times.sort()
        median = statistics.median(times)
        out[variant] = {"median_us": lib.max_over_ranks(median), "rank0_p10_us": times[len(times) // 10],
                        "rank0_p90_us": times[len(times) * 9 // 10], "calls": calls, "ops_per_call": per_call}
        lib.barrier()
    return out


def run_worker(args: argparse.Namespace) -> None:
    lib = Library(args.worker, args.port)
    results = []
    for op in args.ops.split(","):
        for size in [int(s) for s in args.sizes.split(",")]:
            count = size // 4
            try:
                fn = lib.operation(op, count)
                for _ in range(3 if size < 64 * MiB else 1):
                    fn()
                lib.barrier()
                start = time.perf_counter()
                fn()
                once = time.perf_counter() - start
                iters = int(max(3, min(2000, args.seconds_per_size / max(once, 1e-6))))
                iters = int(lib.max_over_ranks(iters))  # every rank must run the same count
                lib.barrier()
                sent_before = lib.bytes_sent()
                start = time.perf_counter()
                for _ in range(iters):
                    fn()
                elapsed = lib.max_over_ranks(time.perf_counter() - start)
                sent = lib.bytes_sent()
                results.append({"op": op, "size": size, "time_us": elapsed / iters * 1e6, "iters": iters,
                                "wire_bytes_per_rank": (sent - sent_before) / iters if sent is not None else None})
            except (RuntimeError, NotImplementedError, ValueError) as exc:
                results.append({"op": op, "size": size, "time_us": None, "error": str(exc).splitlines()[0][:200]})
    report = {"library": args.worker, "np": lib.size, "results": results}
    if args.overhead:
        report["overhead"] = measure_overhead(lib)
    if lib.rank == 0:
        Path(args.out).write_text(json.dumps(report))


# ---- driver ---------------------------------------------------------------------------------


def run_library(lib: str, args: argparse.Namespace, sizes: list[int], out_dir: str, rep: int, net=None) -> dict:
    out = os.path.join(out_dir, f"{lib}.{rep}.json")
    name, _, setting = lib.partition("@")  # e.g. relaxlib@RELAX_MPI_ALLREDUCE_MAX_BYTES=0
    worker = [sys.executable, __file__, "--worker", name, "--ops", ",".join(args.ops), "--port", str(free_port()),
              "--sizes", ",".join(map(str, sizes)), "--seconds-per-size", str(args.seconds_per_size), "--out", out]
    if args.overhead:
        worker.append("--overhead")
    path = ([args.horovod] if name == "horovod" else []) + [str(REPO), os.environ.get("PYTHONPATH", "")]
    env = mpirun_environment(PYTHONPATH=os.pathsep.join(path))
    if setting:
        key, _, value = setting.partition("=")
        env[key] = value
    if net is not None:
        env.update(MASTER_ADDR=net.addresses[0], GLOO_SOCKET_IFNAME="eth0")
        exported = ["MASTER_ADDR", "GLOO_SOCKET_IFNAME"] + ([setting.partition("=")[0]] if setting else [])
        code = net.run(net.mpirun_command(args.np, export=exported, env=env) + worker,
                       timeout=args.timeout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        code = subprocess.run(mpirun_argv(args.np, worker, extra_args=args.mpi_args.split()), env=env,
                              capture_output=True, text=True, timeout=args.timeout).returncode
    if code != 0 or not os.path.exists(out):
        print(f"  {lib} run {rep} failed (exit {code})")
        return {"library": lib, "results": []}
    result = json.loads(Path(out).read_text())
    result["library"] = lib
    return result


def run_driver(args: argparse.Namespace) -> None:
    sizes = default_sizes(parse_size(args.min_bytes), parse_size(args.max_bytes))
    libs = args.libs.split(",")
    runs: dict[str, list[dict]] = {lib: [] for lib in libs}
    net = None
    if args.bandwidth:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from netem import ShapedNetwork
        net = ShapedNetwork(args.np, bandwidth_mbit=args.bandwidth).__enter__()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(args.reps):
                for lib in (libs if rep % 2 == 0 else list(reversed(libs))):  # alternate the order
                    print(f"run {rep + 1}/{args.reps}: {lib}", flush=True)
                    runs[lib].append(run_library(lib, args, sizes, tmp, rep, net))
    finally:
        if net is not None:
            net.down()
    rows = aggregate(runs, args.np)
    print_table(rows, libs, args.np)
    overhead = aggregate_overhead(runs)
    print_overhead(overhead)
    tf_run = args.framework == "tf"
    targets = [] if tf_run else evaluate_targets(rows, sizes)
    print_targets(targets)
    RESULTS.mkdir(parents=True, exist_ok=True)
    link = f"_{int(args.bandwidth)}mbit" if args.bandwidth else ""
    prefix = "collectives_tf" if tf_run else "collectives"
    out = Path(args.out) if args.out else RESULTS / f"{prefix}_np{args.np}{link}.json"
    report = {
        "benchmark": "collectives", "framework": args.framework, "libraries": libs, "np": args.np, "reps": args.reps,
        "link": f"tc tbf {args.bandwidth:g} Mbit/s per rank, MPI over TCP" if args.bandwidth else "shared memory",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
        "mpi": subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
        "method": "each library in its own mpirun job, jobs alternated; time_us = median over jobs of the "
                  "per-iteration time (max over ranks); ratios = median of paired ratios of adjacent jobs",
        "peers_not_measured": {} if "horovod" in libs else {"horovod": HOROVOD_NOT_MEASURED},
        "results": rows, "targets": targets,
    }
    if tf_run:
        import tensorflow as tf
        report["tensorflow"] = tf.__version__
        report["tf_method"] = ("relaxlib-tf: hvd.allreduce/reducescatter/allgather of relaxlib_tf on eager tf tensors "
                               "(out of place: TensorFlow has no in-place collectives; relaxlib_torch's allreduce "
                               "row is in place, allreduce_); TensorFlow's default thread pools unless a library "
                               "name sets one, e.g. relaxlib-tf@TF_NUM_INTEROP_THREADS=1")
    report["ratios"] = ratio_table(rows, libs, sizes)
    if MPI_SAME_TRANSPORT in libs:
        report["transport_note"] = (
            "Within one node relaxlib's collectives run through its own shared-memory segment "
            "(RELAX_SHM_COLLECTIVES); its other MPI traffic uses Open MPI's shared memory in copy-in/copy-out mode "
            "on a virtual machine (btl_vader_single_copy_mechanism=none): CMA single-copy pins every 4 KiB page per "
            "message, which costs more than a second copy there. 'mpi' runs Open MPI's defaults (the issue's "
            f"reference); '{MPI_SAME_TRANSPORT}' is MPI in copy-in/copy-out mode, its faster setting here.")
    if overhead:
        report["overhead_us"] = overhead
        report["overhead_method"] = (f"{OVERHEAD_CALLS} individually timed calls per variant per job after "
                                     "warm-up; median per rank, max over ranks, then median over jobs; "
                                     f"tf_function_loop{OVERHEAD_LOOP}: one tf.function call running "
                                     f"{OVERHEAD_LOOP} chained allreduces, time divided by {OVERHEAD_LOOP}")
    out.write_text(json.dumps(report, indent=1))
    plot(rows, libs, args.np, out.with_suffix(".png"))
    print(f"\nwrote {out} and {out.with_suffix('.png')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5, help="jobs per library (alternated); medians are reported")
    parser.add_argument("--framework", choices=["torch", "tf"], default="torch",
                        help="tf: relaxlib's TensorFlow ops (relaxlib-tf) beside relaxlib_torch and MPI, plus the "
                             "op overhead; writes collectives_tf_np<N>.json")
    parser.add_argument("--libs", help=f"default {','.join(LIBRARIES)}; with --framework tf "
                                       f"{','.join(TF_LIBRARIES)} (choices: {','.join(WORKERS)})")
    parser.add_argument("--overhead", action="store_true",
                        help="also measure 1-element allreduce latency per library (on with --framework tf)")
    parser.add_argument("--ops", type=lambda s: s.split(","), default=list(DEFAULT_OPS),
                        help=f"comma-separated, from {','.join(OPS)}")
    parser.add_argument("--min-bytes", default="4K")
    parser.add_argument("--max-bytes", default="256M")
    parser.add_argument("--seconds-per-size", type=float, default=0.2)
    parser.add_argument("--mpi-args", default="", help="extra mpirun arguments, e.g. '--mca btl tcp,self'")
    parser.add_argument("--bandwidth", type=float,
                        help="run over MPI TCP with each rank's link shaped to this many Mbit/s (root; netem.py)")
    parser.add_argument("--horovod", metavar="DIR",
                        help="a Horovod install (pip install --target DIR horovod, its build patched to C++17): "
                             "adds the peer 'horovod' (horovod.torch) to the default libraries")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out")
    parser.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=29500, help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = [op for op in args.ops if op not in OPS]
    if unknown:
        parser.error(f"unknown --ops {','.join(unknown)}; choose from {','.join(OPS)}")
    if args.libs is None:
        default = TF_LIBRARIES if args.framework == "tf" else LIBRARIES
        # relaxlib changes the transport only on a virtual machine and on Open MPI 4 (vader; Open MPI 5's sm
        # ignores that variable and relaxlib leaves it alone), and over TCP (--bandwidth) it plays no part
        virtual_machine = any(line.startswith("flags") and " hypervisor" in line
                              for line in Path("/proc/cpuinfo").read_text().splitlines())
        mpirun = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
        open_mpi_4 = re.search(r"\(Open MPI\) [1-4]\.", mpirun) is not None
        args.libs = ",".join(lib for lib in default
                             if lib != MPI_SAME_TRANSPORT or (virtual_machine and open_mpi_4 and not args.bandwidth))
        if args.horovod and args.framework == "torch":
            args.libs += ",horovod"
    if "horovod" in args.libs.split(",") and not args.worker:
        if not args.horovod:
            parser.error("the peer 'horovod' needs --horovod DIR (where Horovod is installed)")
        args.horovod = str(Path(args.horovod).resolve())
    if args.framework == "tf" and not args.worker:
        args.overhead = True
    if args.worker:
        args.ops = ",".join(args.ops)
        run_worker(args)
    else:
        run_driver(args)


if __name__ == "__main__":
    main()
