"""The algorithm specification shared by every framework binding."""

from __future__ import annotations


class Algorithm:
    """Base class of communication algorithms.

    An algorithm is a plain description (its knobs); each framework binding turns it into an
    engine that hooks the training step. ``needs_model`` says whether the binding must be given
    the model (for algorithms that hook module forward passes).
    """

    name = "algorithm"
    needs_model = False

    def describe(self) -> str:
        """One-line human-readable summary of the configuration."""
        knobs = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{self.name}({knobs})"

    def __repr__(self) -> str:
        return self.describe()


class AllReduce(Algorithm):
    """Baseline: average gradients with a fused ring all-reduce, overlapped with backward."""

    name = "allreduce"
