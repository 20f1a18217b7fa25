"""Build relaxlib: the framework-neutral core (C++17 + MPI) first, then the glue of each framework
that is importable in this environment. Install with ``pip install --no-build-isolation .`` so the
build uses the torch / TensorFlow you already have instead of downloading another one.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()
VERSION = "0.1.0"
CORE_SOURCES = sorted((ROOT / "cuda_ops" / "src").rglob("*.cc"))
CORE_HEADERS = sorted((ROOT / "cuda_ops").rglob("*.h"))
CORE_INCLUDE = ROOT / "cuda_ops" / "include"


def log(message: str) -> None:
    print(f"[relaxlib build] {message}", flush=True)


def mpi_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags of the system MPI, from its compiler wrapper."""
    wrapper = shutil.which("mpicc")
    if wrapper is None:
        raise SystemExit(
            "relaxlib needs MPI development files (mpicc not found). On Debian/Ubuntu: "
            "apt-get install openmpi-bin libopenmpi-dev"
        )
    compile_flags = shlex.split(subprocess.check_output([wrapper, "--showme:compile"], text=True))
    link_flags = shlex.split(subprocess.check_output([wrapper, "--showme:link"], text=True))
    return compile_flags, link_flags


def mpi_version() -> str:
    try:
        out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True, timeout=30).stdout
        return out.splitlines()[0].strip() if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def framework_version(module: str) -> str | None:
    """Version of an importable framework, or None (checked in a subprocess: importing TF here is slow)."""
    code = f"import {module}; print({module}.__version__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def build_core(out_dir: Path, obj_dir: Path) -> Path:
    """Compiles cuda_ops/src into librelax_core.so, recompiling only what changed."""
    cxx = os.environ.get("CXX", "g++")
    compile_mpi, link_mpi = mpi_flags()
    obj_dir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    newest_header = max((h.stat().st_mtime for h in CORE_HEADERS), default=0)
    flags = [
        "-std=c++17", "-O3", "-fPIC", "-Wall", "-Wextra", "-fvisibility=hidden",
        "-DOMPI_SKIP_MPICXX=1", "-DMPICH_SKIP_MPICXX=1", f'-DRELAX_VERSION_STRING="{VERSION}"',
        f"-I{CORE_INCLUDE}", f"-I{ROOT / 'cuda_ops' / 'src'}", *compile_mpi,
    ]

    def compile_one(src: Path) -> Path:
        relative = src.relative_to(ROOT / "cuda_ops" / "src")
        obj = obj_dir / ("_".join(relative.with_suffix("").parts) + ".o")
        if obj.exists() and obj.stat().st_mtime >= max(src.stat().st_mtime, newest_header):
            return obj
        cmd = [cxx, *flags, "-c", str(src), "-o", str(obj)]
        log(" ".join(cmd[:1] + [src.name]))
        subprocess.check_call(cmd)
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        objects = list(pool.map(compile_one, CORE_SOURCES))
    target = out_dir / "librelax_core.so"
    if not target.exists() or target.stat().st_mtime < max(o.stat().st_mtime for o in objects):
        subprocess.check_call([cxx, "-shared", "-o", str(target), *map(str, objects),
                               "-Wl,-soname,librelax_core.so", *link_mpi, "-pthread"])
        log(f"linked {target}")
    return target


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
        ["relaxlib_torch/csrc/ops.cc"],
        include_dirs=[str(CORE_INCLUDE)],
        libraries=["relax_core"],
        extra_compile_args=["-O2"],
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
        package_root = ROOT if self.inplace else Path(self.build_lib)
        core_dir = package_root / "relaxlib" / "lib"
        build_core(core_dir, ROOT / "build" / "core")
        if not self.inplace:  # editable installs and tests load the library from the source tree
            (ROOT / "relaxlib" / "lib").mkdir(exist_ok=True)
            shutil.copy2(core_dir / "librelax_core.so", ROOT / "relaxlib" / "lib" / "librelax_core.so")
        for ext in self.extensions:
            ext.library_dirs.append(str(core_dir))
        self.write_build_info(package_root)
        super().run()

    def write_build_info(self, package_root: Path) -> None:
        torch_version = framework_version("torch") if self.extensions else None
        info = (
            '"""Generated by setup.py: what this installation was built with."""\n'
            f"VERSION = {VERSION!r}\n"
            f"TORCH_VERSION = {torch_version!r}\n"
            f"MPI_VERSION = {mpi_version()!r}\n"
        )
        for root in {package_root, ROOT}:
            (root / "relaxlib").mkdir(parents=True, exist_ok=True)
            (root / "relaxlib" / "_build_info.py").write_text(info)


class BinaryDistribution(Distribution):
    """Always runs build_ext: the core library is built even when no framework is installed."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    name="relaxlib",
    distclass=BinaryDistribution,
    version=VERSION,
    description="Horovod-style data-parallel training with communication relaxations",
    python_requires=">=3.9",
    packages=["relaxlib", "relaxlib_torch", "relaxlib_launch"],
    package_dir={"relaxlib_launch": "launch"},
    package_data={"relaxlib": ["lib/*.so"]},
    ext_modules=torch_extension(),
    cmdclass={"build_ext": BuildRelax},
    entry_points={"console_scripts": ["relaxrun = relaxlib_launch.relaxrun:main"]},
    install_requires=["numpy"],
    zip_safe=False,
)
