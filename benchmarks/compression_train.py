"""Training throughput with compressed scatter-reduce against all-reduce and torch DDP, in one
run, over kernel-shaped links (needs root). Model: 8 sleep-calibrated layers of 1 MB (8 MB of
gradients per step, forward 40 ms + backward 80 ms of "compute" that leaves the cores free).

    python benchmarks/compression_train.py [--np 2] [--bandwidths 1000,200]

Writes benchmarks/results/compression_train.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = [("ddp", []), ("allreduce", []), ("compressed uint8", ["--algorithm", "compressed", "--codec", "uint8"]),
           ("compressed sign", ["--algorithm", "compressed", "--codec", "sign"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--bandwidths", default="1000,200")
    parser.add_argument("--num-iters", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for bandwidth in args.bandwidths.split(","):
        for label, extra in CONFIGS:
            algorithm = [] if extra else ["--algorithm", label]
            argv = ["--np", str(args.np), "--model", "sleep", "--bandwidth", bandwidth, "--num-iters",
                    str(args.num_iters), "--quiet", "--out", "/tmp/relax_compression_train.json"] + algorithm + extra
            report = train.run(train.parse_args(argv))
            row = {"bandwidth_mbit": float(bandwidth), "algorithm": label,
                   "samples_per_sec_per_worker": report["samples_per_sec_per_worker"],
                   "conf95": report["samples_per_sec_per_worker_conf95"], "step_seconds": report["step_seconds_median"]}
            rows.append(row)
            print(f"{bandwidth:>5} Mbit/s  {label:16s} {row['samples_per_sec_per_worker']:7.1f} +-{row['conf95']:5.1f} "
                  f"samples/s per worker  ({row['step_seconds'] * 1000:6.1f} ms/step)", flush=True)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "compression_train.json"
    out.write_text(json.dumps({"benchmark": "compression_train", "np": args.np,
                               "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
