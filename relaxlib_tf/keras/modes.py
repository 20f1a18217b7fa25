"""How the Keras ``DistributedOptimizer`` runs a relaxation: the two states it keeps, as types.

``Binding``: which context the algorithm was set up with, and so where its state (residuals,
momentum, estimates) lives: host arrays (``KerasContext``) or TF variables (``KerasGraphContext``).
It is fixed by the first step and never changes.

``FitPath``: how the step ``model.fit`` traced last runs the algorithm: traced into the step's
graph as TF ops, split around the Keras update kept in the graph, or as one ``tf.py_function``.

Both are string enums, so a value still compares equal to its name (``"host"``, ``"graph"``, ...).
"""

from __future__ import annotations

import enum


class Binding(enum.StrEnum):
    """The context an algorithm was set up with (None on the optimizer before the first step)."""

    HOST = "host"    # KerasContext: flat numpy arrays, the algorithm runs in Python
    GRAPH = "graph"  # KerasGraphContext: TF ops and variables, traced into the step


class FitPath(enum.StrEnum):
    """How the last traced (``model.fit``) step ran the algorithm (None before one was traced)."""

    GRAPH = "graph"              # the whole step traced as TF ops (``Algorithm.traceable``)
    SPLIT = "split"              # two py_functions around the Keras update (``splits_around_update``)
    PY_FUNCTION = "py_function"  # the whole step on host arrays inside one tf.py_function
