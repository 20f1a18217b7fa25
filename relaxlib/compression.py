"""Codecs of compressed collectives (framework-neutral): names, chunking, and direct access to
the core's encoders (for tests and benchmarks).

A compressed all-reduce splits a flat float32 tensor of ``count`` elements into one contiguous
chunk per rank (sizes differ by at most one, the first chunks taking the extra element). Chunks
above 2^19 elements (2 MiB of float32) are split further into parts (``part_counts``; the same
number for every chunk), and each part is encoded on its own behind a 4-byte marker: between
nodes one part's transfer overlaps the coding of others. The codecs are whatever the core
registered (one C++ file each):
``CODECS`` maps each name to its :class:`CodecSpec`, read from the core when first used, e.g.
``CODECS["sign"].wire_format`` or ``CODECS["sign"].bits_per_element()``.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from relaxlib import _core

# Chunk size at which a codec's ratio is quoted: large enough that headers are negligible but counted.
RATIO_CHUNK_ELEMENTS = 1 << 20
MARKER_BYTES = 4  # before every encoded part: -1, or the rank whose input was not finite


@dataclass(frozen=True)
class CodecSpec:
    """One codec as the core registered it."""

    id: int
    name: str
    wire_format: str
    kind: str  # "fp16" (near exact) or "compressed" (lossy: use error feedback)
    caveat: str
    consensus_step: float  # CHOCO step that stays stable with this codec's error

    def bits_per_element(self, n: int = RATIO_CHUNK_ELEMENTS) -> float:
        """Bits on the wire per float32 element for a chunk of ``n`` elements, headers included."""
        return 8 * encoded_bytes(self.id, n) / n

    @property
    def ratio(self) -> float:
        """Encoded bytes per float32 byte (headers included, at ``RATIO_CHUNK_ELEMENTS``)."""
        return self.bits_per_element() / 32


@functools.cache
def _registered() -> dict[str, CodecSpec]:
    lib = _core.lib()
    specs = {}
    for index in range(lib.relax_codec_count()):
        info = _core.CodecInfo()
        _core.check(lib.relax_codec_info(index, ctypes.byref(info)))
        name = info.name.decode()
        specs[name] = CodecSpec(info.id, name, info.wire_format.decode(), info.kind.decode(),
                                info.caveat.decode(), info.consensus_step)
    return specs


class _CodecTable(Mapping[str, CodecSpec]):
    """Name -> CodecSpec of every codec the core registered, read on first use."""

    def __getitem__(self, name: str) -> CodecSpec:
        return _registered()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_registered())

    def __len__(self) -> int:
        return len(_registered())

    def __repr__(self) -> str:
        return f"CODECS({', '.join(_registered())})"


CODECS: Mapping[str, CodecSpec] = _CodecTable()


def codec_id(codec: str | int) -> int:
    """The core id of a codec name (or id)."""
    if isinstance(codec, int) and any(spec.id == codec for spec in CODECS.values()):
        return codec
    try:
        return CODECS[codec].id
    except (KeyError, TypeError):
        raise ValueError(f"unknown codec {codec!r}; choose one of {sorted(CODECS)}") from None


def chunk_count(count: int, size: int, rank: int) -> int:
    """Elements of ``rank``'s chunk when ``count`` elements are split over ``size`` ranks."""
    return count // size + (1 if rank < count % size else 0)


def chunk_offset(count: int, size: int, rank: int) -> int:
    """Where ``rank``'s chunk starts when ``count`` elements are split over ``size`` ranks."""
    return rank * (count // size) + min(rank, count % size)


def saved_owner_residual_applies(state: dict, ranks: int, owner_offset: int, owner_numel: int) -> bool:
    """Whether an error-feedback state's ``owner`` residual (of the chunk a rank reduced) belongs to
    the chunk this memory reduces now: saved, by as many ranks and at the same offset (where the
    state records them), and as long. Otherwise it restarts at zero: after a lost rank (or a
    checkpoint resumed on another number of ranks) chunks are laid out anew, and a residual added
    to another chunk's elements would be wrong. Each rank's own ``worker`` residual always applies."""
    owner = state.get("owner")
    if owner is None or len(owner) != owner_numel:
        return False
    return state.get("ranks", ranks) == ranks and state.get("owner_offset", owner_offset) == owner_offset


def part_counts(count: int, size: int, rank: int) -> list[int]:
    """Elements of each part of ``rank``'s chunk (what one codec header covers)."""
    parts = int(_core.lib().relax_compressed_parts(count, size))
    chunk = chunk_count(count, size, rank)
    return [chunk_count(chunk, parts, p) for p in range(parts)]


def chunk_wire_bytes(codec: str | int, count: int, size: int, rank: int) -> int:
    """Bytes of ``rank``'s encoded chunk on the wire: its parts, each behind a 4-byte marker."""
    return sum(MARKER_BYTES + encoded_bytes(codec, n) for n in part_counts(count, size, rank))


def encoded_bytes(codec: str | int, n: int) -> int:
    """Bytes of one chunk of ``n`` float32 values encoded with ``codec``."""
    return int(_core.lib().relax_codec_encoded_bytes(codec_id(codec), n))


def encode(codec: str | int, values: np.ndarray) -> np.ndarray:
    """Encodes a float32 array as one chunk; returns the bytes (uint8 array)."""
    values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    out = np.empty(max(encoded_bytes(codec, values.size), 0), dtype=np.uint8)
    _core.check(_core.lib().relax_codec_encode(codec_id(codec), _address(values), values.nbytes, values.size,
                                               _address(out), out.nbytes))
    return out


def decode(codec: str | int, data: np.ndarray, n: int) -> np.ndarray:
    """Decodes one chunk of ``n`` values. ValueError (the core's InvalidArgumentError) for a
    negative ``n`` or when ``data`` holds fewer bytes than their encoding: the core checks both
    buffers' capacities (relax.h, "Buffer capacities") before its decoder reads or writes."""
    data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    out = np.empty(max(n, 0), dtype=np.float32)
    _core.check(_core.lib().relax_codec_decode(codec_id(codec), _address(data), data.nbytes, n, _address(out),
                                               out.nbytes))
    return out


def _address(array: np.ndarray) -> ctypes.c_void_p:
    """The data pointer of a contiguous host array for the core."""
    return array.ctypes.data_as(ctypes.c_void_p)


class Compressor:
    """Horovod's gradient-compression interface (``hvd.Compression.*``): compress before the
    collective, decompress after. Framework bindings subclass it for their tensor type."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to communicate and a context for decompress()."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Restores a communicated tensor using the context from compress()."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Communicates tensors unchanged (any framework)."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor
