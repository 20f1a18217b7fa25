"""Runs the torch parallel modules on real ranks (2, 3 and 4) and fails with every rank's output."""

import pytest

from mpi_launch import run_pytest_on_ranks

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("np_, env", [
    (2, {}),                                      # one node: shared-memory collectives
    (3, {"RELAX_SHM_COLLECTIVES": "off",          # odd world size, every allreduce and
         "RELAX_MPI_ALLREDUCE_MAX_BYTES": "0",    # allgather on our ring over MPI, in 4 KiB
         "RELAX_MPI_ALLGATHER_MAX_BYTES": "0",    # segments (messages split as between nodes)
         "RELAX_RING_SEGMENT_BYTES": "4096"}),
    (3, {"RELAX_SHM_SLOT_BYTES": "4096"}),        # shared memory in many rounds per operation
    (4, {"RELAX_FUSION_THRESHOLD": "65536"}),     # small fusion buffer: many fused batches
    (2, {"RELAX_SHM_COLLECTIVES": "off"}),        # MPI's own allreduce and allgather
    (4, {"RELAX_LOCAL_SIZE": "2",                 # two nodes: the ring's steps over the TCP
         "RELAX_MPI_ALLREDUCE_MAX_BYTES": "0",    # ring's sockets, for every size
         "RELAX_MPI_ALLGATHER_MAX_BYTES": "0"}),
], ids=["np2", "np3-ring", "np3-shm-rounds", "np4-small-fusion", "np2-mpi", "np4-two-nodes-tcp-ring"])
def test_collectives(np_, env):
    run = run_pytest_on_ranks(np_, "torch_collectives.py", env=env)
    assert run.returncode == 0, run.report()


@pytest.mark.parametrize("np_", [2, 4])
def test_distributed_optimizer(np_):
    run = run_pytest_on_ranks(np_, "torch_optimizer.py")
    assert run.returncode == 0, run.report()


@pytest.mark.parametrize("np_", [2, 3])
def test_bad_input_errors(np_):
    run = run_pytest_on_ranks(np_, "torch_errors.py")
    assert run.returncode == 0, run.report()


@pytest.mark.parametrize("np_, env", [(2, {}), (4, {}), (3, {"RELAX_JOINED_RANKS": "contribute-nothing"})],
                         ids=["np2", "np4", "np3-joined-contribute-nothing"])
def test_horovod_api_parity(np_, env):
    run = run_pytest_on_ranks(np_, "torch_api_parity.py", env=env)
    assert run.returncode == 0, run.report()


@pytest.mark.parametrize("np_", [2, 4])
def test_dear(np_):
    run = run_pytest_on_ranks(np_, "torch_dear.py")
    assert run.returncode == 0, run.report()


@pytest.mark.parametrize("np_, env", [(2, {}), (4, {}), (3, {"RELAX_SHM_COLLECTIVES": "off"}),
                                     (4, {"RELAX_LOCAL_SIZE": "2"})],
                         # np3: the all-gather as it runs across nodes; two nodes: hierarchical=True between them
                         ids=["np2", "np4", "np3-gather-streamed", "np4-two-nodes"])
def test_compressed_scatter_reduce(np_, env):
    run = run_pytest_on_ranks(np_, "torch_compression.py", env=env)
    assert run.returncode == 0, run.report()


@pytest.mark.slow
def test_convergence_on_digits_with_four_ranks():
    run = run_pytest_on_ranks(4, "torch_convergence.py", env={"RELAX_LOCAL_SIZE": "2"}, per_test_timeout=300)
    assert run.returncode == 0, run.report()


@pytest.mark.slow
def test_convergence_grid_slice_with_four_ranks():
    """Cells of benchmarks/convergence_grid.py with the grid's targets as assertions."""
    run = run_pytest_on_ranks(4, "torch_convergence_grid.py", per_test_timeout=300)
    assert run.returncode == 0, run.report()


@pytest.mark.slow
def test_scaled_sign_compression_on_two_ranks_keeps_allreduce_accuracy():
    """The grid's worst 1-bit cells without the per-element step scale, with it and without."""
    run = run_pytest_on_ranks(2, "torch_sign_two_ranks.py", per_test_timeout=300)
    assert run.returncode == 0, run.report()


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_decentralized_and_partial_allreduce(np_):
    run = run_pytest_on_ranks(np_, "torch_decentralized.py")
    assert run.returncode == 0, run.report()


def test_stragglers_with_four_ranks():
    run = run_pytest_on_ranks(4, "torch_stragglers.py")
    assert run.returncode == 0, run.report()


def test_step_telemetry():
    run = run_pytest_on_ranks(3, "telemetry.py")
    assert run.returncode == 0, run.report()


def test_calibration_and_advisor():
    run = run_pytest_on_ranks(2, "advisor.py")
    assert run.returncode == 0, run.report()
