"""op=Adasum (Horovod's adaptive summation, issue #54) on real ranks, torch and TensorFlow in one
launch per rank count: 2 and 4 ranks check the results against the numpy tree
(tests/parallel/adasum_reference.py) and the refusal of integer tensors; 3 ranks check that every
rank is refused, as in Horovod, and that the engine works on afterwards."""

import pytest

from mpi_launch import run_pytest_on_ranks

pytestmark = pytest.mark.mpi

MODULES = ["adasum_torch.py", "adasum_tf.py"]


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_adasum_on_ranks(np_):
    run = run_pytest_on_ranks(np_, MODULES, timeout=420, per_test_timeout=120)
    run.check()
    # The checks that matter for this rank count ran (were not skipped) on every rank.
    must_pass = (["test_a_rank_count_that_is_not_a_power_of_two_is_refused_on_every_rank"] if np_ == 3 else
                 ["test_fused_tensors_are_combined_per_tensor_as_the_numpy_tree", "test_float64",
                  "test_distributed_optimizer_adds_the_adasum_of_each_ranks_step",
                  "test_allreduce_and_fused_group_match_the_numpy_tree", "test_gradient_tape_combines"])
    must_pass.append("test_integer_tensors_are_refused_on_every_rank")
    for results in run.results:
        passed = [nodeid for nodeid, outcome in results.outcomes.items() if outcome == "passed"]
        for test in must_pass:
            assert any(test in nodeid for nodeid in passed), (results.rank, test, run.report())
        assert sum("adasum_tf.py" in nodeid for nodeid in passed) >= 2, (results.rank, run.report())
