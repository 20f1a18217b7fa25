"""Runs the torch tests/parallel modules on real ranks (1 to 4) and fails naming each failing rank and inner test.

Each case is a (rank group, module) pair: modules that need the same ranks and settings run in one launch
(tests/rank_groups.py), and each case checks only its own module's inner results.
"""

import pytest
from rank_groups import GROUP_PARAM, MODULE_PARAM, cases, group

pytestmark = pytest.mark.mpi

NP2 = group("np2", 2)                        # one node: shared-memory collectives
NP3 = group("np3", 3)
NP4 = group("np4", 4)
NP3_RING = group("np3-ring", 3,              # odd world size, every allreduce and allgather on our ring
                 RELAX_SHM_COLLECTIVES="off",  # over MPI, in 4 KiB segments (messages split as between nodes)
                 RELAX_MPI_ALLREDUCE_MAX_BYTES="0", RELAX_MPI_ALLGATHER_MAX_BYTES="0",
                 RELAX_RING_SEGMENT_BYTES="4096")
NP3_SHM_ROUNDS = group("np3-shm-rounds", 3, RELAX_SHM_SLOT_BYTES="4096")  # shared memory in many rounds per op
NP4_SMALL_FUSION = group("np4-small-fusion", 4, RELAX_FUSION_THRESHOLD="65536")  # many fused batches
NP2_MPI = group("np2-mpi", 2, RELAX_SHM_COLLECTIVES="off")  # MPI's own allreduce and allgather
NP4_TCP_RING = group("np4-two-nodes-tcp-ring", 4,  # two nodes: the ring's steps over the TCP ring's sockets
                     RELAX_LOCAL_SIZE="2", RELAX_MPI_ALLREDUCE_MAX_BYTES="0", RELAX_MPI_ALLGATHER_MAX_BYTES="0")
NP3_JOINED_NOTHING = group("np3-joined-contribute-nothing", 3, RELAX_JOINED_RANKS="contribute-nothing")
NP3_GATHER_STREAMED = group("np3-gather-streamed", 3, RELAX_SHM_COLLECTIVES="off")  # the all-gather as across nodes
NP4_TWO_NODES = group("np4-two-nodes", 4, RELAX_LOCAL_SIZE="2")  # hierarchical=True between the two nodes

CASES = cases(
    *[(g, "torch_collectives.py") for g in (NP2, NP3_RING, NP3_SHM_ROUNDS, NP4_SMALL_FUSION, NP2_MPI, NP4_TCP_RING)],
    *[(g, "torch_optimizer.py") for g in (NP2, NP4)],
    *[(g, "torch_errors.py") for g in (NP2, NP3)],
    *[(g, "torch_fast_path.py") for g in (NP3_RING, NP4_TCP_RING)],  # (RELAX_FAST_PATH=auto: on off shared memory)
    *[(g, "torch_api_parity.py") for g in (NP2, NP4, NP3_JOINED_NOTHING)],
    *[(g, "torch_dear.py") for g in (NP2, NP4)],
    *[(g, "torch_compression.py") for g in (NP2, NP4, NP3_GATHER_STREAMED, NP4_TWO_NODES)],
    *[(g, "torch_decentralized.py") for g in (NP2, NP3, NP4)],
    *[(g, "torch_powersgd.py") for g in (NP2, NP3)],
    (NP4, "torch_stragglers.py"),
    (NP3, "telemetry.py"),
    (NP2, "advisor.py"),
    # Convergence: digits with every relaxation, cells of benchmarks/convergence_grid.py with the grid's
    # targets as assertions, and the grid's worst 1-bit cells with and without the per-element step scale.
    pytest.param(NP4_TWO_NODES, "torch_convergence.py", marks=pytest.mark.slow),
    pytest.param(NP4, "torch_convergence_grid.py", marks=pytest.mark.slow),
    pytest.param(NP2, "torch_sign_two_ranks.py", marks=pytest.mark.slow),
)


@pytest.mark.parametrize(f"{GROUP_PARAM}, {MODULE_PARAM}", CASES)
def test_parallel_module(rank_group, rank_module, rank_groups):
    rank_groups.check(rank_group, rank_module)
