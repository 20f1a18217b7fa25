"""Tensors laid end to end as one request's input (relax_input_pieces_t), on one process without
mpirun: a reducescatter's and a compressed all-reduce's results are their concatenation's, and
malformed requests through the C ABI are refused with a message naming what is wrong. (Several
ranks: tests/scripts/tcp_ring.py for the reducescatter over each transport,
tests/parallel/torch_compression.py for the compressed all-reduce.)"""

import subprocess
import sys

from mpi_launch import REPO

CODE = r"""
import ctypes
import numpy as np
import torch
import relaxlib_torch as hvd
from relaxlib import _core
from relaxlib.compression import codec_id

hvd.init()
group = [torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.zeros(0), torch.full((4,), 2.5)]
out = hvd.synchronize(hvd.reducescatter_concatenated_async(group, op=hvd.Sum, name="laid"))
assert torch.equal(out, torch.cat([t.reshape(-1) for t in group])), out
out = hvd.synchronize(hvd.compressed_allreduce_concatenated_async(group, name="laid.uint8", prescale_factor=0.1))
flat = hvd.compressed_allreduce(torch.cat([t.reshape(-1) for t in group]) * 0.1, name="flat.uint8")
assert torch.equal(out, flat), (out, flat)
print("ONE RANK OK", flush=True)

lib = _core.lib()
a, b, out = np.ones(2, np.float32), np.ones(3, np.float32), np.zeros(8, np.float32)
smoothed = np.zeros(8, np.float32)


def refusal(name, kind="reducescatter", total=5, ndim=1, counts=(2, 3), pointers=None, with_input=False, ninputs=2,
            prescale=1.0, step_scale=False):
    request = _core.Request()
    request.name, request.dtype, request.ndim = name.encode(), _core.FLOAT32, ndim
    shape = (ctypes.c_int64 * 2)(total, 1)
    request.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    request.input = a.ctypes.data if with_input else None
    request.output = out.ctypes.data
    if kind == "reducescatter":
        request.type = _core.REQ_REDUCESCATTER
        args = request.args.reducescatter
        args.reduce.reduce_op, args.reduce.prescale, args.reduce.postscale = 1, 1.0, 1.0
    else:
        request.type = _core.REQ_COMPRESSED_ALLREDUCE
        args = request.args.compressed_allreduce
        args.codec, args.prescale = codec_id("uint8"), prescale
        if step_scale:
            scale = _core.StepScaleArgs()
            factors = (ctypes.c_int64 * 2)(total, 1)
            scale.nfactors, scale.shapes, scale.floor, scale.decay = 1, factors, 0.1, 0.5
            scale.smoothed = smoothed.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            args.step_scale = ctypes.pointer(scale)
    ptrs = (ctypes.c_void_p * 2)(*(pointers or (a.ctypes.data, b.ctypes.data)))
    sizes = (ctypes.c_int64 * 2)(*counts)
    args.inputs.count = ninputs
    args.inputs.data = ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p))
    args.inputs.counts = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int64))
    handle = lib.relax_enqueue(ctypes.byref(request), _core.ALLOC_FN(), _core.DONE_FN(), None)
    assert handle == 0, f"{name} was accepted"
    return lib.relax_last_error().decode()


print("REFUSED", refusal("sum", total=6))
print("REFUSED", refusal("both", with_input=True))
print("REFUSED", refusal("shape", ndim=2))
print("REFUSED", refusal("null", pointers=(a.ctypes.data, None)))
print("REFUSED", refusal("negative", counts=(-1, 6)))
print("REFUSED", refusal("compressed.sum", kind="compressed", total=7))
print("REFUSED", refusal("compressed.prescale", kind="compressed", prescale=float("inf")))
print("REFUSED", refusal("compressed.prescale32", kind="compressed", prescale=1e39))
print("REFUSED", refusal("compressed.scaled", kind="compressed", ninputs=0, with_input=True, prescale=0.5,
                         step_scale=True))
print("REFUSED", refusal("compressed.scaled.pieces", kind="compressed", step_scale=True))
"""


def test_laid_end_to_end_on_one_rank_and_refusals_name_the_problem():
    run = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd=REPO, timeout=180)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "ONE RANK OK" in run.stdout, out
    for message in ("inputs hold 5 elements but the shape says 6", "either input or inputs",
                    "need a flat shape (ndim 1)", "input 1 is NULL", "input 0 has a negative element count",
                    "compressed.sum'", "inputs hold 5 elements but the shape says 7",
                    "prescale must be finite in float32 (1.0 = none), not inf",
                    "prescale must be finite in float32 (1.0 = none), not 1e+39",
                    "the step scale reads its input as one buffer as it is"):
        assert message in run.stdout, (message, out)
    assert run.stdout.count("the step scale reads its input as one buffer as it is") == 2, out
