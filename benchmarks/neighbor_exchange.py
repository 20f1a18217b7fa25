"""Ring neighbour exchange: MPI point-to-point against an MPI-3 distributed-graph communicator
(neighbourhood collective), and the cost of building a graph per step (as random matchings would
need), beside relaxlib's neighbor_average (exchange + mixing). 4 ranks; each method runs in its
own mpirun so no library's threads compete with another's.

    python benchmarks/neighbor_exchange.py [--tcp]

Writes benchmarks/results/neighbor_exchange[_tcp].json.
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
METHODS = ("p2p", "dist_graph", "dist_graph_per_step", "relaxlib")
SIZES = [1 << 12, 1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26]


def worker(method: str, sizes: list[int], reps: int, out: str) -> None:
    import numpy as np
    from mpi4py import MPI
    if method == "relaxlib":
        import torch

        import relaxlib_torch as hvd
        hvd.init()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    left, right = (rank - 1) % size, (rank + 1) % size
    graph = comm.Create_dist_graph_adjacent([left, right], [left, right]) if method == "dist_graph" else None
    rows = []
    for nbytes in sizes:
        count = nbytes // 4
        send = np.ones(count, dtype=np.float32)
        recv = np.empty(2 * count, dtype=np.float32)
        tensor = torch.ones(count) if method == "relaxlib" else None
        mixed = torch.empty(count) if method == "relaxlib" else None  # reused, as training loops do

        def once(i: int, count=count, send=send, recv=recv, tensor=tensor, mixed=mixed, nbytes=nbytes) -> None:
            if method == "p2p":
                requests = [comm.Irecv(recv[:count], left, 11), comm.Irecv(recv[count:], right, 11),
                            comm.Isend(send, left, 11), comm.Isend(send, right, 11)]
                MPI.Request.Waitall(requests)
            elif method == "dist_graph":
                graph.Neighbor_allgather(send, recv)
            elif method == "dist_graph_per_step":
                g = comm.Create_dist_graph_adjacent([left, right], [left, right])
                g.Neighbor_allgather(send, recv)
                g.Free()
            else:
                hvd.neighbor_average(tensor, [left, right], [1 / 3, 1 / 3], 1 / 3, name=f"nb.{nbytes}.{i}", out=mixed)

        for i in range(3):
            once(-1 - i)
        comm.Barrier()
        times = []
        for i in range(reps):
            start = time.perf_counter()
            once(i)
            times.append(time.perf_counter() - start)
        slowest = np.empty(reps)
        comm.Allreduce(np.array(times), slowest, MPI.MAX)  # an exchange ends when the slowest rank is done
        rows.append({"bytes": nbytes, "time_us": 1e6 * statistics.median(slowest.tolist())})
    if rank == 0:
        Path(out).write_text(json.dumps(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--tcp", action="store_true", help="force MPI's TCP transport (--mca btl tcp,self)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, SIZES, args.reps, args.out)
        return
    env = mpirun_environment(PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    methods = args.methods.split(",")
    results = {}
    for method in methods:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            cmd = mpirun_argv(args.np, [sys.executable, __file__, "--worker", method, "--out", out,
                                        "--reps", str(args.reps)],
                              oversubscribe=True, mca={"btl": "tcp,self"} if args.tcp else None,
                              export=["PYTHONPATH"])
            subprocess.run(cmd, env=env, check=True, timeout=900)
            results[method] = json.loads(Path(out).read_text())
    print(f"{'bytes':>10s}" + "".join(f"{m:>22s}" for m in methods) + "   (median us per exchange)")
    for i, nbytes in enumerate(SIZES):
        print(f"{nbytes:10d}" + "".join(f"{results[m][i]['time_us']:22.1f}" for m in methods))
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "neighbor_exchange_tcp" if args.tcp else "neighbor_exchange"
    report = {"benchmark": "neighbor_exchange", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "ranks": args.np,
              "transport": "tcp" if args.tcp else "default (shared memory)", "reps": args.reps,
              "methods": results}
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
