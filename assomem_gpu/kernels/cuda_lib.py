"""The compiled CUDA C++ library (``kernels/*.cu``, built by CMake via setup.py), loaded with ctypes when present.

``load()`` returns the library or None; ``unavailable_reason()`` says why not. Callers fall back to the library
(CuPy/cuSPARSE) path, which the tests cover everywhere.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "_cuda" / "libassomem_kernels.so"
ABI_VERSION = 2


@functools.lru_cache(maxsize=1)
def _load() -> tuple[ctypes.CDLL | None, str | None]:
    if not LIBRARY.exists():
        return None, f"{LIBRARY} was not built (no nvcc/cmake at install time)"
    try:
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as exc:
        return None, f"{LIBRARY} does not load: {exc}"
    if lib.assomem_kernels_abi_version() != ABI_VERSION:
        return None, f"{LIBRARY} is a stale build (ABI {lib.assomem_kernels_abi_version()}, want {ABI_VERSION})"
    p = ctypes.c_void_p
    lib.assomem_ppr_step.argtypes = [p, p, p, ctypes.c_int, ctypes.c_int, p, p, p, p, p]
    lib.assomem_ppr_step.restype = ctypes.c_int
    return lib, None


def load() -> ctypes.CDLL | None:
    return _load()[0]


def unavailable_reason() -> str | None:
    return _load()[1]


def ppr_step(lib: ctypes.CDLL, scaled, r, base, out, residual) -> None:
    """One fused step on CuPy arrays: out = scaled @ r + base, residual = column L1 change (all F-ordered float32)."""
    import cupy

    n, b = r.shape
    code = lib.assomem_ppr_step(scaled.indptr.data.ptr, scaled.indices.data.ptr, scaled.data.data.ptr, n, b,
                                r.data.ptr, base.data.ptr, out.data.ptr, residual.data.ptr,
                                cupy.cuda.get_current_stream().ptr)
    if code != 0:
        raise RuntimeError(f"assomem_ppr_step failed with CUDA error {code}")
