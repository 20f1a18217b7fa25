"""Prints the shared-memory transport Open MPI reads in this process once relaxlib is initialized."""

import ctypes
import sys

if sys.argv[1:] == ["mpi4py-first"]:
    from mpi4py import MPI  # noqa: F401  (importing initializes MPI before relaxlib does)

import relaxlib

try:
    relaxlib.init()
except relaxlib.InvalidArgumentError as exc:
    print(f"INIT-ERROR {exc}", flush=True)
    sys.exit(0)
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
value = libc.getenv(b"OMPI_MCA_btl_vader_single_copy_mechanism")  # what MPI_Init read
print(f"MECHANISM={value.decode() if value else 'default'}", flush=True)
