"""A reducescatter of tensors laid end to end (relax_reducescatter_args_t::inputs), on one process
without mpirun: the result is the concatenation's, and malformed requests through the C ABI are
refused with a message naming what is wrong. (Several ranks, over each transport:
tests/scripts/tcp_ring.py.)"""

import subprocess
import sys

from mpi_launch import REPO

CODE = r"""
import ctypes
import numpy as np
import torch
import relaxlib_torch as hvd
from relaxlib import _core

hvd.init()
group = [torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.zeros(0), torch.full((4,), 2.5)]
out = hvd.synchronize(hvd.reducescatter_concatenated_async(group, op=hvd.Sum, name="laid"))
assert torch.equal(out, torch.cat([t.reshape(-1) for t in group])), out
print("ONE RANK OK", flush=True)

lib = _core.lib()
a, b, out = np.ones(2, np.float32), np.ones(3, np.float32), np.zeros(8, np.float32)


def refusal(name, total=5, ndim=1, counts=(2, 3), pointers=None, with_input=False, ninputs=2):
    request = _core.Request()
    request.type, request.name, request.dtype, request.ndim = 3, name.encode(), _core.FLOAT32, ndim
    shape = (ctypes.c_int64 * 2)(total, 1)
    request.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    request.input = a.ctypes.data if with_input else None
    request.output = out.ctypes.data
    args = request.args.reducescatter
    args.reduce.reduce_op, args.reduce.prescale, args.reduce.postscale = 1, 1.0, 1.0
    ptrs = (ctypes.c_void_p * 2)(*(pointers or (a.ctypes.data, b.ctypes.data)))
    sizes = (ctypes.c_int64 * 2)(*counts)
    args.ninputs = ninputs
    args.inputs = ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p))
    args.input_counts = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int64))
    handle = lib.relax_enqueue(ctypes.byref(request), _core.ALLOC_FN(), _core.DONE_FN(), None)
    assert handle == 0, f"{name} was accepted"
    return lib.relax_last_error().decode()


print("REFUSED", refusal("sum", total=6))
print("REFUSED", refusal("both", with_input=True))
print("REFUSED", refusal("shape", ndim=2))
print("REFUSED", refusal("null", pointers=(a.ctypes.data, None)))
print("REFUSED", refusal("negative", counts=(-1, 6)))
"""


def test_laid_end_to_end_on_one_rank_and_refusals_name_the_problem():
    run = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd=REPO, timeout=180)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "ONE RANK OK" in run.stdout, out
    for message in ("inputs hold 5 elements but the shape says 6", "either input or inputs",
                    "need a flat shape (ndim 1)", "input 1 is NULL", "input 0 has a negative element count"):
        assert message in run.stdout, (message, out)
