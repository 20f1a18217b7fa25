"""The performance model's equations against hand-computed cases (docs/perfmodel.md)."""

import pytest

from relaxlib import perfmodel as pm
from relaxlib.compression import CODECS

ALPHA, BW = 1e-4, 1e8  # 100 us per message, 100 MB/s


def workload(**overrides) -> pm.Workload:
    base = dict(ranks=4, alpha_s=ALPHA, bandwidth_bytes_per_s=BW, buckets=[4e6, 4e6], forward_s=0.04,
                backward_s=0.08, batch=32, codec_bytes_per_s={"uint8": 1e9, "sign": 2e9})
    base.update(overrides)
    return pm.Workload(**base)


def test_collective_costs():
    # 2(n-1) alpha + 2(n-1)/n b/BW = 6e-4 + 1.5 * 0.04
    assert pm.allreduce_time(4, 4e6, ALPHA, BW) == pytest.approx(6e-4 + 0.06)
    assert pm.reduce_scatter_time(4, 4e6, ALPHA, BW) == pytest.approx(3e-4 + 0.03)
    assert pm.allreduce_time(1, 4e6, ALPHA, BW) == 0.0


def test_pipeline_waits_for_readiness_and_the_previous_bucket():
    assert pm.pipeline_end([0.0, 0.0], [1.0, 1.0]) == 2.0
    assert pm.pipeline_end([0.5, 3.0], [1.0, 1.0]) == 4.0


def test_allreduce_overlaps_backward():
    # buckets ready at 0.04 and 0.08; each all-reduce 0.0606: ends 0.1006 and 0.1612
    p = pm.predict_allreduce(workload())
    assert p.exposed_comm_s == pytest.approx(0.1612 - 0.08)
    assert p.step_s == pytest.approx(0.12 + 0.0812)
    assert p.samples_per_s == pytest.approx(4 * 32 / p.step_s)
    assert p.bytes_sent == pytest.approx(1.5 * 8e6)


def test_allreduce_fully_hidden_behind_a_long_backward():
    p = pm.predict_allreduce(workload(backward_s=1.0))
    # ready at 0.5 and 1.0; the last all-reduce (0.0606) starts at 1.0
    assert p.exposed_comm_s == pytest.approx(0.0606)


def test_dear_hides_allgather_behind_forward():
    w = workload(forward_s=1.0, backward_s=1.0)
    p = pm.predict_dear(w)
    rs = pm.reduce_scatter_time(4, 4e6, ALPHA, BW)  # 0.0303
    # backward: ready 0.5, 1.0 -> last reduce-scatter ends 1.0 + rs; forward: first all-gather
    # (rs) before the first half of forward (0.5), the second overlaps it
    assert p.exposed_comm_s == pytest.approx(rs + rs)
    assert p.step_s == pytest.approx(2.0 + 2 * rs)


def test_without_hooks_nothing_overlaps_compute():
    """Keras: every bucket is ready when backward ends and DeAR's step applies every bucket, so
    all-reduce exposes all of its communication and DeAR's split saves nothing."""
    allreduce = pm.predict_allreduce(workload(hooks=False))
    assert allreduce.exposed_comm_s == pytest.approx(2 * 0.0606)
    dear = pm.predict_dear(workload(hooks=False))
    assert dear.exposed_comm_s == pytest.approx(4 * 0.0303)
    assert dear.step_s == pytest.approx(allreduce.step_s)
    assert pm.predict_dear(workload()).step_s < dear.step_s


def test_compressed_costs_wire_and_codec():
    p = pm.predict_compressed(workload(), "uint8")
    ratio = CODECS["uint8"].ratio  # the core's encoded size, chunk header included
    assert ratio == pytest.approx(0.25, rel=1e-4)
    wire = pm.allreduce_time(4, ratio * 8e6, ALPHA, BW)
    assert p.comm_s == pytest.approx(wire + 4 * 8e6 / 1e9)
    assert p.step_s == pytest.approx(0.12 + p.comm_s)
    with pytest.raises(ValueError, match="calibrate"):
        pm.predict_compressed(workload(codec_bytes_per_s={}), "fp16")


def test_decentralized_ring_sends_twice_the_model():
    ring, random = pm.predict_decentralized(workload(), "ring"), pm.predict_decentralized(workload(), "random")
    assert ring.comm_s == pytest.approx(ALPHA + 2 * 8e6 / BW)
    assert random.comm_s == pytest.approx(ALPHA + 8e6 / BW)
    assert ring.bytes_sent == 2 * random.bytes_sent == 16e6


def test_straggler_sets_the_pace_of_lock_step_modes_only():
    w = workload(slowdown=[1.0, 1.0, 1.0, 3.0], backward_s=1.0, forward_s=0.5)
    lock = pm.predict_partial(w, "static")
    smart = pm.predict_partial(w, "smart")
    async_ = pm.predict_async(w)
    assert lock.step_s == pytest.approx(1.5 * 3 + lock.comm_s)
    comm = pm.allreduce_time(2, 8e6, ALPHA, BW) + 2 * ALPHA
    assert smart.samples_per_s == pytest.approx(3 * 32 / (1.5 + comm) + 32 / (4.5 + comm))
    assert async_.samples_per_s == pytest.approx(3 * 32 / 1.5 + 32 / 4.5)


def test_predict_all_ranks_by_throughput():
    predictions = pm.predict_all(workload(bandwidth_bytes_per_s=1e7))  # a thin link
    rates = [p.samples_per_s for p in predictions]
    assert rates == sorted(rates, reverse=True)
    modes = {p.mode for p in predictions}
    assert {"allreduce", "dear", "compressed-uint8", "compressed-sign", "async"} <= modes
    assert "compressed-fp16" not in modes  # not calibrated
    by_mode = {p.mode: p for p in predictions}
    assert by_mode["compressed-sign"].samples_per_s > by_mode["allreduce"].samples_per_s


def test_topk_bytes_grow_with_ranks_and_cross_allreduce_at_ranks_times_density_one():
    """A rank receives (n-1)·8k bytes against all-reduce's 2(n-1)/n·4N: equal at n·density = 1."""
    for ranks, density in ((4, 0.1), (10, 0.1), (20, 0.1), (2, 0.5), (4, 0.5)):
        w = workload(ranks=ranks)
        topk, exact = pm.predict_topk(w, density), pm.predict_allreduce(w)
        assert topk.bytes_sent == pytest.approx((ranks - 1) * 2 * density * w.model_bytes)
        if ranks * density < 1:
            assert topk.bytes_sent < exact.bytes_sent
        elif ranks * density > 1:
            assert topk.bytes_sent > exact.bytes_sent
        else:
            assert topk.bytes_sent == pytest.approx(exact.bytes_sent)
    # with free host math and no latency the step follows the bytes
    fast = dict(alpha_s=0.0, host_bytes_per_s=1e18, select_bytes_per_s=1e18)
    exact_step = pm.predict_allreduce(workload(ranks=4, **fast)).step_s
    assert pm.predict_topk(workload(ranks=4, **fast), 0.01).step_s < exact_step
    assert pm.predict_topk(workload(ranks=4, **fast), 0.5).step_s > exact_step


def test_powersgd_sends_p_and_q_and_leaves_vectors_exact():
    """A 1000 x 1000 matrix at rank 2 sends 2000 + 2000 floats; a 1000-vector goes exactly; a
    10 x 10 matrix shrinks 2x at rank 2 (100 / (20·2) >= 2: 20 + 20 floats), not at rank 4
    (100 / (20·4) < 2: its 100 floats exactly)."""
    shapes = [(1000, 1000), (1000,), (10, 10)]
    buckets = [4.0 * (1e6 + 1000 + 100)]
    w = workload(ranks=4, buckets=buckets, shapes=shapes)
    p = pm.predict_powersgd(w, rank=2)
    assert p.bytes_sent == pytest.approx(1.5 * 4 * (2000 + 2000 + 1000 + 20 + 20))
    p4 = pm.predict_powersgd(w, rank=4)
    assert p4.bytes_sent == pytest.approx(1.5 * 4 * (4000 + 4000 + 1000 + 100))
    assert p.step_s < pm.predict_allreduce(w).step_s  # 1/200 of the bytes on a 100 MB/s link
    assert pm.matrix_views(workload(buckets=[4e6])) == [(1000, 1000)]  # without shapes: a square per bucket


def test_local_updates_pay_one_model_allreduce_every_h_steps():
    w = workload(ranks=4, host_bytes_per_s=1e18)
    exact = pm.allreduce_time(4, w.model_bytes, ALPHA, BW)
    for h in (1, 8, 32):
        p = pm.predict_local_updates(w, sync_every=h)
        assert p.exposed_comm_s == pytest.approx(exact / h)
        assert p.bytes_sent == pytest.approx(1.5 * w.model_bytes / h)
    # streaming: a fragment of 1/F every H/F steps (same bytes per step); a delay hides it behind compute
    streamed = pm.predict_local_updates(w, sync_every=8, fragments=4)
    assert streamed.bytes_sent == pytest.approx(1.5 * w.model_bytes / 8)
    hidden = pm.predict_local_updates(w, sync_every=8, fragments=4, delay=1)
    assert hidden.exposed_comm_s < streamed.exposed_comm_s


def test_local_updates_with_top_k_outer_gradients_gather_pairs_that_grow_with_the_ranks():
    """codec="topk": (n - 1) · 2k floats gathered per sync; fewer bytes than the exact all-reduce
    only while ranks × density < 1, as for TopK on gradients."""
    for ranks in (2, 4, 16):
        w = workload(ranks=ranks, host_bytes_per_s=1e18, select_bytes_per_s=1e18)
        exact = pm.predict_local_updates(w, sync_every=8)
        sparse = pm.predict_local_updates(w, sync_every=8, codec="topk", density=0.1)
        assert sparse.bytes_sent == pytest.approx((ranks - 1) * 2 * 0.1 * w.model_bytes / 8)
        assert (sparse.bytes_sent < exact.bytes_sent) == (ranks * 0.1 < 1)
