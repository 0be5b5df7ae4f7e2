"""The compiled CUDA C++ library (``kernels/*.cu``, built by CMake via setup.py), loaded with ctypes when it can run.

It is taken only when it is present, exports every symbol of this ABI, was built for the CUDA major version CuPy
runs, and one real step on a tiny graph gives what the library (cuSPARSE) path gives. Otherwise ``load()`` returns
None, ``unavailable_reason()`` says why (the path included) and the reason is logged once; callers then take the
library path, which the tests cover everywhere.
"""
from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "_cuda" / "libassomem_kernels.so"
ABI_VERSION = 3
log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _load() -> tuple[ctypes.CDLL | None, str | None]:
    lib, reason = _open()
    if reason is None:
        reason = _smoke_test(lib)
    if reason is not None:
        log.info("CUDA C++ library not used: %s", reason)
        return None, reason
    log.info("CUDA C++ library in use: %s", LIBRARY)
    return lib, None


def _open() -> tuple[ctypes.CDLL | None, str | None]:
    if not LIBRARY.exists():
        return None, f"{LIBRARY} was not built (no nvcc/cmake of the Python side's CUDA major at install time)"
    try:
        lib = ctypes.CDLL(str(LIBRARY))
        abi = lib.assomem_kernels_abi_version()
        if abi != ABI_VERSION:
            return None, f"{LIBRARY} is a stale build (ABI {abi}, want {ABI_VERSION}): reinstall the package"
        built_for = lib.assomem_kernels_cuda_runtime_version()
        step = lib.assomem_ppr_step
    except OSError as exc:
        return None, f"{LIBRARY} does not load: {exc}"
    except AttributeError as exc:  # a symbol this ABI needs is missing
        return None, f"{LIBRARY} lacks a symbol ({exc}): reinstall the package"
    try:
        import cupy

        runs = cupy.cuda.runtime.runtimeGetVersion()
    except Exception as exc:
        return None, f"{LIBRARY} needs CuPy's CUDA runtime ({exc.__class__.__name__}: {exc})"
    if built_for // 1000 != runs // 1000:
        return None, (f"{LIBRARY} was built for CUDA {built_for // 1000}, CuPy runs CUDA {runs // 1000}: rebuild "
                      f"with ASSOMEM_CUDA_MAJOR={runs // 1000} and that nvcc")
    p = ctypes.c_void_p
    step.argtypes = [p, p, p, ctypes.c_int, ctypes.c_int, p, p, p, p, p]
    step.restype = ctypes.c_int
    return lib, None


def _smoke_test(lib: ctypes.CDLL) -> str | None:
    """One step on a 3-node graph, two columns, held against the cuSPARSE product; None when they agree."""
    try:
        import cupy
        import cupyx.scipy.sparse as csp

        m = csp.csr_matrix(cupy.asarray([[0, 0.5, 1], [0.5, 0, 0], [0.5, 0.5, 0]], dtype=cupy.float32))
        m = csp.csr_matrix((m.data, m.indices.astype(cupy.int32), m.indptr.astype(cupy.int32)), shape=m.shape)
        r = cupy.asarray([[0.2, 0.5], [0.3, 0.5], [0.5, 0.0]], dtype=cupy.float32, order="F")
        base = cupy.asarray([[0.1, 0.0], [0.0, 0.2], [0.1, 0.0]], dtype=cupy.float32, order="F")
        out, residual = cupy.empty_like(r, order="F"), cupy.zeros(2, cupy.float32)
        ppr_step(lib, m, r, base, out, residual)
        want = m @ r + base
        if not (cupy.allclose(out, want, atol=1e-6) and cupy.allclose(residual, cupy.abs(want - r).sum(axis=0),
                                                                     atol=1e-6)):
            return f"{LIBRARY}: a test step on a tiny graph disagrees with cuSPARSE"
    except Exception as exc:
        return f"{LIBRARY}: a test step on a tiny graph failed ({exc.__class__.__name__}: {exc})"
    return None


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
