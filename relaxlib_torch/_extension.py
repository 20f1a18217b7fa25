"""Loads the compiled torch extension (torch.ops.relaxlib.*) after checking it matches the installed torch."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch

REBUILD_HINT = ("rebuild relaxlib with `pip install --no-build-isolation --force-reinstall <relaxlib checkout>` "
                "(or `make build`)")


def _built_torch_version() -> str | None:
    try:
        from relaxlib import _build_info
    except ImportError:
        return None
    return _build_info.TORCH_VERSION


_loaded = False


def load() -> None:
    """Registers torch.ops.relaxlib, or raises ImportError saying exactly what to rebuild."""
    global _loaded
    if _loaded:
        return
    built = _built_torch_version()
    if built is None:
        raise ImportError("relaxlib was built without PyTorch support (torch was not importable at build time); "
                          + REBUILD_HINT)
    if built != torch.__version__:
        raise ImportError(
            f"relaxlib_torch was built against torch {built}, but torch {torch.__version__} is installed; "
            + REBUILD_HINT
        )
    candidates = sorted(Path(__file__).parent.glob("_ops*.so"))
    if not candidates:
        raise ImportError(f"relaxlib_torch's compiled extension is missing; {REBUILD_HINT}")
    import relaxlib._core  # loads the core library first, so the extension binds the same instance

    relaxlib._core.lib()
    try:
        torch.ops.load_library(str(candidates[0]))
    except OSError as exc:
        raise ImportError(f"relaxlib_torch's extension failed to load ({exc}); {REBUILD_HINT}") from exc
    _loaded = True


def direct() -> ModuleType:
    """The extension as a Python module: direct bindings of the synchronous collectives, which skip
    the torch.ops dispatcher (see csrc/python_bindings.cc)."""
    load()
    from relaxlib_torch import _ops

    return _ops
