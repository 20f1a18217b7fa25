"""A training job that loses ranks (tests/test_elastic.py launches it with relaxrun --min-np).

Horovod's elastic pattern: TorchState(model, optimizer, batch=...), ``@hvd.elastic.run``, a commit
every COMMIT_EVERY batches. The ranks named in ``--kill`` (world rank:batch, comma-separated) SIGKILL
themselves at that batch, at the moment ``--where`` says: ``backward`` (gradients in flight),
``step`` (inside optimizer.step's collectives, from a timer), ``commit`` (inside state.commit).
``--freeze-at-end`` stops a rank (SIGSTOP) once trained, before or after ``hvd.shutdown()``.
Every survivor prints one ``DONE`` line: its new rank and size, the batches it trained, the digest of
its parameters, how many resets it went through and the seconds since the first loss.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import threading
import time

import torch
from rank_reports import wait_for_the_others

import relaxlib_torch as hvd
from relaxlib import algorithms, basics

TOTAL_BATCHES = 48
COMMIT_EVERY = 4
SAMPLER_BATCHES, SAMPLER_EPOCHS = 12, 2


def make_algorithm(name: str):
    """The relaxation under test (None: the all-reduce baseline)."""
    return {
        "allreduce": None,
        "dear": lambda: algorithms.DeAR(fusion_mb=0.01),
        "uint8": lambda: algorithms.CompressedScatterReduce(codec="uint8", error_feedback=True),
        "sign": lambda: algorithms.CompressedScatterReduce(codec="sign", error_feedback=True),
        "onebit_adam": lambda: algorithms.OneBitAdam(lr=0.001, warmup_steps=10),
        "powersgd": lambda: algorithms.PowerSGD(rank=2, start_iter=6, min_compression_rate=1.0),
        "topk": lambda: algorithms.TopK(density=0.1),
        "decentralized": lambda: algorithms.Decentralized(topology="ring"),
        "decentralized_sign": lambda: algorithms.Decentralized(topology="ring", codec="sign"),
        "partial": lambda: algorithms.PartialAllReduce(group_size=2, generator="random"),
        "partial_smart": lambda: algorithms.PartialAllReduce(group_size=2, generator="smart"),
        "async": lambda: algorithms.AsyncModelAverage(sync_interval_ms=5.0),
        "local_sgd": lambda: algorithms.LocalSGD(sync_every=4, codec="uint8"),
    }[name]


def make_models_equal(optimizer) -> None:
    """Model-averaging algorithms end with the exact mean of the models (every rank equal)."""
    algorithm = getattr(optimizer, "algorithm", None)
    if hasattr(algorithm, "average_now"):
        algorithm.average_now()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kill", default="", help="world_rank:batch,... to SIGKILL")
    parser.add_argument("--where", choices=("backward", "step", "commit"), default="backward")
    parser.add_argument("--algorithm", default="allreduce")
    parser.add_argument("--die-in-reset", type=int, default=None, help="world rank to SIGKILL in its first reset")
    parser.add_argument("--freeze-in-reset", type=int, default=None,
                        help="world rank to SIGSTOP in its first reset (frozen while the others recover)")
    parser.add_argument("--freeze", default="", help="world_rank:batch to SIGSTOP (frozen, not lost)")
    parser.add_argument("--freeze-where", choices=("backward", "step"), default="backward",
                        help="after backward, or inside optimizer.step's collectives (from a timer)")
    parser.add_argument("--freeze-at-end", default="",
                        help="world_rank:shutdown (SIGSTOP once trained, before hvd.shutdown()) or world_rank:exit "
                             "(after it, before the process exits)")
    parser.add_argument("--sampler", action="store_true",
                        help=f"two epochs of {SAMPLER_BATCHES} batches per rank (on 4 ranks) through an ElasticSampler")
    args = parser.parse_args()
    hvd.init()
    world_rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", hvd.rank()))
    kills = {int(r): int(b) for r, b in (item.split(":") for item in args.kill.split(",") if item)}
    my_kill = kills.get(world_rank)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    factory = make_algorithm(args.algorithm)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                         named_parameters=model.named_parameters(),
                                         **({"algorithm": factory(), "model": model} if factory else {}))
    dataset = torch.utils.data.TensorDataset(torch.randn(SAMPLER_BATCHES * 8 * 4, 16,
                                                         generator=torch.Generator().manual_seed(5)))
    sampler = hvd.elastic.ElasticSampler(dataset, seed=1)
    state = hvd.elastic.TorchState(model, optimizer, batch=0, epoch=0,
                                   **({"train_sampler": sampler} if args.sampler else {}))
    resets = []
    state.register_reset_callbacks([lambda: resets.append(time.monotonic())])
    if args.die_in_reset == world_rank:  # lost during the survivors' recovery: a second reset follows
        state.register_reset_callbacks([lambda: os.kill(os.getpid(), signal.SIGKILL)])
    if args.freeze_in_reset == world_rank:
        state.register_reset_callbacks([lambda: os.kill(os.getpid(), signal.SIGSTOP)])

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def original_commit() -> None:
        hvd.elastic.TorchState.commit(state)

    def commit() -> None:
        if my_kill == state.batch and args.where == "commit":
            threading.Timer(0.002, die).start()  # inside the commit's collectives
        original_commit()

    def batches():
        """This rank's batches: from the sampler (the rest of its epoch, re-sharded after a reset), or
        drawn from the batch number and rank."""
        if not args.sampler:
            while state.batch < TOTAL_BATCHES:
                yield torch.randn(8, 16, generator=torch.Generator().manual_seed(1000 * state.batch + hvd.rank()))
            return
        while state.epoch < SAMPLER_EPOCHS:
            for (x,) in torch.utils.data.DataLoader(dataset, batch_size=8, sampler=state.train_sampler):
                yield x
            state.epoch += 1
            state.train_sampler.set_epoch(state.epoch)
            commit()

    @hvd.elastic.run
    def train(state) -> None:
        for x in batches():
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
            loss.backward()
            if args.freeze == f"{world_rank}:{state.batch}":
                if args.freeze_where == "backward":
                    os.kill(os.getpid(), signal.SIGSTOP)
                else:
                    threading.Timer(0.001, os.kill, (os.getpid(), signal.SIGSTOP)).start()
            if my_kill == state.batch and args.where == "backward":
                die()
            if my_kill == state.batch and args.where == "step":
                threading.Timer(0.001, die).start()
            optimizer.step()
            if args.sampler:
                state.train_sampler.record_batch(state.batch, len(x))
            state.batch += 1
            if state.batch % COMMIT_EVERY == 0:
                commit()
        make_models_equal(optimizer)  # (collective: inside, so a loss during it is survived too)

    try:
        train(state)
    except Exception as error:  # reported here, then every failing survivor waits for the others
        print(f"FAILED world={world_rank}: {type(error).__name__}: {error}", flush=True)
        wait_for_the_others(world_rank)  # every failing survivor printed its error before any exits
        raise SystemExit(1) from None
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
    print(f"DONE world={world_rank} rank={hvd.rank()} size={hvd.size()} batch={state.batch} digest={digest} "
          f"resets={len(resets)} generation={basics.world_generation()}", flush=True)
    if args.freeze_at_end == f"{world_rank}:shutdown":
        os.kill(os.getpid(), signal.SIGSTOP)
    hvd.shutdown()
    if args.freeze_at_end == f"{world_rank}:exit":
        os.kill(os.getpid(), signal.SIGSTOP)


if __name__ == "__main__":
    main()
