"""DistributedOptimizer: wraps any torch.optim optimizer so gradients are averaged over ranks.

As in Horovod, the wrapped object is an instance of a subclass of the original optimizer's
class (isinstance, LR schedulers, state_dict and param_groups keep working). Gradients are
submitted for all-reduce as soon as each one is accumulated (post-accumulate-grad hooks), so
communication overlaps the rest of backward; ``step()`` waits for them.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager

import torch

from relaxlib import advisor, agreement, auto, basics, telemetry
from relaxlib.algorithms import Algorithm, AllReduce
from relaxlib.algorithms.base import follow_new_world, step_or_abandon
from relaxlib.errors import RelaxError
from relaxlib.process_sets import global_process_set
from relaxlib_torch import functions, mpi_ops
from relaxlib_torch.adasum_optimizer import _AdasumOptimizer
from relaxlib_torch.compression import Compression
from relaxlib_torch.context import TorchContext

_SPARSE = object()  # context marker: the gradient went through sparse allreduce


class _SparseAsDense:
    """Context of a sparse gradient reduced densely (sparse_as_dense=True): restore sparsity."""

    def __init__(self, inner) -> None:
        self.inner = inner


class _DistributedOptimizer(torch.optim.Optimizer):
    """Mixin installed between the user's optimizer class and the instance (see DistributedOptimizer)."""

    def _relax_setup(self, named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                     groups, sparse_as_dense, process_set, algorithm, model, max_grad_norm) -> None:
        self.max_grad_norm = max_grad_norm
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self._process_set = process_set
        self.backward_passes_per_step = backward_passes_per_step
        self.algorithm = algorithm
        self.model = model
        self._parameter_names = self._name_parameters(named_parameters)
        self._groups = self._resolve_groups(groups)
        self._handles: dict = {}
        self._group_ready: dict[int, list] = {}
        self._allreduce_delay = {p: backward_passes_per_step for p in self._parameter_names}
        self._requires_update = {p for p in self._parameter_names if p.requires_grad}
        self._synchronized = False
        self._should_synchronize = True
        self._hook_handles = []
        if process_set.included() and process_set.size() > 1:
            self._register_hooks()

    def _name_parameters(self, named_parameters) -> dict:
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is None:
            return {p: f"allreduce.noname.{i}.{j}" for i, group in enumerate(self.param_groups)
                    for j, p in enumerate(group["params"])}
        named = list(named_parameters)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
            raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                             "usually model.named_parameters()")
        names = [name for name, _ in named]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"Parameter names in named_parameters must be unique; duplicates: {duplicates}")
        by_param = {p: name for name, p in named}
        unnamed = [p for p in all_params if p not in by_param]
        if unnamed:
            raise ValueError(f"named_parameters was specified, but {len(unnamed)} optimizer parameter(s) were not "
                             f"named (shapes {[tuple(p.shape) for p in unnamed][:5]}). Pass "
                             "model.named_parameters() for the model whose parameters the optimizer holds.")
        return {p: by_param[p] for p in all_params}

    def _resolve_groups(self, groups) -> dict:
        """Maps parameter -> group index for grouped (atomic) allreduce; empty when ungrouped."""
        params = [p for p in self._parameter_names if p.requires_grad]
        if groups is None or groups == 0:
            return {}
        if isinstance(groups, int):
            if groups < 0:
                raise ValueError("groups must be a non-negative int or a list of lists of parameters")
            size = -(-len(params) // groups)
            return {p: i // size for i, p in enumerate(params)}
        mapping = {}
        for index, group in enumerate(groups):
            for p in group:
                if p not in self._parameter_names:
                    raise ValueError("groups contains a tensor that is not a parameter of this optimizer")
                mapping[p] = index
        return mapping

    def _register_hooks(self) -> None:
        for p in self._parameter_names:
            if p.requires_grad:
                self._hook_handles.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))

    def _make_hook(self, p):
        def hook(param: torch.Tensor) -> None:
            if p in self._handles and self._handles[p][0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before call to step(). "
                    "Increase backward_passes_per_step to accumulate gradients locally.")
            self._allreduce_delay[p] -= 1
            handle, ctx = None, None
            if self._allreduce_delay[p] == 0:
                if p in self._groups:
                    self._group_ready.setdefault(self._groups[p], []).append(p)
                    self._submit_group_if_complete(self._groups[p])
                    return
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def _scale_factors(self) -> tuple[float, float]:
        if self._op == mpi_ops.Average:
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _dense_grad(self, p: torch.Tensor) -> torch.Tensor:
        if p.grad is None:
            # Another rank may have used this parameter (dynamic graphs): contribute zeros.
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse:
            p.grad = p.grad.to_dense()
        return p.grad

    def _allreduce_grad_async(self, p: torch.Tensor):
        if p.grad is not None and p.grad.is_sparse and not self._sparse_as_dense:
            handle = mpi_ops.sparse_allreduce_async(p.grad, name=self._parameter_names[p], op=self._op,
                                                    process_set=self._process_set)
            return handle, _SPARSE
        was_sparse = p.grad is not None and p.grad.is_sparse
        compressed, ctx = self._compression.compress(self._dense_grad(p))
        prescale, postscale = self._scale_factors()
        handle = mpi_ops.allreduce_async_(compressed, name=self._parameter_names[p], op=self._op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self._process_set)
        return handle, (_SparseAsDense(ctx) if was_sparse else ctx)

    def _submit_group_if_complete(self, index: int) -> None:
        members = [p for p, g in self._groups.items() if g == index]
        ready = self._group_ready.get(index, [])
        if len(ready) < len(members):
            return
        grads = [self._compression.compress(self._dense_grad(p)) for p in members]
        prescale, postscale = self._scale_factors()
        handle = mpi_ops.grouped_allreduce_async_([g for g, _ in grads], name=f"allreduce.group.{index}",
                                                  op=self._op, prescale_factor=prescale, postscale_factor=postscale,
                                                  process_set=self._process_set)
        self._handles[tuple(members)] = (handle, [ctx for _, ctx in grads])
        self._group_ready[index] = []

    def synchronize(self) -> None:
        """Waits for every gradient's allreduce (submitting those whose hooks did not fire)."""
        # Alone (from the start, or after a reset left one rank): nothing to average, unless hooks
        # registered for a larger world already submitted this step's gradients.
        if (not self._process_set.included() or self._process_set.size() == 1) and not self._handles:
            self._synchronized = True
            return
        done = set()
        for key in self._handles:
            done.update(key if isinstance(key, tuple) else (key,))
        for index in sorted({self._groups[p] for p in self._requires_update - done if p in self._groups}):
            members = [p for p, g in self._groups.items() if g == index]
            self._group_ready[index] = members
            self._submit_group_if_complete(index)
        for p in sorted(self._requires_update - done - set(self._groups), key=lambda q: self._parameter_names[q]):
            self._handles[p] = self._allreduce_grad_async(p)
        for key, (handle, _) in list(self._handles.items()):
            if handle is None:
                self._handles[key] = self._allreduce_grad_async(key)
        for key, (handle, ctx) in self._handles.items():
            outputs = mpi_ops.synchronize(handle)
            if isinstance(key, tuple):
                for p, out, c in zip(key, outputs, ctx):
                    self._allreduce_delay[p] = self.backward_passes_per_step
                    self._set_grad(p, self._compression.decompress(out, c))
            else:
                self._allreduce_delay[key] = self.backward_passes_per_step
                if ctx is _SPARSE:
                    key.grad = outputs
                elif isinstance(ctx, _SparseAsDense):
                    self._set_grad(key, self._compression.decompress(outputs, ctx.inner))
                    key.grad = key.grad.to_sparse()
                else:
                    self._set_grad(key, self._compression.decompress(outputs, ctx))
        self._handles.clear()
        self._synchronized = True

    @staticmethod
    def _set_grad(p: torch.Tensor, value: torch.Tensor) -> None:
        if value.data_ptr() != p.grad.data_ptr():
            p.grad.copy_(value)

    @contextmanager
    def skip_synchronize(self):
        """Inside this context ``step()`` does not synchronize (call ``synchronize()`` yourself first,
        e.g. to clip the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        """Synchronizes the gradients (unless inside ``skip_synchronize()``), then steps."""
        self._relax_telemetry.begin_step()
        try:
            return self._synchronize_and_step(closure)
        finally:
            self._relax_telemetry.end_step()
            _advise_when_due(self)

    def _synchronize_and_step(self, closure):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(): the gradients are averaged again; call step() inside "
                              "optimizer.skip_synchronize() after an explicit synchronize()", stacklevel=2)
            self.synchronize()
        self._synchronized = False
        if self.max_grad_norm:
            clip_by_global_norm([p for p in self._parameter_names if p.grad is not None], self.max_grad_norm)
        return super(self.__class__, self).step(closure)

    def flush(self) -> None:
        """All-reduce applies updates at once: nothing is ever pending."""

    def load_state_dict(self, state_dict) -> None:
        """Loads the optimizer's state and forgets the step in progress, as Horovod's does: the
        all-reduces a failed step left behind are waited out (their errors dropped) and the
        gradient-accumulation counters start again (``hvd.elastic`` restores through here)."""
        self._forget_step_in_progress()
        super(self.__class__, self).load_state_dict(state_dict)

    def _forget_step_in_progress(self) -> None:
        for handle, _ in self._handles.values():
            if handle is None:
                continue
            try:
                mpi_ops.synchronize(handle)
            except RelaxError:
                pass  # the failure that ended the step is being handled by the caller
            except ValueError:
                pass  # the one whose synchronize raised that failure is gone already
        self._handles.clear()
        self._group_ready.clear()
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._synchronized = False
        self._should_synchronize = True

    def zero_grad(self, set_to_none: bool = True):
        """Clears gradients; refuses while allreduces are pending (that would race with them)."""
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can cause "
                                 "a race condition.")
        return super(self.__class__, self).zero_grad(set_to_none)


def _advise_when_due(optimizer) -> None:
    """``relaxrun --advise``: after the requested number of steps, print the advisor's table from
    the telemetry (once). Costs one comparison per step otherwise."""
    recorder = optimizer._relax_telemetry
    if recorder.advise_at and len(recorder) == recorder.advise_at - 1:
        recorder.advise_at = 0
        params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
        predictions = advisor.advise_from_telemetry(recorder.records(),
                                                    [p.numel() * p.element_size() for p in reversed(params)],
                                                    shapes=[tuple(p.shape) for p in reversed(params)])
        auto.finish_phase(predictions, lambda algorithm: optimizer.model is not None or not algorithm.needs_model)


def clip_by_global_norm(params: list[torch.Tensor], max_norm: float) -> float:
    """Scales the gradients so their global L2 norm is at most ``max_norm``; the norm is
    accumulated in float64 (so every algorithm computes the same coefficient). Returns the norm."""
    total = 0.0
    for p in params:
        g = p.grad.detach().to(torch.float64).reshape(-1)
        total += float(torch.dot(g, g))
    norm = math.sqrt(total)
    coefficient = max_norm / (norm + 1e-6)
    if coefficient < 1.0:
        for p in params:
            p.grad.mul_(coefficient)
    return norm


class _AlgorithmOptimizer(torch.optim.Optimizer):
    """Mixin for relaxed algorithms: hooks call the Algorithm; step() hands it the step."""

    def _relax_setup_algorithm(self, names: dict, algorithm, model, backward_passes_per_step: int, process_set,
                               max_grad_norm, optimizer_class: type) -> None:
        self.algorithm = algorithm
        self.model = model
        self.backward_passes_per_step = backward_passes_per_step
        self.max_grad_norm = max_grad_norm
        self._process_set = process_set
        self._ctx = TorchContext(self, optimizer_class, names, algorithm, model, process_set, max_grad_norm)
        self._world_generation = basics.world_generation()
        self._delay = {}
        self._hook_handles = []
        for index, p in enumerate(p for group in self.param_groups for p in group["params"]):
            self._delay[p] = backward_passes_per_step
            if p.requires_grad:
                self._hook_handles.append(p.register_post_accumulate_grad_hook(self._make_hook(index)))
        if model is not None:
            self._hook_handles.append(model.register_state_dict_pre_hook(lambda *args, **kwargs: self.flush()))
        algorithm.setup(self._ctx)
        basics.follow_world_changes(self._follow_world)

    def _follow_world(self) -> None:
        """Run by ``relaxlib.reset()`` / ``grow()`` (``basics.follow_world_changes``): the algorithm
        is set up again over the new world, keeping what of its state carries over
        (``Algorithm.state_for_new_world``; docs/elastic.md has each algorithm's rule)."""
        if basics.world_generation() == self._world_generation:
            return
        self._world_generation = basics.world_generation()
        self._ctx = follow_new_world(self.algorithm, self._ctx, lambda ctx: ctx.follow_new_world())

    def _make_hook(self, index: int):
        def hook(param: torch.Tensor) -> None:
            self._delay[param] -= 1
            if self._delay[param] < 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before "
                                     "call to step(). Increase backward_passes_per_step to accumulate gradients "
                                     "locally.")
            if self._delay[param] == 0:
                self.algorithm.on_gradient(self._ctx, index)
        return hook

    def step(self, closure=None):
        """Hands the step to the algorithm (which communicates and applies or schedules the update)."""
        self._relax_telemetry.begin_step()
        try:
            return self._algorithm_step(closure)
        finally:
            self._relax_telemetry.end_step()
            _advise_when_due(self)

    def _algorithm_step(self, closure):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._ctx.stop_recording()
        try:
            step_or_abandon(self.algorithm, self._ctx)  # a failed step leaves nothing behind (skip a bad batch)
        finally:
            for p in self._delay:
                self._delay[p] = self.backward_passes_per_step
        self._ctx.step_count += 1
        return loss

    def flush(self) -> None:
        """Applies every deferred update (before evaluation, checkpoints, or the end of training)."""
        self.algorithm.flush(self._ctx)

    def synchronize(self) -> None:
        """For relaxed algorithms: the same as flush()."""
        self.flush()

    def join(self) -> int:
        """This rank ran out of data: with a model-averaging algorithm, keeps serving the peers
        that still train until every rank joined. Returns the last step of any rank."""
        return self.algorithm.join(self._ctx)

    @contextmanager
    def skip_synchronize(self):
        """Accepted for Horovod compatibility; relaxed algorithms always communicate in step()."""
        yield

    def state_dict(self):
        """The optimizer state after applying pending updates, plus the algorithm's own state
        (e.g. error-feedback memories) under the key ``"relaxlib"``."""
        self.flush()
        state = super(self.__class__, self).state_dict()
        state["relaxlib"] = self.algorithm.state_dict()
        return state

    def load_state_dict(self, state_dict) -> None:
        """Restores what ``state_dict`` returned (the algorithm's part too), after waiting out what
        a failed step left in flight (``hvd.elastic`` restores through here)."""
        self.algorithm.abandon_step(self._ctx)
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        state_dict = dict(state_dict)
        algorithm_state = state_dict.pop("relaxlib", None)
        super(self.__class__, self).load_state_dict(state_dict)
        if algorithm_state is not None:
            self.algorithm.load_state_dict(algorithm_state)


def DistributedOptimizer(optimizer: torch.optim.Optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step: int = 1, op=mpi_ops.Average, gradient_predivide_factor: float = 1.0,
                         num_groups: int = 0, groups=None, sparse_as_dense: bool = False,
                         process_set=global_process_set, algorithm=None, model=None, max_grad_norm=None):
    """Wraps ``optimizer`` so that ``step()`` applies gradients averaged over all ranks.

    Arguments follow Horovod 0.28: ``named_parameters`` (names for negotiation and errors),
    ``compression`` (``Compression.none``/``fp16``), ``backward_passes_per_step`` (local
    accumulation), ``op`` (Average, Sum, ...; Adasum takes Horovod's delta optimizer,
    relaxlib_torch/adasum_optimizer.py), ``gradient_predivide_factor`` (split the averaging
    before/after the sum), ``groups`` (int or list of parameter lists, reduced atomically),
    ``sparse_as_dense``, ``process_set``. relaxlib adds ``algorithm`` (a
    :mod:`relaxlib.algorithms` object; None = all-reduce) and ``model`` (needed by algorithms
    that hook module forward passes), and ``max_grad_norm`` (clip the averaged gradients to this
    global L2 norm before the update, the same way for every algorithm).
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"DistributedOptimizer expects a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("this optimizer is already a DistributedOptimizer")
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
        raise ValueError("gradient_predivide_factor requires op == Average")
    if op == mpi_ops.Adasum and process_set is not global_process_set:
        raise NotImplementedError("Adasum does not support non-global process sets (as in Horovod).")
    if op == mpi_ops.Adasum and max_grad_norm is not None:
        raise ValueError("max_grad_norm clips averaged gradients; op=Adasum combines model changes instead")
    if max_grad_norm is not None and max_grad_norm <= 0:
        raise ValueError("max_grad_norm must be positive")
    if algorithm is None:
        algorithm = auto.default_algorithm() or AllReduce()  # relaxrun --auto's pick, if any
        if algorithm.needs_model and model is None:
            warnings.warn(f"RELAX_ALGORITHM={algorithm.name} needs model=<your nn.Module>; using all-reduce",
                          stacklevel=2)
            algorithm = AllReduce()
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a relaxlib.algorithms.Algorithm, got {type(algorithm).__name__}")
    if algorithm.needs_model and model is None:
        raise ValueError(f"algorithm {algorithm.name} hooks module forward passes: pass model=<your nn.Module>")
    if not isinstance(model, (torch.nn.Module, type(None))):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    basics.size()  # raises NotInitializedError before any hook is installed
    if named_parameters is not None and not isinstance(named_parameters, (list, tuple, dict)):
        named_parameters = list(named_parameters)  # a generator is read twice below
    if process_set.included() and not basics.joined_running_job():  # (the running ranks checked long ago)
        _check_same_on_every_rank(optimizer, named_parameters, algorithm, process_set,
                                  {"compression": getattr(compression, "__name__", type(compression).__name__),
                                   "backward_passes_per_step": backward_passes_per_step, "op": op,
                                   "gradient_predivide_factor": gradient_predivide_factor,
                                   "groups": groups if isinstance(groups, int) else len(groups or []) or num_groups,
                                   "sparse_as_dense": sparse_as_dense, "max_grad_norm": max_grad_norm})
    if isinstance(algorithm, AllReduce) and op == mpi_ops.Adasum:  # Horovod's delta optimizer
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_AdasumOptimizer.__dict__))
        wrapped = cls.__new__(cls)
        wrapped.__dict__.update(optimizer.__dict__)
        wrapped._relax_adasum_setup(_DistributedOptimizer._name_parameters(wrapped, named_parameters), compression,
                                    backward_passes_per_step, optimizer.__class__)
        return wrapped
    if isinstance(algorithm, AllReduce):
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
        wrapped = cls.__new__(cls)
        wrapped.__dict__.update(optimizer.__dict__)  # same param_groups, state, defaults, hooks
        wrapped._relax_setup(named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                             groups if groups is not None else (num_groups or None), sparse_as_dense, process_set,
                             algorithm, model, max_grad_norm)
        wrapped._relax_telemetry = telemetry.new_recorder()
        return wrapped
    if compression is not Compression.none or op != mpi_ops.Average or groups or num_groups or sparse_as_dense:
        raise ValueError(f"algorithm {algorithm.name} decides what is communicated: compression, op, groups and "
                         "sparse_as_dense apply to the all-reduce algorithm only")
    if not process_set.included():
        raise ValueError(f"rank {basics.rank()} is not a member of {process_set}")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_AlgorithmOptimizer.__dict__))
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    names = _DistributedOptimizer._name_parameters(wrapped, named_parameters)
    wrapped._relax_setup_algorithm(names, algorithm, model, backward_passes_per_step, process_set, max_grad_norm,
                                   optimizer.__class__)
    wrapped._relax_telemetry = telemetry.new_recorder()
    return wrapped


def _check_same_on_every_rank(optimizer: torch.optim.Optimizer, named_parameters, algorithm: Algorithm, process_set,
                              options: dict) -> None:
    """Collective over the process set: every rank must wrap the same parameters with the same
    algorithm (type and settings), optimizer class and options, or each raises MismatchError
    saying what differs (a rank running another algorithm would otherwise wait forever)."""
    pairs = named_parameters.items() if isinstance(named_parameters, dict) else (named_parameters or [])
    names = {id(p): n for n, p in pairs}
    parameters = [(names.get(id(p), f"group{g}.{i}"), tuple(p.shape), str(p.dtype))
                  for g, group in enumerate(optimizer.param_groups) for i, p in enumerate(group["params"])]
    description = {"algorithm": algorithm.describe(), "optimizer": type(optimizer).__name__, **options,
                   "parameters": f"{len(parameters)} tensors"}
    # Numbered by call order: a check abandoned by an interrupt keeps its name pending.
    label = basics.auto_name("relaxlib.optimizer_agreement", None, process_set)
    gathered = functions.allgather_object((description, parameters), name=label, process_set=process_set)
    ranks = list(process_set.ranks or range(basics.size()))  # the global set lists no ranks
    agreement.raise_if_different("DistributedOptimizer", gathered, ranks, items="parameter lists")
