"""The optional CUDA C++ library compiles with CMake + nvcc where they exist (here and in CI); skipped elsewhere."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("nvcc")), reason="cmake or nvcc not installed")
def test_kernels_compile_with_cmake(tmp_path):
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path / "b"), f"-DASSOMEM_OUTPUT_DIR={tmp_path / 'lib'}"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(tmp_path / "b")], check=True, capture_output=True)
    lib = tmp_path / "lib" / "libassomem_kernels.so"
    assert lib.exists()
    symbols = subprocess.run(["nm", "-D", str(lib)], check=True, capture_output=True, text=True).stdout
    assert "assomem_kernels_abi_version" in symbols and "assomem_ppr_step" in symbols
