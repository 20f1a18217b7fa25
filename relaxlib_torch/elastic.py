"""``hvd.elastic`` for PyTorch: Horovod's elastic state objects on relaxlib's fixed launch.

``TorchState(model, optimizer, **kwargs)`` keeps a copy of the model's and optimizer's state in
host memory (``commit``), rolls back to it (``restore``) and brings every rank to rank 0's
(``sync``); extra keyword arguments are synchronized Python values. The ranks of a relaxlib job
never change: see relaxlib.elastic.
"""

from __future__ import annotations

import copy

from relaxlib import basics
from relaxlib.elastic import ObjectState, State, run_fn
from relaxlib_torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters

__all__ = ["ObjectState", "State", "TorchState", "run"]


def run(func):
    """Decorator for ``func(state, ...)``: synchronizes ``state`` from rank 0, then runs it."""
    return run_fn(func)


class TorchState(ObjectState):
    """State of a torch ``model`` and ``optimizer`` (either may be None) plus Python values."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._model_state = None
        self._optimizer_state = None
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, **kwargs)
        self._save_modules()

    def _save_modules(self) -> None:
        if self.model is not None:
            self._model_state = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._optimizer_state = copy.deepcopy(self.optimizer.state_dict())

    def save(self) -> None:
        """Copies the model's and optimizer's state and the Python values."""
        self._save_modules()
        super().save()

    def restore(self) -> None:
        """Loads the saved model and optimizer state back."""
        if self.model is not None:
            self.model.load_state_dict(self._model_state)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._optimizer_state)
        super().restore()

    def sync(self) -> None:
        """Broadcasts rank 0's parameters, optimizer state and Python values (collective)."""
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        self._save_modules()
        super().sync()
