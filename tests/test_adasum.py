"""op=Adasum (Horovod's adaptive summation, issue #54) on real ranks, torch and TensorFlow, in the
launches of the TensorFlow parallel suite (tests/rank_groups.py: no launch of their own): 2 and 4
ranks check the results against the numpy tree (tests/parallel/adasum_reference.py) and the refusal
of integer tensors; 3 ranks check that every rank is refused, as in Horovod, and that the engine
works on afterwards."""

import pytest
from rank_groups import GROUP_PARAM, MODULE_PARAM, cases, group

pytestmark = pytest.mark.mpi

# the same groups (by value) as tests/test_tf_parallel.py's
TF_NP2 = group("tf-np2", 2)
TF_NP3 = group("tf-np3", 3)
TF_NP4_TWO_NODES = group("tf-np4-two-nodes", 4, RELAX_LOCAL_SIZE="2")

# The checks that matter for a rank count must have run (not been skipped), per module.
MUST_PASS = {
    "adasum_torch.py": {
        True: ["test_fused_tensors_are_combined_per_tensor_as_the_numpy_tree", "test_float64_in_place",
               "test_distributed_optimizer_adds_the_adasum_of_each_ranks_step",
               "test_integer_tensors_are_refused_on_every_rank"],
        False: ["test_a_rank_count_that_is_not_a_power_of_two_is_refused_on_every_rank",
                "test_integer_tensors_are_refused_on_every_rank"]},
    "adasum_tf.py": {
        True: ["test_allreduce_and_fused_group_match_the_numpy_tree", "test_float64",
               "test_gradient_tape_combines_gradients_with_adasum", "test_integer_tensors_are_refused_on_every_rank"],
        False: ["test_a_rank_count_that_is_not_a_power_of_two_is_refused_on_every_rank",
                "test_integer_tensors_are_refused_on_every_rank"]},
}


@pytest.mark.parametrize(f"{GROUP_PARAM}, {MODULE_PARAM}",
                         cases(*[(g, m) for g in (TF_NP2, TF_NP3, TF_NP4_TWO_NODES) for m in MUST_PASS]))
def test_adasum_module(rank_group, rank_module, rank_groups):
    run = rank_groups.run(rank_group, rank_module)
    run.check(rank_module)
    power_of_two = rank_group.np & (rank_group.np - 1) == 0
    for results in run.results:
        passed = [nodeid for nodeid, outcome in results.outcomes.items()
                  if outcome == "passed" and rank_module in nodeid]
        for test in MUST_PASS[rank_module][power_of_two]:
            assert any(test in nodeid for nodeid in passed), (results.rank, test, run.report(rank_module))
