"""``hvd.elastic`` for TensorFlow: Horovod's elastic state objects on relaxlib's fixed launch.

``TensorFlowKerasState`` (a Keras model and optimizer) and ``TensorFlowState`` (variables) keep
a copy of their values in host memory (``commit``), roll back to it (``restore``) and bring every
rank to rank 0's values (``sync``); extra keyword arguments are synchronized Python values. The
ranks of a relaxlib job never change: see relaxlib.elastic.
"""

from __future__ import annotations

import functools

import tensorflow as tf

from relaxlib import basics
from relaxlib.elastic import ObjectState, State, run_fn
from relaxlib.errors import error_named
from relaxlib_tf.functions import broadcast_object, broadcast_variables

__all__ = ["ObjectState", "State", "TensorFlowKerasState", "TensorFlowState", "run"]


def run(func):
    """Horovod's ``hvd.elastic.run`` for TensorFlow (relaxlib.elastic.run_fn): ``func(state, ...)``
    starts from rank 0's state and survives lost ranks. A relaxlib op that failed inside a graph
    (``tf.function``, Keras ``fit``) reaches Python as a ``tf.errors.OpError`` whose message names
    relaxlib's class (``[ProcessFailedError] ...``): it is raised as that class again, so run_fn
    recovers from the one a lost rank causes."""
    @functools.wraps(func)
    def translated(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as error:
            relaxlib_error = error_named(error.message)
            if relaxlib_error is None:
                raise
            raise relaxlib_error from error
    return run_fn(translated)


class _VariablesState(ObjectState):
    """State of a list of variables plus keyword-argument Python values."""

    def __init__(self, variables, session=None, **kwargs):
        self._variables = list(variables)
        self._session = session
        self._values = None
        super().__init__(bcast_object=lambda obj: broadcast_object(obj, 0, session=session), get_rank=basics.rank,
                         **kwargs)
        self._save_variables()

    def _read(self) -> list:
        if tf.executing_eagerly():
            return [v.numpy() for v in self._variables]
        return (self._session or tf.compat.v1.get_default_session()).run(self._variables)

    def _save_variables(self) -> None:
        self._values = self._read()

    def save(self) -> None:
        """Copies the variables' values and the Python values to host memory."""
        self._save_variables()
        super().save()

    def restore(self) -> None:
        """Assigns the saved values back."""
        assigns = [v.assign(value) for v, value in zip(self._variables, self._values)]
        if not tf.executing_eagerly():
            (self._session or tf.compat.v1.get_default_session()).run(assigns)
        super().restore()

    def sync(self) -> None:
        """Broadcasts rank 0's variables and Python values (collective), then saves them."""
        op = broadcast_variables(self._variables, root_rank=0)
        if op is not None:
            (self._session or tf.compat.v1.get_default_session()).run(op)
        self._save_variables()
        super().sync()


class TensorFlowState(_VariablesState):
    """State of ``variables`` (default: the TF1 graph's global variables)."""

    def __init__(self, variables=None, session=None, **kwargs):
        super().__init__(variables if variables is not None else tf.compat.v1.global_variables(), session, **kwargs)


def _keras_state_variables(model, optimizer) -> list:
    """The variables a Keras state keeps: the model's, then the optimizer's, built now if Keras has not
    built them yet (it does at the first step). A state made before the first ``fit``, as in Horovod's
    examples, must hold the optimizer's slots too: otherwise a restore leaves them as the failed step
    left them, and a worker added during the run keeps fresh ones while the others' hold momentum."""
    variables = list(model.variables)
    if not variables:
        raise ValueError("KerasState: the model has no variables yet; build it first (an Input layer, "
                         "model.build(input_shape), or one call on a batch)")
    if optimizer is None:
        return variables
    if not getattr(optimizer, "built", True):
        optimizer.build(model.trainable_variables)
    return variables + list(optimizer.variables)


class TensorFlowKerasState(_VariablesState):
    """State of a Keras ``model`` and its ``optimizer`` (``model.optimizer`` by default)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        super().__init__(_keras_state_variables(model, self.optimizer), **kwargs)

    def reset(self) -> None:
        """After the world was re-formed (the optimizer's algorithm followed it already): ``fit``
        traces its step again (a step traced before holds the old world's algorithm state)."""
        if hasattr(self.model, "train_function"):  # Keras 3: fit makes a new one when it is None
            self.model.train_function = None
