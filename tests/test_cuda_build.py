"""The optional CUDA C++ library compiles with CMake + nvcc where they exist (here and in CI); skipped elsewhere.
It is built only for the CUDA major version the Python side uses (one CUDA end to end)."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("nvcc")), reason="cmake or nvcc not installed")


def nvcc_major() -> str:
    return re.search(r"release (\d+)\.", subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout)[1]


def configure(build: Path, *options: str) -> str:
    done = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), f"-DASSOMEM_OUTPUT_DIR={build / 'lib'}",
                           *options], check=True, capture_output=True, text=True)
    return done.stdout


def test_kernels_compile_with_cmake_for_the_toolkits_cuda(tmp_path):
    configure(tmp_path, f"-DASSOMEM_CUDA_MAJOR={nvcc_major()}")
    subprocess.run(["cmake", "--build", str(tmp_path)], check=True, capture_output=True)
    lib = tmp_path / "lib" / "libassomem_kernels.so"
    symbols = subprocess.run(["nm", "-D", str(lib)], check=True, capture_output=True, text=True).stdout
    for name in ("assomem_kernels_abi_version", "assomem_kernels_cuda_runtime_version", "assomem_ppr_step"):
        assert name in symbols


def test_another_cuda_major_builds_nothing_and_says_why(tmp_path):
    other = str(int(nvcc_major()) + 1)
    said = configure(tmp_path, f"-DASSOMEM_CUDA_MAJOR={other}")
    assert f"the Python side uses CUDA {other}; nothing to build" in said
    subprocess.run(["cmake", "--build", str(tmp_path)], check=True, capture_output=True)
    assert not (tmp_path / "lib" / "libassomem_kernels.so").exists()
