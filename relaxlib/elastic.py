"""Horovod's elastic API (framework-neutral part): training that survives a lost rank.

Horovod's ``hvd.elastic`` keeps training state in memory (``commit``), rolls back uncommitted
changes (``restore``) and brings every rank to rank 0's state (``sync``); its ``run`` decorator
re-runs the training function after the set of ranks changed. relaxlib does the same on Open
MPI's fault-tolerant MPI (ULFM; ``relaxrun --min-np N`` launches with it): when a rank's process
is lost, every survivor's pending collective raises ``ProcessFailedError``; ``run`` then restores
the last commit, re-forms the world from the survivors (``relaxlib.reset()``: the lowest surviving
rank becomes rank 0), runs the reset callbacks, synchronizes the state from the new rank 0 and
calls the function again. At most the steps since the last ``commit`` are lost.

With ``relaxrun --max-np``, ``commit`` raises ``HostsUpdatedInterrupt`` when the job's capacity
exceeds its size, and ``run`` adds the missing workers (``relaxlib.grow``; docs/elastic.md). Without
fault tolerance (Debian's Open MPI 4.1, or ``mpirun`` without ``--with-ft ulfm``) a lost rank ends
the job with an error on the others, as before.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import subprocess
import time
from typing import Callable

from relaxlib import basics
from relaxlib.errors import HostsUpdatedInterrupt, MPIError, ProcessFailedError, RelaxError, ShutdownError, StalledError

logger = logging.getLogger("relaxlib")

# How long a survivor whose collective failed waits for the core to confirm that a process was lost
# (its failure watch polls every 50 ms; a revoked communicator can fail a wait a moment before).
FAILURE_CONFIRMATION_S = 3.0
# How long a survivor that found a rank silent waits for the loss to be confirmed once the rank is
# evicted: the survivors' reports of the silence end within a grace of each other (at most 10 s,
# transport/liveness.h), and the one on the silent rank's host kills it at the end of its report.
EVICTION_CONFIRMATION_S = 15.0
# How long rank 0 lets the host discovery script run at a commit, and how often it runs it at most.
DISCOVERY_TIMEOUT_S = 10.0
DISCOVERY_INTERVAL_S = 1.0
# How long a job below --min-np waits for workers to be added back by default (Horovod's default).
DEFAULT_ELASTIC_TIMEOUT_S = 600.0


class State:
    """Training state kept in host memory: ``save`` copies it, ``restore`` rolls back to the last
    copy, ``sync`` makes every rank equal to rank 0. Subclasses say what the state is."""

    def __init__(self, bcast_object: Callable, get_rank: Callable[[], int]):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: list[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks) -> None:
        """Functions to run after the set of ranks changed (``run`` calls them after a reset, before
        the state is synchronized): rescale the learning rate, rebuild process sets, ..."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Resets the state and runs the reset callbacks (``run`` calls this after re-forming the
        world)."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the current state as the one ``restore`` returns to; then, when workers are to be
        added (``relaxrun --max-np``), raises ``HostsUpdatedInterrupt`` on every rank."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises ``HostsUpdatedInterrupt`` on every rank when the capacity exceeds the world
        (``relaxrun --max-np``: lost ranks are replaced; with ``--host-discovery-script``, up to
        the slots it lists): rank 0 decides, one small broadcast per commit. Nothing without
        ``--max-np``."""
        if not growth_enabled():
            return
        count = self._bcast_object(workers_to_add() if self._rank() == 0 else None)
        if count:
            raise HostsUpdatedInterrupt(count)

    def save(self) -> None:
        """Copies the state to host memory."""
        raise NotImplementedError

    def restore(self) -> None:
        """Returns to the last saved state, undoing uncommitted changes."""
        raise NotImplementedError

    def sync(self) -> None:
        """Makes every rank's state equal to rank 0's (collective)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Called by ``on_reset`` before a re-synchronization; nothing by default."""


class ObjectState(State):
    """State made of plain Python values, given as keyword arguments and exposed as attributes."""

    def __init__(self, bcast_object: Callable, get_rank: Callable[[], int], **kwargs):
        super().__init__(bcast_object, get_rank)
        self._saved_state = dict(kwargs)
        self._set_attrs()

    def save(self) -> None:
        """Copies the current attribute values."""
        self._saved_state = {name: copy.deepcopy(getattr(self, name)) for name in self._saved_state}

    def restore(self) -> None:
        """Sets the attributes back to the saved values."""
        self._set_attrs()

    def sync(self) -> None:
        """Broadcasts rank 0's saved values and sets them on every rank."""
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


def growth_enabled() -> bool:
    """Whether this job adds workers back (``relaxrun --max-np``: RELAX_ELASTIC_MAX_NP), and has
    not given up on it after a failed attempt."""
    return _limits()[2] is not None and not _growth_failed


_growth_failed: list[str] = []  # why adding workers failed (then no more attempts)


def capacity() -> int:
    """How many ranks the job may run now: the slots the host discovery script lists
    (RELAX_ELASTIC_DISCOVERY; ``host`` or ``host:slots`` per line, ``--slots-per-host`` where a
    line has none; run at most every DISCOVERY_INTERVAL_S), else the launch's -np
    (RELAX_ELASTIC_LAUNCH_NP: lost ranks are replaced); at most --max-np."""
    _, _, max_np = _limits()
    script = os.environ.get("RELAX_ELASTIC_DISCOVERY")
    if script:
        now = time.monotonic()
        if _discovered["at"] is None or now - _discovered["at"] >= DISCOVERY_INTERVAL_S:
            _discovered.update(at=now, slots=_discover(script, int(os.environ.get("RELAX_ELASTIC_SLOTS", "1"))))
        total = _discovered["slots"]
    else:
        total = int(os.environ.get("RELAX_ELASTIC_LAUNCH_NP") or basics.size())
    return min(total, max_np) if max_np else total


def _discover(script: str, slots_per_host: int) -> int:
    """The slots ``script`` lists; 0 when it fails (nobody is added), lines it cannot read skipped
    with a warning (rank 0 must reach its broadcast whatever the script prints)."""
    try:
        listed = subprocess.run([script], capture_output=True, text=True, timeout=DISCOVERY_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError) as error:
        logger.warning("relaxlib elastic: host discovery script %s failed: %s", script, error)
        return 0
    total = 0
    for line in listed.stdout.split():
        host, _, slots = line.partition(":")
        if not slots:
            total += slots_per_host
        elif slots.isdigit() and host:
            total += int(slots)
        else:
            logger.warning("relaxlib elastic: host discovery script %s printed %r, not host or host:slots", script,
                           line)
    return total


_discovered: dict = {"at": None, "slots": 0}  # rank 0's last run of the discovery script


def workers_to_add() -> int:
    """How many workers to start now (capacity minus the world, never negative)."""
    return max(0, capacity() - basics.size())


def eviction_enabled() -> bool:
    """Whether a rank that stops answering (frozen, hung: no loss MPI can see) is evicted in an
    elastic job: RELAX_ELASTIC_EVICT, on unless set to 0."""
    text = os.environ.get("RELAX_ELASTIC_EVICT", "1").strip()
    if text not in ("0", "1"):
        raise ValueError(f"RELAX_ELASTIC_EVICT={text} must be 0 or 1")
    return text == "1"


def _evict_silent_peers() -> bool:
    """Kills the processes on this host of the peers the core found silent (a wait failed with
    StalledError after RELAX_OP_TIMEOUT), so MPI's fault tolerance reports them lost and the
    survivors re-form the world without them (a survivor on each one's host does so); True if the
    core named silent peers at all, here or elsewhere."""
    if not basics.silent_peer_pids():
        return False
    basics.end_silent_processes()
    return True


def _lost_a_rank(error: RelaxError) -> bool:
    """Whether ``error`` comes from a lost process (waiting briefly for the core to confirm it when
    the error is of a kind a loss can cause first: a shutdown, a stall, an MPI error). A stall that
    names silent peers makes them lost first, where eviction is on (``eviction_enabled``): a peer on
    this host is killed here; one elsewhere by a survivor on its host, which this rank waits for."""
    if isinstance(error, ProcessFailedError):
        return True
    if not isinstance(error, (ShutdownError, StalledError, MPIError)) or not basics.fault_tolerance()[0]:
        return False
    wait = FAILURE_CONFIRMATION_S
    if isinstance(error, StalledError) and eviction_enabled() and _evict_silent_peers():
        wait = EVICTION_CONFIRMATION_S
    deadline = time.monotonic() + wait
    while not basics.process_failure_noted():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _limits() -> tuple[int, int | None, int | None]:
    """(min_np, reset_limit, max_np) from relaxrun's --min-np / --reset-limit / --max-np
    (RELAX_ELASTIC_*; Horovod's HOROVOD_ELASTIC_* names are read too)."""
    def read(name: str) -> int | None:
        text = os.environ.get(f"RELAX_ELASTIC_{name}") or os.environ.get(f"HOROVOD_ELASTIC_{name}")
        if not text:
            return None
        try:
            value = int(text)
            if value < 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"RELAX_ELASTIC_{name}={text} is not a whole number >= 0") from None
        return value
    return read("MIN_NP") or 1, read("RESET_LIMIT"), read("MAX_NP")


def elastic_timeout() -> float:
    """Seconds a job below ``--min-np`` waits for capacity to add workers back (relaxrun's
    ``--elastic-timeout``: RELAX_ELASTIC_TIMEOUT, or Horovod's HOROVOD_ELASTIC_TIMEOUT; Horovod's
    default, 600 s, when neither is set)."""
    text = os.environ.get("RELAX_ELASTIC_TIMEOUT") or os.environ.get("HOROVOD_ELASTIC_TIMEOUT")
    if not text:
        return DEFAULT_ELASTIC_TIMEOUT_S
    try:
        value = float(text)
        if not value >= 0 or value == float("inf"):
            raise ValueError
    except ValueError:
        raise ValueError(f"RELAX_ELASTIC_TIMEOUT={text} is not a number of seconds >= 0") from None
    return value


class _FailedWhileWaiting(Exception):
    """The broadcast of a decision below ``--min-np`` failed (a rank lost meanwhile): carries the
    error to ``run_fn``, which resets again (never seen by the user)."""

    def __init__(self, error: RelaxError) -> None:
        super().__init__(str(error))
        self.error = error


def _grow_back_to(min_np: int, state: State, error: RelaxError, timeout: float) -> None:
    """After a reset left fewer than ``min_np`` ranks: adds workers back up to the capacity once it
    allows ``min_np`` ranks (``--max-np``; the discovery script is asked again every
    DISCOVERY_INTERVAL_S), waiting at most ``timeout`` seconds; otherwise, or without
    ``--max-np``, raises ProcessFailedError saying why, on every rank. Rank 0 decides and
    broadcasts each decision, so every rank waits, grows or fails together; a rank lost meanwhile
    fails the broadcast on every survivor (``_FailedWhileWaiting``: the caller resets again)."""
    short = f"{error} (only {basics.size()} ranks left, fewer than --min-np={min_np}"
    if not growth_enabled():
        why = "; --max-np was not given, so no workers are added back" if not _growth_failed else \
            f"; adding workers failed earlier: {_growth_failed[-1]}"
        raise ProcessFailedError(f"{short}{why}: the job cannot go on)") from error
    deadline = time.monotonic() + timeout
    while True:
        decision = None
        if state._rank() == 0:
            try:
                room = workers_to_add()
            except Exception as unreadable:  # (told to every rank, never left in the broadcast alone)
                decision = ("fail", f"the capacity could not be read: {unreadable}")
            else:
                if basics.size() + room >= min_np:
                    decision = ("grow", room)
                elif time.monotonic() >= deadline:
                    decision = ("fail", f"after --elastic-timeout={timeout:g} s the capacity is "
                                        f"{basics.size() + room} ranks")
                else:
                    decision = ("wait", 0)
        try:
            verdict, detail = state._bcast_object(decision)
        except RelaxError as failed:
            raise _FailedWhileWaiting(failed) from failed
        if verdict == "grow":
            break
        if verdict == "fail":
            raise ProcessFailedError(f"{short}; {detail}: the job cannot go on)") from error
        time.sleep(DISCOVERY_INTERVAL_S)
    started = time.monotonic()
    try:
        basics.grow(detail)
    except RelaxError as grow_error:
        _growth_failed.append(str(grow_error))
        raise ProcessFailedError(f"{short}; adding {detail} worker(s) back failed: {grow_error})") from grow_error
    logger.warning("relaxlib elastic: below --min-np=%d, %d worker(s) joined in %.2f s: now rank %d of %d",
                   min_np, detail, time.monotonic() - started, basics.rank(), basics.size())


def run_fn(func: Callable) -> Callable:
    """The ``hvd.elastic.run`` decorator: ``func(state, ...)`` starts from rank 0's state on every
    rank (``state.sync()``). When a rank's process is lost (``ProcessFailedError``, with fault
    tolerance on), every survivor restores the last commit, re-forms the world without the lost
    ranks (``relaxlib.reset()``), runs the reset callbacks, synchronizes from the new rank 0 and
    calls ``func`` again. Any other error propagates. When fewer than ``--min-np`` ranks are left,
    workers are added back first (``--max-np``, within ``--elastic-timeout``); fails with
    ``ProcessFailedError`` when they cannot be, or after ``--reset-limit`` resets."""
    @functools.wraps(func)
    def wrapper(state: State, *args, **kwargs):
        min_np, reset_limit, _ = _limits()
        timeout = elastic_timeout()  # (read now: a bad setting is named before training, not after a loss)
        eviction_enabled()
        resets = 0
        while True:
            try:
                state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as interrupt:  # raised by commit: nothing to roll back
                started = time.monotonic()
                try:
                    basics.grow(interrupt.count)
                except RelaxError as error:  # (every rank: the spawn is collective) go on as we are
                    _growth_failed.append(str(error))
                    logger.warning("relaxlib elastic: adding %d worker(s) failed, going on with %d ranks and "
                                   "adding none for the rest of this job: %s", interrupt.count, basics.size(), error)
                    continue
                logger.warning("relaxlib elastic: %d worker(s) joined in %.2f s: now rank %d of %d",
                               interrupt.count, time.monotonic() - started, basics.rank(), basics.size())
                state.on_reset()
            except RelaxError as error:
                if not _lost_a_rank(error):
                    raise
                while True:  # again when a rank is lost while the survivors wait to grow back
                    if reset_limit is not None and resets >= reset_limit:
                        raise ProcessFailedError(f"{error} (no reset: --reset-limit={reset_limit} reached)") \
                            from error
                    state.restore()
                    started = time.monotonic()
                    basics.reset()
                    if eviction_enabled():
                        basics.end_lost_processes()
                    resets += 1
                    logger.warning("relaxlib elastic: world re-formed in %.2f s: now rank %d of %d (reset %d), "
                                   "resuming from the last commit", time.monotonic() - started, basics.rank(),
                                   basics.size(), resets)
                    if basics.size() >= min_np:
                        break
                    try:
                        _grow_back_to(min_np, state, error, timeout)
                        break
                    except _FailedWhileWaiting as waiting:
                        if not _lost_a_rank(waiting.error):
                            raise waiting.error from None
                        error = waiting.error
                state.on_reset()

    return wrapper
