"""``horovod.torch`` -> ``relaxlib_torch`` (attribute forwarding, nothing reimplemented)."""

from horovod import forward

forward(__name__, "relaxlib_torch")
