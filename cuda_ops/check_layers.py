"""The layers of the native core and the include directions between them, checked.

``cuda_ops/src`` is one folder per layer. A file may include headers of its own layer and of the
layers below it, never above; the public C ABI (``relax/...`` in ``cuda_ops/include``) may be
included anywhere. The framework bindings (``relaxlib_torch/csrc``, ``relaxlib_tf/csrc``) see only
the C ABI. ``make lint`` runs this script; it prints each violation as ``file:line: reason`` and
exits 1 if there is any.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# Bottom to top: each layer may include itself and the layers before it.
LAYERS: tuple[tuple[str, str], ...] = (
    ("util", "types, status, logging, text formatting, half-precision math, polling with back-off, CPU features"),
    ("codecs", "compression codecs: encode/decode on the CPU and their CUDA kernels, the registry"),
    ("transport", "MPI context, shared-memory segments, Open MPI's transport choices, the TCP ring's sockets"),
    ("collectives", "all-reduce, all-gather, ... over MPI and shared memory; reduction kernels; "
                    "compressed all-reduce (scatter-reduce of encoded chunks with error feedback)"),
    ("engine", "negotiation (coordinator, round exchange), executor, process sets, handles, config, "
               "timeline: every negotiated request from submission to completion"),
    ("relaxed", "lanes outside negotiation: neighbour/group averaging, the partial all-reduce group "
                "generator"),
    ("api", "the C ABI implementation: lifecycle, request validation, waits, runtime services"),
)
SOURCE_SUFFIXES = {".h", ".cc", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ABI_PREFIX = "relax/"


def layer_rank() -> dict[str, int]:
    """Position of each layer, bottom (0) to top."""
    return {name: index for index, (name, _) in enumerate(LAYERS)}


def _includes(path: Path) -> list[tuple[int, str]]:
    return [(number, match.group(1))
            for number, line in enumerate(path.read_text().splitlines(), start=1)
            if (match := INCLUDE.match(line))]


def check_core(src: Path) -> list[str]:
    """Violations of the layer rules in the core's source tree ``src``."""
    ranks = layer_rank()
    problems = []
    for path in sorted(p for p in src.rglob("*") if p.suffix in SOURCE_SUFFIXES):
        relative = path.relative_to(src)
        own = relative.parts[0] if len(relative.parts) > 1 else None
        if own not in ranks:
            problems.append(f"{path}:1: not in a layer folder (one of {', '.join(ranks)})")
            continue
        for number, target in _includes(path):
            if target.startswith(ABI_PREFIX):
                continue
            layer = target.split("/")[0] if "/" in target else None
            if layer not in ranks:
                problems.append(f"{path}:{number}: include \"{target}\" does not name its layer "
                                f"(write it as <layer>/<file>)")
            elif not (src / target).is_file():
                problems.append(f"{path}:{number}: include \"{target}\" does not exist")
            elif ranks[layer] > ranks[own]:
                problems.append(f"{path}:{number}: {own} includes \"{target}\" from {layer}, "
                                f"a layer above it")
    return problems


def check_bindings(src: Path, binding_dirs: list[Path]) -> list[str]:
    """Violations of "a binding sees only the C ABI": includes of the core's internal headers."""
    ranks = layer_rank()
    problems = []
    for directory in binding_dirs:
        for path in sorted(p for p in directory.rglob("*") if p.suffix in SOURCE_SUFFIXES):
            for number, target in _includes(path):
                if target.split("/")[0] in ranks and (src / target).is_file():
                    problems.append(f"{path}:{number}: a framework binding includes the core's "
                                    f"internal \"{target}\"; use the C ABI (relax/relax.h)")
    return problems


def main() -> int:
    """Checks the repository this script lives in; returns the exit status."""
    root = Path(__file__).resolve().parent.parent
    src = root / "cuda_ops" / "src"
    problems = check_core(src) + check_bindings(
        src, [root / "relaxlib_torch" / "csrc", root / "relaxlib_tf" / "csrc"])
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} layering violation(s); the layers are listed in {Path(__file__).name}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
