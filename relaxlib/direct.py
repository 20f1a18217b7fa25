"""Direct (not negotiated) averaging primitives of relaxed schedules, framework-neutral.

Neighbour averaging and group averaging bypass the engine's negotiation: decentralized and
partial all-reduce schedules are deterministic, so every participant submits the same requests in
the same order, and a negotiation round would bring back the global wait these relaxations exist
to avoid. They run on the core's direct lane (its own thread and communicator) and operate on
flat buffers given as (address, element count, dtype); the framework bindings wrap them.

Semantics (docs/architecture.md): neighbour average ``x' = self_weight * x + sum_k weights[k] * x_{peers[k]}``;
with a codec the CHOCO-gossip variant ``x' = x + gamma (sum_k w_k xh_k + w_self xh_self - xh_self)``
against replicated estimates ``xh``; group average ``x' = sum_k weights[k] * x_{members[k]}``.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relaxlib import _core
from relaxlib.compression import codec_id
from relaxlib.errors import error_for

# The dtypes of flat buffers, by numpy name: the relax_dtype_t constant's name (read from the core
# when a request is built, so importing this module loads no library).
DTYPES = {"float32": "FLOAT32", "float64": "FLOAT64"}


@dataclass
class Buffer:
    """A flat, contiguous buffer: address, element count and dtype name (float32 or float64)."""

    address: int
    count: int
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        """The buffer's capacity in bytes, which travels with its address to the core: the core
        refuses a request whose buffers are smaller than what it reads or writes."""
        return self.count * np.dtype(self.dtype).itemsize

    @classmethod
    def of(cls, array: Any) -> Buffer:
        """The buffer of a contiguous numpy array (the caller keeps the array alive)."""
        return cls(array.ctypes.data, array.size, array.dtype.name)


class DirectHandle:
    """A started neighbour or group average; ``wait()`` blocks until it finished (raising the
    error every participant sees if it failed). Keeps its buffers' owners alive until then."""

    def __init__(self, handle: int, name: str, keepalive: tuple[Any, ...], result: Any = None) -> None:
        self._handle = handle
        self.name = name
        self._keepalive = keepalive
        self.result = result

    def wait(self) -> Any:
        """Blocks until done; returns ``result`` (what the binding attached, e.g. the output)."""
        if self._handle:
            core = _core.lib()
            status = _core.wait_interruptibly(self._handle)  # interrupted: buffers stay alive
            try:
                if status != 0:
                    raise error_for(status, core.relax_handle_message(self._handle).decode(errors="replace"))
            finally:
                core.relax_release(self._handle)
                self._handle = 0
                self._keepalive = ()
        return self.result

    def done(self) -> bool:
        """Whether the average finished (successfully or not)."""
        return not self._handle or _core.lib().relax_poll(self._handle) != 0


def _request(kind: int, src: Buffer, dst: Buffer, name: str) -> tuple[_core.Request, tuple[Any, ...]]:
    """The request's base, its ``args`` at the kind's defaults (relax_request_init): the caller
    sets those its caller chose."""
    if src.count != dst.count or src.dtype != dst.dtype:
        raise ValueError(f"{name}: input and output buffers differ ({src.count} {src.dtype} vs "
                         f"{dst.count} {dst.dtype})")
    if src.dtype not in DTYPES:
        raise ValueError(f"{name}: dtype {src.dtype} is not supported; use one of {sorted(DTYPES)}")
    shape = (ctypes.c_int64 * 1)(src.count)
    encoded = name.encode()
    request = _core.new_request(kind)
    request.name = encoded
    request.dtype = getattr(_core, DTYPES[src.dtype])
    request.ndim = 1
    request.shape = shape
    request.input = src.address
    request.output = dst.address
    request.input_bytes, request.output_bytes = src.nbytes, dst.nbytes
    return request, (shape, encoded)


def _laid_end_to_end(pieces: Sequence[Buffer], name: str) -> tuple[Buffer, _core.InputPieces, tuple[Any, ...]]:
    """``pieces`` as one request input: a buffer of their total size at address 0 (the request's
    ``input`` is then NULL), the relax_input_pieces_t naming each, and the arrays it points to."""
    dtypes = sorted({piece.dtype for piece in pieces})
    if len(dtypes) != 1:
        raise ValueError(f"{name}: tensors laid end to end need one dtype, got {dtypes or 'no tensors'}")
    data = (ctypes.c_void_p * len(pieces))(*[piece.address for piece in pieces])
    counts = (ctypes.c_int64 * len(pieces))(*[piece.count for piece in pieces])
    inputs = _core.InputPieces(len(pieces), ctypes.cast(data, ctypes.POINTER(ctypes.c_void_p)),
                               ctypes.cast(counts, ctypes.POINTER(ctypes.c_int64)))
    return Buffer(0, sum(piece.count for piece in pieces), dtypes[0]), inputs, (data, counts)


def _ranks_and_weights(name: str, ranks: Sequence[int], weights: Sequence[float]) -> tuple[Any, Any]:
    """C arrays of world ranks (int32) and their weights (double)."""
    if len(ranks) != len(weights):
        raise ValueError(f"{name}: {len(ranks)} ranks but {len(weights)} weights")
    return (ctypes.c_int32 * max(1, len(ranks)))(*ranks), (ctypes.c_double * max(1, len(weights)))(*weights)


def _floats(buffer: Buffer | None) -> Any:
    """A ``float*`` to a float32 buffer (NULL for None)."""
    return None if buffer is None else ctypes.cast(buffer.address, ctypes.POINTER(ctypes.c_float))


def _reduce_op(average: bool) -> int:
    """The relax_reduce_op_t of a mean (Average) or a sum (Sum)."""
    return _core.OP_AVERAGE if average else _core.OP_SUM


def _submit(request: _core.Request, name: str, keepalive: tuple[Any, ...], result: Any, alloc: Any = None,
            handle_type: type[DirectHandle] = DirectHandle) -> DirectHandle:
    handle = _core.lib().relax_enqueue(ctypes.byref(request), alloc or _core.ALLOC_FN(), _core.DONE_FN(), None)
    if handle == 0:
        _core.raise_last_error()
    return handle_type(handle, name, keepalive + (alloc,), result)


def neighbor_average_async(src: Buffer, dst: Buffer, name: str, peers: Sequence[int], weights: Sequence[float],
                           self_weight: float, codec: str | None = None, estimate_self: Buffer | None = None,
                           estimate_peers: Buffer | None = None, consensus_step: float = 1.0,
                           keepalive: tuple[Any, ...] = (), result: Any = None) -> DirectHandle:
    """Starts ``dst = self_weight * src + sum_k weights[k] * src@peers[k]`` (world ranks, excluding
    this one). With ``codec``, the CHOCO variant: ``estimate_self`` (count floats) and
    ``estimate_peers`` (one count-float block per peer, in ``peers`` order) are this rank's copies
    of the replicated estimates, updated in place; ``consensus_step`` is CHOCO's gamma. Every peer
    must submit the matching request (same name and size) in the same order."""
    request, hold = _request(_core.REQ_NEIGHBOR_AVERAGE, src, dst, name)
    peer_array, weight_array = _ranks_and_weights(name, peers, weights)
    args = request.args.neighbor_average
    args.npeers = len(peers)
    args.peers = peer_array
    args.weights = weight_array
    args.self_weight = self_weight  # without a codec the other arguments keep their defaults (zero)
    if codec is not None:
        if estimate_self is None or (peers and estimate_peers is None):
            raise ValueError(f"{name}: a compressed neighbour average needs the estimate buffers")
        # their sizes are the core's to check (relax.h, "Buffer capacities"): one rule, one message
        args.codec = codec_id(codec)
        args.estimate_self = _floats(estimate_self)
        args.estimate_peers = _floats(estimate_peers)
        args.estimate_self_bytes = estimate_self.nbytes
        args.estimate_peers_bytes = estimate_peers.nbytes if estimate_peers is not None else 0
        args.consensus_step = consensus_step
    return _submit(request, name, hold + (peer_array, weight_array) + keepalive, result)


def group_members_and_weights(name: str, group: Sequence[int], weights: Sequence[float] | None
                              ) -> tuple[list[int], list[float]]:
    """A partial all-reduce's members in ascending order with their weights: equal ones (the mean)
    when ``weights`` is None, else ``weights`` given in ``group``'s order, reordered with it."""
    members = sorted(int(r) for r in group)
    if len(set(members)) != len(members):
        raise ValueError(f"{name}: group {list(group)} repeats a rank")
    if weights is None:
        return members, [1.0 / len(members)] * len(members)
    if len(weights) != len(members):
        raise ValueError(f"{name}: {len(weights)} weights for a group of {len(members)} ranks")
    by_rank = dict(zip((int(r) for r in group), weights))
    return members, [float(by_rank[r]) for r in members]


def group_average_async(src: Buffer, dst: Buffer, name: str, members: Sequence[int], weights: Sequence[float],
                        keepalive: tuple[Any, ...] = (), result: Any = None) -> DirectHandle:
    """Starts ``dst = sum_k weights[k] * src@members[k]`` over the world ranks ``members``
    (ascending, including this rank) on a cached sub-communicator. Every member must submit the
    matching request (same name, members and size)."""
    request, hold = _request(_core.REQ_GROUP_AVERAGE, src, dst, name)
    member_array, weight_array = _ranks_and_weights(name, members, weights)
    args = request.args.group_average
    args.nmembers = len(members)
    args.members = member_array
    args.weights = weight_array
    return _submit(request, name, hold + (member_array, weight_array) + keepalive, result)


def flat_allreduce_async(src: Buffer, dst: Buffer, name: str, average: bool = True,
                         keepalive: tuple[Any, ...] = (), result: Any = None, process_set: int = 0) -> DirectHandle:
    """Starts the all-reduce (mean, or sum) of a flat buffer over ``process_set`` (an id) through
    the engine's negotiated path: for bindings that hand algorithms plain host arrays (TensorFlow's
    context)."""
    request, hold = _request(_core.REQ_ALLREDUCE, src, dst, name)
    request.process_set = process_set
    request.args.allreduce.reduce_op = _reduce_op(average)  # no scaling: the defaults
    return _submit(request, name, hold + keepalive, result)


def flat_broadcast_async(src: Buffer, dst: Buffer, root: int, name: str, keepalive: tuple[Any, ...] = (),
                         result: Any = None, process_set: int = 0) -> DirectHandle:
    """Starts the broadcast of ``root``'s flat buffer (``root`` a world rank of ``process_set``)
    into ``dst`` on every member, through the engine's negotiated path."""
    request, hold = _request(_core.REQ_BROADCAST, src, dst, name)
    request.process_set = process_set
    request.args.broadcast.root_rank = root
    return _submit(request, name, hold + keepalive, result)


def flat_reducescatter_async(src: Buffer | Sequence[Buffer], dst: Buffer, name: str, keepalive: tuple[Any, ...] = (),
                             result: Any = None, average: bool = False) -> DirectHandle:
    """Starts the sum (or, with ``average``, mean) reduce-scatter of a flat buffer over all ranks
    through the negotiated path: ``dst`` receives this rank's contiguous chunk (see
    ``relaxlib.compression.chunk_count``); it must hold at least that many elements. ``src`` may be
    several buffers laid end to end, each read where it lies."""
    src, pieces, held = _laid_end_to_end(src, name) if not isinstance(src, Buffer) else (src, None, ())
    if src.dtype != dst.dtype or src.dtype not in DTYPES:
        raise ValueError(f"{name}: reduce-scatter needs matching float32/float64 buffers, got {src.dtype} and "
                         f"{dst.dtype}")
    request, hold = _request(_core.REQ_REDUCESCATTER, src, src, name)
    request.output, request.output_bytes = dst.address, dst.nbytes
    args = request.args.reducescatter
    args.reduce.reduce_op = _reduce_op(average)  # no scaling, no recv_counts (an even split): the defaults
    if pieces is not None:
        args.inputs = pieces
    return _submit(request, name, hold + held + keepalive, result)


class _Gathered:
    """The output of an all-gather, allocated when the engine knows its size (every rank's chunk)."""

    def __init__(self, allocate: Callable[[int], tuple[int, Any]]) -> None:
        self.owner: Any = None
        self._allocate = allocate
        self.callback = _core.ALLOC_FN(self._alloc)

    def _alloc(self, _user: Any, ndim: int, shape: Any) -> int | None:
        count = 1
        for i in range(ndim):
            count *= shape[i]
        address, self.owner = self._allocate(count)
        return address


def flat_allgather_async(src: Buffer, name: str, allocate: Callable[[int], tuple[int, Any]],
                         keepalive: tuple[Any, ...] = (), process_set: int = 0) -> DirectHandle:
    """Starts the all-gather of a flat buffer over ``process_set`` (an id) through the negotiated
    path: every member's buffer concatenated in rank order (their lengths may differ).
    ``allocate(count)`` is called once the total is known and returns (address, owner) of a buffer
    of ``count`` elements of ``src.dtype``; ``wait()`` returns that owner."""
    if src.dtype not in DTYPES:
        raise ValueError(f"{name}: dtype {src.dtype} is not supported; use one of {sorted(DTYPES)}")
    request, hold = _request(_core.REQ_ALLGATHER, src, src, name)
    request.output = None
    request.process_set = process_set
    gathered = _Gathered(allocate)
    return _submit(request, name, hold + keepalive, gathered, alloc=gathered.callback, handle_type=_GatherHandle)


class _GatherHandle(DirectHandle):
    """A started all-gather; ``wait()`` returns the owner of the gathered buffer."""

    def wait(self) -> Any:
        return super().wait().owner


@dataclass
class StepScaleBuffers:
    """The factored step scale a compressed all-reduce applies (relax_step_scale_args_t):
    ``shapes`` (an int64 array of rows, cols per parameter), ``floor``, ``decay``, the state it
    updates, ``smoothed`` (the smoothed statistics, from which every element's scale follows), and
    this rank's ``statistics`` of the input if already computed (None: the operation computes them);
    ``owners`` keeps the arrays behind the buffers alive while the operation runs."""

    shapes: Any
    floor: float
    decay: float
    smoothed: Buffer
    statistics: Buffer | None = None
    owners: tuple[Any, ...] = ()


def flat_compressed_allreduce_async(src: Buffer | Sequence[Buffer], dst: Buffer, name: str, codec: str,
                                    worker_error: Buffer | None = None, owner_error: Buffer | None = None,
                                    keepalive: tuple[Any, ...] = (), result: Any = None, average: bool = True,
                                    process_set: int = 0, step_scale: StepScaleBuffers | None = None,
                                    prescale: float = 1.0) -> DirectHandle:
    """Starts the compressed all-reduce (mean, or sum) of a float32 buffer through the negotiated
    path over ``process_set`` (an id), with error feedback when the residual buffers are given:
    ``worker_error`` as long as ``src``, ``owner_error`` as long as this rank's chunk (the core
    refuses either one short, and an owner residual without a worker residual). With
    ``step_scale`` the input is divided by that scale before the codec and the result multiplied
    back, the scale's statistics averaged inside the operation (``src`` is then only read).
    ``src`` may be several buffers laid end to end, each read where it lies, and ``prescale``
    multiplies it first (neither with ``step_scale``)."""
    src, pieces, held = _laid_end_to_end(src, name) if not isinstance(src, Buffer) else (src, None, ())
    if src.dtype != "float32":
        raise ValueError(f"{name}: compressed all-reduce needs float32 buffers, got {src.dtype}")
    request, hold = _request(_core.REQ_COMPRESSED_ALLREDUCE, src, dst, name)
    request.process_set = process_set
    args = request.args.compressed_allreduce
    args.reduce_op = _reduce_op(average)
    args.codec = codec_id(codec)
    args.prescale = prescale
    if pieces is not None:
        args.inputs = pieces
        hold = hold + held
    # each residual given goes to the core, which checks both (an owner residual alone is refused)
    if worker_error is not None:
        args.worker_error, args.worker_error_bytes = _floats(worker_error), worker_error.nbytes
    if owner_error is not None:
        args.owner_error, args.owner_error_bytes = _floats(owner_error), owner_error.nbytes
    if step_scale is not None:
        scale = _core.StepScaleArgs()
        scale.nfactors = len(step_scale.shapes) // 2
        scale.shapes = step_scale.shapes.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        scale.floor, scale.decay = step_scale.floor, step_scale.decay
        scale.smoothed = _floats(step_scale.smoothed)
        scale.statistics = _floats(step_scale.statistics)
        scale.smoothed_bytes = step_scale.smoothed.nbytes
        scale.statistics_bytes = step_scale.statistics.nbytes if step_scale.statistics is not None else 0
        args.step_scale = ctypes.pointer(scale)
        hold = hold + (scale, step_scale)
    return _submit(request, name, hold + keepalive, result)


def peer_step_pending() -> bool:
    """With none of this rank's averages in flight: whether a peer already sent its part of an
    average this rank has not started (so some rank still runs that step)."""
    code = _core.lib().relax_direct_pending()
    if code < 0:
        _core.raise_last_error()
    return code == 1


class Termination:
    """Agreement on the last step of a relaxed schedule when ranks stop at different steps:
    a non-blocking maximum of every rank's last step (collective over all ranks)."""

    def __init__(self, last_step: int) -> None:
        _core.check(_core.lib().relax_direct_join_start(last_step))
        self.final_step: int | None = None

    def poll(self) -> int | None:
        """The last step of any rank once every rank joined, else None."""
        if self.final_step is None:
            value = ctypes.c_int64(0)
            code = _core.lib().relax_direct_join_test(ctypes.byref(value))
            if code < 0:
                _core.raise_last_error()
            if code == 1:
                self.final_step = int(value.value)
        return self.final_step


def serve_until_all_joined(last_step: int, run_step, idle_seconds: float = 0.0005, finishing: bool = False) -> int:
    """Keeps a rank that ran out of data in a deterministic relaxed schedule until every rank has
    joined: ``run_step(step)`` runs this rank's part of ``step`` (an average without a local
    update) and returns when it finished. A step runs once some peer is known to run it (its
    header is waiting) or once every rank joined and the step is not past the last rank's last
    step, so peers never wait for this rank and it never waits for a step nobody runs.
    ``finishing``: this rank serves on its way out (shutdown) and submits no negotiated
    operation again, so a peer's operation that waits only for finishing ranks fails at once.
    Returns the last step of any rank."""
    if finishing:
        _core.check(_core.lib().relax_finishing())
    termination = Termination(last_step)
    step = last_step + 1
    while True:
        final = termination.poll()
        if final is not None and step > final:
            return final
        if (final is not None and step <= final) or peer_step_pending():
            run_step(step)
            step += 1
        else:
            time.sleep(idle_seconds)


def start_group_service(group_size: int, max_lag: int, grace_ms: float, grace_fraction: float = 0.0) -> None:
    """Collective over all ranks: starts the heterogeneity-aware group generator (on rank 0). A
    waiting rank goes in a smaller group after ``max(grace_ms, grace_fraction * its step interval)``."""
    _core.check(_core.lib().relax_group_service_start(group_size, max_lag, grace_ms, grace_fraction))


def retire_from_groups() -> None:
    """Tells the group generator that this rank stopped training (others stop counting on it)."""
    _core.check(_core.lib().relax_group_retire())


@dataclass
class Assignment:
    """A group handed out by the group generator."""

    members: list[int]
    weights: list[float]
    new_step: int
    group_id: int


def request_group(step: int, world_size: int) -> Assignment:
    """Blocks until the group generator assigns this rank (at logical ``step``) a group."""
    members = (ctypes.c_int32 * world_size)()
    weights = (ctypes.c_double * world_size)()
    new_step = ctypes.c_int64(step)
    group_id = ctypes.c_int64(-1)
    n = _core.lib().relax_group_request(step, members, weights, world_size, ctypes.byref(new_step),
                                        ctypes.byref(group_id))
    if n < 0:
        _core.raise_last_error()
    return Assignment(list(members[:n]), list(weights[:n]), int(new_step.value), int(group_id.value))
