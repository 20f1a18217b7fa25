"""Every codec table is derived from the core's registry: the core lists its codecs
(relax_codec_count / relax_codec_info), and Python's ids, ratios, advisor kinds and caveats and
CHOCO steps all come from that list. Adding a codec is one C++ file; these tests add nothing but
check that each consumer takes what the registry says and accepts any registered codec."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from relaxlib import _core, compression, perfmodel
from relaxlib.algorithms.compressed import CompressedScatterReduce, compressed_mode
from relaxlib.algorithms.decentralized import Decentralized

ROOT = Path(__file__).resolve().parent.parent


def core_listing() -> list[tuple[int, str]]:
    lib = _core.lib()
    listing = []
    for index in range(lib.relax_codec_count()):
        info = _core.CodecInfo()
        _core.check(lib.relax_codec_info(index, ctypes.byref(info)))
        listing.append((info.id, info.name.decode()))
    return listing


def test_python_lists_exactly_the_codecs_the_core_registered():
    assert [(spec.id, name) for name, spec in compression.CODECS.items()] == core_listing()
    assert {"fp16", "uint8", "sign"} <= set(compression.CODECS)


def test_an_index_past_the_registry_is_an_error_naming_the_count():
    lib = _core.lib()
    with pytest.raises(Exception, match=f"there are {lib.relax_codec_count()}"):
        _core.check(lib.relax_codec_info(lib.relax_codec_count(), ctypes.byref(_core.CodecInfo())))


@pytest.mark.parametrize("name", ["fp16", "uint8", "sign"])
def test_ratio_and_bits_are_the_cores_encoded_size_headers_included(name):
    spec = compression.CODECS[name]
    n = compression.RATIO_CHUNK_ELEMENTS
    assert spec.bits_per_element() == 8 * compression.encoded_bytes(name, n) / n
    assert spec.ratio == pytest.approx({"fp16": 16, "uint8": 8, "sign": 1}[name] / 32, rel=1e-3)
    assert spec.bits_per_element(64) > spec.bits_per_element(1 << 20) or name == "fp16"  # header share


@pytest.fixture
def extra_codec(monkeypatch):
    """A codec the consumers have never heard of: "sign-twin", registered under sign's id."""
    registered = dict(compression._registered())
    sign = registered["sign"]
    twin = compression.CodecSpec(sign.id, "sign-twin", sign.wire_format, "compressed", "a twin's caveat", 0.25)
    monkeypatch.setattr(compression, "_registered", lambda: {**registered, "sign-twin": twin})
    return twin


def test_every_consumer_accepts_a_codec_it_was_not_written_for(extra_codec):
    assert compression.codec_id("sign-twin") == extra_codec.id
    workload = perfmodel.Workload(ranks=4, buckets=[8e6], forward_s=0.04, backward_s=0.08, alpha_s=1e-4,
                                  bandwidth_bytes_per_s=1e8, codec_bytes_per_s={"sign-twin": 1e9})
    prediction = perfmodel.predict_compressed(workload, "sign-twin")
    assert prediction.bytes_sent == pytest.approx(2 * 3 / 4 * extra_codec.ratio * 8e6)
    assert prediction.note == "a twin's caveat"
    mode = compressed_mode("sign-twin")
    assert (mode.name, mode.kind, mode.caveat) == ("compressed-sign-twin", "compressed", "a twin's caveat")
    assert mode.algorithm().codec == "sign-twin"
    assert CompressedScatterReduce(codec="sign-twin").codec == "sign-twin"
    assert Decentralized(codec="sign-twin").consensus_step == 0.25


def test_no_python_module_keeps_a_codec_table_of_its_own():
    literal_table = re.compile(r"""[{,]\s*["'](fp16|uint8|sign)["']\s*:""")
    offenders = []
    for package in ("relaxlib", "relaxlib_torch", "relaxlib_tf"):
        for path in (ROOT / package).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if literal_table.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
