"""Compressed scatter-reduce on real ranks: the primitive against a numpy model of the same math
(bitwise), error feedback's effect, checkpoint/resume, bad input, and the algorithms."""

import copy

import numpy as np
import pytest
import torch
from compression_model import Model, inputs

import relaxlib
import relaxlib_torch as hvd
from relaxlib import compression, direct
from relaxlib.algorithms import CompressedScatterReduce, OneBitAdam
from relaxlib.algorithms.step_scale import FactoredScale

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


@pytest.mark.parametrize("codec", ["uint8", "sign", "fp16"])
@pytest.mark.parametrize("feedback", [True, False])
@pytest.mark.parametrize("count", [1, SIZE + 1, 1031])
def test_primitive_matches_the_numpy_model_bitwise(codec, feedback, count):
    model = Model(codec, count, feedback, SIZE)
    state = hvd.ErrorFeedback(count) if feedback else None
    for step in range(4):
        xs = [inputs(step, count, r) for r in range(SIZE)]
        out = hvd.compressed_allreduce(torch.from_numpy(xs[RANK]), codec=codec, state=state,
                                       name=f"model.{codec}.{feedback}.{count}")
        expected = model.step(xs)
        np.testing.assert_array_equal(out.numpy(), expected)
        if feedback:
            np.testing.assert_array_equal(state.worker.numpy(), model.worker[RANK])
            np.testing.assert_array_equal(state.owner.numpy(), model.owner[RANK])


# Chunks above 2^19 elements travel in parts, each with its own codec header; between nodes
# (RELAX_SHM_COLLECTIVES=off) the parts are pipelined. Two parts per chunk here.
@pytest.mark.parametrize("codec", ["uint8", "sign"])
def test_chunks_in_parts_match_the_numpy_model_bitwise(codec):
    count = SIZE * (1 << 19) + 7
    assert len(compression.part_counts(count, SIZE, RANK)) == 2
    model = Model(codec, count, True, SIZE)
    state = hvd.ErrorFeedback(count)
    for step in range(2):
        xs = [inputs(step, count, r) for r in range(SIZE)]
        out = hvd.compressed_allreduce(torch.from_numpy(xs[RANK]), codec=codec, state=state, name=f"parts.{codec}")
        np.testing.assert_array_equal(out.numpy(), model.step(xs))
        np.testing.assert_array_equal(state.worker.numpy(), model.worker[RANK])
        np.testing.assert_array_equal(state.owner.numpy(), model.owner[RANK])


def test_a_non_finite_value_in_a_later_part_fails_everywhere():
    count = SIZE * (1 << 19) + 7
    state = hvd.ErrorFeedback(count)
    hvd.compressed_allreduce(torch.ones(count), codec="uint8", state=state, name="parts.finite.warmup")
    before = state.state_dict()
    x = torch.ones(count)
    if RANK == 0:
        x[-1] = float("nan")  # second part of the last rank's chunk
    with pytest.raises(relaxlib.InvalidArgumentError, match="non-finite values .* rank 0"):
        hvd.compressed_allreduce(x, codec="uint8", state=state, name="parts.finite.check")
    assert torch.equal(state.worker, before["worker"]) and torch.equal(state.owner, before["owner"])
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(SIZE)))


def laid_end_to_end(count: int, step: int) -> list[torch.Tensor]:
    """This rank's inputs of ``count`` elements in tensors of uneven sizes (one empty, one of a
    single element, boundaries inside chunks and parts), shaped like layers."""
    flat = torch.from_numpy(inputs(step, count, RANK))
    cuts = sorted(min(cut, count) for cut in (0, 1, 2, count // 3, count // 3, count // 2 + 5, count))
    pieces = [flat[a:b].clone() for a, b in zip(cuts, cuts[1:])]
    return [p.reshape(2, -1) if p.numel() % 2 == 0 and p.numel() > 2 else p for p in pieces]


@pytest.mark.parametrize("codec", ["uint8", "sign", "fp16"])
@pytest.mark.parametrize("feedback", [True, False])
@pytest.mark.parametrize("count", [SIZE + 3, 1031, SIZE * (1 << 19) + 7], ids=["small", "1031", "two-parts"])
@pytest.mark.parametrize("prescale", [1.0, 0.05])
def test_tensors_laid_end_to_end_with_a_prescale_match_their_scaled_concatenation_bitwise(codec, feedback, count,
                                                                                          prescale):
    """The pieces are read where they lie and multiplied by the prescale inside the operation: the
    same result and residuals, bit for bit, as the flat tensor ``prescale * cat(pieces)``; the
    pieces themselves are left as they were."""
    pieces_state = hvd.ErrorFeedback(count) if feedback else None
    flat_state = hvd.ErrorFeedback(count) if feedback else None
    for step in range(3):
        pieces = laid_end_to_end(count, step)
        assert sum(p.numel() for p in pieces) == count and any(p.numel() == 0 for p in pieces)
        kept = [p.clone() for p in pieces]
        out = hvd.synchronize(hvd.compressed_allreduce_concatenated_async(
            pieces, codec=codec, state=pieces_state, name=f"laid.{codec}", prescale_factor=prescale))
        flat = torch.cat([p.reshape(-1) for p in kept]) * prescale
        expected = hvd.compressed_allreduce(flat, codec=codec, state=flat_state, name=f"flat.{codec}")
        assert torch.equal(out, expected), (step, (out - expected).abs().max())
        assert all(torch.equal(p, k) for p, k in zip(pieces, kept))
        if feedback:
            assert torch.equal(pieces_state.worker, flat_state.worker)
            assert torch.equal(pieces_state.owner, flat_state.owner)


def test_a_non_finite_piece_fails_everywhere_naming_its_rank_and_leaves_the_state_alone():
    count = 1031
    state = hvd.ErrorFeedback(count)
    hvd.synchronize(hvd.compressed_allreduce_concatenated_async(laid_end_to_end(count, 0), state=state,
                                                                name="laid.finite.warmup"))
    before = state.state_dict()
    pieces = laid_end_to_end(count, 1)
    if RANK == SIZE - 1:
        pieces[-1].view(-1)[-1] = float("inf")
    with pytest.raises(relaxlib.InvalidArgumentError, match=f"non-finite values .* rank {SIZE - 1}"):
        hvd.synchronize(hvd.compressed_allreduce_concatenated_async(pieces, state=state, name="laid.finite.check"))
    assert torch.equal(state.worker, before["worker"]) and torch.equal(state.owner, before["owner"])
    # a prescale that overflows float32 makes the scaled input non-finite: refused alike
    with pytest.raises(relaxlib.InvalidArgumentError, match="non-finite values"):
        hvd.synchronize(hvd.compressed_allreduce_concatenated_async(
            laid_end_to_end(count, 2), state=state, name="laid.finite.overflow",
            prescale_factor=1e38 if RANK == 0 else 1.0))
    assert torch.equal(state.worker, before["worker"])


def test_laid_end_to_end_bad_arguments():
    with pytest.raises(ValueError, match="float32"):
        hvd.compressed_allreduce_concatenated_async([torch.ones(2), torch.ones(2, dtype=torch.float64)])
    with pytest.raises(ValueError, match="holds 3 elements"):
        hvd.compressed_allreduce_concatenated_async([torch.ones(2), torch.ones(2)], state=hvd.ErrorFeedback(3))
    with pytest.raises(ValueError, match="prescale_factor must be finite"):
        hvd.compressed_allreduce_concatenated_async([torch.ones(2)], prescale_factor=float("inf"))
    with pytest.raises(ValueError, match="prescale_factor must be finite"):
        hvd.compressed_allreduce(torch.ones(2), prescale_factor=1e39)  # not finite in float32
    # ranks that lay out different totals fail alike, naming the shapes
    total = 6 if RANK == 0 else 5
    with pytest.raises(relaxlib.MismatchError, match="shapes"):
        hvd.synchronize(hvd.compressed_allreduce_concatenated_async([torch.ones(2), torch.ones(total - 2)],
                                                                    name="laid.mismatch"))


@pytest.mark.parametrize("codec, momentum, dampening, compress",
                         [("uint8", 0.0, 0.0, "auto"), ("uint8", 0.9, 0.0, "auto"), ("uint8", 0.9, 0.5, "auto"),
                          ("fp16", 0.9, 0.0, "auto"), ("sign", 0.9, 0.0, "auto"), ("uint8", 0.9, 0.0, "gradient")],
                         ids=["uint8-sgd", "uint8-momentum", "uint8-dampening", "fp16-gradient", "sign-scaled",
                              "uint8-gradient"])
def test_training_from_gradients_where_they_lie_gives_the_flattened_steps_bit_for_bit(monkeypatch, codec, momentum,
                                                                                      dampening, compress):
    """Buckets compressed from the gradients in place (the learning rate applied inside the
    operation, SGD's momentum added into its buffer per parameter) against the flattened
    gradients and SGD's step as tensor ops: the same parameters and residuals, bit for bit."""
    def run():
        model = make_model()
        algorithm = CompressedScatterReduce(codec, fusion_mb=0.0002, compress=compress)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum,
                                                       dampening=dampening),
                                       named_parameters=model.named_parameters(), algorithm=algorithm)
        train(opt, model, range(5))
        return [p.detach().clone() for p in model.parameters()], algorithm.state_dict()

    started = []
    in_place = CompressedScatterReduce._start_in_place
    monkeypatch.setattr(CompressedScatterReduce, "_start_in_place",
                        lambda self, ctx, bucket: started.append(handle := in_place(self, ctx, bucket)) or handle)
    read_in_place, state = run()
    # sign's step scale needs the flat step first; the others start in place (after dampening's first step: not)
    assert any(h is not None for h in started) == (codec != "sign"), started
    monkeypatch.setattr(CompressedScatterReduce, "_start_in_place", lambda *args: None)
    flattened, flat_state = run()
    assert all(torch.equal(a, b) for a, b in zip(read_in_place, flattened))
    for mine, theirs in zip(state["error_feedback"], flat_state["error_feedback"]):
        assert torch.equal(mine["worker"], theirs["worker"]) and torch.equal(mine["owner"], theirs["owner"])
    for mine, theirs in zip(state["momentum"], flat_state["momentum"]):
        assert (mine is None and theirs is None) or torch.equal(mine, theirs)


def subnormal_count(t: torch.Tensor) -> int:
    return int(((t != 0) & (t.abs() < torch.finfo(torch.float32).tiny)).sum())


@pytest.mark.parametrize("codec", ["uint8", "fp16"])
def test_a_vanished_gradients_residual_never_turns_subnormal(codec):
    """Once a bucket's gradient is zero, error feedback sends what is left of the residual each
    step, and uint8 keeps about 1/255 of it: within some 15 steps it would pass through the
    subnormal range, where every float operation of the codec's passes is a microcode assist (it
    made compressed training 2x slower). The compressed work reads and writes such values as
    zero, so neither the residuals nor the result ever hold one."""
    count = 1031
    state = hvd.ErrorFeedback(count)
    x = torch.from_numpy(inputs(0, count, RANK)) * 1e-3
    for step in range(40):
        out = hvd.compressed_allreduce(x, codec=codec, state=state, name=f"vanishing.{codec}")
        x = torch.zeros(count) if step < 20 else torch.full((count,), 1e-39)  # then subnormal input
        assert subnormal_count(out) == 0, (step, out)
        assert subnormal_count(state.worker) == subnormal_count(state.owner) == 0, (step, state.worker, state.owner)


def test_sum_op_and_all_ranks_agree():
    x = torch.from_numpy(inputs(0, 100, RANK))
    out = hvd.compressed_allreduce(x, codec="uint8", op=hvd.Sum)
    gathered = hvd.allgather(out.unsqueeze(0))
    assert all(torch.equal(gathered[0], gathered[r]) for r in range(SIZE))
    exact = sum(torch.from_numpy(inputs(0, 100, r)) for r in range(SIZE))
    assert torch.allclose(out, exact, atol=0.2)


@pytest.mark.parametrize("codec", ["sign", "uint8"])
def test_error_feedback_keeps_the_running_sum_on_track_and_its_absence_shows_bias(codec):
    count, steps = 257, 200
    with_feedback, without = hvd.ErrorFeedback(count), None
    true_sum = np.zeros(count, np.float64)
    sums = {"ef": np.zeros(count, np.float64), "plain": np.zeros(count, np.float64)}
    worst_step_error = 0.0
    for step in range(steps):
        xs = [inputs(step, count, r) for r in range(SIZE)]
        average = np.mean(xs, axis=0)
        true_sum += average
        for key, state in (("ef", with_feedback), ("plain", without)):
            out = hvd.compressed_allreduce(torch.from_numpy(xs[RANK]), codec=codec, state=state,
                                           name=f"track.{codec}.{key}").numpy()
            sums[key] += out
            if key == "ef":
                worst_step_error = max(worst_step_error, float(np.abs(out - average).max()))
    drift_ef = float(np.abs(sums["ef"] - true_sum).max())
    drift_plain = float(np.abs(sums["plain"] - true_sum).max())
    assert drift_ef <= 4 * worst_step_error, (drift_ef, worst_step_error)  # bounded: does not grow with steps
    assert drift_plain > 10 * drift_ef, (drift_plain, drift_ef)  # without feedback the bias accumulates


# Element 3 lies in the chunk of a rank other than the last; element 7 in the last rank's own chunk,
# which the other ranks receive only through that rank's owner stage (its re-encoded sum).
@pytest.mark.parametrize("position", [3, 7])
def test_non_finite_input_fails_everywhere_and_leaves_the_state_alone(position):
    state = hvd.ErrorFeedback(8)
    hvd.compressed_allreduce(torch.ones(8), codec="sign", state=state, name=f"finite.warmup.{position}")
    before = state.state_dict()
    x = torch.ones(8)
    if RANK == SIZE - 1:
        x[position] = float("inf")
    with pytest.raises(relaxlib.InvalidArgumentError, match=f"non-finite values .* rank {SIZE - 1}"):
        hvd.compressed_allreduce(x, codec="sign", state=state, name=f"finite.check.{position}")
    assert torch.equal(state.worker, before["worker"]) and torch.equal(state.owner, before["owner"])
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(SIZE)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="float32"):
        hvd.compressed_allreduce(torch.ones(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="unknown codec"):
        hvd.compressed_allreduce(torch.ones(4), codec="zip")
    with pytest.raises(ValueError, match="holds 3 elements"):
        hvd.compressed_allreduce(torch.ones(4), state=hvd.ErrorFeedback(3))
    mismatched = "uint8" if RANK == 0 else "sign"
    with pytest.raises(relaxlib.MismatchError, match="codecs"):
        hvd.compressed_allreduce(torch.ones(4), codec=mismatched, name="codec.mismatch")


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def batch(step):
    gen = torch.Generator().manual_seed(step * 10 + RANK)
    return torch.randn(8, 8, generator=gen), torch.randint(0, 4, (8,), generator=gen)


def train(opt, model, steps):
    for step in steps:
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


@pytest.mark.parametrize("codec, step_scale", [("uint8", "auto"), ("sign", "auto"), ("sign", "none")],
                         ids=["uint8", "sign", "sign-unscaled"])
def test_checkpoint_and_resume_give_the_uninterrupted_trajectory(codec, step_scale):
    def fresh():
        model = make_model()
        algorithm = CompressedScatterReduce(codec, fusion_mb=0.0002, step_scale=step_scale)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                       named_parameters=model.named_parameters(), algorithm=algorithm)
        return model, opt

    model, opt = fresh()
    train(opt, model, range(4))
    # Copies, as torch.save would make: state_dict() returns the live tensors.
    checkpoint = copy.deepcopy({"model": model.state_dict(), "optimizer": opt.state_dict()})
    state = checkpoint["optimizer"]["relaxlib"]
    assert any(m is not None and m["worker"].abs().sum() > 0 for m in state["error_feedback"])
    assert (state["step_scale"] is not None) == (codec == "sign" and step_scale == "auto")
    train(opt, model, range(4, 8))
    uninterrupted = [p.detach().clone() for p in model.parameters()]

    model, opt = fresh()
    model.load_state_dict(checkpoint["model"])
    opt.load_state_dict(checkpoint["optimizer"])
    train(opt, model, range(4, 8))
    for a, b in zip(model.parameters(), uninterrupted):
        assert torch.equal(a.detach(), b)


def linear_sgd(algorithm, gradient: torch.Tensor, steps: int, lr: float = 0.1, momentum: float = 0.0):
    """Parameters after ``steps`` SGD steps on the loss <w, gradient> (whose gradient is exactly
    ``gradient``, every step), from zeros."""
    w = torch.nn.Parameter(torch.zeros(len(gradient)))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=lr, momentum=momentum), named_parameters=[("w", w)],
                                   algorithm=algorithm)
    for _ in range(steps):
        opt.zero_grad()
        (w * gradient).sum().backward()
        opt.step()
    return w.detach()


def spread_gradient(per_rank: bool) -> torch.Tensor:
    """Magnitudes from 1e-3 to 1 in one bucket (a first layer's steps beside a last layer's),
    random signs; different on every rank, or the same."""
    gen = torch.Generator().manual_seed(3 + (RANK if per_rank else 0))
    signs = torch.randint(0, 2, (96,), generator=gen) * 2.0 - 1
    return signs * torch.logspace(-3, 0, 96)[torch.randperm(96, generator=gen)]


def test_the_step_scale_with_an_exact_codec_is_sgd():
    """Dividing by the scale, multiplying back and moving the residuals with it change nothing
    but rounding: with fp16 the scaled steps are all-reduce's SGD steps."""
    gradient = spread_gradient(per_rank=True)
    reference = linear_sgd(None, gradient, 6, momentum=0.9)
    scaled = linear_sgd(CompressedScatterReduce("fp16", compress="update", step_scale="factored"), gradient, 6,
                        momentum=0.9)
    torch.testing.assert_close(scaled, reference, rtol=2e-3, atol=1e-6)


def worst_relative_error(w: torch.Tensor, exact: torch.Tensor) -> float:
    return float(((w - exact).abs() / exact.abs().clamp_min(1e-12)).max())


def factored_gradient(seed: int, rows: int, cols: int, magnitude: float) -> torch.Tensor:
    """A weight's step as a layer makes it: its units' errors times its inputs, magnitudes
    ``magnitude * a_i * b_j`` spread over three orders of magnitude, random signs."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.logspace(-1.5, 0, rows)[torch.randperm(rows, generator=gen)]
    b = torch.logspace(-1.5, 0, cols)[torch.randperm(cols, generator=gen)]
    signs = torch.randint(0, 2, (rows, cols), generator=gen) * 2.0 - 1
    return magnitude * signs * torch.outer(a, b)


def sgd_on_fixed_gradients(algorithm, gradients: list[torch.Tensor], steps: int) -> list[torch.Tensor]:
    """Parameters after ``steps`` SGD steps (lr 0.1) on the loss sum_k <w_k, gradients[k]>, from zeros."""
    weights = [torch.nn.Parameter(torch.zeros_like(g)) for g in gradients]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(weights, lr=0.1), algorithm=algorithm,
                                   named_parameters=[(f"w{k}", w) for k, w in enumerate(weights)])
    for _ in range(steps):
        opt.zero_grad()
        sum((w * g).sum() for w, g in zip(weights, gradients)).backward()
        opt.step()
    return [w.detach() for w in weights]


def test_weights_of_very_different_magnitudes_in_one_bucket_go_through_one_bit_exactly():
    """A first layer's steps beside a last layer's, 1000 times larger, in one bucket, each with
    magnitudes a row factor times a column factor (three orders of magnitude within the weight):
    the factored scale recovers every element's magnitude from rows + cols + 1 floats per weight,
    and the scaled values, all of magnitude 1, go through the sign codec exactly (with a
    negligible floor). Without the scale the 1-bit codec sends every element of a chunk with one
    magnitude and the small ones move too far."""
    gradients = [factored_gradient(11, 12, 8, 1e-3), factored_gradient(12, 6, 16, 1.0)]
    exact = sgd_on_fixed_gradients(None, gradients, 10)
    scaled = sgd_on_fixed_gradients(CompressedScatterReduce("sign", scale_floor=1e-9), gradients, 10)
    unscaled = sgd_on_fixed_gradients(CompressedScatterReduce("sign", step_scale="none"), gradients, 10)
    assert max(worst_relative_error(w, e) for w, e in zip(scaled, exact)) < 1e-5
    # the negative control: the test can tell them apart
    assert max(worst_relative_error(w, e) for w, e in zip(unscaled, exact)) > 1.0


def test_the_step_scale_inside_the_operation_gives_the_composed_steps_bit_for_bit(monkeypatch):
    """One request per bucket, whose operation averages the statistics itself, against the scale
    composed around the compressed all-reduce (the statistics' own all-reduce, then the bucket):
    the same parameters, residuals and scale state, bit for bit."""
    def run():
        model = make_model()
        algorithm = CompressedScatterReduce("sign")
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                       algorithm=algorithm, named_parameters=model.named_parameters())
        train(opt, model, range(1))
        before = hvd.engine_stats()["completed"]
        train(opt, model, range(1, 6))
        requests_per_step = (hvd.engine_stats()["completed"] - before) / 5
        return [p.detach().clone() for p in model.parameters()], algorithm.state_dict(), requests_per_step

    inside, inside_state, inside_requests = run()
    monkeypatch.setattr(FactoredScale, "start_compressed", lambda *args, **kwargs: None)
    composed, composed_state, composed_requests = run()
    assert (inside_requests, composed_requests) == (1, 2)  # one bucket: the statistics' all-reduce is gone
    assert all(torch.equal(a, b) for a, b in zip(inside, composed))
    assert torch.equal(inside_state["step_scale"][0]["smoothed"], composed_state["step_scale"][0]["smoothed"])
    for key in ("worker", "owner"):
        assert torch.equal(inside_state["error_feedback"][0][key], composed_state["error_feedback"][0][key])


def scaled_allreduce(name: str, x: np.ndarray, shapes: list[int], floor: float = 0.1, decay: float = 0.5):
    """The compressed (sign) average of ``x`` with a fresh step scale over ``shapes``."""
    out = np.empty_like(x)
    smoothed = np.zeros(sum(1 if rows == 1 else rows + cols + 1 for rows, cols in zip(shapes[::2], shapes[1::2])),
                        np.float32)
    scale = direct.StepScaleBuffers(np.array(shapes, np.int64), floor, decay, direct.Buffer.of(smoothed))
    direct.flat_compressed_allreduce_async(direct.Buffer.of(x), direct.Buffer.of(out), name, "sign",
                                           step_scale=scale).wait()
    return out


def test_ranks_that_disagree_on_the_step_scale_fail_everywhere_naming_it():
    x = np.ones(6, np.float32)
    with pytest.raises(relaxlib.MismatchError, match="step scales .*floor 0.1.*floor 0.2"):
        scaled_allreduce("scale.floor.mismatch", x, [2, 3], floor=0.1 if RANK == 0 else 0.2)
    with pytest.raises(relaxlib.MismatchError, match="step scales .*2x3.*3x2"):
        scaled_allreduce("scale.shape.mismatch", x, [2, 3] if RANK == 0 else [3, 2])
    np.testing.assert_allclose(scaled_allreduce("scale.after.mismatch", x, [2, 3]), x, rtol=1e-6)


def test_bad_step_scale_arguments_fail_naming_what_is_wrong():
    x = np.ones(6, np.float32)
    with pytest.raises(relaxlib.InvalidArgumentError, match="parameters hold 5 elements, the tensor 6"):
        scaled_allreduce("scale.bad.count", x, [1, 5])
    with pytest.raises(relaxlib.InvalidArgumentError, match="parameter 0 has shape 0 x 6"):
        scaled_allreduce("scale.bad.shape", x, [0, 6])
    with pytest.raises(relaxlib.InvalidArgumentError, match="floor must be positive"):
        scaled_allreduce("scale.bad.floor", x, [1, 6], floor=0.0)
    with pytest.raises(relaxlib.InvalidArgumentError, match="decay must be in"):
        scaled_allreduce("scale.bad.decay", x, [1, 6], decay=1.0)
    # a good one afterwards still runs: every element scales alike, which 1-bit carries (but rounding)
    np.testing.assert_allclose(scaled_allreduce("scale.good", x, [2, 3]), x, rtol=1e-6)


def test_a_non_finite_step_on_one_rank_fails_everywhere_naming_it_and_leaves_the_scale_alone():
    """The step scale averages every rank's statistics, so one rank's NaN reaches every rank's
    scale unless it is kept out: the error must name that rank (not every rank's now
    non-finite input), and the scale and residuals must stay finite."""
    model = make_model()
    algorithm = CompressedScatterReduce("sign")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), algorithm=algorithm,
                                   named_parameters=model.named_parameters())
    train(opt, model, range(2))
    x, y = batch(2)
    if RANK == SIZE - 1:
        x[0, 0] = float("nan")
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises(relaxlib.InvalidArgumentError, match=f"non-finite values .* rank {SIZE - 1}"):
        opt.step()
    state = algorithm.state_dict()
    assert all(torch.isfinite(s["smoothed"]).all() for s in state["step_scale"])
    assert all(torch.isfinite(m["worker"]).all() and torch.isfinite(m["owner"]).all() for m in state["error_feedback"])


@pytest.mark.parametrize("make_algorithm, optimizer", [
    (lambda: CompressedScatterReduce("sign"), "sgd"),
    (lambda: CompressedScatterReduce("sign", step_scale="none"), "sgd"),
    (lambda: CompressedScatterReduce("uint8"), "sgd"),
    (lambda: CompressedScatterReduce("uint8", compress="gradient"), "sgd"),
    (lambda: OneBitAdam(warmup_steps=2), "adam"),
    # only the node leaders' all-reduce sees the NaN (in a node's mean): the others must hear of it
    (lambda: CompressedScatterReduce("sign", hierarchical=True), "sgd"),
    (lambda: CompressedScatterReduce("uint8", compress="gradient", hierarchical=True), "sgd"),
], ids=["sign", "sign-unscaled", "uint8", "uint8-gradients", "onebit-adam", "sign-hierarchical",
        "uint8-gradients-hierarchical"])
def test_skipping_a_batch_that_failed_the_step_gives_the_run_without_it(make_algorithm, optimizer):
    """A user who catches the step's error and moves on (skipping a bad batch, as mixed
    precision does) must get the run that never saw that batch: the failed step leaves no
    state behind on any rank (in-flight buckets, ready counts, SGD momentum, backward counters)."""
    def run(steps, bad_step=None):
        model = make_model()
        base = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if optimizer == "sgd"
                else torch.optim.Adam(model.parameters(), lr=0.01))
        opt = hvd.DistributedOptimizer(base, algorithm=make_algorithm(), named_parameters=model.named_parameters())
        for step in steps:
            x, y = batch(step)
            if step == bad_step and RANK == SIZE - 1:
                x[0, 0] = float("nan")
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if step != bad_step:
                opt.step()
                continue
            with pytest.raises(relaxlib.InvalidArgumentError, match=f"non-finite values .* rank {SIZE - 1}"):
                opt.step()
        return [p.detach().clone() for p in model.parameters()]

    skipped = run([0, 1, 2, 3, 4, 5], bad_step=3)
    reference = run([0, 1, 2, 4, 5])
    assert all(torch.equal(s, r) for s, r in zip(skipped, reference))
    assert all(torch.isfinite(p).all() for p in skipped)
