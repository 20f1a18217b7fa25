"""Every binding names the members of a grouped request by the core's one rule
(relax_request_member_name: "<base>.<index>of<count>"), so the same call gives the same names in
PyTorch and TensorFlow. The bindings used to name them themselves, and disagreed: the torch
extension "g.0of2", the TensorFlow layer "g.0". One process each, without mpirun (a world of one).
"""

import subprocess
import sys

from mpi_launch import REPO
from relaxlib import _core


def expected() -> list[str]:
    """The core's names of the two members of a group submitted as "g"."""
    return [_core.member_name("g", i, 2) for i in range(2)]

# The core refuses a scalar allgather with a message naming the request: the member's name as
# the torch extension built it (the Python layer's own scalar check is bypassed on purpose).
TORCH = """
import torch, relaxlib_torch as hvd
hvd.init()
for index in range(2):
    tensors = [torch.ones(1), torch.ones(1)]
    tensors[index] = torch.tensor(1.0)
    try:
        torch.ops.relaxlib.grouped_allgather_async(tensors, "g", 0)
    except RuntimeError as e:
        print("ERROR", e)
hvd.shutdown()
"""

# The names the TensorFlow grouped ops hand their kernels.
TF = """
from relaxlib_tf import mpi_ops
print("NAMES", [n.decode() for n in mpi_ops._names("grouped_allreduce", "g", 2).numpy()])
"""


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_the_core_names_members_with_their_count():
    assert expected() == ["g.0of2", "g.1of2"]


def test_torch_names_grouped_members_by_the_core_rule():
    out = run(TORCH)
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2, out
    for name, error in zip(expected(), errors):
        assert f"'{name}'" in error, error


def test_tensorflow_names_grouped_members_by_the_core_rule():
    out = run(TF)
    assert f"NAMES {expected()}" in out, out
