"""ctypes binding of the core library's C ABI (cuda_ops/include/relax/relax.h)."""

from __future__ import annotations

import contextlib
import ctypes
import threading
from pathlib import Path

from relaxlib.errors import InvalidArgumentError, error_for

# The ABI this binding was written against (RELAX_ABI_VERSION): a core of another ABI is refused at
# load. Every other constant of relax.h (status codes, dtypes, reduce ops, request kinds) is read
# from the core (relax_abi_constants) as an attribute of this module without the RELAX_ prefix,
# e.g. ``_core.REQ_ALLREDUCE``, ``_core.FLOAT32``, ``_core.OP_SUM``, ``_core.PENDING``.
ABI_VERSION = 25
LIBRARY_PATH = Path(__file__).with_name("lib") / "librelax_core.so"

WAIT_SLICE_MS = 50  # waits return to Python this often, so Ctrl-C and signal-based timeouts work


class CodecInfo(ctypes.Structure):
    """relax_codec_info_t."""

    _fields_ = [
        ("id", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("wire_format", ctypes.c_char_p),
        ("kind", ctypes.c_char_p),
        ("caveat", ctypes.c_char_p),
        ("consensus_step", ctypes.c_double),
    ]


class ReduceArgs(ctypes.Structure):
    """relax_reduce_args_t (allreduce; reducescatter's ``reduce``)."""

    _fields_ = [
        ("reduce_op", ctypes.c_int32),
        ("prescale", ctypes.c_double),
        ("postscale", ctypes.c_double),
    ]


class BroadcastArgs(ctypes.Structure):
    """relax_broadcast_args_t."""

    _fields_ = [("root_rank", ctypes.c_int32)]


class InputPieces(ctypes.Structure):
    """relax_input_pieces_t."""

    _fields_ = [
        ("count", ctypes.c_int32),
        ("data", ctypes.POINTER(ctypes.c_void_p)),
        ("counts", ctypes.POINTER(ctypes.c_int64)),
    ]


class ReducescatterArgs(ctypes.Structure):
    """relax_reducescatter_args_t."""

    _fields_ = [
        ("reduce", ReduceArgs),
        ("ncounts", ctypes.c_int32),
        ("recv_counts", ctypes.POINTER(ctypes.c_int64)),
        ("inputs", InputPieces),
    ]


class AlltoallArgs(ctypes.Structure):
    """relax_alltoall_args_t."""

    _fields_ = [
        ("nsplits", ctypes.c_int32),
        ("splits", ctypes.POINTER(ctypes.c_int64)),
    ]


class AddProcessSetArgs(ctypes.Structure):
    """relax_add_process_set_args_t."""

    _fields_ = [
        ("nranks", ctypes.c_int32),
        ("ranks", ctypes.POINTER(ctypes.c_int32)),
    ]


class RemoveProcessSetArgs(ctypes.Structure):
    """relax_remove_process_set_args_t."""

    _fields_ = [("process_set_id", ctypes.c_int32)]


class StepScaleArgs(ctypes.Structure):
    """relax_step_scale_args_t."""

    _fields_ = [
        ("nfactors", ctypes.c_int32),
        ("shapes", ctypes.POINTER(ctypes.c_int64)),
        ("floor", ctypes.c_double),
        ("decay", ctypes.c_double),
        ("statistics", ctypes.POINTER(ctypes.c_float)),
        ("smoothed", ctypes.POINTER(ctypes.c_float)),
        ("statistics_bytes", ctypes.c_int64),
        ("smoothed_bytes", ctypes.c_int64),
    ]


class CompressedAllreduceArgs(ctypes.Structure):
    """relax_compressed_allreduce_args_t."""

    _fields_ = [
        ("reduce_op", ctypes.c_int32),
        ("codec", ctypes.c_int32),
        ("worker_error", ctypes.POINTER(ctypes.c_float)),
        ("owner_error", ctypes.POINTER(ctypes.c_float)),
        ("step_scale", ctypes.POINTER(StepScaleArgs)),
        ("prescale", ctypes.c_double),
        ("inputs", InputPieces),
        ("worker_error_bytes", ctypes.c_int64),
        ("owner_error_bytes", ctypes.c_int64),
    ]


class NeighborAverageArgs(ctypes.Structure):
    """relax_neighbor_average_args_t."""

    _fields_ = [
        ("npeers", ctypes.c_int32),
        ("peers", ctypes.POINTER(ctypes.c_int32)),
        ("weights", ctypes.POINTER(ctypes.c_double)),
        ("self_weight", ctypes.c_double),
        ("codec", ctypes.c_int32),
        ("consensus_step", ctypes.c_double),
        ("estimate_self", ctypes.POINTER(ctypes.c_float)),
        ("estimate_peers", ctypes.POINTER(ctypes.c_float)),
        ("estimate_self_bytes", ctypes.c_int64),
        ("estimate_peers_bytes", ctypes.c_int64),
    ]


class GroupAverageArgs(ctypes.Structure):
    """relax_group_average_args_t."""

    _fields_ = [
        ("nmembers", ctypes.c_int32),
        ("members", ctypes.POINTER(ctypes.c_int32)),
        ("weights", ctypes.POINTER(ctypes.c_double)),
    ]


class RequestArgs(ctypes.Union):
    """The union relax_request_t::args: the member named by the request's type."""

    _fields_ = [
        ("allreduce", ReduceArgs),
        ("broadcast", BroadcastArgs),
        ("reducescatter", ReducescatterArgs),
        ("alltoall", AlltoallArgs),
        ("add_process_set", AddProcessSetArgs),
        ("remove_process_set", RemoveProcessSetArgs),
        ("compressed_allreduce", CompressedAllreduceArgs),
        ("neighbor_average", NeighborAverageArgs),
        ("group_average", GroupAverageArgs),
    ]


class Request(ctypes.Structure):
    """relax_request_t: the base every kind has, and ``args``. Start one with ``new_request(kind)``,
    which has the core fill its kind's defaults (a bare Request is all zeros: no scaling would be
    a scale of 0). Every buffer travels with its capacity in bytes (``input_bytes``,
    ``output_bytes``, the ``*_bytes`` fields of the kinds' state buffers): the core refuses a
    buffer smaller than what it touches."""

    _fields_ = [
        ("type", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("input", ctypes.c_void_p),
        ("output", ctypes.c_void_p),
        ("process_set", ctypes.c_int32),
        ("args", RequestArgs),
        ("input_bytes", ctypes.c_int64),
        ("output_bytes", ctypes.c_int64),
    ]


# The C name of each struct the core's relax_request_layout() describes, and its ctypes mirror.
REQUEST_LAYOUT_STRUCTS = {
    "relax_request_t": Request,
    "relax_reduce_args_t": ReduceArgs,
    "relax_broadcast_args_t": BroadcastArgs,
    "relax_reducescatter_args_t": ReducescatterArgs,
    "relax_input_pieces_t": InputPieces,
    "relax_alltoall_args_t": AlltoallArgs,
    "relax_add_process_set_args_t": AddProcessSetArgs,
    "relax_remove_process_set_args_t": RemoveProcessSetArgs,
    "relax_compressed_allreduce_args_t": CompressedAllreduceArgs,
    "relax_step_scale_args_t": StepScaleArgs,
    "relax_neighbor_average_args_t": NeighborAverageArgs,
    "relax_group_average_args_t": GroupAverageArgs,
}


class Stats(ctypes.Structure):
    """relax_stats_t."""

    _fields_ = [(name, ctypes.c_int64) for name in
                ("rounds", "completed", "bytes_sent", "bytes_received", "negotiation_ns", "execution_ns",
                 "inline_allreduces", "fast_path_buckets", "fast_path_engagements", "fast_path_exits")]


ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64))
DONE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_char_p)

_SIGNATURES = {
    "relax_init_rendezvous": ([ctypes.c_int32], ctypes.c_int),
    "relax_was_initialized": ([], ctypes.c_int),
    "relax_init": ([], ctypes.c_int),
    "relax_note_wait": ([ctypes.c_int32], ctypes.c_int),
    "relax_shutdown": ([], ctypes.c_int),
    "relax_finishing": ([], ctypes.c_int),
    "relax_fault_tolerance": ([], ctypes.c_int),
    "relax_process_failure_noted": ([], ctypes.c_int),
    "relax_silent_peer_pid": ([ctypes.c_int32], ctypes.c_int64),
    "relax_lost_peer_pid": ([ctypes.c_int32], ctypes.c_int64),
    "relax_end_lost_processes": ([], ctypes.c_int),
    "relax_end_silent_processes": ([], ctypes.c_int),
    "relax_reset": ([], ctypes.c_int),
    "relax_grow": ([ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int32, ctypes.c_int32, ctypes.c_char_p,
                    ctypes.c_char_p], ctypes.c_int),
    "relax_is_initialized": ([], ctypes.c_int),
    "relax_rank": ([], ctypes.c_int),
    "relax_size": ([], ctypes.c_int),
    "relax_local_rank": ([], ctypes.c_int),
    "relax_local_size": ([], ctypes.c_int),
    "relax_cross_rank": ([], ctypes.c_int),
    "relax_cross_size": ([], ctypes.c_int),
    "relax_mpi_threads_supported": ([], ctypes.c_int),
    "relax_local_ranks": ([ctypes.POINTER(ctypes.c_int32), ctypes.c_int32], ctypes.c_int),
    "relax_last_error": ([], ctypes.c_char_p),
    "relax_last_error_code": ([], ctypes.c_int),
    "relax_version": ([], ctypes.c_char_p),
    "relax_abi_version": ([], ctypes.c_int),
    "relax_request_layout": ([], ctypes.c_char_p),
    "relax_abi_constants": ([], ctypes.c_char_p),
    "relax_request_init": ([ctypes.POINTER(Request), ctypes.c_int32], ctypes.c_int),
    "relax_request_member_name": ([ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32],
                                  ctypes.c_int),
    "relax_enqueue": ([ctypes.POINTER(Request), ALLOC_FN, DONE_FN, ctypes.c_void_p], ctypes.c_int64),
    "relax_reject": ([ctypes.POINTER(Request), ctypes.c_int32, ctypes.c_int32, ctypes.c_char_p], ctypes.c_int),
    "relax_drive": ([ctypes.c_int64], ctypes.c_int),
    "relax_poll": ([ctypes.c_int64], ctypes.c_int),
    "relax_wait": ([ctypes.c_int64], ctypes.c_int),
    "relax_wait_for": ([ctypes.c_int64, ctypes.c_int32], ctypes.c_int),
    "relax_handle_status": ([ctypes.c_int64], ctypes.c_int),
    "relax_handle_message": ([ctypes.c_int64], ctypes.c_char_p),
    "relax_handle_result": ([ctypes.c_int64], ctypes.c_int64),
    "relax_handle_received_splits": ([ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32], ctypes.c_int),
    "relax_release": ([ctypes.c_int64], None),
    "relax_set_fusion_threshold": ([ctypes.c_int64], ctypes.c_int),
    "relax_set_cycle_time_ms": ([ctypes.c_double], ctypes.c_int),
    "relax_get_stats": ([ctypes.POINTER(Stats)], ctypes.c_int),
    "relax_process_set_size": ([ctypes.c_int32], ctypes.c_int),
    "relax_process_set_rank": ([ctypes.c_int32], ctypes.c_int),
    "relax_process_set_ranks": ([ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32], ctypes.c_int),
    "relax_start_timeline": ([ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
    "relax_codec_count": ([], ctypes.c_int32),
    "relax_codec_info": ([ctypes.c_int32, ctypes.POINTER(CodecInfo)], ctypes.c_int),
    "relax_auto_bucket_bytes": ([ctypes.c_int64, ctypes.c_int64], ctypes.c_int64),
    "relax_codec_encoded_bytes": ([ctypes.c_int32, ctypes.c_int64], ctypes.c_int64),
    # (codec, in, in_bytes, n, out, out_bytes): each buffer with its capacity in bytes
    "relax_codec_encode": ([ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                            ctypes.c_int64], ctypes.c_int),
    "relax_codec_decode": ([ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                            ctypes.c_int64], ctypes.c_int),
    "relax_compressed_parts": ([ctypes.c_int64, ctypes.c_int32], ctypes.c_int32),
    # the step scale's host passes: each buffer followed by its capacity in bytes
    "relax_scale_statistics": ([ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p,
                                ctypes.c_int64], ctypes.c_int),
    "relax_scale_apply": ([ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                           ctypes.c_int32, ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                           ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                           ctypes.c_int64, ctypes.c_int64], ctypes.c_int),
    "relax_scale_multiply": ([ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int32, ctypes.c_float,
                              ctypes.c_void_p, ctypes.c_int64], ctypes.c_int),
    "relax_stop_timeline": ([], ctypes.c_int),
    "relax_direct_pending": ([], ctypes.c_int),
    "relax_direct_join_start": ([ctypes.c_int64], ctypes.c_int),
    "relax_direct_join_test": ([ctypes.POINTER(ctypes.c_int64)], ctypes.c_int),
    "relax_group_service_start": ([ctypes.c_int32, ctypes.c_int32, ctypes.c_double, ctypes.c_double], ctypes.c_int),
    "relax_group_retire": ([], ctypes.c_int),
    "relax_group_request": ([ctypes.c_int64, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_double),
                             ctypes.c_int32, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)],
                            ctypes.c_int),
}

_lib: ctypes.CDLL | None = None
_constants: dict[str, int] | None = None
_lock = threading.Lock()


def lib() -> ctypes.CDLL:
    """The loaded core library (loaded on first use)."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = _load()
        return _lib


def _load() -> ctypes.CDLL:
    if not LIBRARY_PATH.exists():
        raise ImportError(
            f"relaxlib's core library is missing ({LIBRARY_PATH}). Build it with "
            "`pip install --no-build-isolation .` in the relaxlib checkout (or `make build`)."
        )
    try:
        handle = ctypes.CDLL(str(LIBRARY_PATH), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise ImportError(
            f"relaxlib's core library failed to load ({exc}). If MPI was upgraded or removed, rebuild with "
            "`pip install --no-build-isolation --force-reinstall .`"
        ) from exc
    handle.relax_abi_version.argtypes, handle.relax_abi_version.restype = [], ctypes.c_int
    if handle.relax_abi_version() != ABI_VERSION:  # before binding: an older core lacks newer functions
        raise ImportError(
            f"relaxlib's core library has ABI {handle.relax_abi_version()}, the Python package expects "
            f"{ABI_VERSION}: rebuild with `pip install --no-build-isolation --force-reinstall .`"
        )
    for name, (argtypes, restype) in _SIGNATURES.items():
        fn = getattr(handle, name)
        fn.argtypes = argtypes
        fn.restype = restype
    return handle


def constants() -> dict[str, int]:
    """The constants of relax.h as the core was compiled with them (relax_abi_constants), by name
    without the ``RELAX_`` prefix: ``{"ABI_VERSION": 20, "OK": 0, ..., "REQ_GROUP_AVERAGE": 11}``."""
    global _constants
    if _constants is None:
        values = {}
        for line in lib().relax_abi_constants().decode().splitlines():
            name, value = line.split()
            values[name.removeprefix("RELAX_")] = int(value)
        _constants = values
    return _constants


def __getattr__(name: str) -> int:
    """A constant of relax.h read from the core (PEP 562), e.g. ``_core.REQ_ALLREDUCE``."""
    if name.isupper():
        value = constants().get(name)
        if value is not None:
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def request_kinds() -> dict[str, int]:
    """The request kinds of relax_request_type_t, by lower-case name: ``{"allreduce": 0, ...}``."""
    return {name.removeprefix("REQ_").lower(): value for name, value in constants().items()
            if name.startswith("REQ_")}


def new_request(kind: int) -> Request:
    """A Request of ``kind`` with its kind's defaults, filled by the core (relax_request_init)."""
    request = Request()
    check(lib().relax_request_init(ctypes.byref(request), kind))
    return request


def member_name(base: str, index: int, count: int) -> str:
    """The name of member ``index`` of ``count`` requests submitted as one group under ``base``,
    by the core's rule (relax_request_member_name), which every binding follows."""
    core = lib()
    length = core.relax_request_member_name(base.encode(), index, count, None, 0)
    if length < 0:
        raise_last_error()
    out = ctypes.create_string_buffer(length + 1)
    core.relax_request_member_name(base.encode(), index, count, out, length + 1)
    return out.value.decode()


def check(code: int) -> int:
    """Raises the matching RelaxError when a core call returned an error code."""
    if code != 0:
        raise error_for(code, lib().relax_last_error().decode(errors="replace"))
    return code


def raise_last_error() -> None:
    """Raises the error of the last failing core call on this thread."""
    core = lib()
    raise error_for(core.relax_last_error_code(), core.relax_last_error().decode(errors="replace"))


def reject(request_type: int, names: list[str], process_set: int, message: str) -> None:
    """Announces that this rank rejected the requests ``names`` (one, or a group) before
    submitting them, so the other members fail instead of waiting for it (relax_reject; best
    effort: this rank raises its own error regardless)."""
    encoded = [n.encode() for n in names]
    requests = (Request * len(encoded))()  # relax_reject reads only type, name and process_set
    for request, name in zip(requests, encoded):
        request.type, request.name, request.process_set = request_type, name, process_set
    lib().relax_reject(requests, len(encoded), InvalidArgumentError.code, message.encode())


@contextlib.contextmanager
def blocked_waiting():
    """Marks the calling thread as blocked on negotiated requests for the engine's deadlock
    check while a framework runs them synchronously on its own (TensorFlow, eagerly)."""
    lib().relax_note_wait(1)
    try:
        yield
    finally:
        lib().relax_note_wait(0)


def wait_interruptibly(handle: int, wait_for=None) -> int:
    """Waits for a handle and returns its status, in slices of WAIT_SLICE_MS: between slices the
    interpreter runs signal handlers, so Ctrl-C raises KeyboardInterrupt (and pytest-timeout's
    alarm fires) while a peer has not submitted, instead of when it finally does. The request
    stays pending after such an exception: its buffers must stay alive. ``wait_for`` is the
    binding's relax_wait_for (the ctypes one by default)."""
    wait_for = wait_for or lib().relax_wait_for
    while True:
        status = wait_for(handle, WAIT_SLICE_MS)
        if status != constants()["PENDING"]:
            return status
