"""One rank: errors before init and after shutdown, re-init, and size-1 collectives."""

import pytest
import torch

import relaxlib
import relaxlib_torch as hvd


def test_everything_before_init_raises_a_clear_error():
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match=r"init\(\)"):
        hvd.rank()
    with pytest.raises(relaxlib.NotInitializedError, match=r"call init\(\) first"):
        hvd.allreduce(torch.ones(2))
    with pytest.raises(relaxlib.NotInitializedError):
        hvd.broadcast_(torch.ones(2), root_rank=0)
    with pytest.raises(relaxlib.NotInitializedError):
        hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1))


def test_single_rank_collectives_are_identities():
    hvd.init()
    hvd.init()  # idempotent
    assert (hvd.rank(), hvd.size(), hvd.local_size()) == (0, 1, 1)
    x = torch.arange(5.0)
    assert torch.equal(hvd.allreduce(x), x)
    assert torch.equal(hvd.allgather(x), x)
    assert torch.equal(hvd.reducescatter(x, op=hvd.Sum), x)
    assert torch.equal(hvd.alltoall(x), x)
    assert hvd.join() == 0


def test_shutdown_then_ops_fail_and_init_restarts():
    hvd.init()
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(relaxlib.NotInitializedError):
        hvd.allreduce(torch.ones(1))
    hvd.init()
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.ones(2))


def test_engine_counts_rounds_and_bytes():
    hvd.init()
    stats = hvd.engine_stats()
    assert stats["rounds"] > 0 and stats["completed"] > 0
