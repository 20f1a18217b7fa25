"""Bad input on real ranks: every rank gets a clear exception naming the tensor; nothing hangs,
and the engine keeps working afterwards."""

import re

import pytest
import torch

import relaxlib
import relaxlib_torch as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


def still_works():
    assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum), torch.full((3,), float(SIZE)))


def test_shape_mismatch_raises_on_every_rank_naming_the_tensor():
    shape = (3,) if RANK == 0 else (4,)
    with pytest.raises(hvd.HorovodInternalError) as info:
        hvd.allreduce(torch.ones(shape), name="grad.weight")
    message = str(info.value)
    assert isinstance(info.value, relaxlib.MismatchError)
    assert "'grad.weight'" in message and "shapes" in message
    assert "rank 0 sent [3]" in message
    still_works()


def test_in_place_shape_mismatch_raises_on_every_rank():
    tensor = torch.ones((3,) if RANK == 0 else (5,))
    with pytest.raises(relaxlib.MismatchError, match=r"shapes for 'inplace.weight'.*rank 0 sent \[3\]"):
        hvd.allreduce_(tensor, name="inplace.weight")
    assert torch.equal(tensor, torch.ones_like(tensor))  # untouched after the failure
    still_works()


def test_dtype_mismatch():
    dtype = torch.float32 if RANK == 0 else torch.float64
    with pytest.raises(relaxlib.MismatchError, match=r"data types for 'mixed'.*float64"):
        hvd.allreduce(torch.ones(2, dtype=dtype), name="mixed")
    still_works()


def test_op_mismatch():
    op = hvd.Sum if RANK == 0 else hvd.Max
    with pytest.raises(relaxlib.MismatchError, match="reduction ops for 'ops'"):
        hvd.allreduce(torch.ones(2), name="ops", op=op)
    still_works()


def test_collective_type_mismatch():
    with pytest.raises(relaxlib.MismatchError, match="collective operations for 'kind'"):
        if RANK == 0:
            hvd.broadcast(torch.ones(2), root_rank=0, name="kind")
        else:
            hvd.allreduce(torch.ones(2), name="kind")
    still_works()


def test_broadcast_root_mismatch():
    with pytest.raises(relaxlib.MismatchError, match="root ranks for 'rooted'"):
        hvd.broadcast(torch.ones(2), root_rank=RANK % 2, name="rooted")
    still_works()


def test_allgather_trailing_shape_mismatch():
    with pytest.raises(relaxlib.MismatchError, match="beyond the first dimension"):
        hvd.allgather(torch.ones(2, 3 + RANK % 2), name="gathered")
    still_works()


def test_duplicate_pending_name_is_refused_locally():
    # Rank 0 submits first; the others only after the barrier, so rank 0's request stays pending.
    if RANK == 0:
        h = hvd.allreduce_async(torch.ones(2), name="twice")
        with pytest.raises(relaxlib.DuplicateNameError, match="'twice' is already pending"):
            hvd.allreduce_async(torch.ones(2), name="twice")
    hvd.barrier()
    if RANK != 0:
        h = hvd.allreduce_async(torch.ones(2), name="twice")
    assert torch.equal(hvd.synchronize(h), torch.ones(2))
    assert torch.equal(hvd.synchronize(hvd.allreduce_async(torch.ones(2), name="twice")), torch.ones(2))


def test_local_argument_errors():
    with pytest.raises(TypeError, match="does not support tensors of type"):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="does not support tensors of type"):
        hvd.allgather(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="does not support tensors of type"):
        hvd.reducescatter(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="Adasum reduction supports float16, float32 and float64 tensors, not int32"):
        hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum)
    with pytest.raises(ValueError, match="root rank 99 is out of range"):
        hvd.broadcast(torch.ones(2), root_rank=99)
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(torch.ones(SIZE + 1), splits=[1] * SIZE)
    with pytest.raises(ValueError, match="cannot reduce tensors of type bool"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="scalar"):
        hvd.allgather(torch.tensor(1.0))
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(torch.ones(1), average=True, op=hvd.Sum)
    still_works()


def test_a_rank_dependent_local_error_fails_every_rank():
    """One rank rejects its request before the others see it (a dtype the binding cannot map, a
    root outside the set, a bad member of a group, an unnamed request): the others must fail in the
    round they submit, naming that rank and why, instead of waiting for it; the job goes on."""
    bad_rank = SIZE - 1
    bad = RANK == bad_rank

    def dtype():
        return torch.complex64 if bad else torch.float32

    cases = {
        "dtype": lambda: hvd.allreduce(torch.ones(2, dtype=dtype()), name="rejected.dtype"),
        "root": lambda: hvd.broadcast(torch.ones(2), root_rank=SIZE + 5 if bad else 0, name="rejected.root"),
        "group member": lambda: hvd.grouped_allreduce([torch.ones(2), torch.ones(1, dtype=dtype())],
                                                      name="rejected.group"),
        "async": lambda: hvd.synchronize(hvd.allgather_async(torch.ones(2, 1, dtype=dtype()), name="rejected.async")),
        "unnamed": lambda: hvd.allreduce(torch.ones(2, dtype=dtype())),
        "reducescatter": lambda: hvd.reducescatter(torch.ones(SIZE, dtype=dtype())),
    }
    for case, call in cases.items():
        with pytest.raises((TypeError, ValueError, relaxlib.RelaxError)) as info:
            call()
        if not bad:
            assert f"rank {bad_rank} rejected it locally" in str(info.value), (case, str(info.value))
    still_works()
    # Unnamed requests keep their call-order names aligned after a rejection.
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(SIZE)))


def test_optimizers_built_differently_raise_on_every_rank():
    """A rank wrapping its optimizer with another algorithm, other settings or other parameters
    would wait forever for collectives the others never issue: every rank raises instead, naming
    what differs, and the job goes on."""
    from relaxlib.algorithms import CompressedScatterReduce, DeAR
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    cases = {
        "algorithm": (DeAR() if RANK == 0 else None, list(model.parameters())),
        "codec='sign'": (CompressedScatterReduce("sign" if RANK == SIZE - 1 else "uint8"), list(model.parameters())),
        "parameter lists": (None, list(model.parameters())[:2 if RANK == 1 else 4]),
    }
    for expected, (algorithm, params) in cases.items():
        named = [(n, p) for n, p in model.named_parameters() if any(p is q for q in params)]
        with pytest.raises(relaxlib.MismatchError, match=re.escape(expected)):
            hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), named_parameters=named, algorithm=algorithm,
                                     model=model)
    same = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters(), algorithm=DeAR(), model=model)
    assert same.algorithm.name == "dear"
    still_works()
