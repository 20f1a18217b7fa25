"""Prints the transport settings Open MPI read in this process once relaxlib is initialized: the
shared-memory single-copy mechanism (MECHANISM=) and the TCP eager limit (TCP_EAGER=).

    mpi_transport.py                      relaxlib initializes MPI
    mpi_transport.py mpi4py-first         mpi4py initializes MPI before relaxlib is loaded
    mpi_transport.py loaded-then-mpi4py   relaxlib_torch is imported, then mpi4py initializes MPI
    mpi_transport.py changed-to-on        RELAX_SHM_SINGLE_COPY=on is set after the import
"""

import ctypes
import os
import sys

mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "mpi4py-first":
    from mpi4py import MPI  # noqa: F401  (importing initializes MPI before relaxlib does)
if mode in ("loaded-then-mpi4py", "changed-to-on"):
    import relaxlib_torch  # noqa: F401  (loads relaxlib's core library)
if mode == "loaded-then-mpi4py":
    from mpi4py import MPI  # noqa: F401,F811
if mode == "changed-to-on":
    os.environ["RELAX_SHM_SINGLE_COPY"] = "on"

import relaxlib  # noqa: E402

try:
    relaxlib.init()
except relaxlib.InvalidArgumentError as exc:
    print(f"INIT-ERROR {exc}", flush=True)
    sys.exit(0)
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
for label, variable in (("MECHANISM", b"OMPI_MCA_btl_vader_single_copy_mechanism"),
                        ("TCP_EAGER", b"OMPI_MCA_btl_tcp_eager_limit")):
    value = libc.getenv(variable)  # what MPI_Init read
    print(f"{label}={value.decode() if value else 'default'}", flush=True)
