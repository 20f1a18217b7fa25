"""The ctypes mirror of relax_request_t (relaxlib/_core.py) matches the core's struct field for field.

The core describes its layout (relax_request_layout: "<struct> 0 <sizeof>" per struct, then
"<struct>.<field> <offset> <size>" per field; the args union is the field relax_request_t.args).
A mirror that drifted from the header would hand the core garbage without any error, so every
struct's size and every field's offset and size must agree, and neither side may have a field
the other lacks.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from relaxlib import _core
from relaxlib.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parent.parent

Layout = dict[str, dict[str, tuple[int, int]]]  # struct -> {"": (0, sizeof), field: (offset, size)}


def parse_layout(text: str) -> Layout:
    layout: Layout = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        assert len(parts) == 3, f"malformed layout line {line!r}"
        key, offset, size = parts[0], int(parts[1]), int(parts[2])
        struct, _, field = key.partition(".")
        fields = layout.setdefault(struct, {})
        assert field not in fields, f"{key} listed twice"
        fields[field] = (offset, size)
    return layout


def mirror_layout() -> Layout:
    layout: Layout = {}
    for struct, mirror in _core.REQUEST_LAYOUT_STRUCTS.items():
        fields = {"": (0, ctypes.sizeof(mirror))}
        for name, _ in mirror._fields_:
            descriptor = getattr(mirror, name)
            fields[name] = (descriptor.offset, descriptor.size)
        layout[struct] = fields
    return layout


def check_against(core: Layout) -> None:
    mirror = mirror_layout()
    assert sorted(core) == sorted(mirror), "structs the core describes vs the ctypes mirrors"
    for struct, core_fields in core.items():
        assert "" in core_fields, f"the core gave no size line for {struct}"
        assert core_fields[""] == mirror[struct][""], f"sizeof({struct}) (offset, size): core vs ctypes"
        assert sorted(core_fields) == sorted(mirror[struct]), f"fields of {struct}: core vs ctypes"
        for field, (offset, size) in core_fields.items():
            assert (offset, size) == mirror[struct][field], f"{struct}.{field} (offset, size): core vs ctypes"


def test_the_ctypes_request_mirrors_the_core_layout():
    text = _core.lib().relax_request_layout()
    assert text, "relax_request_layout returned nothing"
    check_against(parse_layout(text.decode()))


def test_the_args_union_holds_one_struct_per_kind():
    """Each member of the union mirror is the struct the header names for that kind, at offset 0."""
    union = _core.RequestArgs
    by_class = {mirror: name for name, mirror in _core.REQUEST_LAYOUT_STRUCTS.items()}
    # the union as relax.h declares it: "relax_<kind>_args_t <member>;" lines
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    body = re.search(r"union\s*\{(.*?)\}\s*args;", text, flags=re.S).group(1)
    expected = {member: struct for struct, member in re.findall(r"(relax_\w+_t)\s+(\w+);", body)}
    assert len(expected) >= 9, "the header parse found too few union members"
    assert {name: by_class[kind] for name, kind in union._fields_} == expected
    assert all(getattr(union, name).offset == 0 for name, _ in union._fields_)
    assert ctypes.sizeof(union) == max(ctypes.sizeof(kind) for _, kind in union._fields_)


def test_the_mirror_compiles_against_the_header(tmp_path):
    """The same check against relax.h itself, compiled with this machine's C compiler (offsetof
    and sizeof of every field the mirror has, in relax_request_layout's format): a mirror field the
    header lacks fails to compile; a header field the mirror lacks shows in the struct's size."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lines = []
    for struct, fields in mirror_layout().items():
        lines.append(f'  printf("{struct} 0 %zu\\n", sizeof({struct}));')
        for field in fields:
            if field:
                lines.append(f'  printf("{struct}.{field} %zu %zu\\n", offsetof({struct}, {field}), '
                             f"sizeof((({struct}*)0)->{field}));")
    source = tmp_path / "layout.c"
    source.write_text("#include <stddef.h>\n#include <stdio.h>\n#include \"relax/relax.h\"\n"
                      "int main(void) {\n" + "\n".join(lines) + "\n  return 0;\n}\n")
    binary = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", f"-I{ROOT / 'cuda_ops' / 'include'}", str(source), "-o", str(binary)],
                   check=True, capture_output=True, text=True)
    header = parse_layout(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)
    check_against(header)


# The buffers a request lends the core (what it reads or writes beyond the call), each of which
# must travel with its capacity (relax.h, "Buffer capacities"). Argument arrays read only during
# relax_enqueue (shape, splits, peers, ...) are not buffers the operation touches later; the
# tensors laid end to end carry their element counts (relax_input_pieces_t.counts).
LENT_BUFFERS = {
    "relax_request_t": ["input", "output"],
    "relax_compressed_allreduce_args_t": ["worker_error", "owner_error"],
    "relax_step_scale_args_t": ["statistics", "smoothed"],
    "relax_neighbor_average_args_t": ["estimate_self", "estimate_peers"],
}


def test_every_lent_buffer_travels_with_its_capacity():
    """A ``<buffer>_bytes`` int64 for each lent buffer, in the core's layout and the mirror."""
    core = parse_layout(_core.lib().relax_request_layout().decode())
    for struct, buffers in LENT_BUFFERS.items():
        for buffer in buffers:
            assert core[struct][f"{buffer}_bytes"][1] == 8, f"{struct}.{buffer}_bytes"
    assert _core.lib().relax_abi_version() == _core.ABI_VERSION == header_constants()["ABI_VERSION"]


HEADER = ROOT / "cuda_ops" / "include" / "relax" / "relax.h"


def header_constants() -> dict[str, int]:
    """RELAX_ABI_VERSION and every enumerator of relax.h's enums (each with an explicit value),
    read from the header's text, by name without the RELAX_ prefix, in declaration order."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    constants = {"ABI_VERSION": int(re.search(r"#define RELAX_ABI_VERSION (\d+)", text).group(1))}
    for body in re.findall(r"typedef enum\s*\{(.*?)\}", text, flags=re.S):
        entries = [entry.strip() for entry in body.split(",") if entry.strip()]
        for entry in entries:
            match = re.fullmatch(r"RELAX_(\w+)\s*=\s*(-?\d+)", entry)
            assert match, f"relax.h enumerator without an explicit value: {entry!r}"
            constants[match.group(1)] = int(match.group(2))
    return constants


def test_the_core_reports_every_constant_of_the_header():
    """relax_abi_constants() lists the header's constants with the header's values, in its order:
    an enumerator added to relax.h but not to the core's list (api/abi_constants.cc) fails here."""
    header = header_constants()
    assert len(header) > 40, "the header parse found too few constants"
    assert list(_core.constants().items()) == list(header.items())


def test_the_binding_reads_every_constant_from_the_core():
    """Every constant of relax.h is an attribute of relaxlib._core with the header's value (the
    hand-kept copies lacked INT16 and UINT16), and the binding expects the header's ABI."""
    header = header_constants()
    for name, value in header.items():
        assert getattr(_core, name) == value, name
    assert _core.ABI_VERSION == header["ABI_VERSION"] == _core.lib().relax_abi_version()
    kinds = {name.removeprefix("REQ_").lower(): value for name, value in header.items() if name.startswith("REQ_")}
    assert _core.request_kinds() == kinds and len(kinds) == 12
    with pytest.raises(AttributeError):
        _core.REQ_NO_SUCH_KIND  # noqa: B018


def test_new_requests_carry_the_core_defaults():
    """_core.new_request starts a request as the C++ bindings do (relax_request_init): no
    scaling for the reductions and the compressed all-reduce, zero elsewhere."""
    allreduce = _core.new_request(_core.REQ_ALLREDUCE)
    assert allreduce.type == _core.REQ_ALLREDUCE
    assert (allreduce.args.allreduce.reduce_op, allreduce.args.allreduce.prescale,
            allreduce.args.allreduce.postscale) == (_core.OP_AVERAGE, 1.0, 1.0)
    scatter = _core.new_request(_core.REQ_REDUCESCATTER).args.reducescatter
    assert (scatter.reduce.prescale, scatter.reduce.postscale, scatter.ncounts) == (1.0, 1.0, 0)
    compressed = _core.new_request(_core.REQ_COMPRESSED_ALLREDUCE).args.compressed_allreduce
    assert (compressed.prescale, compressed.reduce_op, compressed.codec) == (1.0, _core.OP_AVERAGE, 0)
    group = _core.new_request(_core.REQ_GROUP_AVERAGE)
    assert bytes(group.args) == bytes(ctypes.sizeof(group.args))
    with pytest.raises(InvalidArgumentError, match="unknown request type 99"):
        _core.new_request(99)


def test_grouped_members_are_named_by_the_core():
    """One rule for every binding: "<base>.<index>of<count>"."""
    assert [_core.member_name("grads", i, 3) for i in range(3)] == ["grads.0of3", "grads.1of3", "grads.2of3"]
    with pytest.raises(InvalidArgumentError, match="index 3, count 3"):
        _core.member_name("grads", 3, 3)


def test_a_tensorflow_message_names_the_relaxlib_error_class():
    """TF ops carry the core's error class in brackets, after TF's own words (relaxlib_tf/csrc/bridge.cc);
    hvd.elastic.run raises that class again to tell a lost rank from other failures."""
    from relaxlib.errors import ProcessFailedError, ShutdownError, error_named
    text = "Graph execution error:\n\nDetected at node x\n[ProcessFailedError] rank 2 lost\n\t [[{{node R}}]]"
    error = error_named(text)
    assert type(error) is ProcessFailedError and isinstance(error, ShutdownError) and str(error) == "rank 2 lost"
    assert error_named("[Foo] not ours") is None and error_named("no marker") is None


def test_a_py_function_traceback_names_the_error_it_raised():
    """Algorithms that run on host arrays inside Keras fit raise through tf.py_function, whose
    error message quotes the traceback: the last relaxlib class named there is the one raised."""
    from relaxlib.errors import ProcessFailedError, error_named
    text = ("UNKNOWN: ProcessFailedError: thread failed: rank 2 lost\nTraceback (most recent call last):\n"
            "relaxlib.errors.ProcessFailedError: async: thread failed: rank 2 lost\n\t [[{{node EagerPyFunc}}]]")
    error = error_named(text)
    assert type(error) is ProcessFailedError and str(error) == "async: thread failed: rank 2 lost"
    assert error_named("ValueError: not ours") is None
