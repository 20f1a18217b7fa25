"""DistributedOptimizer on real ranks: equivalence with single-process large-batch training.

Each rank trains on its shard; the reference (one process, full batch, plain optimizer) is
computed locally on every rank, so no communication is trusted to check communication.
"""

import pytest
import torch

import relaxlib_torch as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
BATCH = 8 * SIZE  # per step, split evenly over ranks


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def data(step: int):
    gen = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, 6, generator=gen), torch.randint(0, 3, (BATCH,), generator=gen)


def shard(x: torch.Tensor) -> torch.Tensor:
    per = x.shape[0] // SIZE
    return x[RANK * per:(RANK + 1) * per]


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def train_reference(make_opt, steps: int, clip: float | None = None):
    model = make_model()
    opt = make_opt(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for step in range(steps):
        x, y = data(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
    return flat_params(model)


def train_distributed(make_opt, steps: int, clip: float | None = None, **kwargs):
    model = make_model()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters(), **kwargs)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    passes = kwargs.get("backward_passes_per_step", 1)
    for step in range(steps):
        x, y = data(step)
        xs, ys = shard(x), shard(y)
        opt.zero_grad()
        for micro in range(passes):
            per = xs.shape[0] // passes
            sl = slice(micro * per, (micro + 1) * per)
            loss = torch.nn.functional.cross_entropy(model(xs[sl]), ys[sl]) / passes
            loss.backward()
        if clip:
            opt.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        sched.step()
    return model, opt


def assert_same_on_all_ranks(model):
    flat = flat_params(model)
    gathered = hvd.allgather(flat.unsqueeze(0), name="check.params")
    for r in range(SIZE):
        assert torch.equal(gathered[r], gathered[0]), f"rank {r} differs from rank 0"


OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=0.01),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_matches_single_process_full_batch(name):
    expected = train_reference(OPTIMIZERS[name], steps=6)
    model, opt = train_distributed(OPTIMIZERS[name], steps=6)
    assert isinstance(opt, type(OPTIMIZERS[name]([torch.nn.Parameter(torch.zeros(1))])))
    torch.testing.assert_close(flat_params(model), expected, rtol=1e-5, atol=1e-6)
    assert_same_on_all_ranks(model)


def test_gradient_clipping_after_synchronize():
    expected = train_reference(OPTIMIZERS["sgd_momentum"], steps=4, clip=0.05)
    model, _ = train_distributed(OPTIMIZERS["sgd_momentum"], steps=4, clip=0.05)
    torch.testing.assert_close(flat_params(model), expected, rtol=1e-5, atol=1e-6)


def test_backward_passes_per_step_accumulates_locally():
    expected = train_reference(OPTIMIZERS["adam"], steps=4)
    model, _ = train_distributed(OPTIMIZERS["adam"], steps=4, backward_passes_per_step=2)
    torch.testing.assert_close(flat_params(model), expected, rtol=1e-5, atol=1e-6)


def test_fp16_compression_is_close():
    expected = train_reference(OPTIMIZERS["sgd_momentum"], steps=4)
    model, _ = train_distributed(OPTIMIZERS["sgd_momentum"], steps=4, compression=hvd.Compression.fp16)
    torch.testing.assert_close(flat_params(model), expected, rtol=1e-2, atol=1e-3)
    assert_same_on_all_ranks(model)


@pytest.mark.parametrize("groups", [2, "explicit"])
def test_grouped_gradients_match(groups):
    expected = train_reference(OPTIMIZERS["adam"], steps=3)
    if groups == "explicit":
        probe = make_model()
        params = list(probe.parameters())
        groups_arg = None
        model = make_model()
        params = list(model.parameters())
        groups_arg = [params[:2], params[2:]]
        opt = hvd.DistributedOptimizer(OPTIMIZERS["adam"](model.parameters()),
                                       named_parameters=model.named_parameters(), groups=groups_arg)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        for step in range(3):
            x, y = data(step)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(shard(x)), shard(y)).backward()
            opt.step()
            sched.step()
    else:
        model, _ = train_distributed(OPTIMIZERS["adam"], steps=3, groups=groups)
    torch.testing.assert_close(flat_params(model), expected, rtol=1e-5, atol=1e-6)


def test_gradient_predivide_factor_and_sum():
    expected = train_reference(OPTIMIZERS["sgd_momentum"], steps=3)
    model, _ = train_distributed(OPTIMIZERS["sgd_momentum"], steps=3, gradient_predivide_factor=float(SIZE))
    torch.testing.assert_close(flat_params(model), expected, rtol=1e-5, atol=1e-6)
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0), op=hvd.Sum)
    model(torch.ones(1, 6)).sum().backward()
    opt.synchronize()
    local = make_model()
    local(torch.ones(1, 6)).sum().backward()
    torch.testing.assert_close(model[0].bias.grad, local[0].bias.grad * SIZE)


def test_unused_parameter_on_some_ranks_still_synchronizes():
    model = make_model()
    extra = torch.nn.Linear(6, 3)
    params = list(model.parameters()) + list(extra.parameters())
    named = list(model.named_parameters()) + [("extra." + n, p) for n, p in extra.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), named_parameters=named)
    x = torch.ones(2, 6)
    out = model(x) + (extra(x) if RANK == 0 else 0)
    out.sum().backward()
    opt.step()
    assert_same_on_all_ranks(extra)


def test_state_dict_round_trip_and_lr_scheduler():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    model(torch.ones(1, 6)).sum().backward()
    opt.step()
    state = opt.state_dict()
    fresh = torch.optim.SGD(make_model().parameters(), lr=0.5, momentum=0.9)
    fresh.load_state_dict(state)
    assert fresh.param_groups[0]["lr"] == 0.1
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    opt.zero_grad()
    model(torch.ones(1, 6)).sum().backward()
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)


def test_zero_grad_between_backward_and_step_is_refused():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    model(torch.ones(1, 6)).sum().backward()
    if SIZE > 1:
        with pytest.raises(AssertionError, match="zero_grad"):
            opt.zero_grad()
    opt.step()


def test_bad_arguments_raise_clear_errors():
    model = make_model()
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=list(model.named_parameters())[:1])
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[("same", p) for p in model.parameters()])
    with pytest.raises(ValueError, match="max_grad_norm.*Adasum"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum, max_grad_norm=1.0)
    with pytest.raises(TypeError):
        hvd.DistributedOptimizer(model)


def test_join_with_uneven_number_of_steps():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for _ in range(RANK + 1):  # rank r does r+1 steps
        opt.zero_grad()
        model(torch.ones(2, 6)).sum().backward()
        opt.step()
    last = hvd.join()
    assert last == SIZE - 1
