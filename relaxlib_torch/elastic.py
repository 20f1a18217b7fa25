"""``hvd.elastic`` for PyTorch: Horovod's elastic state objects.

``TorchState(model, optimizer, **kwargs)`` keeps a copy of the model's and optimizer's state in
host memory (``commit``), rolls back to it (``restore``) and brings every rank to rank 0's
(``sync``); extra keyword arguments are synchronized Python values, and for ``ElasticSampler``s
(relaxlib_torch.elastic_sampler) their progress through the epoch. relaxlib.elastic says how a
lost rank is survived.
"""

from __future__ import annotations

import copy

from relaxlib import basics
from relaxlib.elastic import ObjectState, State, run_fn
from relaxlib_torch.elastic_sampler import ElasticSampler
from relaxlib_torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters

__all__ = ["ElasticSampler", "ObjectState", "State", "TorchState", "run"]


def run(func):
    """Decorator for ``func(state, ...)``: synchronizes ``state`` from rank 0, then runs it."""
    return run_fn(func)


class TorchState(ObjectState):
    """State of a torch ``model`` and ``optimizer`` (either may be None) plus Python values.
    Keyword values that are ``ElasticSampler``s are kept as they are (not copied) and their
    progress through the epoch is committed, restored and synchronized with the rest."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._model_state = None
        self._optimizer_state = None
        self._samplers = {name: kwargs.pop(name) for name in list(kwargs)
                          if isinstance(kwargs[name], ElasticSampler)}
        self._sampler_states: dict[str, dict] = {}
        for name, sampler in self._samplers.items():
            setattr(self, name, sampler)
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, **kwargs)
        self._save_modules()

    def _save_modules(self) -> None:
        if self.model is not None:
            self._model_state = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._optimizer_state = copy.deepcopy(self.optimizer.state_dict())
        self._sampler_states = {name: sampler.state_dict() for name, sampler in self._samplers.items()}

    def save(self) -> None:
        """Copies the model's and optimizer's state, the samplers' progress and the Python values."""
        self._save_modules()
        super().save()

    def restore(self) -> None:
        """Loads the saved model, optimizer and sampler state back."""
        if self.model is not None:
            self.model.load_state_dict(self._model_state)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._optimizer_state)
        for name, sampler in self._samplers.items():
            sampler.load_state_dict(self._sampler_states[name])
        super().restore()

    def sync(self) -> None:
        """Broadcasts rank 0's parameters, optimizer state, sampler progress and Python values
        (collective); the samplers re-shard the rest of their epoch over the current world."""
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        if self._samplers:
            saved = broadcast_object(self._sampler_states, root_rank=0)
            for name, sampler in self._samplers.items():
                sampler.load_state_dict(saved[name])
        self._save_modules()
        super().sync()
