"""Codecs of compressed collectives (framework-neutral): names, chunking, and direct access to
the core's encoders (for tests and benchmarks).

A compressed all-reduce splits a flat float32 tensor of ``count`` elements into one contiguous
chunk per rank (sizes differ by at most one, the first chunks taking the extra element); each
chunk is encoded on its own:

========  ======================================  ==========================================
codec     wire format per chunk of n elements     error per element
========  ======================================  ==========================================
fp16      2n bytes                                IEEE half rounding (relative 2^-11)
uint8     min, max (8 bytes) + n bytes            <= (max - min) / 255 / 2
sign      rms(x) (4 bytes) + ceil(n / 8) bytes    | |x| - rms(x) |; the chunk's L2 norm is kept
========  ======================================  ==========================================
"""

from __future__ import annotations

import ctypes

import numpy as np

from relaxlib import _core

CODECS = {"fp16": 1, "uint8": 2, "sign": 3}


def codec_id(codec: str | int) -> int:
    """The core id of a codec name (or id)."""
    if isinstance(codec, int) and codec in CODECS.values():
        return codec
    try:
        return CODECS[codec]
    except (KeyError, TypeError):
        raise ValueError(f"unknown codec {codec!r}; choose one of {sorted(CODECS)}") from None


def chunk_count(count: int, size: int, rank: int) -> int:
    """Elements of ``rank``'s chunk when ``count`` elements are split over ``size`` ranks."""
    return count // size + (1 if rank < count % size else 0)


def encoded_bytes(codec: str | int, n: int) -> int:
    """Bytes of one chunk of ``n`` float32 values encoded with ``codec``."""
    return int(_core.lib().relax_codec_encoded_bytes(codec_id(codec), n))


def encode(codec: str | int, values: np.ndarray) -> np.ndarray:
    """Encodes a float32 array as one chunk; returns the bytes (uint8 array)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    out = np.empty(encoded_bytes(codec, values.size), dtype=np.uint8)
    _core.check(_core.lib().relax_codec_encode(codec_id(codec), values.ctypes.data_as(ctypes.c_void_p), values.size,
                                               out.ctypes.data_as(ctypes.c_void_p)))
    return out


def decode(codec: str | int, data: np.ndarray, n: int) -> np.ndarray:
    """Decodes one chunk of ``n`` values."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    out = np.empty(n, dtype=np.float32)
    _core.check(_core.lib().relax_codec_decode(codec_id(codec), data.ctypes.data_as(ctypes.c_void_p), n,
                                               out.ctypes.data_as(ctypes.c_void_p)))
    return out


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
