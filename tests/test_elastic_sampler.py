"""hvd.elastic.ElasticSampler: an epoch's unprocessed samples re-sharded over a new world.

The world size and rank the sampler reads are set here (as relaxlib.reset() would leave them); one
sampler object stands for each rank. tests/test_elastic.py runs it on real ranks with a SIGKILL.
"""

from __future__ import annotations

import pytest

from relaxlib import basics
from relaxlib_torch.elastic_sampler import ElasticSampler


def samplers_for(world: int, monkeypatch, dataset, state: dict | None = None, **options) -> list[ElasticSampler]:
    """One sampler per rank of a ``world``-rank job (from ``state``, as TorchState.sync loads it)."""
    monkeypatch.setattr(basics, "size", lambda: world)
    out = []
    for rank in range(world):
        monkeypatch.setattr(basics, "rank", lambda rank=rank: rank)
        sampler = ElasticSampler(dataset, **options)
        if state is not None:
            sampler.load_state_dict(state)
        out.append(sampler)
    return out


def train(samplers: list[ElasticSampler], batches: int, batch_size: int) -> list[int]:
    """Every rank takes ``batches`` batches from its shard and records them; the indices taken."""
    taken = []
    for sampler in samplers:
        shard = list(sampler)
        taken += shard[:batches * batch_size]
    for sampler in samplers:
        for batch in range(batches):
            sampler.record_batch(batch, batch_size)
    return taken


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_lost_rank_neither_skips_nor_repeats_a_sample(monkeypatch, shuffle):
    dataset = list(range(50))
    four = samplers_for(4, monkeypatch, dataset, shuffle=shuffle, seed=7)
    before = train(four, batches=2, batch_size=3)
    assert len(before) == len(set(before)) == 24
    three = samplers_for(3, monkeypatch, dataset, state=four[0].state_dict(), shuffle=shuffle, seed=7)
    after = [i for sampler in three for i in sampler]
    assert len(after) == 27 and len(three[0]) == 9  # 26 left, padded to equal shards of 9
    assert set(before).isdisjoint(after) and set(before) | set(after) == set(dataset)


def test_every_rank_draws_the_same_permutation_and_each_epoch_another(monkeypatch):
    dataset = list(range(40))
    ranks = samplers_for(2, monkeypatch, dataset, seed=3)
    assert sorted(list(ranks[0]) + list(ranks[1])) == dataset
    first = list(ranks[0])
    assert first != sorted(first)
    for rank, sampler in enumerate(ranks):
        monkeypatch.setattr(basics, "rank", lambda rank=rank: rank)
        sampler.set_epoch(1)
    assert list(ranks[0]) != first and sorted(list(ranks[0]) + list(ranks[1])) == dataset


def test_a_remainder_smaller_than_the_world_is_padded(monkeypatch):
    dataset = list(range(9))
    four = samplers_for(4, monkeypatch, dataset, shuffle=False)
    train(four, batches=2, batch_size=1)  # 8 of 9 processed
    rest = samplers_for(4, monkeypatch, dataset, state=four[0].state_dict(), shuffle=False)
    assert [list(s) for s in rest] == [[8], [8], [8], [8]]
    done = samplers_for(2, monkeypatch, dataset, state={"epoch": 0, "processed_num": 12}, shuffle=False)
    assert [list(s) for s in done] == [[], []] and len(done[0]) == 0


def test_bad_arguments_are_named(monkeypatch):
    monkeypatch.setattr(basics, "size", lambda: 1)
    monkeypatch.setattr(basics, "rank", lambda: 0)
    with pytest.raises(TypeError, match="seed must be an integer"):
        ElasticSampler(range(4), seed=0.5)
    with pytest.raises(ValueError, match="batch_size must be >= 0"):
        ElasticSampler(range(4)).record_batch(0, -1)
