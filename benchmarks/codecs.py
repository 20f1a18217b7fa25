"""Codec throughput on one core: relaxlib's C++ encoders/decoders beside memcpy (the physical
limit, measured in the same run) and beside the same codec written with torch ops.

    python benchmarks/codecs.py [--mib 16]

Throughput is float32 input bytes per second (encode) / output bytes per second (decode).
Writes benchmarks/results/codecs.json.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from relaxlib import _core
from relaxlib.compression import CODECS, encoded_bytes

RESULTS = Path(__file__).resolve().parent / "results"


def best_seconds(fn, repeat: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---- the same codecs with torch ops (for comparison) ----

def torch_uint8(x: torch.Tensor):
    lo, hi = x.min(), x.max()
    step = (hi - lo) / 255
    q = ((x - lo) / step + 0.5).clamp_(0, 255).to(torch.uint8)
    return lambda: lo + q.float() * step, q


def torch_sign(x: torch.Tensor):
    scale = x.abs().mean()
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
    bits = ((x >= 0).to(torch.uint8).view(-1, 8) * weights).sum(dim=1, dtype=torch.uint8)

    def decode():
        unpacked = bits.unsqueeze(1).bitwise_and(weights).ne(0).view(-1)
        return torch.where(unpacked, scale, -scale)
    return decode, bits


def torch_fp16(x: torch.Tensor):
    h = x.half()
    return lambda: h.float(), h


TORCH_CODECS = {"uint8": torch_uint8, "sign": torch_sign, "fp16": torch_fp16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=16, help="float32 input size")
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.mib * (1 << 20) // 4
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    nbytes = x.nbytes
    core = _core.lib()
    src, dst = np.empty_like(x), np.empty_like(x)
    memcpy_s = best_seconds(lambda: ctypes.memmove(dst.ctypes.data, x.ctypes.data, nbytes))
    print(f"memcpy of {args.mib} MiB: {nbytes / memcpy_s / 1e9:.2f} GB/s (physical limit on this core)")
    rows = []
    for name, spec in CODECS.items():
        codec = spec.id
        encoded = np.empty(encoded_bytes(name, n), dtype=np.uint8)
        encode_s = best_seconds(lambda codec=codec, encoded=encoded: core.relax_codec_encode(
            codec, x.ctypes.data_as(ctypes.c_void_p), x.nbytes, n, encoded.ctypes.data_as(ctypes.c_void_p),
            encoded.nbytes))
        decode_s = best_seconds(lambda codec=codec, encoded=encoded: core.relax_codec_decode(
            codec, encoded.ctypes.data_as(ctypes.c_void_p), encoded.nbytes, n, src.ctypes.data_as(ctypes.c_void_p),
            src.nbytes))
        if name not in TORCH_CODECS:
            print(f"{name}: no torch version to compare with; skipped")
            continue
        xt = torch.from_numpy(x)
        torch_encode_s = best_seconds(lambda name=name, xt=xt: TORCH_CODECS[name](xt), repeat=5)
        decode_fn, _ = TORCH_CODECS[name](xt)
        torch_decode_s = best_seconds(decode_fn, repeat=5)
        row = {"codec": name, "compression_ratio": nbytes / encoded.nbytes,
               "encode_gbps": nbytes / encode_s / 1e9, "decode_gbps": nbytes / decode_s / 1e9,
               "torch_encode_gbps": nbytes / torch_encode_s / 1e9, "torch_decode_gbps": nbytes / torch_decode_s / 1e9,
               "encode_fraction_of_memcpy": memcpy_s / encode_s, "decode_fraction_of_memcpy": memcpy_s / decode_s}
        rows.append(row)
        print(f"{name:6s} ratio {row['compression_ratio']:5.1f}x  encode {row['encode_gbps']:6.2f} GB/s "
              f"({100 * row['encode_fraction_of_memcpy']:3.0f}% of memcpy)  decode {row['decode_gbps']:6.2f} GB/s "
              f"({100 * row['decode_fraction_of_memcpy']:3.0f}%)  | torch ops: encode {row['torch_encode_gbps']:5.2f}, "
              f"decode {row['torch_decode_gbps']:5.2f} GB/s")
    RESULTS.mkdir(exist_ok=True)
    report = {"benchmark": "codecs", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
              "input_mib": args.mib, "threads": 1, "memcpy_gbps": nbytes / memcpy_s / 1e9, "codecs": rows}
    (RESULTS / "codecs.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {RESULTS / 'codecs.json'}")


if __name__ == "__main__":
    main()
