"""``relaxrun --auto``: run the advisor for a few steps, then relaunch with the mode it picks.

Phase 1 (RELAX_ADVISE and RELAX_AUTO set): after the advice, rank 0 writes the pick to
RELAX_AUTO_FILE and every rank ends the script (the advice is collective, so all ranks are at
the same step). Phase 2: relaxrun starts the script again with RELAX_ALGORITHM=<mode>, which a
``DistributedOptimizer`` built with ``algorithm=None`` uses as its algorithm.

The pick is the predicted-fastest mode whose kind departs no further from all-reduce's
mathematics than the level the user allowed (``--auto exact`` by default: all-reduce or DeAR,
whose results equal all-reduce's).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Callable

from relaxlib import algorithms, basics
from relaxlib.advisor import kind_of
from relaxlib.algorithms import modes

LEVELS = modes.KINDS  # increasing departure from all-reduce


def allowed_level() -> str | None:
    """The ``--auto`` level of this launch (RELAX_AUTO), or None when not choosing."""
    level = os.environ.get("RELAX_AUTO", "")
    if not level:
        return None
    if level not in LEVELS:
        raise ValueError(f"RELAX_AUTO={level!r} is not one of {', '.join(LEVELS)}")
    return level


def choose(predictions: list, level: str, supported: set[str]) -> tuple[str, float]:
    """The fastest predicted mode in ``supported`` whose kind is within ``level``, and its
    predicted speedup over all-reduce. ``predictions`` come fastest first."""
    allowed = set(LEVELS[:LEVELS.index(level) + 1])
    baseline = next(p for p in predictions if p.mode == modes.BASELINE)
    for p in predictions:
        if p.mode in supported and kind_of(p.mode) in allowed:
            return p.mode, p.samples_per_s / baseline.samples_per_s
    return modes.BASELINE, 1.0


def finish_phase(predictions: list, runs: Callable[[algorithms.Algorithm], bool], hard_exit: bool = False) -> None:
    """Phase 1 after the advice: rank 0 records the pick among the modes whose algorithm the
    caller ``runs``; every rank then ends the script, by SystemExit, or (``hard_exit``, inside
    TensorFlow's py_function, which would turn SystemExit into an op error) by shutting relaxlib
    down and exiting the process from C."""
    level = allowed_level()
    if level is None:
        return
    mode, speedup = choose(predictions, level, {p.mode for p in predictions if runs(algorithm_for(p.mode))})
    path = os.environ.get("RELAX_AUTO_FILE")
    if basics.rank() == 0:
        print(f"relaxrun --auto {level}: picked {mode} (predicted {speedup:.2f}x all-reduce); restarting with it",
              flush=True)
        if path:
            with open(path, "w") as f:
                json.dump({"mode": mode, "predicted_speedup": speedup, "level": level}, f)
    if hard_exit:
        sys.stdout.flush()
        sys.stderr.flush()
        basics.shutdown()
        ctypes.CDLL(None).exit(0)  # C exit: runs the core's MPI_Finalize hook, which os._exit skips
    raise SystemExit(0)


def algorithm_for(mode: str) -> algorithms.Algorithm:
    """The algorithm object of an advisor mode name (``allreduce``, ``dear``, ``compressed-uint8``,
    ``decentralized-ring``, ``partial-smart``, ``async``, ...: ``relaxlib.algorithms.modes.names()``)."""
    return modes.get(mode).algorithm()


def default_algorithm() -> algorithms.Algorithm | None:
    """The algorithm RELAX_ALGORITHM names (set by ``relaxrun --auto``), or None."""
    mode = os.environ.get("RELAX_ALGORITHM", "")
    return algorithm_for(mode) if mode else None
