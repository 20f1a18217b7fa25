"""``hvd.elastic.ElasticSampler``: a sampler that re-shards what is left of an epoch after a reset.

Like torch's ``DistributedSampler``, every rank takes every ``size()``-th index of one permutation
of the dataset (the same on every rank: ``seed + epoch``). It also counts the samples the job has
processed in the epoch (``record_batch``); after the world was re-formed without a lost rank, the
indices not processed yet are shared among the new ranks, so the epoch neither skips nor repeats
samples beyond the padding that makes the shards equal. Held by a ``TorchState``, its count is
committed, rolled back and synchronized with the rest of the state (Horovod's semantics).
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.utils.data

from relaxlib import basics


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions ``dataset`` across ranks and re-partitions the unprocessed rest after a reset.

    Use it as a ``DataLoader``'s ``sampler``; give it to ``TorchState`` (any keyword, e.g.
    ``TorchState(model, optimizer, train_sampler=sampler)``); call ``record_batch(batch_idx,
    batch_size)`` after each batch and ``set_epoch(epoch + 1)`` at the *end* of each epoch.
    ``shuffle``: a new permutation per epoch from ``seed + epoch`` (the same seed on every rank).
    """

    def __init__(self, dataset, shuffle: bool = True, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"ElasticSampler: seed must be an integer (the same on every rank), not {seed!r}")
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.processed_num = 0  # samples of this epoch processed by the whole job
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts ``epoch`` (call it at the end of the previous one): nothing of it is processed yet."""
        self.epoch = int(epoch)
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Counts one batch of ``batch_size`` samples on every rank as processed."""
        if batch_size < 0:
            raise ValueError(f"ElasticSampler.record_batch: batch_size must be >= 0, not {batch_size}")
        self.processed_num += int(batch_size) * self.num_replicas

    def state_dict(self) -> dict:
        """The epoch and how many of its samples were processed (what ``TorchState`` commits)."""
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state: dict) -> None:
        """Restores ``state_dict()`` and re-shards the rest of the epoch over the current world."""
        self.epoch = int(state["epoch"])
        self.processed_num = int(state["processed_num"])
        self.reset()

    def reset(self) -> None:
        """Shards the epoch's unprocessed indices over the ranks of the current world."""
        self.num_replicas = basics.size()
        self.rank = basics.rank()
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=generator).tolist()
        else:
            order = list(range(len(self.dataset)))
        self.remaining_indices = order[min(self.processed_num, len(order)):]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        while indices and len(indices) < self.total_size:  # pad with the first ones: equal shards
            indices += indices[:self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples
