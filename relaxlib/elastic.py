"""Horovod's elastic *state* API on a fixed set of ranks (framework-neutral part).

Horovod's ``hvd.elastic`` keeps training state in memory (``commit``), rolls back uncommitted
changes (``restore``) and brings every rank to rank 0's state (``sync``), and its ``run``
decorator re-runs the training function when ranks join or leave. relaxlib runs on a fixed
``mpirun`` launch: the state objects behave as in Horovod, so elastic scripts run unchanged,
but the set of ranks never changes. ``commit`` never raises ``HostsUpdatedInterrupt``, and a lost
rank ends the job with an error on the others (relaunch, resuming from your own checkpoint)
instead of a reset.
"""

from __future__ import annotations

import copy
import functools
from typing import Callable


class State:
    """Training state kept in host memory: ``save`` copies it, ``restore`` rolls back to the last
    copy, ``sync`` makes every rank equal to rank 0. Subclasses say what the state is."""

    def __init__(self, bcast_object: Callable, get_rank: Callable[[], int]):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: list[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks) -> None:
        """Functions to run after the set of ranks changes. Kept for Horovod compatibility; with
        relaxlib's fixed launch they never run."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Resets the state and runs the reset callbacks (Horovod calls this after a membership
        change, which relaxlib does not have)."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the current state as the one ``restore`` returns to."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Horovod raises ``HostsUpdatedInterrupt`` here when hosts were added or removed; the
        ranks of a relaxlib job are fixed, so there is never anything to report."""

    def save(self) -> None:
        """Copies the state to host memory."""
        raise NotImplementedError

    def restore(self) -> None:
        """Returns to the last saved state, undoing uncommitted changes."""
        raise NotImplementedError

    def sync(self) -> None:
        """Makes every rank's state equal to rank 0's (collective)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Called by ``on_reset`` before a re-synchronization; nothing by default."""


class ObjectState(State):
    """State made of plain Python values, given as keyword arguments and exposed as attributes."""

    def __init__(self, bcast_object: Callable, get_rank: Callable[[], int], **kwargs):
        super().__init__(bcast_object, get_rank)
        self._saved_state = dict(kwargs)
        self._set_attrs()

    def save(self) -> None:
        """Copies the current attribute values."""
        self._saved_state = {name: copy.deepcopy(getattr(self, name)) for name in self._saved_state}

    def restore(self) -> None:
        """Sets the attributes back to the saved values."""
        self._set_attrs()

    def sync(self) -> None:
        """Broadcasts rank 0's saved values and sets them on every rank."""
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


def run_fn(func: Callable) -> Callable:
    """The ``hvd.elastic.run`` decorator: ``func(state, ...)`` starts from rank 0's state on every
    rank (``state.sync()``), then runs once. Horovod would re-run it after a membership change;
    relaxlib's ranks are fixed, so errors propagate (a lost peer ends the job on every rank)."""
    @functools.wraps(func)
    def wrapper(state: State, *args, **kwargs):
        state.sync()
        return func(state, *args, **kwargs)

    return wrapper
