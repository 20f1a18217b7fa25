"""Ranks that wait for each other's different operations (``order``: rank 0 runs 'a' then 'b', the
others 'b' then 'a') must all get StalledError naming the deadlock, then go on; a rank that is
merely slow to submit (``slow``: it computes for twice RELAX_DEADLOCK_TIME) must not be taken for
a deadlock. ``tf-order`` is ``order`` with TensorFlow ops run eagerly."""

import os
import sys
import time

import relaxlib

mode = sys.argv[1]
if mode.startswith("tf-"):
    import tensorflow as tf

    import relaxlib_tf as hvd
else:
    import torch

    import relaxlib_torch as hvd

hvd.init()
if mode in ("order", "tf-order"):
    names = ["a", "b"] if hvd.rank() == 0 else ["b", "a"]
    try:
        for name in names:
            hvd.allreduce(tf.ones(2) if mode == "tf-order" else torch.ones(2), name=name)
        raise SystemExit("expected a StalledError")
    except (relaxlib.StalledError, Exception) as exc:  # TensorFlow raises its own class, naming ours
        text = str(exc)
        assert isinstance(exc, relaxlib.StalledError) or "[StalledError]" in text, text
        assert "Deadlock" in text, text
        assert "'a' submitted by ranks [0], not by [1, 2]" in text, text
        assert "'b' submitted by ranks [1, 2], not by [0]" in text, text
        print("DEADLOCK-ERROR-OK", flush=True)
elif mode == "slow":
    if hvd.rank() == 1:
        time.sleep(2 * float(os.environ["RELAX_DEADLOCK_TIME"]))
    assert torch.equal(hvd.allreduce(torch.ones(2), name="late", op=hvd.Sum), torch.full((2,), float(hvd.size())))
    print("NO-FALSE-DEADLOCK-OK", flush=True)
hvd.barrier()
if mode.startswith("tf-"):
    assert hvd.allreduce(tf.ones(2), op=hvd.Sum).numpy().tolist() == [float(hvd.size())] * 2
else:
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())))
print("AFTER-OK", flush=True)
