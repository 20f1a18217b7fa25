"""``mock`` -> ``unittest.mock``: Horovod's test/utils/common.py imports the PyPI ``mock`` backport,
which the project's venv does not install; the standard library has the same API."""

import sys
import unittest.mock

sys.modules[__name__] = unittest.mock
