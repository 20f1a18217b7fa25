"""Error feedback through the core's codecs, single process: the running sum of what was sent
must stay within a bounded distance of the running sum of the inputs, also when one bucket
mixes layers whose gradients differ by 1000x in magnitude (the case that broke 1-bit training)."""

import numpy as np
import pytest

from relaxlib import compression

# A fused bucket like an MLP's: a large first layer with tiny gradients, a hidden layer, and a
# few large outputs and biases; magnitudes span 1000x.
LAYERS = ((4096, 0.001), (1024, 0.03), (64, 1.0))
STEPS = 1200


def bucket_inputs(seed: int):
    rng = np.random.default_rng(seed)
    scale = np.concatenate([np.full(n, m, dtype=np.float32) for n, m in LAYERS])
    drift = rng.standard_normal(scale.size).astype(np.float32)  # a persistent direction, like a gradient's
    for _ in range(STEPS):
        yield scale * (0.5 * drift + rng.standard_normal(scale.size).astype(np.float32))


def worst_drift(round_trip) -> tuple[float, float]:
    """Largest |sum sent - sum of inputs| over the run, in units of one input's norm, in the first
    and the second half of the run."""
    residual = None
    worst = [0.0, 0.0]
    for step, x in enumerate(bucket_inputs(0)):
        v = x if residual is None else x + residual
        sent = round_trip(v)
        residual = v - sent  # = sum of inputs - sum sent, so far
        half = 0 if step < STEPS // 2 else 1
        worst[half] = max(worst[half], float(np.linalg.norm(residual) / np.linalg.norm(x)))
    return worst[0], worst[1]


def core_round_trip(codec: str):
    return lambda v: compression.decode(codec, compression.encode(codec, v), v.size)


def mean_abs_sign(v: np.ndarray) -> np.ndarray:
    """The sign codec as it was before (scale = mean |x|): the negative control of the bound."""
    return np.where(v >= 0, 1.0, -1.0).astype(np.float32) * np.abs(v).mean()


BOUND = 20.0  # inputs' worth of error the running sum may be behind at any step


@pytest.mark.parametrize("codec", ["sign", "uint8", "fp16"])
def test_error_feedback_keeps_the_running_sum_close_across_1000x_magnitudes(codec):
    first, second = worst_drift(core_round_trip(codec))
    assert max(first, second) < BOUND, (codec, first, second)
    assert second < 1.5 * first + 0.5, f"{codec}: the error keeps growing ({first:.2f} then {second:.2f})"


def test_the_bound_fails_a_mean_abs_scale():
    """The same loop with the former mean-|x| scale lets the large elements' residual pile up:
    this is what the bound above guards against."""
    first, second = worst_drift(mean_abs_sign)
    assert max(first, second) > 2 * BOUND, (first, second)


def test_sign_decodes_to_the_root_mean_square():
    v = np.array([3.0, -4.0, 0.0, 0.0], dtype=np.float32)
    out = compression.decode("sign", compression.encode("sign", v), v.size)
    assert np.allclose(out, [2.5, -2.5, 2.5, 2.5])
    assert compression.encoded_bytes("sign", 4096) * 8 / 4096 == pytest.approx(1 + 32 / 4096)


@pytest.mark.parametrize("codec", ["sign", "uint8"])  # (fp16 has no values that small at all)
def test_subnormal_values_encode_as_zero_and_the_callers_arithmetic_is_left_alone(codec):
    tiny = np.float32(np.finfo(np.float32).tiny)  # the smallest normal float32
    subnormal = (np.arange(1, 65, dtype=np.float32) - 20) * tiny / np.float32(64)
    assert np.all(np.abs(subnormal) < tiny) and np.count_nonzero(subnormal) == 63
    decoded = compression.decode(codec, compression.encode(codec, subnormal), subnormal.size)
    np.testing.assert_array_equal(decoded, np.zeros_like(subnormal))
    assert tiny / np.float32(4) != 0  # the core restored this thread's float environment
    normal = subnormal * np.float32(2**30)  # the same values, scaled into the normal range
    assert np.count_nonzero(compression.decode(codec, compression.encode(codec, normal), normal.size)) > 0



def test_an_owner_residual_applies_only_to_the_chunk_it_was_laid_out_for():
    """After a lost rank (or a checkpoint resumed on another number of ranks) the chunk a rank
    reduces moves: its saved owner residual then restarts at zero instead of landing elsewhere."""
    from relaxlib.compression import chunk_count, chunk_offset, saved_owner_residual_applies
    numel = 13
    saved = {"worker": np.zeros(numel), "owner": np.ones(chunk_count(numel, 4, 1)), "ranks": 4,
             "owner_offset": chunk_offset(numel, 4, 1)}
    assert saved_owner_residual_applies(saved, 4, chunk_offset(numel, 4, 1), chunk_count(numel, 4, 1))
    assert not saved_owner_residual_applies(saved, 3, chunk_offset(numel, 3, 1), chunk_count(numel, 3, 1))
    assert not saved_owner_residual_applies(saved, 4, chunk_offset(numel, 4, 2), chunk_count(numel, 4, 2))
    assert not saved_owner_residual_applies(dict(saved, owner=None), 4, saved["owner_offset"], len(saved["owner"]))
    legacy = {"worker": saved["worker"], "owner": saved["owner"]}  # saved before the layout was recorded
    assert saved_owner_residual_applies(legacy, 4, saved["owner_offset"], len(saved["owner"]))
    assert not saved_owner_residual_applies(legacy, 3, 5, 5)
