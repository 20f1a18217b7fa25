"""Test-only stand-in for the ``horovod`` package: every module forwards to relaxlib.

It exists so that Horovod's own parallel test suites (fetched, never committed) run against
relaxlib unchanged; see tests/horovod_suites/README.md. Nothing here implements Horovod API: a
name relaxlib lacks stays missing (AttributeError), so the suites report it.
"""

import importlib
import sys
import types

SHIM_MARKER = True   # run_suites.py checks that ``import horovod`` found this package


def forward(module_name: str, target_name: str) -> types.ModuleType:
    """Makes the shim module ``module_name`` forward every attribute it lacks to ``target_name``."""
    target = importlib.import_module(target_name)
    module = sys.modules[module_name]

    def __getattr__(name):
        return getattr(target, name)

    def __dir__():
        return sorted(set(vars(module)) | set(dir(target)))

    module.__getattr__ = __getattr__
    module.__dir__ = __dir__
    module.__all__ = list(getattr(target, "__all__", [n for n in dir(target) if not n.startswith("_")]))
    module.__relaxlib_target__ = target
    return target
