"""``horovod.tensorflow`` -> ``relaxlib_tf`` (attribute forwarding, nothing reimplemented).

``util`` and ``_executing_eagerly`` are test plumbing (see ``util.py``).
"""

from horovod import forward
from horovod.tensorflow import util  # noqa: F401
from horovod.tensorflow.util import _executing_eagerly  # noqa: F401

forward(__name__, "relaxlib_tf")
