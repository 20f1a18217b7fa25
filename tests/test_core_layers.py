"""The core's include rules (cuda_ops/check_layers.py, run by `make lint`) hold, and the checker
catches each kind of violation it exists for."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("check_layers", ROOT / "cuda_ops" / "check_layers.py")
check_layers = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(check_layers)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of cuda_ops/src to break on purpose."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "cuda_ops" / "src", src)
    return src


def test_repository_follows_the_layers():
    src = ROOT / "cuda_ops" / "src"
    bindings = [ROOT / "relaxlib_torch" / "csrc", ROOT / "relaxlib_tf" / "csrc"]
    assert check_layers.check_core(src) == []
    assert check_layers.check_bindings(src, bindings) == []


def test_every_layer_folder_exists_and_holds_sources():
    for name, _ in check_layers.LAYERS:
        assert any((ROOT / "cuda_ops" / "src" / name).glob("*.h")), name


def _append_include(path: Path, target: str) -> None:
    path.write_text(path.read_text() + f'\n#include "{target}"\n')


def test_an_include_from_a_higher_layer_is_reported(tree: Path):
    _append_include(tree / "util" / "types.h", "engine/engine.h")
    problems = check_layers.check_core(tree)
    assert len(problems) == 1
    assert "types.h" in problems[0] and "util includes \"engine/engine.h\" from engine" in problems[0]


def test_an_include_without_its_layer_or_a_file_outside_the_layers_is_reported(tree: Path):
    _append_include(tree / "engine" / "config.cc", "shm_transport.h")
    (tree / "loose.cc").write_text("int x;\n")
    problems = check_layers.check_core(tree)
    assert any("does not name its layer" in p for p in problems)
    assert any("loose.cc" in p and "not in a layer folder" in p for p in problems)


def test_a_binding_that_includes_an_internal_header_is_reported(tree: Path, tmp_path: Path):
    binding = tmp_path / "binding"
    binding.mkdir()
    (binding / "ops.cc").write_text('#include "relax/relax.h"\n#include "engine/engine.h"\n')
    problems = check_layers.check_bindings(tree, [binding])
    assert problems == [f"{binding / 'ops.cc'}:2: a framework binding includes the core's internal "
                        "\"engine/engine.h\"; use the C ABI (relax/relax.h)"]
