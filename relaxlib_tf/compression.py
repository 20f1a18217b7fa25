"""Gradient compression applied around a collective (Horovod's ``hvd.Compression`` for TensorFlow)."""

from __future__ import annotations

import tensorflow as tf


class Compressor:
    """Interface: compress before communicating, decompress after."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to communicate and a context for decompress()."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Restores a communicated tensor using the context from compress()."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Communicates tensors unchanged."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Casts floating-point tensors to float16 for the transfer and back afterwards."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None or tensor.dtype == ctx else tf.cast(tensor, ctx)


class Compression:
    """Available compressors: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
