"""Imported at start-up by the Python processes the suite starts (tests/conftest.py puts this folder on
PYTHONPATH): once everything else has run at exit, the interpreter's teardown skips collecting the
objects still alive.

Why: Python's teardown walks every tracked object with torch or TensorFlow loaded, about 0.5 s (torch)
and 0.9 s (TensorFlow) of CPU per process on this machine kind, and the suite starts hundreds of rank
processes on 2 cores. The atexit hook is registered first, so it runs last: relaxlib's own exit
hooks (MPI_Finalize, the exit agreement) run as in a user's process. What the suite gives up here, a
crash in a cyclic object's finalizer at teardown, the demo test (tests/test_examples.py) and
tests/test_wheel_install.py still cover: they start their processes with a PYTHONPATH of their own.
"""

import atexit
import gc

atexit.register(gc.freeze)
