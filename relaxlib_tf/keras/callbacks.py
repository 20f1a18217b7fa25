"""Keras 3 callbacks of Horovod's ``horovod.tensorflow.keras.callbacks``."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from relaxlib import basics
from relaxlib_tf import functions, mpi_ops


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """At the start of training, sets every rank's model and optimizer variables to
    ``root_rank``'s, so that differently initialized ranks start equal. ``device`` is accepted
    for compatibility."""

    def __init__(self, root_rank: int, device: str = "") -> None:
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False

    def on_train_begin(self, logs=None):
        if self.broadcast_done:
            return
        variables = list(self.model.variables)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and optimizer.built:
            variables += list(optimizer.variables)
        functions.broadcast_variables(variables, self.root_rank)
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """At the end of every epoch, replaces each metric in ``logs`` by its mean over ranks. Put it
    before callbacks that read the metrics (checkpointing, early stopping, LR schedules)."""

    def __init__(self, device: str = "") -> None:
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and np.issubdtype(np.asarray(v).dtype,
                                                                                        np.number))
        if not keys:
            return
        values = tf.constant([float(logs[k]) for k in keys], tf.float64)
        averaged = mpi_ops.allreduce(values, op=basics.Average, name=f"MetricAverageCallback.{epoch}").numpy()
        for key, value in zip(keys, averaged):
            logs[key] = float(value)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` from ``start_epoch`` until
    ``end_epoch`` (exclusive; None: no end). ``multiplier`` is a number or a function of the epoch;
    with ``staircase`` it changes at epoch starts (integer epochs), else at every batch with a
    fractional epoch ``epoch + batch / steps_per_epoch`` (``steps_per_epoch`` defaults to the
    value ``fit`` reports). ``momentum_correction`` is accepted for compatibility and has no
    effect: Keras 3 compiles the momentum into the training step."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, verbose=0) -> None:
        super().__init__()
        if initial_lr is None:
            raise ValueError("initial_lr is required: the learning rate the schedule multiplies")
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch, m=float(multiplier): m)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0

    def _in_range(self, epoch) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set_lr(self, epoch) -> None:
        lr = self.initial_lr * self.multiplier(epoch)
        optimizer = self.model.optimizer
        if isinstance(optimizer.learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            raise ValueError("the optimizer's learning rate is a schedule object; a schedule callback needs a "
                             "float learning rate")
        optimizer.learning_rate = lr

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._in_range(epoch):
            self._set_lr(epoch)
        elif not self.staircase and epoch == self.end_epoch:
            self._set_lr(epoch)  # per-batch schedules end on their end value, not the last batch's

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase:
            return
        steps = self.steps_per_epoch or (self.params or {}).get("steps")
        if not steps:
            raise ValueError("a non-staircase schedule needs steps_per_epoch (fit did not report the number of "
                             "steps per epoch)")
        epoch = self.current_epoch + batch / steps
        if self._in_range(epoch):
            self._set_lr(epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Goya et al.'s gradual warm-up: the learning rate grows from ``initial_lr / size`` to
    ``initial_lr`` over ``warmup_epochs``, per batch:
    ``lr = initial_lr / size * (epoch * (size - 1) / warmup_epochs + 1)`` with a fractional epoch."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0) -> None:
        size = basics.size()

        def multiplier(epoch):
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch, verbose=verbose)
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1 and self.verbose > 0 and basics.rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {self.initial_lr:g}.")
