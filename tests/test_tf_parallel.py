"""Runs the TensorFlow / Keras tests/parallel modules on real ranks and fails naming each failing rank and inner test.

Modules that need the same ranks and settings share one launch (tests/rank_groups.py): TensorFlow's import
alone takes seconds per rank.
"""

import pytest
from rank_groups import GROUP_PARAM, MODULE_PARAM, cases, group

pytestmark = pytest.mark.mpi

TF_NP2 = group("tf-np2", 2)
TF_NP3 = group("tf-np3", 3)  # 3 ranks: uneven reduce-scatter chunks (DeAR), a real ring for model averaging
# Two emulated nodes of 2: the hierarchical case of the torch/Keras conformance then compresses between leaders.
TF_NP4_TWO_NODES = group("tf-np4-two-nodes", 4, RELAX_LOCAL_SIZE="2")

CASES = cases(
    *[(g, "tf_collectives.py") for g in (TF_NP2, TF_NP3)],
    (TF_NP2, "tf_keras.py"),             # optimizer, callbacks and the engine shared with torch
    (TF_NP3, "tf_decentralized.py"),     # model averaging algorithms in Keras
    (TF_NP2, "tf_compression.py"),
    (TF_NP3, "tf_dear.py"),
    *[(g, "conformance.py") for g in (TF_NP2, TF_NP3, TF_NP4_TWO_NODES)],  # torch and Keras agree
)


@pytest.mark.parametrize(f"{GROUP_PARAM}, {MODULE_PARAM}", CASES)
def test_parallel_module(rank_group, rank_module, rank_groups):
    rank_groups.check(rank_group, rank_module)
