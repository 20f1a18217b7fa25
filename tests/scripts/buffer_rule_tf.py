"""Buffers too small for what a request writes, through the TensorFlow ops, on 3 ranks: the
compressed all-reduce's owner residual (the ops copy each residual into an output of the same
shape, which the core updates in place) and a CHOCO neighbour average's estimates. Each must be
refused with an error naming the request, the buffer and both sizes.

Prints "OK <case>" per case that behaved, "FAIL <case>: <why>" otherwise.

    mpirun -np 3 python buffer_rule_tf.py
"""

import tensorflow as tf

import relaxlib_tf as hvd
from relaxlib.compression import codec_id
from relaxlib_tf import mpi_ops

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
assert SIZE == 3, "run on 3 ranks"


def expect_refusal(case, run, words):
    """Runs ``run``; it must raise an error whose message holds every one of ``words``."""
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - any error class is reported with its message
        text = str(exc)
        missing = [w for w in words if w not in text]
        print(f"FAIL {case}: the error lacks {missing}: {text}" if missing else f"OK {case}: {text}", flush=True)
        return
    print(f"FAIL {case}: accepted", flush=True)


# 1. An owner residual of one float where this rank's chunk is 1200 / 3 = 400 floats.
expect_refusal("tf_owner_residual",
               lambda: mpi_ops._ops.relaxlib_compressed_allreduce(
                   tf.ones([1200]), tf.zeros([1200]), tf.zeros([1]), "tf.ef.short", codec=codec_id("uint8"),
                   reduce_op=hvd.Average, process_set=0),
               ["tf.ef.short", "owner", "4 bytes", "1600 bytes"])

# 2. CHOCO estimates of the peers holding one float each instead of 2 x 100 (ring neighbours).
peers = [(RANK - 1) % SIZE, (RANK + 1) % SIZE]
expect_refusal("tf_neighbor_estimates",
               lambda: mpi_ops._ops.relaxlib_neighbor_average(
                   tf.ones([100]), tf.constant(peers, tf.int32), tf.constant([1 / 3, 1 / 3], tf.float64),
                   tf.constant(1 / 3, tf.float64), tf.zeros([100]), tf.zeros([1]), "tf.choco.short",
                   codec=codec_id("uint8"), consensus_step=0.5),
               ["tf.choco.short", "estimate", "4 bytes", "800 bytes"])

total = hvd.allreduce(tf.ones([3]), op=hvd.Sum, name="after")
assert bool(tf.reduce_all(total == 3.0)), total
print("DONE", flush=True)
hvd.shutdown()
