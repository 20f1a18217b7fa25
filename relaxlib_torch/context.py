"""The PyTorch implementation of relaxlib's TrainingContext: what algorithms may do with torch
parameters, gradients, the network and the wrapped optimizer."""

from __future__ import annotations

import copy

import numpy as np
import torch

from relaxlib import direct, process_sets
from relaxlib.algorithms.base import Algorithm, ParamRef, TrainingContext
from relaxlib_torch import compressed, functions, mpi_ops, relaxed


class TorchContext(TrainingContext):
    """Binds an Algorithm to one wrapped optimizer (and, optionally, its model)."""

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
        self._nodes = None
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

    def _dense_cpu_grads(self, indices: list[int]) -> list[torch.Tensor] | None:
        """The gradients of ``indices`` where every one is a dense CPU tensor, else None."""
        grads = [self._params[i].grad for i in indices]
        if any(g is None or g.layout != torch.strided or g.device.type != "cpu" for g in grads):
            return None
        return grads

    def add_grads(self, flat: torch.Tensor, indices: list[int]) -> torch.Tensor:
        """Adds the gradients into ``flat`` in place, each where it lies, when every one is a dense
        CPU tensor (else ``flat`` plus the flattened gradients)."""
        grads = self._dense_cpu_grads(indices)
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

    def sum_of_squares(self, tensor: torch.Tensor) -> float:
        t = tensor.detach().to(torch.float64)
        return float(torch.dot(t, t)) if t.dim() == 1 else float((t * t).sum())

    def scale_(self, tensor: torch.Tensor, factor: float) -> None:
        tensor.mul_(factor)

    def add_(self, tensor: torch.Tensor, other: torch.Tensor, alpha: float = 1.0) -> None:
        tensor.add_(other, alpha=alpha)

    def copy_(self, tensor: torch.Tensor, value: torch.Tensor) -> None:
        tensor.copy_(value)

    def clone(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone()

    def host_view(self, tensor: torch.Tensor):
        if tensor.device.type != "cpu" or tensor.dtype != torch.float32 or not tensor.is_contiguous():
            return None
        return tensor.detach().numpy()

    def sqrt(self, tensor: torch.Tensor) -> torch.Tensor:
        """Correctly rounded: torch's CPU kernels (vectorized) are off by one ulp for about a
        sixth of float32 inputs, so a CPU tensor goes through numpy's sqrt (no copies)."""
        if tensor.device.type != "cpu" or tensor.dtype not in (torch.float32, torch.float64):
            return torch.sqrt(tensor)
        return torch.from_numpy(np.sqrt(tensor.detach().numpy()))

    def factor_mean_squares(self, tensor: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        """A CPU tensor goes through numpy (no copies): torch's float64 conversion took 10 times as long."""
        if tensor.device.type == "cpu":
            return torch.from_numpy(super().factor_mean_squares(tensor.detach().numpy(), rows, cols))
        squares = tensor.detach().to(torch.float64).reshape(rows, cols).square()
        row = squares.mean(1)
        return torch.cat([row, squares.mean(0), row.mean().reshape(1)]).float()

    def outer(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.outer(a, b).reshape(-1)

    def repeat(self, tensor: torch.Tensor, count: int) -> torch.Tensor:
        return tensor.repeat_interleave(count)

    def finite_or(self, value: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
        return torch.where(torch.isfinite(value), value, fallback)

    def zeros(self, numel: int) -> torch.Tensor:
        """On the parameters' device: algorithms keep it as state next to them (e.g. momentum)."""
        return torch.zeros(numel, dtype=torch.float32, device=self._params[0].device if self._params else None)

    def concat(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(tensors)

    def neighbor_average_async(self, flat: torch.Tensor, name: str, peers: list[int], weights: list[float],
                               self_weight: float, codec: str | None = None, estimates=None,
                               consensus_step: float = 1.0, out=None) -> direct.DirectHandle:
        return relaxed.neighbor_average_async(flat, peers, weights, self_weight, name, codec=codec,
                                              estimates=estimates, consensus_step=consensus_step, out=out)

    def group_average_async(self, flat: torch.Tensor, name: str, members: list[int], weights: list[float],
                            out=None) -> direct.DirectHandle:
        return relaxed.partial_allreduce_async(flat, members, name, weights, out=out)

    def reduce_scatter_async(self, flat: torch.Tensor, name: str):
        return mpi_ops.reducescatter_async(flat, name=name, op=mpi_ops.Average, process_set=self._process_set)

    def reduce_scatter_grads_async(self, indices: list[int], name: str):
        """Reduce-scatters the gradients where they lie (no flattened copy) when every one is a
        dense CPU tensor; otherwise through the flattened buffer."""
        grads = self._dense_cpu_grads(indices)
        if grads is None:
            return super().reduce_scatter_grads_async(indices, name)
        return mpi_ops.reducescatter_concatenated_async(grads, name=name, op=mpi_ops.Average,
                                                        process_set=self._process_set)

    def allreduce_async(self, tensor: torch.Tensor, name: str, average: bool = True, group=None):
        return mpi_ops.allreduce_async(tensor, name=name, op=mpi_ops.Average if average else mpi_ops.Sum,
                                       process_set=group or self._process_set)

    def broadcast_async(self, tensor: torch.Tensor, root: int, name: str, group=None):
        return mpi_ops.broadcast_async(tensor, root, name=name, process_set=group or self._process_set)

    def compressed_allreduce_async(self, flat: torch.Tensor, name: str, codec: str, state=None, average: bool = True,
                                   group=None, prescale: float = 1.0):
        return compressed.compressed_allreduce_async(flat, codec=codec, state=state, name=name,
                                                     op=mpi_ops.Average if average else mpi_ops.Sum,
                                                     process_set=group or self._process_set, prescale_factor=prescale)

    def compressed_allreduce_grads_async(self, indices: list[int], name: str, codec: str, state=None,
                                         prescale: float = 1.0):
        """Compresses the gradients where they lie (no flattened copy) when every one is a dense
        CPU tensor; otherwise through the flattened buffer."""
        grads = self._dense_cpu_grads(indices)
        if grads is None:
            return super().compressed_allreduce_grads_async(indices, name, codec, state, prescale)
        return compressed.compressed_allreduce_concatenated_async(grads, codec=codec, state=state, name=name,
                                                                  process_set=self._process_set,
                                                                  prescale_factor=prescale)

    def scaled_compressed_allreduce_async(self, flat: torch.Tensor, name: str, codec: str, state,
                                          step_scale: direct.StepScaleBuffers):
        src = flat.detach().reshape(-1)
        if src.device.type != "cpu" or src.dtype != torch.float32 or not src.is_contiguous():
            return None
        out = torch.empty_like(src)
        worker = direct.Buffer.of(state.worker.numpy()) if state is not None else None
        owner = direct.Buffer.of(state.owner.numpy()) if state is not None else None
        return direct.flat_compressed_allreduce_async(
            direct.Buffer.of(src.numpy()), direct.Buffer.of(out.numpy()), name, codec, worker, owner,
            keepalive=(src, out, state), result=out, process_set=self._process_set.process_set_id,
            step_scale=step_scale)

    def error_feedback(self, numel: int, group=None):
        return compressed.ErrorFeedback(numel, process_set=group or self._process_set)

    def node_groups(self):
        if self._nodes is None:
            self._nodes = process_sets.node_process_sets(functions.allgather_object)
        return self._nodes

    def allgather_async(self, shard: torch.Tensor, name: str):
        return mpi_ops.allgather_async(shard, name=name, process_set=self._process_set)

    def wait(self, handle):
        if isinstance(handle, direct.DirectHandle):
            return handle.wait()
        return mpi_ops.synchronize(handle)

    def allreduce_scalar(self, value: float, name: str) -> float:
        total = mpi_ops.allreduce(torch.tensor([value], dtype=torch.float64), op=mpi_ops.Sum, name=name,
                                  process_set=self._process_set)
        return float(total.item())

    def broadcast_object(self, obj, root: int = 0):
        return functions.broadcast_object(obj, root_rank=self._process_set.ranks[root] if self._process_set.ranks
                                          else root, process_set=self._process_set)

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

    def close(self) -> None:
        """Removes the model hooks."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
