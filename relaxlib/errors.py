"""Exceptions raised by relaxlib, one class per failure kind of the core (relax_status_t).

Every class derives from :class:`RelaxError` (a ``RuntimeError``), which is also exported as
``HorovodInternalError`` by the framework modules so Horovod-style ``except`` clauses keep working.
"""

from __future__ import annotations

import re


class RelaxError(RuntimeError):
    """Base class of every relaxlib error; ``code`` is the core's status code."""

    code = 8

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class NotInitializedError(RelaxError, ValueError):
    """An operation was called before ``init()`` or after ``shutdown()``."""

    code = 1


class InvalidArgumentError(RelaxError, ValueError):
    """A request was rejected locally: bad dtype, op, root rank, shape or splits."""

    code = 2


class MismatchError(RelaxError):
    """Ranks submitted the same name with different operations, shapes, dtypes or options."""

    code = 3


class ShutdownError(RelaxError):
    """relaxlib shut down (here or on another rank) before the operation completed."""

    code = 4


class StalledError(RelaxError):
    """Some ranks never submitted the operation within ``RELAX_OP_TIMEOUT`` (or
    ``RELAX_STALL_SHUTDOWN_TIME``)."""

    code = 5


class DuplicateNameError(RelaxError, ValueError):
    """An operation with this name is already pending on this rank."""

    code = 6


class MPIError(RelaxError):
    """MPI failed or cannot be used (e.g. insufficient thread support)."""

    code = 7


class ProcessFailedError(ShutdownError):
    """A rank's process was lost. With fault tolerance on (``mpirun --with-ft ulfm``, the default
    of ``relaxrun``), the survivors can go on: ``hvd.elastic.run`` restores the last commit and
    re-forms the world without the lost ranks (``relaxlib.reset()``)."""

    code = 12


class ProcessSetError(RelaxError, ValueError):
    """Unknown process set, or this rank is not a member of it."""

    code = 10


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's: raised by ``state.commit()`` on every rank when workers are to be added (the
    capacity grew, e.g. a lost rank can be replaced); ``hvd.elastic.run`` catches it, grows the
    world and goes on from the commit just made, with the new workers synchronized from rank 0.
    ``count``: how many workers join."""

    def __init__(self, count: int = 0, skip_sync: bool = False) -> None:
        super().__init__(f"{count} worker(s) are joining")
        self.count = count
        self.skip_sync = skip_sync


_BY_CODE = {cls.code: cls for cls in (NotInitializedError, InvalidArgumentError, MismatchError, ShutdownError,
                                       StalledError, DuplicateNameError, MPIError, ProcessSetError,
                                       ProcessFailedError)}


def error_named(text: str) -> RelaxError | None:
    """The exception a TensorFlow error's message names, or None: a relaxlib op's
    (``"... [ProcessFailedError] <message>"``; TF may put its own words first), else the last one a
    ``tf.py_function`` raised (``"ProcessFailedError: <message>"`` in the traceback TF quotes)."""
    classes = {cls.__name__: cls for cls in (RelaxError, *_BY_CODE.values())}
    for match in re.finditer(r"\[(\w+)\] (.*)", text):
        if match.group(1) in classes:
            return classes[match.group(1)](match.group(2))
    raised = [m for m in re.finditer(r"(?:^|[\s.])(\w+): (.*)", text) if m.group(1) in classes]
    return classes[raised[-1].group(1)](raised[-1].group(2)) if raised else None


def error_for(code: int, message: str) -> RelaxError:
    """The exception instance for a core status code and message."""
    return _BY_CODE.get(code, RelaxError)(message, code)
