"""Gradient compression applied around a collective (Horovod's ``hvd.Compression`` for TensorFlow)."""

from __future__ import annotations

import tensorflow as tf

from relaxlib.compression import Compressor, NoneCompressor


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
