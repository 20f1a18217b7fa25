"""Gradient compression applied around a collective (Horovod's ``hvd.Compression``)."""

from __future__ import annotations

import torch

from relaxlib.compression import Compressor, NoneCompressor


class FP16Compressor(Compressor):
    """Casts floating-point tensors to float16 for the transfer and back afterwards."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None or tensor.dtype == ctx else tensor.type(ctx)


class Compression:
    """Available compressors: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
