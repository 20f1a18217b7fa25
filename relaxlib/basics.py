"""Process-level API shared by every framework: init/shutdown, ranks and sizes, build facts.

The framework modules (``relaxlib_torch``, ``relaxlib_tf``) re-export these functions, so
``hvd.init()`` and ``relaxlib.init()`` start the same single core engine in a process.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import shutil
import sys
import threading
import time
import warnings
import weakref

from relaxlib import _core
from relaxlib.errors import NotInitializedError

# Reduction ops (values shared with the core and with Horovod).
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5
# The ops relaxlib implements. Adasum (Horovod's adaptive summation: float32/float64 allreduce
# over a power-of-two number of ranks, never divided by the size) is checked by the core.
REDUCTIONS = (Average, Sum, Adasum, Min, Max, Product)


def exact_gradients() -> bool:
    """Whether allgather, broadcast and reducescatter differentiate exactly
    (``RELAX_COLLECTIVE_GRADIENTS=exact``: the gradient of the sum over ranks) rather than with
    Horovod's formulas (the default): Horovod averages the incoming gradients of allgather and
    broadcast over ranks, and scales reducescatter's by the number of ranks for op=Sum (op=Average
    passes them through)."""
    return os.environ.get("RELAX_COLLECTIVE_GRADIENTS", "horovod") == "exact"


def gather_gradient_op() -> int:
    """The reduction the backward of allgather and broadcast applies to the incoming gradients."""
    return Sum if exact_gradients() else Average


def scatter_gradient_factor(op: int, size: int) -> float:
    """The factor reducescatter's backward applies to the all-gathered gradients, besides the
    prescale and postscale factors."""
    if exact_gradients():
        return 1.0 / size if op == Average else 1.0
    return float(size) if op == Sum else 1.0


def resolve_op(op: int | None, average: bool | None) -> int:
    """The reduction of a Horovod-style call: ``op`` (default Average) or the deprecated
    ``average=True/False``; rejects unknown values (what an op does not support, e.g. Adasum
    on integers or outside allreduce, the core refuses on every rank with a message)."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if op is None:
        if average is not None:
            warnings.warn("Parameter `average` has been replaced with `op` and will be removed", DeprecationWarning,
                          stacklevel=3)
        op = Sum if average is False else Average
    if op not in REDUCTIONS:
        raise ValueError(f"unknown reduction op {op!r}; use Average, Sum, Adasum, Min, Max or Product")
    return op

logger = logging.getLogger("relaxlib")
_atexit_registered = False


def _configure_logging() -> None:
    level = os.environ.get("RELAX_LOG_LEVEL", "warning").upper()
    logger.setLevel({"TRACE": "DEBUG", "WARN": "WARNING"}.get(level, level)
                    if level in {"TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "CRITICAL"}
                    else "WARNING")


_configure_logging()


def init(comm=None, process_sets=None) -> None:
    """Initializes relaxlib (and MPI, unless the application already did). Idempotent: as in
    Horovod, it also does nothing after a peer's shutdown stopped this rank's engine (collectives
    keep raising ShutdownError); re-initializing takes shutdown() then init() on every rank.

    ``comm`` is accepted for Horovod compatibility; only ``None`` or MPI's world communicator is
    supported. ``process_sets`` registers ProcessSet objects (the same list on every rank);
    ``"dynamic"`` is accepted and changes nothing (sets can always be added later).
    """
    global _atexit_registered
    if comm is not None and not _is_world_communicator(comm):
        raise NotImplementedError("relaxlib.init(comm=...) supports only the world communicator for now")
    _wait_for_every_rank_to_init()
    _core.check(_core.lib().relax_init())
    if not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered = True
    if process_sets is not None and process_sets != "dynamic":
        from relaxlib import process_sets as sets
        for index, ps in enumerate(process_sets):
            if isinstance(ps, sets.ProcessSet) and ps.process_set_id is not None:
                continue  # already registered (init called twice)
            try:
                sets.add_process_set(ps)
            except ValueError as exc:
                raise ValueError(f"relaxlib could not register process_sets entry number {index} ({ps}): "
                                 f"{exc}") from None


def _wait_for_every_rank_to_init() -> None:
    """Waits, in slices that let signal handlers run, until every rank is in init() when init
    must create communicators with them (MPI already initialized). A re-initialization gives up
    after RELAX_INIT_TIMEOUT seconds (default 120; 0 waits forever): the peers may have finished."""
    lib = _core.lib()
    again = bool(lib.relax_was_initialized())
    text = os.environ.get("RELAX_INIT_TIMEOUT", "120")
    try:
        timeout = float(text)
        if timeout < 0:
            raise ValueError
    except ValueError:
        raise ValueError(f"RELAX_INIT_TIMEOUT={text} is not a number of seconds >= 0") from None
    started = time.monotonic()
    while lib.relax_init_rendezvous(_core.WAIT_SLICE_MS) == _core.PENDING:
        if again and timeout > 0 and time.monotonic() - started >= timeout:
            from relaxlib.errors import StalledError
            raise StalledError(
                f"init(): not every rank called init() within RELAX_INIT_TIMEOUT={timeout:g} s. Re-initializing "
                "after a shutdown is collective: every rank must call init() again, and some have finished or "
                "stopped using relaxlib.")


def _is_world_communicator(comm) -> bool:
    try:
        from mpi4py import MPI
    except ImportError:
        return False
    return comm is MPI.COMM_WORLD or (hasattr(comm, "Compare") and comm.Compare(MPI.COMM_WORLD) == MPI.IDENT)


_before_shutdown: list[weakref.WeakMethod] = []


def before_shutdown(method) -> None:
    """Registers a bound method that ``shutdown()`` calls first, while collectives still work: a
    collective end of training (a model-averaging algorithm's join). Held weakly: a collected
    object is skipped. Skipped as well when the program exits because of an uncaught exception:
    peers then get ShutdownError instead of waiting for a rank that failed."""
    _before_shutdown.append(weakref.WeakMethod(method))


def grow(count: int, command: str | None = None, args: list[str] | None = None) -> None:
    """Adds ``count`` ranks to the world (collective over every rank; ``hvd.elastic`` calls it when
    workers are to be added back). They run ``command args`` (default: this program again, as it
    was started: ``sys.executable`` and ``sys.argv``) where the launcher places them, with this
    process's RELAX_* / HOROVOD_* / PYTHONPATH settings; their ``init()`` joins the world after the
    current ranks, which keep their numbers. ``size()`` and the transports are the grown world's."""
    global _world_generation
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"grow: count must be a positive integer, not {count!r}")
    if command is None:
        command, args = sys.executable, [*getattr(sys, "orig_argv", [sys.executable, *sys.argv])[1:]]
    settings = [f"{name}={value}" for name, value in sorted(os.environ.items())
                if name.startswith(("RELAX_", "HOROVOD_")) or name == "PYTHONPATH"] + ["RELAX_ELASTIC_JOINED=1"]
    # The new ranks start under `env NAME=value ... command args`: an MPI info value (Open MPI's
    # PMIX_ENVAR) holds at most MPI_MAX_INFO_VAL = 256 characters, which a PYTHONPATH alone can pass.
    env = shutil.which("env") or "/usr/bin/env"
    arguments = [a.encode() for a in [*settings, str(command), *map(str, args or [])]]
    argv = (ctypes.c_char_p * len(arguments))(*arguments)
    _core.check(_core.lib().relax_grow(env.encode(), argv, len(arguments), count, None, None))
    _world_generation += 1
    _after_world_change()


def joined_running_job() -> bool:
    """Whether this process was started by ``grow()`` to join a running job (hvd.elastic's added
    workers): it then skips the start-up checks the running ranks made before it came."""
    return os.environ.get("RELAX_ELASTIC_JOINED") == "1"


def follow_world_changes(method) -> None:
    """Registers a bound method run right after ``reset()`` or ``grow()`` on every rank, in the
    order registered (held weakly): a distributed optimizer sets its algorithm up again there, at
    the point where a worker that joins sets it up for the first time (when it is created)."""
    _world_followers.append(weakref.WeakMethod(method))


def _after_world_change() -> None:
    """Process sets are gone; unnamed operations are numbered from zero again on every rank (a
    failed step may have numbered some on one rank only, and a joining worker starts at zero);
    the registered followers run."""
    from relaxlib import process_sets
    process_sets._reset_after_shutdown()
    with _name_lock:
        _name_counters.clear()
    for ref in list(_world_followers):
        method = ref()
        if method is None:
            _world_followers.remove(ref)
        else:
            method()


_world_followers: list = []


def shutdown() -> None:
    """Stops the engine on every rank. Pending operations fail with ShutdownError."""
    hooks = [ref() for ref in _before_shutdown]
    _before_shutdown.clear()
    if getattr(sys, "last_value", None) is not None:  # the interpreter printed an uncaught exception
        hooks = []
    for hook in hooks:
        if hook is None:
            continue
        try:
            hook()
        except Exception as exc:  # shutting down anyway: report, do not mask the shutdown
            logger.warning("relaxlib: %s before shutdown failed: %s", getattr(hook, "__qualname__", hook), exc)
    _core.lib().relax_shutdown()
    from relaxlib import process_sets
    process_sets._reset_after_shutdown()


def fault_tolerance() -> tuple[bool, str]:
    """Whether this job can survive a lost rank: ``(True, "")``, or ``(False, why not)`` (relaxlib
    built without Open MPI's ULFM, or ``mpirun`` started without ``--with-ft ulfm``)."""
    lib = _core.lib()
    if lib.relax_fault_tolerance():
        return True, ""
    return False, lib.relax_last_error().decode(errors="replace")


def process_failure_noted() -> bool:
    """True once this rank learned that a peer's process was lost (since the last ``reset()``)."""
    return bool(_core.lib().relax_process_failure_noted())


def _pid_list(pid_at) -> list[int]:
    """The list a C ABI function ``pid_at(index)`` hands out one by one, up to its -1."""
    pids = []
    while (pid := int(pid_at(len(pids)))) >= 0:
        pids.append(pid)
    return pids


def silent_peer_pids() -> list[int]:
    """The peers a failed wait found not answering (frozen, hung), once a collective raised
    ``StalledError``: the process id of each that runs on this host, 0 for each on another host;
    empty when no silent peer was found."""
    return _pid_list(_core.lib().relax_silent_peer_pid)


def lost_peer_pids() -> list[int]:
    """The ranks the last ``reset()`` left out of the world: the process id of each that ran on this
    host, 0 for each on another host. A rank that MPI's failure detector declared failed because it
    stopped answering (frozen) may still exist; ``hvd.elastic`` kills those on its host."""
    return _pid_list(_core.lib().relax_lost_peer_pid)


def end_lost_processes() -> int:
    """Kills the processes of the ranks in ``lost_peer_pids()`` that still exist on this host and were
    started by the same launcher (their parent is this process's parent: a lost rank that did die may
    have had its id reused); returns how many. ``hvd.elastic`` calls it after a reset."""
    return int(_core.lib().relax_end_lost_processes())


def end_silent_processes() -> int:
    """Kills the processes of the peers in ``silent_peer_pids()`` that still exist on this host and
    were started by the same launcher (the rule of ``end_lost_processes``); returns how many.
    ``hvd.elastic`` calls it to evict a rank that stopped answering."""
    return int(_core.lib().relax_end_silent_processes())


def reset() -> None:
    """Re-forms the world from the live ranks after a lost rank (collective over the survivors;
    needs fault tolerance, see ``fault_tolerance()``). Ranks are renumbered in their old order, so
    the lowest surviving rank becomes rank 0; ``size()``, ``local_size()`` and the transports are
    those of the new world. Process sets added with ``add_process_set`` are gone (add them again in
    a reset callback). ``hvd.elastic.run`` calls this for you."""
    global _world_generation
    _core.check(_core.lib().relax_reset())
    _world_generation += 1
    _after_world_change()


_world_generation = 0


def world_generation() -> int:
    """How many times ``reset()`` re-formed the world in this process (0: the launch's world): state
    laid out for a number of ranks compares it to know whether it still fits."""
    return _world_generation


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing a Chrome-trace timeline (rank 0 writes; a no-op elsewhere); also started by
    RELAX_TIMELINE=path at init. With ``{rank}`` in the path every rank writes its own file
    (``{rank}`` replaced by its rank). Open it in chrome://tracing or https://ui.perfetto.dev."""
    _core.check(_core.lib().relax_start_timeline(str(file_path).encode(), int(bool(mark_cycles))))


def stop_timeline() -> None:
    """Finishes and closes the timeline file."""
    _core.check(_core.lib().relax_stop_timeline())


def is_homogeneous() -> bool:
    """True when every node runs the same number of ranks."""
    return size() == local_size() * cross_size()


def is_initialized() -> bool:
    """True between init() and shutdown() (and while no other rank has shut down)."""
    return bool(_core.lib().relax_is_initialized())


def _topology(getter: str) -> int:
    value = getattr(_core.lib(), getter)()
    if value < 0:
        raise NotInitializedError("relaxlib has not been initialized; call init() first.")
    return value


def rank() -> int:
    """This process's rank in the world (0..size-1)."""
    return _topology("relax_rank")


def size() -> int:
    """Number of ranks."""
    return _topology("relax_size")


def local_rank() -> int:
    """Rank within this node."""
    return _topology("relax_local_rank")


def local_size() -> int:
    """Number of ranks on this node."""
    return _topology("relax_local_size")


def cross_rank() -> int:
    """Index of this node among the nodes (rank among processes with the same local rank)."""
    return _topology("relax_cross_rank")


def cross_size() -> int:
    """Number of processes with this local rank (the number of nodes when nodes are uniform)."""
    return _topology("relax_cross_size")


def local_ranks() -> list[int]:
    """World ranks of the processes on this node (RELAX_LOCAL_SIZE=k pretends nodes of k ranks)."""
    buffer = (ctypes.c_int32 * 4096)()
    count = _core.lib().relax_local_ranks(buffer, 4096)
    if count < 0:
        raise NotInitializedError("relaxlib has not been initialized; call init() first.")
    return list(buffer[:count])


def mpi_threads_supported() -> bool:
    """True when MPI runs with MPI_THREAD_MULTIPLE."""
    return bool(_topology("relax_mpi_threads_supported"))


def mpi_built() -> bool:
    """relaxlib's transport is MPI: always True."""
    return True


def mpi_enabled() -> bool:
    """True: MPI is the transport in use."""
    return True


def gloo_built() -> bool:
    """Gloo is not a relaxlib transport."""
    return False


def gloo_enabled() -> bool:
    """Gloo is not a relaxlib transport."""
    return False


def nccl_built() -> int:
    """NCCL version built against (0: this is a CPU build), as in Horovod."""
    return 0


def ddl_built() -> bool:
    """IBM DDL is not supported."""
    return False


def ccl_built() -> bool:
    """oneCCL is not supported."""
    return False


def cuda_built() -> bool:
    """This is a CPU build."""
    return False


def rocm_built() -> bool:
    """This is a CPU build."""
    return False


def set_fusion_threshold(num_bytes: int) -> None:
    """Sets the tensor-fusion buffer size in bytes (like RELAX_FUSION_THRESHOLD)."""
    _core.check(_core.lib().relax_set_fusion_threshold(int(num_bytes)))


def set_cycle_time(milliseconds: float) -> None:
    """Sets the engine's idle cycle time in ms (like RELAX_CYCLE_TIME)."""
    _core.check(_core.lib().relax_set_cycle_time_ms(float(milliseconds)))


def engine_stats() -> dict:
    """Engine counters since init: negotiation rounds, completed requests, bytes sent and received,
    and nanoseconds spent negotiating (including waiting for peers) and executing collectives."""
    stats = _core.Stats()
    _core.check(_core.lib().relax_get_stats(ctypes.byref(stats)))
    return {name: getattr(stats, name) for name, _ in _core.Stats._fields_}


def version() -> str:
    """Version of the core library."""
    return _core.lib().relax_version().decode()


_name_counters: dict[tuple[str, int], int] = {}  # (kind, process set id) -> unnamed operations so far
_name_lock = threading.Lock()


def auto_name(kind: str, name: str | None, process_set: object = 0) -> str:
    """``name``, or for an unnamed operation ``<kind>.noname.<i>`` numbered by call order within
    its process set (``<kind>.ps<id>.noname.<i>`` outside the global one). Collectives must be
    called in the same order by every member of their set, so the numbers agree; counting per set
    keeps them agreeing when ranks run different numbers of operations in other sets."""
    if name:
        return name
    set_id = process_set if isinstance(process_set, int) else getattr(process_set, "process_set_id", 0) or 0
    with _name_lock:
        index = _name_counters.get((kind, set_id), 0)
        _name_counters[(kind, set_id)] = index + 1
    scope = f".ps{set_id}" if set_id else ""
    return f"{kind}{scope}.noname.{index}"


def auto_name_counts() -> dict[tuple[str, int], int]:
    """How many unnamed operations of each (kind, process set) this rank has named so far."""
    with _name_lock:
        return dict(_name_counters)


def align_auto_names(counts_per_rank: list[dict[tuple[str, int], int]]) -> None:
    """Advances every unnamed-operation counter to the furthest any rank reached. join() calls this
    with every rank's counts: while a rank was joined the others ran (or failed) unnamed operations
    it never named, and its next unnamed operation must carry the same number as theirs."""
    with _name_lock:
        for counts in counts_per_rank:
            for key, count in counts.items():
                if count > _name_counters.get(key, 0):
                    _name_counters[key] = count
