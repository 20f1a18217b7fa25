"""The ctypes mirror of relax_request_t (relaxlib/_core.py) matches the core's struct field for field.

The core describes its layout (relax_request_layout: "<struct> 0 <sizeof>" per struct, then
"<struct>.<field> <offset> <size>" per field; the args union is the field relax_request_t.args).
A mirror that drifted from the header would hand the core garbage without any error, so every
struct's size and every field's offset and size must agree, and neither side may have a field
the other lacks.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from relaxlib import _core

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
    expected = {
        "allreduce": "relax_reduce_args_t", "broadcast": "relax_broadcast_args_t",
        "reducescatter": "relax_reducescatter_args_t", "alltoall": "relax_alltoall_args_t",
        "add_process_set": "relax_add_process_set_args_t", "remove_process_set": "relax_remove_process_set_args_t",
        "compressed_allreduce": "relax_compressed_allreduce_args_t",
        "neighbor_average": "relax_neighbor_average_args_t", "group_average": "relax_group_average_args_t",
    }
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
    assert _core.lib().relax_abi_version() == _core.ABI_VERSION == 15
