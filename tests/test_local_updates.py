"""LocalSGD / DiLoCo (relaxlib.algorithms.local_updates): argument checks and the outer step
against a hand computation in one process; the multi-rank modules (torch on 3 ranks, torch against
Keras on 3 ranks) share the launches of the torch and TensorFlow parallel suites (tests/rank_groups.py)."""

import numpy as np
import pytest
from rank_groups import GROUP_PARAM, MODULE_PARAM, cases, group

from relaxlib.algorithms.context import ParamRef
from relaxlib.algorithms.host_math import HostMath
from relaxlib.algorithms.local_updates import DiLoCo, LocalSGD, OuterSGD, fragment_schedule, split_fragments

# the same groups (by value) as tests/test_torch_parallel.py's NP3 and tests/test_tf_parallel.py's TF_NP3
NP3 = group("np3", 3)
TF_NP3 = group("tf-np3", 3)


@pytest.mark.parametrize("kwargs, message", [
    ({"sync_every": 0}, "sync_every must be an integer >= 1"),
    ({"sync_every": -3}, "sync_every must be an integer >= 1"),
    ({"sync_every": 2.5}, "sync_every must be an integer >= 1"),
    ({"sync_every": True}, "sync_every must be an integer >= 1"),
    ({"fragments": 0}, "fragments must be an integer >= 1"),
    ({"sync_every": 4, "fragments": 5}, "fragments=5 must not exceed sync_every=4"),
    ({"sync_every": 4, "delay": 4}, r"delay must be an integer in \[0, sync_every=4\)"),
    ({"delay": -1}, "delay must be an integer"),
    ({"mixing": 1.0}, r"mixing must be a number in \[0, 1\)"),
    ({"outer_lr": 0.0}, "outer_lr must be a finite number > 0"),
    ({"outer_lr": float("nan")}, "outer_lr must be a finite number > 0"),
    ({"outer_momentum": 1.0}, r"outer_momentum must be a number in \[0, 1\)"),
    ({"outer_momentum": -0.1}, r"outer_momentum must be a number in \[0, 1\)"),
    ({"nesterov": True}, "nesterov=True needs outer_momentum > 0"),
    ({"codec": "zip"}, "unknown codec 'zip'"),
    ({"codec": "topk", "density": 0.0}, r"density must be a number in \(0, 1\]"),
    ({"codec": "topk", "density": 1.5}, r"density must be a number in \(0, 1\]"),
    ({"codec": "topk", "density": "0.1"}, r"density must be a number in \(0, 1\]"),
    ({"codec": "uint8", "density": 0.1}, "density is the fraction codec='topk' keeps; codec is 'uint8'"),
    ({"outer_optimizer": OuterSGD(0.5), "outer_lr": 0.7}, "either outer_optimizer or outer_lr"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LocalSGD(**kwargs)


def test_a_framework_optimizer_is_refused_as_the_outer_optimizer():
    torch = pytest.importorskip("torch")
    other = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.7, momentum=0.9, nesterov=True)
    with pytest.raises(TypeError, match="framework optimizer holds its own parameters"):
        LocalSGD(outer_optimizer=other)


def test_diloco_is_the_papers_outer_optimizer():
    diloco = DiLoCo(sync_every=8)
    assert diloco.outer_optimizer == OuterSGD(0.7, 0.9, nesterov=True)
    assert diloco.sync_every == 8 and diloco.codec is None
    assert LocalSGD(outer_optimizer=OuterSGD(0.5, 0.8)).outer_optimizer == OuterSGD(0.5, 0.8, False)
    assert DiLoCo(codec="uint8", fragments=2, sync_every=4).requirements() >= {"compressed_allreduce", "weights"}


@pytest.mark.parametrize("momentum, nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_outer_step_matches_the_hand_computation(momentum, nesterov):
    """anchor -= lr * update with m = mu m + delta and update = delta + mu m (Nesterov), m, or delta."""
    rng = np.random.default_rng(0)
    lr = 0.7
    anchor = rng.standard_normal(5)
    expected_anchor, buffer = anchor.copy(), np.zeros(5)
    outer, state = OuterSGD(lr, momentum, nesterov), None
    for _ in range(4):
        delta = rng.standard_normal(5)
        buffer = momentum * buffer + delta
        update = delta + momentum * buffer if nesterov else (buffer if momentum else delta)
        expected_anchor = expected_anchor - lr * update
        state = outer.step(HostMath(), anchor, delta.copy(), state)
        np.testing.assert_allclose(anchor, expected_anchor, rtol=1e-12, atol=1e-12)
    assert (state is None) == (momentum == 0)


def test_outer_step_is_torch_sgd_on_the_outer_gradient():
    """The same update torch.optim.SGD(nesterov=True) takes with the outer gradient as its gradient."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    anchor = rng.standard_normal(7)
    param = torch.nn.Parameter(torch.from_numpy(anchor.copy()))
    reference = torch.optim.SGD([param], lr=0.7, momentum=0.9, nesterov=True)
    outer, state = OuterSGD(0.7, 0.9, True), None
    for _ in range(5):
        delta = rng.standard_normal(7)
        param.grad = torch.from_numpy(delta.copy())
        reference.step()
        state = outer.step(HostMath(), anchor, delta, state)
    np.testing.assert_allclose(anchor, param.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_fragments_are_contiguous_balanced_and_sent_in_turn():
    assert split_fragments([10, 1, 1, 1], 2) == [[0], [1, 2, 3]]
    assert split_fragments([5] * 6, 3) == [[0, 1], [2, 3], [4, 5]]
    assert split_fragments([100, 1, 1], 3) == [[0], [1], [2]]
    assert fragment_schedule(8, 1) == [0]  # every 8th step
    assert fragment_schedule(8, 4) == [2, 4, 6, 0]  # one every 2 steps, the last at the 8th
    with pytest.raises(ValueError, match="fragments=3 is more than the 2 parameter tensors"):
        split_fragments([4, 4], 3)


class _Parameters:
    """Just enough of a context for setup's checks, which run before any communication."""

    math = HostMath()

    def __init__(self, *dtypes: str) -> None:
        self._refs = [ParamRef(i, f"w{i}", 4, 4, dtype) for i, dtype in enumerate(dtypes)]

    def parameters(self):
        return self._refs


@pytest.mark.parametrize("algorithm, dtypes, message", [
    (LocalSGD(), ("float32", "float16"), r"one flat float32 or float64 copy .* \['float16', 'float32'\]"),
    (LocalSGD(), ("float16",), "one flat float32 or float64"),
    (LocalSGD(codec="uint8"), ("float64",), "compresses float32 outer gradients; the parameters are float64"),
    (LocalSGD(sync_every=4, fragments=3), ("float32", "float32"), "fragments=3 is more than the 2 parameter"),
])
def test_setup_names_unsupported_models(algorithm, dtypes, message):
    with pytest.raises(ValueError, match=message):
        algorithm.setup(_Parameters(*dtypes))


def test_a_checkpoint_loaded_before_setup_is_restored_by_setup():
    """Keras sets an algorithm up at its first step: a checkpoint loaded before must not be lost."""
    saved = {"inner_steps": 5, "syncs": 1, "anchor": [np.arange(8, dtype=np.float32)],
             "momentum": [np.ones(8, np.float32)], "error_feedback": [None]}
    algorithm = LocalSGD(sync_every=4, outer_momentum=0.5)
    with pytest.raises(RuntimeError, match="no state before it is set up"):
        algorithm.state_dict()
    algorithm.load_state_dict(saved)
    algorithm.setup(_Parameters("float32", "float32"))
    state = algorithm.state_dict()
    assert (state["inner_steps"], state["syncs"]) == (5, 1)
    np.testing.assert_array_equal(state["anchor"][0], saved["anchor"][0])
    np.testing.assert_array_equal(state["momentum"][0], saved["momentum"][0])


def test_a_checkpoint_of_another_model_is_refused():
    algorithm = LocalSGD(sync_every=4)
    algorithm.setup(_Parameters("float32", "float32"))
    state = {"inner_steps": 1, "anchor": [np.zeros(6, np.float32)], "momentum": [None], "error_feedback": [None]}
    with pytest.raises(ValueError, match="anchor of fragment 0 has 6 elements, the model's 8"):
        algorithm.load_state_dict(state)
    with pytest.raises(ValueError, match="the checkpoint has 2 fragments, this configuration 1"):
        algorithm.load_state_dict({**state, "anchor": [np.zeros(4, np.float32)] * 2})


@pytest.mark.mpi
@pytest.mark.parametrize(f"{GROUP_PARAM}, {MODULE_PARAM}",
                         cases((NP3, "local_updates.py"), (TF_NP3, "local_updates_keras.py")))
def test_parallel_module(rank_group, rank_module, rank_groups):
    rank_groups.check(rank_group, rank_module)
