"""Horovod's own elastic examples, run on relaxlib by import swap, with a rank SIGKILLed mid-run.

Reads the examples from a Horovod checkout (a work tree, or a bare mirror read with ``git show``),
swaps ``horovod.torch`` / ``horovod.tensorflow`` for ``relaxlib_torch`` / ``relaxlib_tf`` in a
temporary copy (and ``opt.lr`` for Keras 3's ``opt.learning_rate``; nothing of Horovod's is
committed here), launches it with ``relaxrun -np N --min-np M`` and, once the benchmark is
running, SIGKILLs one rank's process from outside. Where an example needs torchvision (absent
here), a one-module stand-in provides a small convolutional model under the name given with
``--model``. Writes benchmarks/results/horovod_elastic_examples.json.

    python benchmarks/horovod_elastic_examples.py --horovod /path/to/horovod
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "pytorch_synthetic": ("examples/elastic/pytorch/pytorch_synthetic_benchmark_elastic.py",
                          {"import horovod.torch as hvd": "import relaxlib_torch as hvd"},
                          ["--model", "tiny", "--batch-size", "8", "--num-iters", "12", "--num-warmup-batches", "2",
                           "--num-batches-per-iter", "5"]),
    "tensorflow2_synthetic": ("examples/elastic/tensorflow2/tensorflow2_synthetic_benchmark_elastic.py",
                              {"import horovod.tensorflow as hvd": "import relaxlib_tf as hvd",
                               # Keras 3 removed the optimizer's `lr` alias (the example's reset callback):
                               "opt.lr.assign(": "opt.learning_rate.assign("},
                              ["--model", "MobileNetV3Small", "--batch-size", "4", "--num-iters", "12",
                               "--num-warmup-batches", "2", "--num-batches-per-iter", "3"]),
}

# A stand-in for torchvision.models where torchvision is not installed: one small CNN, any name.
TORCHVISION_STAND_IN = '''
import torch


def _tiny(num_classes=1000):
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 5, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
                               torch.nn.Flatten(), torch.nn.Linear(128, num_classes))


def __getattr__(name):
    return _tiny
'''


def read_example(horovod: Path, path: str) -> str:
    """The example's text from a work tree, or from a bare mirror (git show HEAD:path)."""
    if (horovod / path).exists():
        return (horovod / path).read_text()
    return subprocess.run(["git", "--git-dir", str(horovod), "show", f"HEAD:{path}"], check=True,
                          capture_output=True, text=True).stdout


def rank_process(world_rank: int, marker: str) -> int | None:
    """The pid of the process of ``world_rank`` whose command line contains ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker not in (entry / "cmdline").read_bytes().decode(errors="replace"):
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={world_rank}".encode() in environ:
            return int(entry.name)
    return None


def run_example(name: str, horovod: Path, np: int, min_np: int, victim: int, kill_after_line: str,
                timeout: float) -> dict:
    """Runs one example with a rank killed once ``kill_after_line`` appeared in its output."""
    path, swaps, argv = EXAMPLES[name]
    text = read_example(horovod, path)
    for old, new in swaps.items():
        assert old in text, f"{path}: '{old}' not found"
        text = text.replace(old, new)
    work = Path(tempfile.mkdtemp(prefix=f"hvd-elastic-{name}-"))
    script = work / Path(path).name
    script.write_text(text)
    env = dict(os.environ, PYTHONPATH=str(work))
    if "torchvision" in text:
        try:
            import torchvision  # noqa: F401
        except ImportError:
            (work / "torchvision").mkdir()
            (work / "torchvision" / "__init__.py").write_text("")
            (work / "torchvision" / "models.py").write_text(TORCHVISION_STAND_IN)
    command = [sys.executable, "-m", "relaxlib_launch.relaxrun", "-np", str(np), "--min-np", str(min_np),
               sys.executable, str(script), *argv]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               cwd=work)
    lines, killed_at = [], None

    def kill() -> None:
        nonlocal killed_at
        pid = rank_process(victim, script.name)
        if pid:
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic() - started

    timer = threading.Timer(timeout, process.kill)
    timer.start()
    for line in process.stdout:
        lines.append(line.rstrip())
        print(f"[{name}] {line}", end="", flush=True)
        if killed_at is None and kill_after_line in line:
            kill()
    rc = process.wait()
    timer.cancel()
    return {"example": path, "argv": argv, "np": np, "min_np": min_np, "killed_world_rank": victim,
            "killed_after_s": killed_at, "returncode": rc, "wall_s": round(time.monotonic() - started, 1),
            "resets_logged": sum("world re-formed" in line for line in lines),
            "last_lines": [line for line in lines if "img/sec" in line.lower() or "Error" in line][-4:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--horovod", type=Path, required=True, help="a Horovod checkout or bare mirror")
    parser.add_argument("--examples", default=",".join(EXAMPLES), help="comma-separated: " + ", ".join(EXAMPLES))
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--min-np", type=int, default=2)
    parser.add_argument("--victim", type=int, default=2, help="world rank to SIGKILL")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "horovod_elastic_examples.json")
    args = parser.parse_args()
    results = [run_example(name, args.horovod, args.np, args.min_np, args.victim, "Iter #2", args.timeout)
               for name in args.examples.split(",")]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    for r in results:
        print(f"{r['example']}: rc={r['returncode']} killed rank {r['killed_world_rank']} at {r['killed_after_s']} s, "
              f"resets logged {r['resets_logged']}, {r['wall_s']} s")


if __name__ == "__main__":
    main()
