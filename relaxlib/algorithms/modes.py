"""The advisor's modes: one registry that every algorithm module declares its modes into.

A *mode* is one ready-to-run configuration of an algorithm under a kebab-case name, the string
users pass (``RELAX_ALGORITHM``, ``relaxrun --auto``, ``examples/torch_digits.py --algorithm``)
and find in the advisor's table and the benchmarks' results: ``allreduce``, ``dear``,
``compressed-uint8``, ``decentralized-ring``, ``partial-smart``, ``async``, ... The module that
defines an algorithm registers its modes with :func:`register`, saying how far each departs from
all-reduce (``kind``), what to watch for (``caveat``), how to build the algorithm from the mode's
``params`` and which performance-model equation predicts it (called with the same ``params``).
``relaxlib.auto``, ``relaxlib.advisor`` and ``relaxlib.perfmodel`` only iterate this registry.

Importing this module imports ``relaxlib.algorithms`` first (it is part of that package), so the
registry is complete whenever it can be read. Modes that depend on what the core library
registered (one per codec) are registered lazily, on the first read, so that importing the
algorithms does not load the core.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # run time: no import, perfmodel and the algorithms import this module
    from relaxlib.algorithms.base import Algorithm
    from relaxlib.perfmodel import Prediction, Workload

# How far a mode departs from all-reduce's mathematics, least first (the levels of relaxrun --auto):
# exact results, fp16 rounding, compressed gradients with error feedback, models that differ
# between ranks, asynchronous averaging.
KINDS = ("exact", "fp16", "compressed", "averaging", "async")
BASELINE = "allreduce"  # the mode every other is compared with (registered by relaxlib.algorithms.base)
NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")  # kebab-case


@dataclass(frozen=True)
class Mode:
    """One advisor mode. ``build(**params)`` makes its algorithm; ``predict(workload, **params)``
    is its performance-model equation. ``position`` orders the modes the performance model
    predicts equally fast (lower first; then registration order)."""

    name: str
    kind: str
    caveat: str
    build: Callable[..., Algorithm]
    predict: Callable[..., Prediction]
    params: Mapping[str, Any] = field(default_factory=dict)
    position: int = 0

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name):
            raise ValueError(f"mode name {self.name!r} is not kebab-case (lower-case words joined by '-')")
        if self.kind not in KINDS:
            raise ValueError(f"mode {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def algorithm(self) -> Algorithm:
        """A new algorithm object configured as this mode."""
        return self.build(**self.params)

    def prediction(self, workload: Workload) -> Prediction:
        """The performance model's prediction of this mode on ``workload``, under this mode's name."""
        return replace(self.predict(workload, **self.params), mode=self.name)


_REGISTRY: dict[str, Mode] = {}
_PROVIDERS: list[Callable[[], Iterable[Mode]]] = []  # lazily registered, see register_lazily
_LOCK = threading.Lock()


def register(*modes: Mode) -> None:
    """Adds ``modes`` to the registry; a name can be registered once."""
    for mode in modes:
        if mode.name in _REGISTRY:
            raise ValueError(f"mode {mode.name!r} is already registered")
        _REGISTRY[mode.name] = mode


def register_lazily(provider: Callable[[], Iterable[Mode]]) -> None:
    """Registers the modes ``provider`` returns when the registry is first read (for modes that
    need the core library, such as one per registered codec)."""
    _PROVIDERS.append(provider)


def _complete() -> dict[str, Mode]:
    """The registry, after registering what the lazy providers return (a provider that fails is
    asked again at the next read)."""
    if _PROVIDERS:
        with _LOCK:
            while _PROVIDERS:
                provided = tuple(_PROVIDERS[0]())
                del _PROVIDERS[0]
                register(*provided)
    return _REGISTRY


def registered() -> tuple[Mode, ...]:
    """Every registered mode, in listing order (``position``, then registration order)."""
    return tuple(sorted(_complete().values(), key=lambda mode: mode.position))


def names() -> tuple[str, ...]:
    """The names of every registered mode, in listing order."""
    return tuple(mode.name for mode in registered())


def find(name: str) -> Mode | None:
    """The mode registered as ``name``, or None."""
    return _complete().get(name)


def get(name: str) -> Mode:
    """The mode registered as ``name``; ValueError naming the choices if there is none."""
    mode = find(name)
    if mode is None:
        raise ValueError(f"unknown mode {name!r}; choose one of {', '.join(names())}")
    return mode
