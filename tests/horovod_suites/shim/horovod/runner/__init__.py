"""``horovod.runner``: only the thread helper Horovod's test utilities import (test plumbing)."""
