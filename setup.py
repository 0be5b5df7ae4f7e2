"""Packaging entry point. Metadata lives in pyproject.toml; this file only adds the optional CUDA C++ build.

When ``cmake`` and ``nvcc`` are on PATH (and ``ASSOMEM_BUILD_CUDA`` is not ``0``), ``kernels/`` is compiled with
CMake into ``assomem_gpu/_cuda/``, for the CUDA major version ``ASSOMEM_CUDA_MAJOR`` (CMake's default: 12, that of
the ``gpu`` extra; an nvcc of another major builds nothing). Without them, or if the build fails, installation goes
on without the library: the package falls back to its library code paths.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def build_cuda_kernels(dest: Path) -> bool:
    if os.environ.get("ASSOMEM_BUILD_CUDA") == "0":
        return False
    if not (shutil.which("cmake") and shutil.which("nvcc")):
        print("assomem_gpu: cmake or nvcc not found, skipping the CUDA C++ kernels", file=sys.stderr)
        return False
    with tempfile.TemporaryDirectory() as build:
        try:
            major = [f"-DASSOMEM_CUDA_MAJOR={os.environ['ASSOMEM_CUDA_MAJOR']}"] \
                if os.environ.get("ASSOMEM_CUDA_MAJOR") else []
            subprocess.run(["cmake", "-S", str(ROOT), "-B", build, f"-DASSOMEM_OUTPUT_DIR={dest}", *major], check=True,
                           stdout=subprocess.DEVNULL)
            subprocess.run(["cmake", "--build", build, "-j2"], check=True, stdout=subprocess.DEVNULL)
        except (subprocess.CalledProcessError, OSError) as exc:
            print(f"assomem_gpu: CUDA C++ kernel build failed ({exc}); continuing without it", file=sys.stderr)
            return False
    return True


class BuildPyWithKernels(build_py):
    def run(self):
        super().run()
        editable = getattr(self, "editable_mode", False)
        build_cuda_kernels((ROOT if editable else Path(self.build_lib)) / "assomem_gpu" / "_cuda")


setup(cmdclass={"build_py": BuildPyWithKernels})
