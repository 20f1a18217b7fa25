"""Calibration and the advisor on real ranks: plausible network figures, and advice that ranks
modes exactly as the performance model does. Launched by tests/test_torch_parallel.py (2 ranks).
"""

import torch

import relaxlib_torch as hvd
from relaxlib import calibration, perfmodel

hvd.init()


def test_network_calibration_is_plausible():
    network = calibration.measure_network(reps=5, large_bytes=8 << 20)
    assert 1e-7 < network.alpha_s < 0.05
    assert 1e6 < network.bandwidth_bytes_per_s < 1e12
    assert network.large_allreduce_s > network.small_allreduce_s > 0


def test_bucket_and_exchange_calibration_fits_through_the_bucket():
    bucket, size = 1 << 20, hvd.size()
    network = calibration.measure_network(reps=3, large_bytes=8 << 20, bucket_bytes=bucket, exchange_bytes=4 << 20)
    assert network.bucket_bytes == bucket and network.bucket_allreduce_s > 0 and network.bucket_reduce_scatter_s > 0
    assert 1e-7 < network.alpha_s < 0.05 and 1e-7 < network.reduce_scatter_alpha_s < 0.05
    assert 1e6 < network.bandwidth_bytes_per_s < 1e12 and 1e6 < network.exchange_bytes_per_s < 1e12
    # the fitted line passes through the bucket's time (unless clamped at the tiny message's α)
    fitted = perfmodel.allreduce_time(size, bucket, network.alpha_s, network.bandwidth_bytes_per_s)
    assert fitted >= network.bucket_allreduce_s * 0.999


def test_codec_throughput_is_positive_for_every_codec():
    codecs = calibration.measure_codecs(nbytes=1 << 20, reps=1)
    assert set(codecs) == {"fp16", "uint8", "sign"} and all(v > 0 for v in codecs.values())


def test_compressed_allreduce_gives_every_codec_an_effective_throughput():
    network = calibration.Network(1e-5, 1e9, 2e-5, 0.1, 1 << 20)
    codecs = calibration.measure_compressed(network, 1 << 20, reps=2)
    assert set(codecs) == {"fp16", "uint8", "sign"}
    assert all(1e6 < v < 1e12 for v in codecs.values()), codecs


def test_host_math_rates_are_plausible_and_agreed():
    host = calibration.measure_host_math(1 << 20, reps=2)
    rates = [host.host_bytes_per_s, host.matmul_flops_per_s, host.select_bytes_per_s]
    assert all(1e6 < r < 1e13 for r in rates), host
    assert hvd.allgather_object(rates) == [rates] * hvd.size()  # averaged: every rank predicts the same


def test_slowdowns_are_relative_to_the_fastest_rank():
    spread = calibration.slowdowns(1.0 + hvd.rank())
    assert spread == [1.0 + r for r in range(hvd.size())]


def test_advice_follows_the_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    network = calibration.Network(1e-4, 1e8, 2e-4, 0.1, 1 << 20)
    codecs = {"uint8": 1e9}
    predictions = hvd.advise(model, torch.randn(32, 128), show=False)
    assert [p.samples_per_s for p in predictions] == sorted((p.samples_per_s for p in predictions), reverse=True)
    from relaxlib import advisor
    defaults = perfmodel.Workload(ranks=1, alpha_s=0, bandwidth_bytes_per_s=1, buckets=[], forward_s=0, backward_s=0)
    host = calibration.HostMath(defaults.host_bytes_per_s, defaults.matmul_flops_per_s, defaults.select_bytes_per_s)
    given = advisor.advise(0.01, 0.02, [256 * 10 * 4, 128 * 256 * 4], batch=32, network=network, codecs=codecs,
                           show=False, host=host)
    workload = perfmodel.Workload(ranks=hvd.size(), alpha_s=1e-4, bandwidth_bytes_per_s=1e8,
                                  buckets=advisor.buckets_of([256 * 10 * 4, 128 * 256 * 4]), forward_s=0.01,
                                  backward_s=0.02, batch=32, slowdown=[1.0] * hvd.size(), codec_bytes_per_s=codecs)
    assert [p.mode for p in given] == [p.mode for p in perfmodel.predict_all(workload)]
