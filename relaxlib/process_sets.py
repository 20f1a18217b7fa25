"""Process sets: subsets of ranks that run collectives among themselves (Horovod's API).

Adding or removing a set is collective over *all* ranks (every rank calls it with the same ranks,
in the same order), because creating the set's communicator is. Collectives on a set then involve
only its members. Broadcast roots stay world ranks and must belong to the set.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Iterable

from relaxlib import _core, basics
from relaxlib.errors import NotInitializedError, ProcessSetError, error_for


class ProcessSet:
    """A set of ranks, given as an iterable of world ranks or an mpi4py communicator.

    It becomes usable once registered (``init(process_sets=[...])`` or ``add_process_set``);
    ``process_set_id`` is None until then. ``global_process_set`` (id 0) spans every rank.
    """

    def __init__(self, ranks_or_comm: Iterable[int] | object) -> None:
        self.mpi_comm = None
        if hasattr(ranks_or_comm, "Get_group"):
            self.mpi_comm = ranks_or_comm
            ranks = _ranks_of_communicator(ranks_or_comm)
        else:
            try:
                ranks = [int(r) for r in ranks_or_comm]  # type: ignore[union-attr]
            except (TypeError, ValueError):
                raise ValueError("ProcessSet should be initialized with a list of process ranks or an mpi4py "
                                 "Comm object") from None
        self.ranks: list[int] = sorted(ranks)
        self.process_set_id: int | None = None

    def _require_registered(self) -> int:
        if self.process_set_id is None:
            raise ProcessSetError(f"{self} has not been registered; pass it to init(process_sets=[...]) or "
                                  "add_process_set()")
        return self.process_set_id

    def size(self) -> int:
        """Number of ranks in the set."""
        if self.process_set_id == 0:
            return basics.size()
        self._require_registered()
        return len(self.ranks)

    def rank(self) -> int:
        """This process's rank within the set; ValueError for non-members."""
        set_id = self._require_registered()
        value = _core.lib().relax_process_set_rank(set_id)
        if value < -1:
            _core.raise_last_error()
        if value == -1:
            raise ProcessSetError(f"rank {basics.rank()} is not part of {self}")
        return value

    def included(self) -> bool:
        """True when this process belongs to the set."""
        return self.process_set_id == 0 or basics.rank() in self.ranks

    def __repr__(self) -> str:
        if self.process_set_id == 0:
            return "ProcessSet(global)"
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


def _ranks_of_communicator(comm) -> list[int]:
    from mpi4py import MPI
    group = comm.Get_group()
    world = MPI.COMM_WORLD.Get_group()
    return [int(r) for r in MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world)]


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_registered: dict[int, ProcessSet] = {0: global_process_set}
_request_counter = itertools.count()


def process_set_id(process_set: ProcessSet | None) -> int:
    """The core id of a registered process set (0 for the global set)."""
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"process_set must be a ProcessSet, got {type(process_set).__name__}")
    return process_set._require_registered()


def _membership_request(kind: int, name: str, ranks: list[int] | None = None, set_id: int = 0) -> int:
    """Submits an add/remove request (collective over all ranks) and returns the core's result."""
    core = _core.lib()
    request = _core.Request()
    request.type = kind
    request.name = name.encode()
    members = (ctypes.c_int32 * len(ranks))(*ranks) if ranks else None
    if kind == _core.REQ_ADD_PROCESS_SET:
        request.args.add_process_set.nranks = len(ranks) if ranks else 0
        request.args.add_process_set.ranks = members  # world ranks
    elif kind == _core.REQ_REMOVE_PROCESS_SET:
        request.args.remove_process_set.process_set_id = set_id
    handle = core.relax_enqueue(ctypes.byref(request), _core.ALLOC_FN(), _core.DONE_FN(), None)
    if handle == 0:
        _core.raise_last_error()
    status = _core.wait_interruptibly(handle)
    try:
        if status != 0:
            message = core.relax_handle_message(handle).decode(errors="replace")
            raise error_for(status, message)
        return core.relax_handle_result(handle)
    finally:
        core.relax_release(handle)


def add_process_set(process_set: ProcessSet | Iterable[int]) -> ProcessSet:
    """Registers a process set; collective over all ranks. Returns the (registered) ProcessSet."""
    if not basics.is_initialized():
        raise NotInitializedError("relaxlib has not been initialized; call init() first.")
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ProcessSetError(f"Attempted to add a duplicate process set: {ps}")
    if not ps.ranks:
        raise ProcessSetError("a process set needs at least one rank")
    ps.process_set_id = _membership_request(_core.REQ_ADD_PROCESS_SET, f"process_set.add.{next(_request_counter)}",
                                            ranks=ps.ranks)
    _registered[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a registered process set; collective over all ranks. Operations still pending on
    it fail. Returns True."""
    if process_set is global_process_set or process_set.process_set_id == 0:
        raise ProcessSetError("the global process set cannot be removed")
    set_id = process_set._require_registered()
    _membership_request(_core.REQ_REMOVE_PROCESS_SET, f"process_set.remove.{next(_request_counter)}", set_id=set_id)
    _registered.pop(set_id, None)
    process_set.process_set_id = None
    return True


def registered_process_sets() -> list[ProcessSet]:
    """Every registered process set, the global one first."""
    return [_registered[k] for k in sorted(_registered)]


def _reset_after_shutdown() -> None:
    for set_id, ps in list(_registered.items()):
        if set_id != 0:
            ps.process_set_id = None
            del _registered[set_id]


def _existing_or_added(ranks: list[int]) -> ProcessSet:
    """The registered process set with exactly these ranks (the global one for every rank), else a
    new one. Collective over all ranks; every rank holds the same registry, so all decide alike."""
    if sorted(ranks) == list(range(basics.size())):
        return global_process_set
    for registered in _registered.values():
        if registered.ranks == sorted(ranks):
            return registered
    return add_process_set(ranks)


def node_process_sets(allgather_object) -> tuple[ProcessSet, ProcessSet | None, int]:
    """Collective over all ranks: a process set per node (the ranks sharing this machine), one of
    the node leaders (each node's lowest rank), and this rank's leader. Returns (this node's set,
    the leaders' set on a leader else None, this node's leader). ``allgather_object`` is the
    framework binding's (it gathers every rank's list of node-local ranks)."""
    nodes = sorted(set(map(tuple, allgather_object(basics.local_ranks(), name="relax.nodes"))))
    sets = {node: _existing_or_added(list(node)) for node in nodes}
    leaders = _existing_or_added([node[0] for node in nodes])
    mine = next(node for node in nodes if basics.rank() in node)
    return sets[mine], leaders if basics.rank() == mine[0] else None, mine[0]
