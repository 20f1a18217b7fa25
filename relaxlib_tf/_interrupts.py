"""Delivers a signal that interrupted a relaxlib TensorFlow op (see csrc/interrupts.h).

The op library fails ops that wait for their peers when SIGINT or SIGALRM arrives, with a
CancelledError saying "interrupted by signal N", and holds the signal back. Once TensorFlow has
built that exception and raises it in Python (eagerly, or from a ``tf.function`` whose exception
is built in C++), the signal's Python handler runs in its place: Ctrl-C raises KeyboardInterrupt
and pytest-timeout's alarm its timeout, as they would between two Python statements. A handler
that does not raise leaves the CancelledError to propagate.

The handler cannot run while the exception is being built: pybind11, which may be building it,
turns an exception raised there into a RuntimeError. So the constructor only arms a trace
function on the frames below it, and the handler runs on the first "exception" event, which
replaces the propagating exception with whatever the handler raises.
"""

from __future__ import annotations

import re
import signal
import sys

from tensorflow.python.framework import errors_impl

_INTERRUPTED = re.compile(r"\[RelaxError\] interrupted by signal (\d+) ")
_installed = False


def install() -> None:
    """Makes CancelledError carrying relaxlib's mark hand its signal back to Python."""
    global _installed
    if _installed:
        return
    _installed = True
    original = errors_impl.CancelledError.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        match = _INTERRUPTED.search(self.message or "")
        if match:
            _run_handler_when_raised(self, int(match.group(1)), sys._getframe(1))

    errors_impl.CancelledError.__init__ = __init__


def _run_handler_when_raised(error: BaseException, signo: int, caller) -> None:
    """Runs the Python handler of ``signo`` when ``error`` is first raised in a frame of the
    stack below ``caller`` (inclusive)."""
    frames = []
    while caller is not None:
        frames.append((caller, caller.f_trace))
        caller = caller.f_back
    previous = sys.gettrace()
    budget = [100_000]  # events before giving up, should TensorFlow swallow `error` (then the signal is lost)

    def disarm() -> None:
        for frame, trace in frames:
            frame.f_trace = trace
        sys.settrace(previous)

    def tracer(frame, event, arg):
        budget[0] -= 1
        if budget[0] < 0:
            disarm()
            return None
        if event == "exception" and arg[1] is error:
            disarm()
            handler = signal.getsignal(signo)
            if callable(handler):
                handler(signo, frame)  # KeyboardInterrupt, a timeout: replaces `error`
            elif signo == signal.SIGINT and handler == signal.SIG_DFL:
                raise KeyboardInterrupt
            return None
        return tracer

    for frame, _ in frames:
        frame.f_trace = tracer
    sys.settrace(tracer)
