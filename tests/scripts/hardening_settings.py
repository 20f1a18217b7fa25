"""Issue #49 on real ranks. Every rank: each bad numeric setting makes init() raise
InvalidArgumentError naming the variable and its range (settings are read at each init, and a bad
one fails it before MPI starts, so one process tries them all); then a clean init works, shapes
whose size overflows int64 are refused, and an allgather whose rows together overflow fails on
every rank without calling the allocation callback."""

import ctypes
import os
import sys

import relaxlib
from relaxlib import _core

BAD_SETTINGS = [
    ("RELAX_CYCLE_TIME", "nan"), ("RELAX_CYCLE_TIME", "inf"), ("RELAX_CYCLE_TIME", "1e30"),
    ("RELAX_OP_TIMEOUT", "nan"), ("RELAX_RING_SEGMENT_BYTES", "nan"), ("RELAX_SHM_SLOT_BYTES", "nan"),
    ("RELAX_FUSION_THRESHOLD", "1e30"),
]


def check_bad_settings() -> None:
    """Each setting alone: init raises, naming it and its range."""
    for name, value in BAD_SETTINGS:
        os.environ[name] = value
        try:
            relaxlib.init()
        except relaxlib.InvalidArgumentError as exc:
            assert f"{name}={value} is not a" in str(exc) and " in [" in str(exc), str(exc)
        else:
            raise AssertionError(f"init() accepted {name}={value}")
        finally:
            del os.environ[name]
        assert not relaxlib.is_initialized()
        print(f"REFUSED {name}={value}", flush=True)


def enqueue(kind: int, dtype: int, shape: list[int], alloc) -> int:
    """Submits a request over ``shape`` (buffers claim to hold it: it must never be read); 0 if refused."""
    dims = (ctypes.c_int64 * len(shape))(*shape)
    data = (ctypes.c_uint8 * 64)()
    request = _core.Request()
    request.type, request.name, request.dtype = kind, f"huge.{kind}.{shape}".encode(), dtype
    request.ndim, request.shape, request.input = len(shape), dims, ctypes.addressof(data)
    if hasattr(request, "input_bytes"):  # the buffer-capacity rule: claim what the shape says
        request.input_bytes = 1 << 62
    if kind == _core.REQ_ALLREDUCE:
        request.output = ctypes.addressof(data)
        request.args.allreduce.reduce_op = 1  # Sum
        request.args.allreduce.prescale = request.args.allreduce.postscale = 1.0
    enqueue.keep = (dims, data, request, alloc)
    return _core.lib().relax_enqueue(ctypes.byref(request), alloc, _core.DONE_FN(), None)


def check_shapes() -> None:
    """Sizes past int64 are refused locally with a message that says so."""
    for shape in ([3, 2**62], [2**32, 2**32]):
        assert enqueue(_core.REQ_ALLREDUCE, _core.FLOAT32, shape, _core.ALLOC_FN()) == 0, shape
        message = _core.lib().relax_last_error().decode()
        assert "int64" in message and str(shape[1]) in message, message
        print(f"REFUSED shape {shape}", flush=True)


def check_allgather_rows() -> None:
    """2^62 bytes of rows each are fine alone; together (2^63) they overflow on every rank."""
    calls = []

    @_core.ALLOC_FN
    def alloc(_ctx, ndim, dims):
        calls.append([dims[i] for i in range(ndim)])
        return None

    handle = enqueue(_core.REQ_ALLGATHER, _core.UINT8, [2**62], alloc)
    assert handle != 0, _core.lib().relax_last_error().decode()
    status = _core.wait_interruptibly(handle)
    message = _core.lib().relax_handle_message(handle).decode()
    _core.lib().relax_release(handle)
    assert status != 0 and "int64" in message, (status, message)
    assert not calls, f"allocation callback called with {calls}"
    print("REFUSED allgather rows", flush=True)


check_bad_settings()
relaxlib.init()
rank = relaxlib.rank()
check_shapes()
check_allgather_rows()
relaxlib.shutdown()
print(f"HARDENING-OK rank {rank}", flush=True)
sys.exit(0)
