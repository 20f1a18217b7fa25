"""The PyTorch implementation of relaxlib's TrainingContext: the parameters, their gradients,
the model's forward hooks and the wrapped optimizer; the tensor math (``TorchMath``) and the
collectives (``TorchCommunicator``) are its ``math`` and ``comm``."""

from __future__ import annotations

import copy

import torch

from relaxlib.algorithms.base import Algorithm, ParamRef, TrainingContext
from relaxlib.errors import RelaxError
from relaxlib_torch.communicator import TorchCommunicator
from relaxlib_torch.tensor_math import TorchMath


class TorchContext(TrainingContext):
    """Binds an Algorithm to one wrapped optimizer (and, optionally, its model)."""

    math = TorchMath()  # replaced per context by one on the parameters' device

    def __init__(self, optimizer: torch.optim.Optimizer, optimizer_class: type, names: dict, algorithm: Algorithm,
                 model: torch.nn.Module | None, process_set, max_grad_norm: float | None) -> None:
        self._optimizer = optimizer
        self._optimizer_class = optimizer_class
        self._algorithm = algorithm
        self._process_set = process_set
        self.rank = process_set.rank()
        self.size = process_set.size()
        self.step_count = 0
        self.max_grad_norm = max_grad_norm
        self._params = [p for group in optimizer.param_groups for p in group["params"]]
        self._group_of = [gi for gi, group in enumerate(optimizer.param_groups) for _ in group["params"]]
        self._index_of = {p: i for i, p in enumerate(self._params)}
        self._refs = [ParamRef(i, names[p], p.numel(), p.element_size(), str(p.dtype), self._group_of[i],
                               tuple(p.shape))
                      for i, p in enumerate(self._params)]
        self._recording = model is not None
        self._module_calls: list[torch.nn.Module] = []
        self._module_buckets: dict[torch.nn.Module, list[int]] = {}
        self._hooks = []
        self.math = TorchMath(self._params[0].device if self._params else None)
        self.comm = TorchCommunicator(process_set)
        if model is not None:
            for module in model.modules():
                if any(True for _ in module.parameters(recurse=False)):
                    self._hooks.append(module.register_forward_pre_hook(self._before_module))

    # -- model hooks --

    def _before_module(self, module: torch.nn.Module, args) -> None:
        if self._recording and module not in self._module_calls:
            self._module_calls.append(module)
        for bucket in self._module_buckets.get(module, ()):
            self._algorithm.before_forward(self, bucket)

    def stop_recording(self) -> None:
        """The first optimizer step ends forward-order recording."""
        self._recording = False

    # -- TrainingContext --

    def parameters(self) -> list[ParamRef]:
        return list(self._refs)

    def forward_order(self) -> list[tuple[int, int]] | None:
        if not self._module_calls:
            return None
        order, seen = [], set()
        for module_id, module in enumerate(self._module_calls):
            for p in module.parameters(recurse=False):
                index = self._index_of.get(p)
                if index is not None and index not in seen:
                    seen.add(index)
                    order.append((index, module_id))
        return order

    def watch_buckets(self, buckets: list[list[int]]) -> None:
        owner = {}
        for module in self._module_calls:
            for p in module.parameters(recurse=False):
                owner.setdefault(p, module)
        self._module_buckets = {}
        for b, members in enumerate(buckets):
            for index in members:
                module = owner.get(self._params[index])
                if module is not None and b not in self._module_buckets.setdefault(module, []):
                    self._module_buckets[module].append(b)

    def flatten_grads(self, indices: list[int], out=None) -> torch.Tensor:
        params = [self._params[i] for i in indices]
        total = sum(p.numel() for p in params)
        dtype = params[0].dtype
        if out is None or out.numel() != total or out.dtype != dtype:
            out = torch.empty(total, dtype=dtype)
        offset = 0
        for p in params:
            n = p.numel()
            if p.grad is None:
                out[offset:offset + n].zero_()
            else:
                out[offset:offset + n].copy_(p.grad.reshape(-1))
            offset += n
        return out

    def grads_where_they_lie(self, indices: list[int]) -> list[torch.Tensor] | None:
        """The gradients of ``indices`` where every one is a dense CPU tensor, else None."""
        grads = [self._params[i].grad for i in indices]
        if any(g is None or g.layout != torch.strided or g.device.type != "cpu" for g in grads):
            return None
        return grads

    def add_grads(self, flat: torch.Tensor, indices: list[int]) -> torch.Tensor:
        """Adds the gradients into ``flat`` in place, each where it lies, when every one is a dense
        CPU tensor (else ``flat`` plus the flattened gradients)."""
        grads = self.grads_where_they_lie(indices)
        if grads is None:
            return super().add_grads(flat, indices)
        offset = 0
        for grad in grads:
            flat[offset:offset + grad.numel()].add_(grad.reshape(-1))
            offset += grad.numel()
        return flat

    def flatten_params(self, indices: list[int], out=None) -> torch.Tensor:
        views = [self._params[i].detach().reshape(-1) for i in indices]
        total = sum(v.numel() for v in views)
        if out is not None and out.numel() == total and out.dtype == views[0].dtype:
            return torch.cat(views, out=out)
        return torch.cat(views)

    def set_params_from_flat(self, indices: list[int], flat: torch.Tensor) -> None:
        offset = 0
        with torch.no_grad():
            for i in indices:
                p = self._params[i]
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()

    def add_to_params(self, indices: list[int], flat: torch.Tensor, alpha: float = 1.0) -> None:
        offset = 0
        with torch.no_grad():
            for i in indices:
                p = self._params[i]
                p.add_(flat[offset:offset + p.numel()].view_as(p), alpha=alpha)
                offset += p.numel()

    def snapshot(self):
        return [{k: copy.copy(v) for k, v in group.items() if k != "params"} for group in self._optimizer.param_groups]

    def apply_update(self, indices: list[int], snapshot, flat_grads=None) -> None:
        params = [self._params[i] for i in indices]
        saved = [p.grad for p in params]
        if flat_grads is not None:
            offset = 0
            for p in params:
                p.grad = flat_grads[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
        try:
            by_group: dict[int, list[torch.Tensor]] = {}
            for i, p in zip(indices, params):
                by_group.setdefault(self._group_of[i], []).append(p)
            # A restricted view of the optimizer: same state and settings, these parameters only.
            view = object.__new__(self._optimizer_class)
            view.__dict__.update(self._optimizer.__dict__)
            view.param_groups = [dict(snapshot[g], params=ps) for g, ps in by_group.items()]
            self._optimizer_class.step(view)
        finally:
            if flat_grads is not None:
                for p, g in zip(params, saved):
                    p.grad = g

    def follow_new_world(self) -> TorchContext:
        """This context over the world ``relaxlib.reset()`` re-formed after a lost rank: the rank,
        size and communicator of its process set there (the recorded forward order and the model
        hooks stay). Returns itself (``relaxlib.algorithms.base.follow_new_world`` takes it)."""
        if self._process_set.process_set_id is None:
            raise RelaxError(f"{self._algorithm.name} ran over a process set that the reset removed (process sets "
                             "are gone after a lost rank); use the global process set with hvd.elastic")
        self.rank = self._process_set.rank()
        self.size = self._process_set.size()
        self.comm = TorchCommunicator(self._process_set)
        return self

    def close(self) -> None:
        """Removes the model hooks."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
