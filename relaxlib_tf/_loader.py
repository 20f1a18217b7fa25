"""Loads the compiled TensorFlow op library after checking it matches the installed TensorFlow."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

REBUILD_HINT = ("rebuild relaxlib with `pip install --no-build-isolation --force-reinstall <relaxlib checkout>` "
                "(or `make build`)")

_library = None


def _built_tf_version() -> str | None:
    try:
        from relaxlib import _build_info
    except ImportError:
        return None
    return getattr(_build_info, "TF_VERSION", None)


def library():
    """The op module (``relaxlib_allreduce``, ...), or ImportError saying exactly what to rebuild."""
    global _library
    if _library is not None:
        return _library
    built = _built_tf_version()
    if built is None:
        raise ImportError("relaxlib was built without TensorFlow support (TensorFlow was not importable at build "
                          "time); " + REBUILD_HINT)
    if built != tf.__version__:
        raise ImportError(f"relaxlib_tf was built against TensorFlow {built}, but TensorFlow {tf.__version__} is "
                          "installed; " + REBUILD_HINT)
    path = Path(__file__).parent / "_ops.so"
    if not path.exists():
        raise ImportError(f"relaxlib_tf's op library is missing; {REBUILD_HINT}")
    import relaxlib._core  # the core first, so the op library binds the same instance as torch and ctypes

    relaxlib._core.lib()
    try:
        _library = tf.load_op_library(str(path))
    except (OSError, tf.errors.NotFoundError) as exc:
        raise ImportError(f"relaxlib_tf's op library failed to load ({exc}); {REBUILD_HINT}") from exc
    from relaxlib_tf import _interrupts

    _interrupts.install()  # the ops it loaded can be interrupted by a signal
    return _library
