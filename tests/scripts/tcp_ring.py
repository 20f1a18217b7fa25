"""Ring collectives checked against numpy, and identical on every rank, whichever transport the
ring's steps use (run with RELAX_LOCAL_SIZE=1 for ranks on separate nodes, RELAX_TCP_RING to
choose). Prints ``TCP-RING=<connected>`` from relaxlib's debug log line being present or not
(the caller reads the log: run with RELAX_LOG_LEVEL=debug)."""

import numpy as np
import torch

import relaxlib_torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
# sizes around the ring's blocks and the 256 KiB receive piece, odd counts for uneven blocks
for count in (1, 7, 65_537, 300_001, 2_000_003):
    for dtype in (torch.float32, torch.float64, torch.int64, torch.float16):
        inputs = [torch.from_numpy(np.random.default_rng(count + r).standard_normal(count) * 50).to(dtype)
                  for r in range(size)]
        mine = inputs[rank]
        summed = hvd.allreduce(mine, op=hvd.Sum, name=f"sum.{count}.{dtype}")
        expected = sum(x.double() for x in inputs)
        tolerance = 0.5 if dtype == torch.float16 else 1e-4
        assert torch.allclose(summed.double(), expected, rtol=tolerance, atol=tolerance), (count, dtype)
        everyone = hvd.allgather(summed.unsqueeze(0), name=f"same.{count}.{dtype}")
        assert all(torch.equal(everyone[0], row) for row in everyone), f"ranks differ: {count} {dtype}"
        if dtype == torch.int64:
            assert torch.equal(summed, sum(inputs)), count
        part = hvd.reducescatter(mine, op=hvd.Sum, name=f"rs.{count}.{dtype}")
        gathered = hvd.allgather(part, name=f"rsg.{count}.{dtype}")
        assert torch.allclose(gathered.double(), expected, rtol=tolerance, atol=tolerance), (count, dtype)
        uneven = hvd.allgather(mine[: count // 2 + rank], name=f"ag.{count}.{dtype}")
        assert torch.equal(uneven, torch.cat([x[: count // 2 + r] for r, x in enumerate(inputs)])), (count, dtype)
print(f"CHECKED rank {rank}", flush=True)
