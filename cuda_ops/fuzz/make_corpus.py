#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets (cuda_ops/fuzz/corpus/<target>/).

A handful of valid inputs each, in the formats the targets read (see each fuzz_<target>.cc):
negotiation payloads as engine/coordinator.cc encodes them, codec selector + element count +
bytes, configuration values split at NUL bytes, and deterministic bytes for the validation target
(it builds requests with FuzzedDataProvider, whose coverage the fuzzer extends quickly).
Run: python3 cuda_ops/fuzz/make_corpus.py (rewrites the seeds; deterministic).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"


def u32(v: int) -> bytes:
    """encode_u32: 4 bytes, little-endian (the core writes native order; x86 and arm64 are little)."""
    return struct.pack("<I", v & 0xFFFFFFFF)


def i64(v: int) -> bytes:
    """encode_i64."""
    return struct.pack("<q", v)


def f64(v: float) -> bytes:
    """encode_double: the bits as an int64."""
    return struct.pack("<d", v)


def text(s: str) -> bytes:
    """encode_string: length, then the bytes."""
    raw = s.encode()
    return u32(len(raw)) + raw


def vector(values: list[int]) -> bytes:
    """encode_vector: count, then int64 each."""
    return u32(len(values)) + b"".join(i64(v) for v in values)


def descriptor(name: str, type_: int = 0, dtype: int = 0, op: int = 1, root: int = 0, prescale: float = 1.0,
               postscale: float = 1.0, shape: list[int] | None = None, splits: list[int] | None = None,
               recv_counts: list[int] | None = None, group: str = "", group_size: int = 0, codec: int = 0,
               flags: int = 0, scale_shapes: list[int] | None = None, scale_floor: float = 0.0,
               scale_decay: float = 0.0, rejection: str = "", rejection_code: int = 0) -> bytes:
    """encode_descriptor (util/types.cc), field by field."""
    return (text(name) + u32(type_) + u32(dtype) + u32(op) + u32(root) + f64(prescale) + f64(postscale)
            + vector(shape or []) + vector(splits or []) + vector(recv_counts or []) + text(group)
            + u32(group_size) + u32(codec) + u32(flags) + vector(scale_shapes or []) + f64(scale_floor)
            + f64(scale_decay) + text(rejection) + u32(rejection_code))


def payload(descriptors: list[bytes], stall_aborts: list[str]) -> bytes:
    """encode_payload (engine/coordinator.cc)."""
    return u32(len(descriptors)) + b"".join(descriptors) + u32(len(stall_aborts)) + b"".join(map(text, stall_aborts))


def negotiation() -> dict[str, bytes]:
    """Round payloads: single requests of several kinds, a group, a rejection, stall aborts."""
    return {
        "allreduce": payload([descriptor("grad.0", shape=[4, 3])], []),
        "allreduce_avg_scaled": payload([descriptor("g", op=0, prescale=0.5, postscale=2.0, shape=[10])], []),
        "alltoall_reducescatter": payload([
            descriptor("a2a", type_=4, shape=[6, 2], splits=[1, 2, 3]),
            descriptor("rs", type_=3, dtype=1, shape=[9], recv_counts=[3, 3, 3]),
        ], []),
        "broadcast_group": payload([
            descriptor("b0", type_=2, dtype=5, root=1, shape=[7], group="grp", group_size=2),
            descriptor("b1", type_=2, dtype=5, root=1, shape=[], group="grp", group_size=2),
        ], []),
        "compressed_scaled": payload([descriptor("c", type_=9, op=0, shape=[12], codec=3, flags=3,
                                                 scale_shapes=[3, 4], scale_floor=0.01, scale_decay=0.9)], []),
        "rejected": payload([descriptor("r", dtype=8, shape=[2], rejection="unsupported dtype", rejection_code=2)], []),
        "stall_aborts": payload([], ["stuck.0", "stuck.1"]),
        "barrier_join_sets": payload([descriptor("barrier", type_=5), descriptor("join", type_=6),
                                      descriptor("add", type_=7, shape=[0, 2])], []),
    }


def codecs() -> dict[str, bytes]:
    """Codec index, element count (12 bits in 2 bytes), flags (bit 0: finite values only), then data bytes."""
    floats = struct.pack("<16f", *[(-1.0) ** i * (i + 0.5) for i in range(16)])
    return {
        f"codec{index}_n{n}_{'finite' if finite else 'any'}": bytes([index, n & 0xFF, n >> 8, finite]) + floats
        for index in range(4) for n, finite in ((0, 1), (1, 1), (9, 0), (1000, 1))
    }


def config() -> dict[str, bytes]:
    """Topology bytes (host ranks, cores; high bits: single node, cores shared), then values in
    fuzz_config.cc's order of variables, NUL-separated."""
    def values(*items: str) -> bytes:
        return b"\0".join(item.encode() for item in items)

    return {
        "defaults": bytes([2, 4]),
        "numbers": bytes([0x84, 2]) + values("1048576", "2.5", "64", "30", "0", "0", "5", "4", "8", "0", "0", "50",
                                             "65536", "on", "auto", "off", "off", "auto", "0", "8192", "32",
                                             "contribute-nothing", "1"),
        "bad_values": bytes([3, 0x81]) + values("-1", "x", "1e400", "nan", "", "inf", "0x10", "1", "-0", "3.5"),
        "out_of_range": bytes([3, 0x81]) + values("1e30", "-1e30", "1e30", "1e-320", "9223372036854775808"),
        "eager_limit": bytes([1, 1]) + values(*[""] * 16, "auto", "off"),
        "horovod_names": bytes([1, 8]) + values(*[""] * 23, "1024", "0.1", "8", "10", "20"),
    }


def validate() -> dict[str, bytes]:
    """Deterministic bytes: FuzzedDataProvider reads choices from the end, values from the front."""
    rng = random.Random(49)
    return {f"seed{i}": bytes(rng.randrange(256) for _ in range(48 + 24 * i)) for i in range(8)}


def main() -> None:
    """Writes every target's seeds, replacing the previous ones."""
    for target, seeds in {"negotiation": negotiation(), "codecs": codecs(), "config": config(),
                          "validate": validate()}.items():
        directory = CORPUS / target
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            old.unlink()
        for name, data in seeds.items():
            (directory / name).write_bytes(data)


if __name__ == "__main__":
    main()
