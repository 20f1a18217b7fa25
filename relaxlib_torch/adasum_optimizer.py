"""DistributedOptimizer(op=Adasum): Horovod's delta optimizer.

As in Horovod (horovod/torch/optimizer.py, ``_DistributedAdasumOptimizer``), Adasum does not
combine gradients before a shared step: each rank takes its own optimizer step from the same
start, and the model changes (deltas, ``-lr * f(g)``) are combined with the Adasum reduction;
the model becomes ``start + Adasum(deltas)``. Nothing is divided by the number of ranks, which is
why Horovod's user guide advises the learning rate of a single worker (times the local size
with GPUs), not one scaled by the number of ranks.

Horovod takes each parameter's step in its gradient hook to overlap the reductions with
backward; here ``step()`` takes the wrapped optimizer's step for every parameter at once, then
submits every delta before waiting for any (the engine fuses them; each keeps its own dot
products). For per-parameter optimizers (SGD, Adam, ...) the result is the same.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from relaxlib_torch import mpi_ops


class _AdasumOptimizer(torch.optim.Optimizer):
    """Mixin installed between the user's optimizer class and the instance (see
    relaxlib_torch.optimizer.DistributedOptimizer)."""

    def _relax_adasum_setup(self, names: dict, compression, backward_passes_per_step: int,
                            optimizer_class: type) -> None:
        """Records what step() needs: parameter names (the reductions' names), the compression,
        and the wrapped optimizer's class (whose step() computes each rank's delta)."""
        self._parameter_names = names
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self._relax_base_class = optimizer_class

    def synchronize(self) -> None:
        """Nothing to wait for: the reductions run inside step() (Horovod's Adasum optimizer
        does nothing here either)."""

    @contextmanager
    def skip_synchronize(self):
        """Refused, as in Horovod: the Adasum optimizer has no separate synchronization."""
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # pragma: no cover - makes this a generator for contextmanager

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Horovod's setter (the step is taken when step() is called)."""
        self.backward_passes_per_step = passes

    @torch.no_grad()
    def step(self, closure=None):
        """Steps locally from the current model, then sets every parameter to its start plus the
        Adasum of all ranks' changes. Every rank must call it (the reductions are collective)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for p in self._parameter_names if p.requires_grad]
        for p in params:
            if p.grad is None:
                # As Horovod (which zero-fills every gradient up front): a parameter this rank did
                # not use still takes its step and its part in the reduction the others wait for.
                p.grad = torch.zeros_like(p)
        starts = [p.detach().clone() for p in params]
        self._relax_base_class.step(self)
        deltas = [p.detach() - start for p, start in zip(params, starts)]
        for p, start in zip(params, starts):
            p.copy_(start)  # the model stays at its start unless the combined change arrives
        pending, errors = [], []
        try:
            for p, delta in zip(params, deltas):
                compressed, ctx = self._compression.compress(delta)
                handle = mpi_ops.allreduce_async_(compressed, name=self._parameter_names[p], op=mpi_ops.Adasum)
                pending.append((p, handle, ctx))
        except Exception as exc:  # noqa: BLE001 - refused on every rank alike; raised below
            errors.append(exc)
        for p, handle, ctx in pending:
            try:  # wait for every handle, so none is left pending when one fails
                p.add_(self._compression.decompress(mpi_ops.synchronize(handle), ctx))
            except Exception as exc:  # noqa: BLE001 - raised below, after the others are waited for
                errors.append(exc)
        if errors:
            raise errors[0]
        return loss
