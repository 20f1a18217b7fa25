"""The TrainingContext of ``DistributedGradientTape``: an algorithm's step that ends in gradients.

The tape has no optimizer: it returns gradients. An algorithm runs in it when what its step hands
the optimizer is gradients (``apply_update`` with averaged gradients) and it never writes the
weights itself (it does not require ``"weights"``): ``CompressedScatterReduce`` compressing
gradients (with error feedback kept across steps) and ``DeAR``. ``apply_update`` records the
gradients the tape then returns. The communication is relaxlib's TF ops, as in a traced Keras
step, so the tape works eagerly and, for a traceable algorithm, inside ``tf.function``.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from relaxlib.algorithms.base import Algorithm, require_capabilities, step_or_abandon
from relaxlib_tf.graph_context import KerasGraphContext

NO_WEIGHTS = "the tape returns gradients and does not write the weights"


class TapeContext(KerasGraphContext):
    """Binds an Algorithm to the sources of ``DistributedGradientTape.gradient``."""

    capabilities = KerasGraphContext.capabilities - {"weights"}

    def __init__(self, variables: list, algorithm: Algorithm) -> None:
        super().__init__(None, variables, algorithm)
        self._shapes = [tuple(v.shape) for v in self._variables]
        self.result: list = []

    def check_sources(self, variables: list) -> None:
        """ValueError unless ``variables`` are the sources the algorithm was set up with (by
        count and shape): its state (buckets, residuals) is per source."""
        shapes = [tuple(v.shape) for v in variables]
        if shapes != self._shapes:
            raise ValueError(f"this algorithm was set up with the gradients of {len(self._shapes)} sources of "
                             f"shapes {self._shapes}; DistributedGradientTape.gradient got {len(shapes)} of shapes "
                             f"{shapes}: use one algorithm object per set of sources")
        self._variables = list(variables)

    def set_gradients(self, grads: list) -> None:
        super().set_gradients(grads)
        self.result = list(grads)

    def snapshot(self):
        """No optimizer: no hyper-parameters (algorithms then compress gradients, not SGD steps)."""
        return [{}]

    def apply_update(self, indices: list[int], snapshot, flat_grads=None) -> None:
        """Records the gradients of ``indices`` (slices of ``flat_grads``) as the tape's result."""
        self.applied = True
        if flat_grads is not None:
            for i, (_, value) in zip(indices, self._slices(indices, flat_grads)):
                self.result[i] = value

    def set_params_from_flat(self, indices: list[int], flat) -> None:
        raise NotImplementedError(NO_WEIGHTS)

    def add_to_params(self, indices: list[int], flat, alpha: float = 1.0) -> None:
        raise NotImplementedError(NO_WEIGHTS)


_CONTEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # algorithm -> its TapeContext


def check_supported(algorithm: Algorithm) -> None:
    """NotImplementedError naming what ``algorithm`` needs that the tape does not offer."""
    require_capabilities(algorithm, TapeContext.capabilities,
                         "DistributedGradientTape does not offer (it only returns gradients); pass it to "
                         "relaxlib_tf.keras.DistributedOptimizer, which runs the step")


def reduce(algorithm: Algorithm, grads: list, variables: list) -> list:
    """``grads`` of ``variables`` through one step of ``algorithm`` (set up on its first call)."""
    ctx = _CONTEXTS.get(algorithm)
    if ctx is None:
        ctx = TapeContext(variables, algorithm)
        algorithm.setup(ctx)
        _CONTEXTS[algorithm] = ctx
    ctx.check_sources(variables)
    if not tf.executing_eagerly() and not algorithm.traceable(ctx):
        raise NotImplementedError(f"{algorithm.describe()} cannot be traced into tf.function in "
                                  "DistributedGradientTape; call the tape eagerly")
    ctx.set_gradients(grads)
    step_or_abandon(algorithm, ctx)
    ctx.step_count += 1
    return ctx.result
