"""Every buffer a binding hands the core travels with its capacity in bytes, and the core refuses a
request whose buffer is smaller than what the operation reads or writes (relax.h, "Buffer
capacities"), with an error naming the request, the buffer and both sizes, instead of writing
past it. The ranks' scripts (tests/scripts/buffer_rule_*.py) keep the memory past each short
buffer in a sentinel-filled tensor, so a write past it shows as such.

Also relaxlib.compression.decode, which calls the core's codec on a caller's bytes: data shorter
than the encoding of ``n`` values is refused before the core reads past it."""

import sys

import numpy as np
import pytest

from mpi_launch import REPO, run_ranks
from relaxlib import compression

SCRIPTS = REPO / "tests" / "scripts"


def check_cases(run, ranks_cases):
    """Each rank printed OK for each of its cases and finished."""
    assert not run.timed_out and run.returncode == 0, run.report()
    for rank, cases in ranks_cases.items():
        output = run.outputs[rank]
        for case in cases:
            assert f"OK {case}:" in output, (rank, case, run.report())
        assert "FAIL" not in output and "DONE" in output, (rank, run.report())


def test_short_buffers_through_torch_and_ctypes_are_refused_on_every_rank():
    """4 ranks, a process set of ranks 0-2: error feedback sized for the global set used on the
    set (owner residual 300 floats where the set's chunk is 400), a grouped all-reduce's
    10-element output for a 1000-element input, and the ctypes lane's short owner residual and
    reduce-scatter output."""
    run = run_ranks(4, [sys.executable, str(SCRIPTS / "buffer_rule_torch.py")], timeout=240)
    in_set = ["owner_residual", "grouped_output", "direct_owner_residual", "direct_reducescatter_output"]
    check_cases(run, {0: in_set, 1: in_set, 2: in_set, 3: ["grouped_output", "direct_reducescatter_output"]})


def test_short_buffers_through_tensorflow_ops_are_refused_on_every_rank():
    """3 ranks: the TF compressed all-reduce's owner residual and a CHOCO neighbour average's
    estimates of one float each."""
    pytest.importorskip("tensorflow")
    run = run_ranks(3, [sys.executable, str(SCRIPTS / "buffer_rule_tf.py")], timeout=240)
    check_cases(run, {rank: ["tf_owner_residual", "tf_neighbor_estimates"] for rank in range(3)})


def test_decode_refuses_data_shorter_than_the_encoding():
    """8 bytes cannot hold 200 values of any codec: ValueError naming both sizes, not heap contents."""
    for codec in compression.CODECS:
        needed = compression.encoded_bytes(codec, 200)
        with pytest.raises(ValueError, match=rf"{needed} bytes.*8|8 bytes.*{needed}"):
            compression.decode(codec, np.zeros(8, np.uint8), 200)
    with pytest.raises(ValueError):
        compression.decode("uint8", np.zeros(8, np.uint8), 1 << 26)  # read 64 MiB past it before
    with pytest.raises(ValueError):
        compression.decode("uint8", np.zeros(8, np.uint8), -1)


def test_decode_still_round_trips():
    values = np.linspace(-1, 1, 200, dtype=np.float32)
    for codec in compression.CODECS:
        decoded = compression.decode(codec, compression.encode(codec, values), values.size)
        assert decoded.shape == values.shape and np.isfinite(decoded).all()


ONE_RANK = r"""
import ctypes
import numpy as np
from relaxlib import _core, basics

basics.init()
lib = _core.lib()
SENTINEL = -7.0


def request(kind, name, data, out, input_bytes, output_bytes):
    r = _core.Request()
    r.type, r.name, r.dtype, r.ndim = kind, name.encode(), _core.FLOAT32, 1
    shape = (ctypes.c_int64 * 1)(data.size)
    r.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    r.input, r.output = data.ctypes.data, out.ctypes.data
    r.input_bytes, r.output_bytes = input_bytes, output_bytes
    if kind == _core.REQ_ALLREDUCE:
        r.args.allreduce.reduce_op, r.args.allreduce.prescale, r.args.allreduce.postscale = 1, 1.0, 1.0
    return r, shape


data, room = np.ones(100, np.float32), np.full(200, SENTINEL, np.float32)
# An input said to hold fewer bytes than its shape: refused at submission.
r, keep = request(_core.REQ_ALLREDUCE, "short.input", data, room, 40, 800)
assert lib.relax_enqueue(ctypes.byref(r), _core.ALLOC_FN(), _core.DONE_FN(), None) == 0
print("REFUSED", lib.relax_last_error().decode())
# An allgather into the caller's own output (no allocation callback): its size is known only when
# it runs, so it fails then, and the output is left untouched.
r, keep = request(_core.REQ_ALLGATHER, "short.gather", data, room, 400, 40)
handle = ctypes.c_int64(0)
status = lib.relax_run(ctypes.byref(r), _core.ALLOC_FN(), None, ctypes.byref(handle))
assert status != 0, "the allgather was accepted"
assert (room == SENTINEL).all(), "the allgather wrote into its short output"
print("FAILED", lib.relax_handle_message(handle.value).decode())
lib.relax_release(handle.value)
basics.shutdown()
"""


def test_input_capacity_and_run_time_output_capacity_on_one_rank():
    """Through the C ABI itself (ctypes, one process): a short input is refused at submission, and
    an allgather whose own output is short fails when it runs without writing into it."""
    import subprocess

    run = subprocess.run([sys.executable, "-c", ONE_RANK], capture_output=True, text=True, cwd=REPO, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "'short.input': the input buffer holds 40 bytes but the operation needs 400 bytes" in run.stdout, out
    assert "'short.gather': the output buffer holds 40 bytes but the operation needs 400 bytes" in run.stdout, out
