"""Framework-neutral algorithm pieces without MPI: bucketing, the fusion-size search, argument
checks and the step scale's statistics."""

import math

import numpy as np
import pytest

from relaxlib.algorithms import (
    AllReduce,
    AsyncModelAverage,
    CompressedScatterReduce,
    DeAR,
    Decentralized,
    OneBitAdam,
    PartialAllReduce,
)
from relaxlib.algorithms.base import CAPABILITIES, TrainingContext, missing_capabilities
from relaxlib.algorithms.bucketing import ParamSpec, auto_bucket_bytes, make_buckets
from relaxlib.algorithms.host_math import HostMath
from relaxlib.algorithms.step_scale import factor_shape
from relaxlib.algorithms.tuning import BayesianSearch


def spec(index, numel, group, dtype="float32"):
    return ParamSpec(index, numel, 4, dtype, group)


def test_buckets_follow_the_given_order_and_respect_the_size():
    order = [spec(3, 100, 0), spec(4, 10, 0), spec(0, 100, 1), spec(1, 100, 2), spec(2, 20, 3)]
    assert make_buckets(order, bucket_bytes=500) == [[3, 4], [0], [1, 2]]


def test_a_module_is_never_split_and_oversized_units_stand_alone():
    order = [spec(0, 1000, 0), spec(1, 1000, 0), spec(2, 1, 1)]
    assert make_buckets(order, bucket_bytes=16) == [[0, 1], [2]]


def test_buckets_hold_one_dtype():
    order = [spec(0, 1, 0), spec(1, 1, 1, "float16"), spec(2, 1, 2)]
    assert make_buckets(order, bucket_bytes=1 << 20) == [[0], [1], [2]]


def test_bayesian_search_finds_the_minimum_in_few_trials():
    best_at = 12.0
    search = BayesianSearch(1, 100, initial=3, seed=1)
    for _ in range(10):
        value = search.propose()
        assert 1 <= value <= 100
        search.observe(value, (math.log(value) - math.log(best_at)) ** 2 + 0.01 * math.sin(value))
    assert abs(math.log(search.best()) - math.log(best_at)) < 0.35  # within ~40% of 12 MB
    assert len(set(search.values)) == len(search.values)  # never measures a point twice


def test_dear_rejects_bad_settings():
    for bad in (0, -1, math.nan):
        with pytest.raises(ValueError, match="fusion_mb"):
            DeAR(fusion_mb=bad)
    with pytest.raises(ValueError):
        DeAR(tune=True, tune_steps=1)
    assert DeAR(fusion_mb=4).needs_model
    assert DeAR().fusion_mb is None  # chosen from the model at the first step


def test_auto_bucket_size_is_a_sixteenth_of_the_model_across_nodes_and_ddps_on_one():
    mib = 1 << 20
    assert auto_bucket_bytes(27 * mib, spans_nodes=True) == 27 * mib // 16
    assert auto_bucket_bytes(4 * mib, spans_nodes=True) == mib  # never under 1 MiB
    assert auto_bucket_bytes(1 << 40, spans_nodes=True) == 25 * mib  # nor over DDP's 25 MiB
    assert auto_bucket_bytes(27 * mib, spans_nodes=False) == 25 * mib
    assert auto_bucket_bytes(0, spans_nodes=True) == mib


def test_decentralized_topology_defaults_to_the_relaxrun_setting(monkeypatch):
    monkeypatch.setenv("RELAX_TOPOLOGY", "random")
    assert Decentralized().topology == "random"
    assert Decentralized("ring").topology == "ring"  # the keyword argument wins
    monkeypatch.delenv("RELAX_TOPOLOGY")
    assert Decentralized().topology == "ring"
    monkeypatch.setenv("RELAX_TOPOLOGY", "star")
    with pytest.raises(ValueError, match="star"):
        Decentralized()


def test_model_averaging_arguments_are_checked():
    for bad in (dict(group_size=1), dict(generator="greedy"), dict(max_lag=-1), dict(period=0), dict(grace_ms=-1),
                dict(grace_fraction=1.0)):
        with pytest.raises(ValueError):
            PartialAllReduce(**bad)
    for bad in (dict(codec="zip"), dict(period=0), dict(consensus_step=0.0), dict(consensus_step=1.5)):
        with pytest.raises(ValueError):
            Decentralized("ring", **bad)
    with pytest.raises(ValueError):
        AsyncModelAverage(sync_interval_ms=-1)
    assert Decentralized("ring", codec="sign").consensus_step < Decentralized("ring", codec="fp16").consensus_step


def test_the_step_scale_arguments_are_checked():
    assert CompressedScatterReduce("sign").step_scale == "auto"
    for bad in ("warmup", None, True, 0):
        with pytest.raises(ValueError, match="step_scale"):
            CompressedScatterReduce("sign", step_scale=bad)
    with pytest.raises(ValueError, match="scale_floor"):
        CompressedScatterReduce("sign", scale_floor=0)


def test_parameters_factor_as_first_dimension_against_the_rest():
    assert factor_shape((16, 1, 3, 3)) == (16, 9)  # a convolution: out x (in * kh * kw)
    assert factor_shape((10, 128)) == (10, 128)
    assert factor_shape((10,)) == factor_shape(()) == (1, 1)  # a bias, a scalar: one scale
    assert factor_shape((1, 64)) == factor_shape((64, 1)) == (1, 1)  # not a float of statistics per element


def test_factored_statistics_are_the_mean_squares_of_rows_columns_and_whole():
    step = np.arange(6, dtype=np.float32)  # [[0, 1, 2], [3, 4, 5]]
    stats = HostMath().factor_mean_squares(step, 2, 3)
    assert stats.dtype == np.float32
    np.testing.assert_allclose(stats, [5 / 3, 50 / 3, 4.5, 8.5, 14.5, 55 / 6], rtol=1e-7)


def test_algorithms_declare_the_context_capabilities_they_use():
    assert AllReduce().requirements() == frozenset()
    assert AsyncModelAverage().requirements() == {"weights"}  # averaging writes the weights
    assert DeAR().requirements() == {"reduce_scatter", "allgather"}  # forward hooks where the binding has them
    assert CompressedScatterReduce(error_feedback=False).requirements() == {"compressed_allreduce"}
    assert CompressedScatterReduce(compress="update").requirements() == {"compressed_allreduce", "error_feedback",
                                                                          "weights"}
    assert CompressedScatterReduce(hierarchical=True).requirements() >= {"node_groups", "error_feedback"}
    assert OneBitAdam().requirements() == {"compressed_allreduce", "error_feedback", "weights"}
    assert Decentralized().requirements() == {"neighbor_average", "weights"}
    assert PartialAllReduce().requirements() == {"group_average", "weights"}
    for algorithm in (DeAR(), CompressedScatterReduce(hierarchical=True), OneBitAdam()):
        assert algorithm.requirements() <= set(CAPABILITIES)
    assert missing_capabilities(DeAR(), frozenset({"forward_hooks"})) == sorted(
        [CAPABILITIES["allgather"], CAPABILITIES["reduce_scatter"]])


def test_the_flat_context_interface_forwards_to_the_pieces():
    """``ctx.zeros``, ``ctx.allreduce_async``, ... of algorithms written against the flat interface
    call ``ctx.math`` and ``ctx.comm``; every public operation of the pieces has its alias."""
    from relaxlib.algorithms.context import COMM_ALIASES, MATH_ALIASES, Communicator, TensorMath
    from relaxlib.algorithms.step_scale import StepScaleMath

    def public(cls):  # operations (not properties such as TensorMath.writes_in_place)
        return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}

    assert set(MATH_ALIASES) == public(TensorMath) | public(StepScaleMath)
    parts = {"reduce_scatter_parts_async", "compressed_allreduce_parts_async"}  # for the *_grads_async methods
    assert set(COMM_ALIASES) == public(Communicator) - parts

    class Comm:
        def wait(self, handle):
            return ("waited", handle)

    class Context(TrainingContext):
        parameters = forward_order = watch_buckets = flatten_grads = flatten_params = None
        set_params_from_flat = add_to_params = snapshot = apply_update = None
        math, comm = HostMath(), Comm()

    ctx = Context()
    assert ctx.zeros(3).dtype == np.float32 and ctx.wait(7) == ("waited", 7)
    assert ctx.scaled_compressed_allreduce_async(None, "n", "uint8", None, None) is None  # Comm has no scaled path
