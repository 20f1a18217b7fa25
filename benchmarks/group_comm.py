"""What a partial all-reduce group costs: MPI sub-communicator creation (MPI_Comm_create_group,
mpi4py) against a 4 KiB partial_allreduce on a cached group and with the cache disabled
(RELAX_GROUP_CACHE_SIZE=0: a communicator per use). 4 ranks, groups of 2 from the static
schedule; each variant in its own mpirun.

    python benchmarks/group_comm.py [--tcp]

Writes benchmarks/results/group_comm[_tcp].json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from relaxlib_launch.mpirun_command import mpirun_argv, mpirun_environment

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
VARIANTS = {"mpi_comm_create_group": {}, "relaxlib_cached": {}, "relaxlib_uncached": {"RELAX_GROUP_CACHE_SIZE": "0"}}


def worker(variant: str, reps: int, out: str) -> None:
    import numpy as np
    from mpi4py import MPI

    from relaxlib import groups
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if variant != "mpi_comm_create_group":
        import torch

        import relaxlib_torch as hvd
        hvd.init()
        tensor, out_buffer = torch.ones(1024), torch.empty(1024)
    times = []
    for step in range(-5, reps):  # 5 warm-up steps; the static schedule cycles through 2 partitions
        members = groups.group_of(rank, groups.deterministic_groups("static", step, size, 2, 0))
        comm.Barrier()
        start = time.perf_counter()
        if variant == "mpi_comm_create_group":
            group = comm.Get_group().Incl(members)
            sub = comm.Create_group(group, tag=step % 1000 + 10)
            sub.Free()
            group.Free()
        else:
            hvd.partial_allreduce(tensor, members, name=f"bench.{step}", out=out_buffer)
        elapsed = time.perf_counter() - start
        if step >= 0:
            times.append(elapsed)
    slowest = np.empty(len(times))
    comm.Allreduce(np.array(times), slowest, MPI.MAX)
    if rank == 0:
        Path(out).write_text(json.dumps({"median_us": 1e6 * statistics.median(slowest.tolist()),
                                         "p90_us": 1e6 * float(np.percentile(slowest, 90))}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--tcp", action="store_true", help="force MPI's TCP transport (--mca btl tcp,self)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.reps, args.out)
        return
    results = {}
    for variant, extra_env in VARIANTS.items():
        env = mpirun_environment(PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **extra_env)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            cmd = mpirun_argv(args.np, [sys.executable, __file__, "--worker", variant, "--out", out,
                                        "--reps", str(args.reps)],
                              oversubscribe=True, mca={"btl": "tcp,self"} if args.tcp else None,
                              export=["PYTHONPATH", *extra_env])
            subprocess.run(cmd, env=env, check=True, timeout=600)
            results[variant] = json.loads(Path(out).read_text())
        row = results[variant]
        print(f"{variant:24s} median {row['median_us']:9.1f} us   p90 {row['p90_us']:9.1f} us")
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "group_comm_tcp" if args.tcp else "group_comm"
    report = {"benchmark": "group_comm", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "ranks": args.np,
              "transport": "tcp" if args.tcp else "default (shared memory)", "reps": args.reps,
              "group_size": 2, "tensor_bytes": 4096, "results": results}
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
