"""User-visible handles of torch collectives: submitting a request to the core (its errors
raised as relaxlib exceptions), the registry that maps a handle to its core requests and to how
their result is made, and waiting for it (``poll``, ``synchronize``)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Callable

import torch

from relaxlib import _core
from relaxlib.errors import error_for
from relaxlib_torch import _extension

_extension.load()
ops = torch.ops.relaxlib

_SUBMIT_ERROR = re.compile(r"\[relaxlib:(\d+)\] (.*)", re.S)


@dataclass
class _Pending:
    """Core handles behind one user-visible handle, and how to turn them into the result."""

    core_handles: list[int]
    finish: Callable[[list[int]], object]
    keep_alive: list = field(default_factory=list)


_handle_map: dict[int, _Pending] = {}
_handle_counter = itertools.count(1)


def submit(fn: Callable, *args) -> object:
    """Calls a torch.ops.relaxlib submit op, mapping core errors to relaxlib exceptions."""
    try:
        return fn(*args)
    except RuntimeError as exc:
        raise_submit_error(exc)


def raise_submit_error(exc: RuntimeError):
    """Raises the relaxlib exception a core error message names (``exc`` itself if none)."""
    match = _SUBMIT_ERROR.search(str(exc))
    if match is None:
        raise exc
    raise error_for(int(match.group(1)), (match.group(2).splitlines() or [""])[0]) from None


def register(core_handles: list[int], finish: Callable[[list[int]], object], keep_alive: list | None = None) -> int:
    """A new user-visible handle for ``core_handles``: ``synchronize`` returns ``finish(core_handles)``;
    ``keep_alive`` (tensors the core reads or writes) lives until then."""
    handle = next(_handle_counter)
    _handle_map[handle] = _Pending(core_handles, finish, keep_alive or [])
    return handle


def wait_core(core_handle: int) -> None:
    """Waits for one core request (Ctrl-C interrupts); raises its error, releasing the handle."""
    status = _core.wait_interruptibly(core_handle, ops.wait_for)
    if status != 0:
        message = ops.message(core_handle)
        ops.release(core_handle)
        raise error_for(status, message)


def engine_output(handles: list[int]) -> torch.Tensor:
    """Waits for a request whose output the engine allocated (allgather, reducescatter) and returns it."""
    wait_core(handles[0])
    out = ops.output(handles[0])
    ops.release(handles[0])
    return out


class DerivedHandle:
    """A handle made of other handles (e.g. a sparse allreduce's two allgathers): ``poll`` and
    ``synchronize`` ask it, calling it gives the result."""

    def __call__(self) -> torch.Tensor:
        raise NotImplementedError

    def poll(self) -> bool:
        raise NotImplementedError


def poll(handle) -> bool:
    """True when the operation behind ``handle`` has completed (``synchronize`` will not block)."""
    if isinstance(handle, DerivedHandle):
        return handle.poll()
    pending = _handle_map.get(handle)
    if pending is None:
        raise ValueError(f"unknown or already synchronized handle {handle}")
    return all(ops.poll(h) for h in pending.core_handles)


def synchronize(handle):
    """Waits for ``handle`` and returns its result; raises the operation's error, if any."""
    if isinstance(handle, DerivedHandle):
        return handle()
    pending = _handle_map.pop(handle, None)
    if pending is None:
        raise ValueError(f"unknown or already synchronized handle {handle}")
    if pending.core_handles:
        ops.drive(pending.core_handles[-1])  # run its rounds here rather than wake the engine thread
    return pending.finish(pending.core_handles)
