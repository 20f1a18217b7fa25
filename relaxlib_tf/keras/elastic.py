"""``hvd.elastic`` for Keras 3 (``import relaxlib_tf.keras as hvd``): Horovod's elastic Keras API.

``KerasState(model, optimizer=None, **values)`` keeps the model's and optimizer's variables and the
values in host memory; the callbacks keep ``state.batch`` / ``state.epoch`` current and commit, so
that ``@hvd.elastic.run`` around ``model.fit(...)`` resumes from the last commit after a lost rank
(relaxlib.elastic says how). As in Horovod, pass ``epochs=total - state.epoch`` to ``fit``, and put
``UpdateBatchStateCallback`` before ``CommitStateCallback``.
"""

from __future__ import annotations

import keras

from relaxlib_tf.elastic import ObjectState, State, TensorFlowKerasState, run

__all__ = ["CommitStateCallback", "KerasState", "ObjectState", "State", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]


class KerasState(TensorFlowKerasState):
    """State of a Keras ``model`` and its optimizer (``model.optimizer`` by default) plus Python values."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at the end of every epoch."""

    def __init__(self, state: State, batches_per_commit: int = 1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit={batches_per_commit} must be at least 1")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        """Counts from the start of every fit (the same on every rank after a reset)."""
        self.batches_remaining = self.batches_per_commit

    def on_train_batch_end(self, batch, logs=None):
        """Commits when ``batches_per_commit`` batches ended since the last commit."""
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        """Commits at the end of every epoch."""
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the number of batches done in the current epoch (0 at its end); with
    ``steps_per_epoch``, the first epoch after a reset runs only the batches that epoch still lacks."""

    def __init__(self, state: State):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        """Forgets the epoch length of an earlier fit."""
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        """Shortens the epoch by the batches already done in it (resumed after a reset)."""
        steps = self.params.get("steps") if self.params else None
        if steps:
            if self.steps_per_epoch is None:
                self.steps_per_epoch = steps
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_train_batch_end(self, batch, logs=None):
        """Records the batches done in this epoch (``batch`` counts from 0 in the possibly shortened epoch)."""
        skipped = self.steps_per_epoch - self.params["steps"] if self.steps_per_epoch is not None else 0
        self.state.batch = skipped + batch + 1

    def on_epoch_end(self, epoch, logs=None):
        """A finished epoch has no batches left to resume."""
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch`` at the number of epochs finished, across resets (Keras counts each
    fit's epochs from 0)."""

    def __init__(self, state: State):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        """The epochs finished before this fit (carried over from before a reset)."""
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        """One more epoch finished."""
        self.state.epoch = self.initial_epoch + epoch + 1


