"""Training throughput benchmark in the style of Horovod's synthetic benchmark: samples/sec per
worker (mean +- 1.96 sigma over iterations), total, and scaling efficiency, for every algorithm
beside torch DDP, optionally over a kernel-shaped link and with a straggler.

    python benchmarks/train.py --np 2 --algorithm dear --model sleep --bandwidth 1000
    python benchmarks/train.py --np 4 --algorithm allreduce --straggler 3:3

--bandwidth (Mbit/s per rank link) runs the ranks in network namespaces behind tc tbf (root only,
see netem.py). --straggler RANK:FACTOR makes one rank's compute FACTOR times slower.
Writes a JSON report to benchmarks/results/ (or --out).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from relaxlib_launch.mpirun_command import free_port, mpirun_argv, mpirun_environment

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent))

ALGORITHMS = ("allreduce", "dear", "compressed", "onebit_adam", "ddp", "horovod", "none", "decentralized", "partial",
              "async", "powersgd", "topk", "local", "diloco", "ddp-powersgd")
PEERS = ("ddp", "horovod", "ddp-powersgd")  # other libraries: no relaxlib engine, telemetry or algorithm
# All-reduced steps before PowerSGD compresses, in both implementations: DDP's hook needs at least 2
# with error feedback or warm start (PowerSGDState refuses fewer).
PSGD_START_ITER = 2


def mode_arguments(mode: str) -> list[str]:
    """train.py arguments of an advisor mode name (``allreduce``, ``ddp``, ``compressed-uint8``,
    ``decentralized-ring``, ``partial-smart``, ``async``, ...)."""
    if mode.startswith("ddp-powersgd"):  # ddp-powersgd-R: DDP with its PowerSGD hook at rank R
        return ["--algorithm", "ddp-powersgd"] + (["--psgd-rank", mode.rsplit("-", 1)[1]] if mode.count("-") == 2
                                                  else [])
    family, _, variant = mode.partition("-")
    if mode == "allreduce-negotiated":  # the baseline with every step negotiated (RELAX_FAST_PATH=off)
        return ["--algorithm", "allreduce", "--no-fast-path"]
    if family == "topk" and variant:
        return ["--algorithm", "topk", "--density", str(float(variant) / 100)]
    option = {"compressed": "--codec", "decentralized": "--topology", "partial": "--generator",
              "powersgd": "--psgd-rank", "local": "--sync-every", "diloco": "--sync-every"}.get(family)
    return ["--algorithm", family] + ([option, variant] if option and variant else [])


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--algorithm", default="allreduce", choices=ALGORITHMS,
                        help="none = no communication (each rank alone); ddp = torch DDP (gloo); horovod = "
                             "Horovod's DistributedOptimizer (needs --horovod)")
    parser.add_argument("--no-fast-path", action="store_true",
                        help="negotiate every step (RELAX_FAST_PATH=off on every rank)")
    parser.add_argument("--model", default="sleep", choices=["sleep", "mlp", "transformer"],
                        help="transformer: bench_models.TinyLM on SyntheticText (--batch-size sequences of "
                             "--seq-len tokens; samples are sequences)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=262144,
                        help="sleep: parameters per layer; mlp: layer width")
    parser.add_argument("--forward-ms", type=float, default=40.0, help="sleep model: forward time per step")
    parser.add_argument("--backward-ms", type=float, default=80.0, help="sleep model: backward time per step")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64, help="transformer: tokens per sequence")
    parser.add_argument("--vocab", type=int, default=4096, help="transformer: vocabulary size")
    parser.add_argument("--d-model", type=int, default=256, help="transformer: embedding width")
    parser.add_argument("--lm-layers", type=int, default=6, help="transformer: transformer blocks")
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"],
                        help="the wrapped optimizer (adamw: for loss against tokens on the transformer)")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--num-warmup-batches", type=int, default=3)
    parser.add_argument("--num-batches-per-iter", type=int, default=2)
    parser.add_argument("--num-iters", type=int, default=8)
    parser.add_argument("--fusion-mb", type=float,
                        help="DeAR bucket size in MiB (default: DeAR's own, chosen from the model)")
    parser.add_argument("--tune", action="store_true", help="DeAR: tune the bucket size")
    parser.add_argument("--codec", default="uint8", choices=["fp16", "uint8", "sign"], help="compressed: codec")
    parser.add_argument("--no-error-feedback", action="store_true", help="compressed: without error feedback")
    parser.add_argument("--step-scale", default="auto", choices=["auto", "factored", "none"],
                        help="compressed: the per-element step scale (auto: with sign and SGD)")
    parser.add_argument("--compress-model", action="store_true", help="decentralized: send --codec (CHOCO)")
    parser.add_argument("--topology", default="ring", choices=["ring", "random"], help="decentralized: neighbours")
    parser.add_argument("--generator", default="smart", choices=["static", "random", "smart"],
                        help="partial: group generator")
    parser.add_argument("--group-size", type=int, default=2, help="partial: ranks per group")
    parser.add_argument("--sync-interval-ms", type=float, default=20.0, help="async: averaging interval")
    parser.add_argument("--psgd-rank", type=int, default=1,
                        help="powersgd / ddp-powersgd: rank of the approximation (both compress from step "
                             f"{PSGD_START_ITER + 1})")
    parser.add_argument("--density", type=float, default=0.01,
                        help="topk, and diloco with --outer-codec topk: fraction of the (outer) gradient sent")
    parser.add_argument("--sync-every", type=int, default=8, help="local / diloco: inner steps between syncs")
    parser.add_argument("--fragments", type=int, default=1,
                        help="diloco: fragments synchronized in turn (streaming DiLoCo when > 1)")
    parser.add_argument("--outer-codec", default="none", choices=["none", "fp16", "uint8", "sign", "topk"],
                        help="diloco: codec of the outer gradient (with error feedback)")
    parser.add_argument("--horovod", metavar="DIR", help="where Horovod is installed (pip install --target DIR; "
                        "tests/horovod_suites/README.md builds it), for --algorithm horovod")
    parser.add_argument("--bandwidth", type=float, help="Mbit/s per rank link (shaped; needs root)")
    parser.add_argument("--straggler", help="RANK:FACTOR, e.g. 3:2.5")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    parser.add_argument("--scaling", action="store_true", help="also run one worker alone for scaling efficiency")
    parser.add_argument("--out", help="JSON report path")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.straggler:
        rank, factor = args.straggler.split(":")
        args.straggler_rank, args.straggler_factor = int(rank), float(factor)
    else:
        args.straggler_rank, args.straggler_factor = -1, 1.0
    if args.algorithm == "horovod" and not args.worker and not args.horovod:
        parser.error("--algorithm horovod needs --horovod DIR")
    return args


# ---- worker ---------------------------------------------------------------------------------

class Comms:
    """The algorithm under test behind one interface: init, wrap the optimizer, gather results."""

    def __init__(self, args) -> None:
        import torch
        self.args, self.torch = args, torch
        if args.algorithm in ("ddp", "ddp-powersgd"):
            import torch.distributed as dist
            self.rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
            self.size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
            dist.init_process_group("gloo", rank=self.rank, world_size=self.size)
            self.dist = dist
        else:  # Horovod itself is found through --horovod, which the driver puts on PYTHONPATH
            hvd = importlib.import_module("horovod.torch" if args.algorithm == "horovod" else "relaxlib_torch")
            hvd.init()
            self.hvd, self.rank, self.size = hvd, hvd.rank(), hvd.size()

    def wrap(self, model, optimizer):
        args, torch = self.args, self.torch
        if args.algorithm == "ddp":
            return torch.nn.parallel.DistributedDataParallel(model), optimizer
        if args.algorithm == "ddp-powersgd":  # the reference: torch DDP with its own PowerSGD hook
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
            ddp = torch.nn.parallel.DistributedDataParallel(model)
            state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.psgd_rank,
                                                start_powerSGD_iter=PSGD_START_ITER, min_compression_rate=2)
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
            return ddp, optimizer
        if args.algorithm == "none":
            return model, optimizer
        if args.algorithm == "horovod":
            self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            return model, self.hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        from relaxlib import algorithms
        algorithm = {
            "allreduce": lambda: None,
            "dear": lambda: algorithms.DeAR(fusion_mb=args.fusion_mb, tune=args.tune),
            "compressed": lambda: algorithms.CompressedScatterReduce(args.codec,
                                                                     error_feedback=not args.no_error_feedback,
                                                                     step_scale=args.step_scale),
            "onebit_adam": lambda: algorithms.OneBitAdam(lr=1e-4, warmup_steps=2),
            "decentralized": lambda: algorithms.Decentralized(args.topology, codec=args.codec if args.compress_model
                                                              else None),
            "partial": lambda: algorithms.PartialAllReduce(args.group_size, args.generator),
            "async": lambda: algorithms.AsyncModelAverage(sync_interval_ms=args.sync_interval_ms),
            "powersgd": lambda: algorithms.PowerSGD(rank=args.psgd_rank, start_iter=PSGD_START_ITER),
            "topk": lambda: algorithms.TopK(density=args.density),
            "local": lambda: algorithms.LocalSGD(sync_every=args.sync_every),
            "diloco": lambda: algorithms.DiLoCo(sync_every=args.sync_every, fragments=args.fragments,
                                                codec=None if args.outer_codec == "none" else args.outer_codec,
                                                density=args.density if args.outer_codec == "topk" else None),
        }[args.algorithm]()
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        return model, self.hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                                     algorithm=algorithm, model=model)

    def gather(self, obj):
        if self.args.algorithm in ("ddp", "ddp-powersgd"):
            out = [None] * self.size
            self.dist.all_gather_object(out, obj)
            return out
        return self.hvd.allgather_object(obj)

    def step_summary(self, last: int) -> dict | None:
        """Medians of relaxlib's per-step telemetry over the timed steps (None for a peer library)."""
        if self.args.algorithm in PEERS:
            return None
        from relaxlib import telemetry
        recorder = telemetry.current()
        return recorder.summary(last) if recorder is not None else None

    def stats(self) -> dict:
        return {} if self.args.algorithm in PEERS else self.hvd.engine_stats()

    def barrier(self) -> None:
        if self.args.algorithm in ("ddp", "ddp-powersgd"):
            self.dist.barrier()
        else:
            self.hvd.barrier()


def build_model(args):
    """The model under test (bench_models), seeded identically on every rank."""
    from bench_models import TinyLM, make_model
    if args.model == "transformer":
        return TinyLM(args.vocab, args.d_model, args.lm_layers, seq_len=args.seq_len)
    return make_model(args.model, args.layers, args.width, args.forward_ms, args.backward_ms)


def batches(args, rank: int):
    """(next_batch, loss_of): ``next_batch()`` gives this rank's (inputs, targets) for a step,
    ``loss_of(output, targets)`` the scalar loss."""
    import torch
    if args.model == "transformer":
        from bench_models import SyntheticText, lm_loss
        text = SyntheticText(args.vocab)
        generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of the stream
        return (lambda: text.batch(args.batch_size, args.seq_len, generator)), lm_loss
    features = 8 if args.model == "sleep" else args.width
    data = torch.randn(args.batch_size, features)
    # The MLP learns random labels, as Horovod's synthetic benchmark does: its gradients stay
    # alive. (Minimizing the outputs' sum killed every ReLU within 20 steps, after which each
    # gradient was exactly zero and the compressed codecs ran on zeros.)
    labels = torch.randint(0, features, (args.batch_size,))
    if args.model == "sleep":
        return (lambda: (data, labels)), (lambda output, targets: output.sum())
    return (lambda: (data, labels)), torch.nn.functional.cross_entropy


def run_worker(args) -> None:
    import torch
    torch.set_num_threads(args.threads)
    comms = Comms(args)
    torch.manual_seed(0)
    model = build_model(args)
    straggling = comms.rank == args.straggler_rank
    if straggling and args.model == "sleep":
        model.set_slowdown(args.straggler_factor)
    optimizer = (torch.optim.AdamW(model.parameters(), lr=args.lr) if args.optimizer == "adamw"
                 else torch.optim.SGD(model.parameters(), lr=args.lr))
    model, optimizer = comms.wrap(model, optimizer)
    next_batch, loss_of = batches(args, comms.rank)
    losses, compute_s, step_end_s, bytes_sent_total = [], [], [], []
    counts_bytes = args.algorithm not in PEERS  # a peer library's traffic is not ours to count
    bytes_at_start = comms.stats()["bytes_sent"] if counts_bytes else 0  # the initial broadcast excluded
    started = time.perf_counter()

    def one_batch():
        start = time.perf_counter()
        optimizer.zero_grad()
        inputs, targets = next_batch()
        loss = loss_of(model(inputs), targets)
        loss.backward()
        losses.append(loss.item())
        compute = time.perf_counter() - start
        if straggling and args.model != "sleep":
            time.sleep(compute * (args.straggler_factor - 1))
        optimizer.step()
        compute_s.append(compute)
        step_end_s.append(time.perf_counter() - started)  # loss against wall time
        if counts_bytes:  # cumulative; differenced below into bytes per step (peak traffic)
            bytes_sent_total.append(comms.stats()["bytes_sent"])

    for _ in range(args.num_warmup_batches):
        one_batch()
    comms.barrier()
    stats_before = comms.stats()
    algorithm = getattr(optimizer, "algorithm", None)
    averagings_before = getattr(algorithm, "averagings", None)
    rates, iteration_s = [], []
    cpu_before = time.process_time()  # every thread of this rank: compute, engine, transport
    for _ in range(args.num_iters):
        start = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            one_batch()
        elapsed = time.perf_counter() - start
        iteration_s.append(elapsed / args.num_batches_per_iter)
        rates.append(args.batch_size * args.num_batches_per_iter / elapsed)
    cpu_seconds = time.process_time() - cpu_before
    if hasattr(optimizer, "flush"):
        optimizer.flush()
    timed_steps = args.num_iters * args.num_batches_per_iter
    averagings = None if averagings_before is None else (algorithm.averagings - averagings_before) / timed_steps
    if hasattr(algorithm, "average_now"):
        optimizer.join()  # ranks finish at their own pace; the slower ones are still served
    stats_after = comms.stats()
    stats = {k: stats_after[k] - stats_before.get(k, 0) for k in stats_after}
    mine = {"rank": comms.rank, "samples_per_sec": rates, "step_seconds": iteration_s,
            "forward_backward_seconds": statistics.median(compute_s), "engine": stats,
            "cpu_seconds_per_step": cpu_seconds / (args.num_iters * args.num_batches_per_iter),
            "averagings_per_step": averagings, "losses": losses, "step_end_seconds": step_end_s,
            "step_bytes_sent": ([b - a for a, b in zip([bytes_at_start, *bytes_sent_total], bytes_sent_total)]
                                if counts_bytes else None),
            "step_stats": comms.step_summary(timed_steps),
            "tuned_fusion_mb": getattr(getattr(optimizer, "algorithm", None), "chosen_fusion_mb", None)}
    gathered = comms.gather(mine)
    if comms.rank == 0:
        Path(args.result).write_text(json.dumps({"size": comms.size, "ranks": gathered}))


# ---- driver ---------------------------------------------------------------------------------


def worker_argv(args, result: str) -> list[str]:
    argv = [sys.executable, __file__, "--worker", "--result", result]
    for key in ("algorithm", "model", "layers", "width", "forward_ms", "backward_ms", "batch_size", "seq_len",
                "vocab", "d_model", "lm_layers", "optimizer", "lr",
                "num_warmup_batches", "num_batches_per_iter", "num_iters", "fusion_mb", "threads", "codec",
                "topology", "generator", "group_size", "sync_interval_ms", "step_scale", "psgd_rank", "density",
                "sync_every", "fragments", "outer_codec"):
        if getattr(args, key) is not None:  # (None: the option's own default, e.g. DeAR's bucket size)
            argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    if args.straggler:
        argv += ["--straggler", args.straggler]
    if args.tune:
        argv.append("--tune")
    if args.no_error_feedback:
        argv.append("--no-error-feedback")
    if args.compress_model:
        argv.append("--compress-model")
    return argv


def launch(args, np_: int, result: str) -> int:
    horovod = [str(Path(args.horovod).resolve())] if args.algorithm == "horovod" else []
    path = horovod + [str(REPO), os.environ.get("PYTHONPATH", "")]
    env = mpirun_environment(PYTHONPATH=os.pathsep.join(path), MASTER_PORT=str(free_port()))
    if args.no_fast_path:
        env["RELAX_FAST_PATH"] = "off"  # (the ranks inherit the launcher's environment)
    if args.bandwidth and np_ > 1:
        from netem import ShapedNetwork
        with ShapedNetwork(np_, bandwidth_mbit=args.bandwidth) as net:
            env["MASTER_ADDR"] = net.addresses[0]
            env["GLOO_SOCKET_IFNAME"] = "eth0"  # the hostname resolves to each namespace's own loopback
            exported = ["MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"]
            cmd = net.mpirun_command(np_, export=exported, env=env) + worker_argv(args, result)
            return net.run(cmd, env=env, timeout=1800)
    env["MASTER_ADDR"] = "127.0.0.1"
    cmd = mpirun_argv(np_, worker_argv(args, result), oversubscribe=True,
                      export=["PYTHONPATH", "MASTER_ADDR", "MASTER_PORT"])
    return subprocess.call(cmd, env=env, timeout=1800)


def summarize(raw: dict) -> dict:
    per_rank = [statistics.mean(r["samples_per_sec"]) for r in raw["ranks"]]
    all_rates = [x for r in raw["ranks"] for x in r["samples_per_sec"]]
    per_worker = statistics.mean(all_rates)
    conf = 1.96 * statistics.stdev(all_rates) if len(all_rates) > 1 else 0.0
    steps = [x for r in raw["ranks"] for x in r["step_seconds"]]
    return {"samples_per_sec_per_worker": per_worker, "samples_per_sec_per_worker_conf95": conf,
            "samples_per_sec_total": sum(per_rank), "per_rank_samples_per_sec": per_rank,
            "per_rank_averagings_per_step": [r.get("averagings_per_step") for r in raw["ranks"]],
            "per_rank_step_stats": [r.get("step_stats") for r in raw["ranks"]],
            "step_seconds_median": statistics.median(steps)}


def run(args) -> dict:
    """Runs the benchmark as configured and returns the report (also written as JSON)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        code = launch(args, args.np, result)
        if code != 0 or not os.path.exists(result):
            raise RuntimeError(f"benchmark run failed (exit code {code})")
        raw = json.loads(Path(result).read_text())
        config = {k: v for k, v in vars(args).items() if k not in ("worker", "result")}
        report = {"benchmark": "train", "config": config,
                  "date": time.strftime("%Y-%m-%d %H:%M:%S"), **summarize(raw), "raw": raw}
        if args.scaling:
            single = argparse.Namespace(**vars(args))
            single.algorithm, single.straggler, single.straggler_rank = "none", None, -1
            code = launch(single, 1, result)
            if code == 0:
                alone = summarize(json.loads(Path(result).read_text()))["samples_per_sec_per_worker"]
                report["single_worker_samples_per_sec"] = alone
                report["scaling_efficiency"] = report["samples_per_sec_total"] / (args.np * alone)
    if not args.quiet:
        print_report(args, report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    bandwidth = f"_{int(args.bandwidth)}mbit" if args.bandwidth else ""
    out = Path(args.out) if args.out else RESULTS / f"train_{args.algorithm}_{args.model}_np{args.np}{bandwidth}.json"
    out.write_text(json.dumps(report, indent=1))
    return report


def print_report(args, report: dict) -> None:
    algorithm = {"compressed": f"compressed ({args.codec})", "decentralized": f"decentralized ({args.topology})",
                 "partial": f"partial ({args.generator}, groups of {args.group_size})"}.get(args.algorithm,
                                                                                          args.algorithm)
    print(f"Model: {args.model} ({args.layers} layers), algorithm: {algorithm}, batch size: {args.batch_size}, "
          f"ranks: {args.np}" + (f", link: {args.bandwidth:g} Mbit/s" if args.bandwidth else "")
          + (f", straggler {args.straggler}" if args.straggler else ""))
    for r in report["raw"]["ranks"]:
        rates = " ".join(f"{x:.1f}" for x in r["samples_per_sec"])
        print(f"  rank {r['rank']}: {rates} samples/sec")
    print(f"Samples/sec per worker: {report['samples_per_sec_per_worker']:.1f} "
          f"+-{report['samples_per_sec_per_worker_conf95']:.1f}")
    print(f"Total samples/sec on {args.np} worker(s): {report['samples_per_sec_total']:.1f}")
    if "scaling_efficiency" in report:
        print(f"Scaling efficiency: {100 * report['scaling_efficiency']:.1f}% "
              f"(one worker alone: {report['single_worker_samples_per_sec']:.1f} samples/sec)")


def main() -> None:
    args = parse_args()
    if args.worker:
        run_worker(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
