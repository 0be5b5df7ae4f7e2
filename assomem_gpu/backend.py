"""CPU and CUDA backends: the array module, the sparse module and the kernels every retrieval stage takes.

``get_backend("auto")`` picks CUDA only when CuPy imports, a device answers and the Numba kernel compiles on it;
otherwise it returns the CPU backend and ``cuda_unavailable_reason()`` says why. No stage branches on the device:
each takes ``backend.xp`` / ``backend.sparse`` / ``backend.ppr`` / ``backend.fused_topk``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Backend:
    name: str  # "cpu" or "cuda"
    device: str  # human-readable description
    xp: Any  # numpy or cupy
    sparse: Any  # scipy.sparse or cupyx.scipy.sparse
    ppr: Callable  # batched PPR: kernels.ppr_cpu.personalized_pagerank_cpu / signals.importance.personalized_pagerank
    fused_topk: Callable  # kernels.fused_topk.fused_topk_cpu / fused_topk_cuda
    max_batch: int  # questions per pass: a CPU pass stays within its cache and its allocator's reused memory

    def asarray(self, x, dtype=None):
        return self.xp.asarray(x, dtype=dtype)

    def to_host(self, x) -> np.ndarray:
        return x.get() if hasattr(x, "get") else np.asarray(x)

    def csr(self, matrix):
        """A scipy CSR matrix on this backend (on the device with int32 indices, as cuSPARSE and the C++ step take)."""
        if self.name == "cpu":
            return matrix
        m = matrix.tocsr()
        return self.sparse.csr_matrix((self.xp.asarray(m.data, dtype=np.float32), self.xp.asarray(m.indices, dtype=np.int32),
                                       self.xp.asarray(m.indptr, dtype=np.int32)), shape=m.shape)


def cpu_backend() -> Backend:
    import os
    import platform

    import scipy.sparse

    from .kernels.fused_topk import fused_topk_cpu
    from .kernels.ppr_cpu import personalized_pagerank_cpu

    return Backend("cpu", f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)", np, scipy.sparse,
                   personalized_pagerank_cpu, fused_topk_cpu, max_batch=256)


@functools.lru_cache(maxsize=1)
def cuda_unavailable_reason() -> str | None:
    """Why the CUDA backend cannot run here, or None when it can."""
    try:
        import cupy
        import cupyx.scipy.sparse  # noqa: F401
    except Exception as exc:  # ImportError, or a CUDA library missing underneath
        return f"cupy is not usable ({exc.__class__.__name__}: {exc}); pip install 'assomem_gpu[gpu]'"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:
        return f"no CUDA device ({exc})"
    try:
        from numba import cuda

        if not cuda.is_available():
            return "numba cannot use the CUDA device"
        from .kernels.fused_topk import fused_topk_cuda

        fused_topk_cuda(np.zeros((1, 2, 1), np.float32), np.array([2]), np.ones((1, 1), np.float32), 1.0, 1)
    except Exception as exc:
        return f"the Numba CUDA kernel does not compile or run ({exc.__class__.__name__}: {exc})"
    return None


def cuda_backend() -> Backend:
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"CUDA backend unavailable: {reason}")
    import cupy
    import cupyx.scipy.sparse

    from .kernels.fused_topk import fused_topk_cuda
    from .signals.importance import personalized_pagerank

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return Backend("cuda", name, cupy, cupyx.scipy.sparse, functools.partial(personalized_pagerank, xp=cupy),
                   fused_topk_cuda, max_batch=4096)


def get_backend(device: str = "auto", ppr: str = "batched") -> Backend:
    """``"cpu"``, ``"cuda"`` (an error saying why if it cannot run) or ``"auto"``.

    ``ppr="cugraph"`` swaps in one-question-at-a-time PageRank on cuGraph (via nx-cugraph) for a single graph too
    large for the batched buffers; an error says why when it is not installed.
    """
    if device == "cpu":
        backend = cpu_backend()
    elif device == "cuda":
        backend = cuda_backend()
    elif device == "auto":
        backend = cpu_backend() if cuda_unavailable_reason() else cuda_backend()
    else:
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if ppr == "batched":
        return backend
    if ppr != "cugraph":
        raise ValueError(f"ppr must be 'batched' or 'cugraph', got {ppr!r}")
    from .signals.importance_graph import cugraph_available, personalized_pagerank_graph

    reason = cugraph_available()
    if reason is not None:
        raise RuntimeError(f"ppr='cugraph' unavailable: {reason}")
    return replace(backend, ppr=personalized_pagerank_graph)
