"""Ctrl-C during a blocked wait: rank 0 waits on an operation rank 1 never submits; the test sends
SIGINT to rank 0. Rank 0 must raise KeyboardInterrupt while rank 1 is still away, report how long
it took, and exit; rank 1 (which then submits) must get an error instead of waiting forever.

    interrupt.py <mode> <signal-file>
        mode: allreduce | allgather | async | neighbour | reinit (torch), tf-eager | tf-function (TensorFlow)
        (reinit: rank 0 shuts down and calls init() again, which waits for rank 1 to do the same)

The test writes the time it sent the signal to <signal-file>; rank 0 writes its pid next to it.
"""

import os
import re
import sys
import time

import relaxlib

mode, signal_file = sys.argv[1], sys.argv[2]
if mode.startswith("tf-"):
    import tensorflow as tf

    import relaxlib_tf as hvd
else:
    import torch

    import relaxlib_torch as hvd

hvd.init()
if hvd.rank() == 0:
    with open(signal_file + ".pid", "w") as f:
        f.write(str(os.getpid()))
    try:
        if mode == "tf-eager":
            hvd.allreduce(tf.ones(4), name="blocked")
        elif mode == "tf-function":
            tf.function(lambda x: hvd.allgather(x, name="blocked"))(tf.ones(4))
        elif mode == "allreduce":
            hvd.allreduce(torch.ones(4), name="blocked")
        elif mode == "allgather":
            hvd.allgather(torch.ones(4), name="blocked")
        elif mode == "reinit":
            hvd.shutdown()
            hvd.init()
        elif mode == "async":
            hvd.synchronize(hvd.broadcast_async(torch.ones(4), root_rank=1, name="blocked"))
        else:
            hvd.neighbor_average(torch.ones(4), peers=[1], weights=[0.5], self_weight=0.5, name="blocked")
        print("NOT INTERRUPTED", flush=True)
    except KeyboardInterrupt:
        with open(signal_file) as f:
            sent = float(f.read())
        print(f"KEYBOARD-INTERRUPT after {time.time() - sent:.3f} s", flush=True)
        sys.exit(3)
else:
    while not os.path.exists(signal_file):  # stay away until rank 0 has been interrupted
        time.sleep(0.05)
    time.sleep(2.0)
    try:
        if mode == "neighbour":
            hvd.neighbor_average(torch.ones(4), peers=[0], weights=[0.5], self_weight=0.5, name="blocked")
        elif mode.startswith("tf-"):
            hvd.allreduce(tf.ones(4), name="late")
        else:
            hvd.allreduce(torch.ones(4), name="late")
        print("PEER NOT TOLD", flush=True)
    except Exception as error:  # relaxlib's class, or TensorFlow's error naming it in brackets
        named = re.search(r"\[(\w+Error)\]", str(error))
        kind = type(error).__name__ if isinstance(error, relaxlib.RelaxError) or not named else named.group(1)
        print(f"PEER-ERROR {kind}: {error}", flush=True)
