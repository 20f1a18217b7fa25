"""``relaxrun --check-build``: what this installation was built with, and whether each piece loads here.

Every framework binding is probed in a fresh interpreter: importing one can fail (a torch upgraded after the
build, a missing runtime dependency, an op library that does not load) or take seconds (TensorFlow), and
neither may take relaxrun down. A binding is reported as found only if importing it works; otherwise the
line says why, in the binding's own words.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from relaxlib_launch.mpirun_command import mpirun_executable

PROBE_TIMEOUT_S = 120


@dataclass
class Probe:
    """One thing to import in a fresh interpreter, and the expression whose value describes it."""

    label: str
    code: str


@dataclass
class ProbeResult:
    """Whether a probe's import worked, with the value it printed or the last line of its error."""

    ok: bool
    detail: str


# Each probe prints one line: what loaded (a version) when it works.
FRAMEWORK_PROBES = (
    Probe("PyTorch", "import torch, relaxlib_torch; print('torch', torch.__version__)"),
    Probe("TensorFlow", "import tensorflow as tf, relaxlib_tf; print('tensorflow', tf.__version__)"),
    Probe("Keras", "import keras, relaxlib_tf.keras; print('keras', keras.__version__)"),
)
CORE_PROBE = Probe("core", "from relaxlib import _core; _core.lib(); print('loads')")


def run_probe(probe: Probe) -> ProbeResult:
    """Imports the probe's modules in a fresh interpreter; never raises."""
    env_quiet = {"TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        out = subprocess.run([sys.executable, "-c", probe.code], capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S, env={**os.environ, **env_quiet})
    except subprocess.TimeoutExpired:
        return ProbeResult(False, f"importing it took over {PROBE_TIMEOUT_S} s")
    lines = out.stdout.strip().splitlines()
    if out.returncode == 0 and lines:
        return ProbeResult(True, lines[-1])
    errors = [line for line in out.stderr.strip().splitlines() if line.strip()]
    return ProbeResult(False, errors[-1] if errors else f"exit code {out.returncode}")


def build_info() -> dict:
    """The versions setup.py recorded at build time (all None when the package was never built;
    ``ulfm`` None for a build made before setup.py checked for ULFM)."""
    try:
        from relaxlib import _build_info
    except ImportError:
        return {"version": None, "torch": None, "tensorflow": None, "mpi": None, "ulfm": None, "ulfm_why": None}
    return {"version": _build_info.VERSION, "torch": _build_info.TORCH_VERSION,
            "tensorflow": _build_info.TF_VERSION, "mpi": _build_info.MPI_VERSION,
            "ulfm": getattr(_build_info, "MPI_ULFM", None), "ulfm_why": getattr(_build_info, "MPI_ULFM_WHY", None)}


def mpirun_version() -> str:
    """First line of ``mpirun --version`` for the mpirun relaxrun launches with ("" if there is none)."""
    try:
        out = subprocess.run([mpirun_executable() or "mpirun", "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.splitlines()[0].strip() if out.strip() else ""


def open_mpi_release(version_line: str | None) -> tuple[int, str] | None:
    """(major, "Open MPI X.Y.Z") from a ``mpirun --version`` line of Open MPI, else None."""
    match = re.search(r"\(Open MPI\) (\d+)\.(\S+)", version_line or "")
    return (int(match.group(1)), f"Open MPI {match.group(1)}.{match.group(2)}") if match else None


def fault_tolerance(info: dict, running: str, environ: dict[str, str]) -> tuple[bool, str]:
    """Whether a job of this installation can survive a lost rank at the MPI level (Open MPI's ULFM):
    (True, "Open MPI 5.0.11 ULFM") or (False, why not). ``running``: ``mpirun --version`` of the
    mpirun relaxrun launches with; ``environ``: this process's environment (inside a job it says whether mpirun
    turned fault tolerance on)."""
    if info["ulfm"] is None:
        return False, ("this build predates the ULFM check (rebuild: `make build` or "
                       "`pip install --no-build-isolation .`)")
    if not info["ulfm"]:
        return False, info["ulfm_why"] or "MPI lacks ULFM"
    built = open_mpi_release(info["mpi"])
    now = open_mpi_release(running)
    if now is None or now[0] < 5:
        return False, (f"the mpirun found ({running or 'none found'}) cannot start a job with fault tolerance "
                       f"(--with-ft ulfm); relaxlib was built against {built[1] if built else info['mpi']}")
    in_job = "OMPI_COMM_WORLD_SIZE" in environ or "PMIX_RANK" in environ
    if in_job and environ.get("OMPI_MCA_mpi_ft_enable", "") not in ("1", "true", "yes"):
        return False, "mpirun not started with --with-ft ulfm"
    return True, f"{(built or now)[1]} ULFM"


def report() -> str:
    """The --check-build text: frameworks found (with why not, for each that is not), transports, core."""
    def mark(ok: bool) -> str:
        return "[X]" if ok else "[ ]"

    info = build_info()
    built_with = {"PyTorch": info["torch"], "TensorFlow": info["tensorflow"], "Keras": info["tensorflow"]}
    built = [probe for probe in FRAMEWORK_PROBES if built_with[probe.label] is not None]
    with ThreadPoolExecutor(max_workers=len(built) + 1) as pool:  # each probe is a process: run them together
        core_future = pool.submit(run_probe, CORE_PROBE)
        results = dict(zip((p.label for p in built), pool.map(run_probe, built)))
    core = core_future.result()
    tolerant, tolerance_detail = fault_tolerance(info, mpirun_version(), dict(os.environ))
    lines = [f"relaxlib v{info['version'] or 'unknown (not built)'}:", "", "Available frameworks:"]
    for probe in FRAMEWORK_PROBES:
        if probe.label not in results:
            lines.append(f"    {mark(False)} {probe.label} (binding not built: the framework was not importable "
                         "at build time)")
            continue
        result = results[probe.label]
        detail = result.detail if result.ok else f"binding does not load: {result.detail}"
        lines.append(f"    {mark(result.ok)} {probe.label} ({detail})")
    lines += [
        "",
        "Available transports:",
        f"    {mark(core.ok)} MPI ({info['mpi'] or 'unknown'})",
        f"    {mark(False)} Gloo",
        f"    {mark(False)} NCCL",
        "",
        "Fault tolerance: " + (f"available ({tolerance_detail})" if tolerant else f"unavailable: {tolerance_detail}"),
        "",
        "Core library: " + ("loads" if core.ok else f"MISSING or broken ({core.detail}) - rebuild with "
                            "`pip install --no-build-isolation .` or `make build`"),
    ]
    return "\n".join(lines)
