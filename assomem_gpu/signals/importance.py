"""Importance: query-personalised PageRank (paper eq. 2), for a batch of questions in one product per iteration
(the library path: numpy/scipy or CuPy/cuSPARSE, and the CUDA C++ step; the teleports come from ``scoring.teleport``)."""
from __future__ import annotations

import numpy as np


def personalized_pagerank(transition, teleports, damping: float, tol: float, max_iter: int, xp=np) -> tuple[np.ndarray, int]:
    """Power iteration r ← d·M·r + (1−d)·t from r⁰ = t for every column of ``teleports`` at once: the CUDA
    backend's PPR (it runs on numpy too; the CPU backend's twin is ``kernels.ppr_cpu``, same signature and results).

    ``transition`` is column-stochastic (N, N), scipy or cupyx CSR; ``teleports`` (N, B) numpy or cupy (``xp``).
    d is folded into the matrix once, so an iteration is one sparse × dense product and one add into a buffer
    allocated up front (F-ordered, as cuSPARSE SpMM wants). Stops when the largest per-column L1 change is below
    ``tol`` or after ``max_iter`` iterations. Returns the scores (N, B) and the iterations run.
    """
    scaled = (transition * np.float32(damping)).astype(np.float32)
    base = xp.asfortranarray((1.0 - damping) * teleports, dtype=np.float32)
    r = xp.array(teleports, dtype=np.float32, order="F", copy=True)  # never write into the caller's array
    nxt = xp.empty_like(r, order="F")
    fused = _fused_step(xp, scaled)
    residuals = xp.zeros(r.shape[1], np.float32)
    it = 0
    for it in range(1, max_iter + 1):
        if fused is not None:  # the CUDA C++ kernel: product, teleport and residual in one pass
            fused(scaled, r, base, nxt, residuals)
            residual = float(residuals.max()) if r.size else 0.0
        else:
            nxt[...] = scaled @ r
            nxt += base
            residual = float(xp.abs(nxt - r).sum(axis=0).max()) if r.size else 0.0
        r, nxt = nxt, r
        if residual < tol:
            break
    return r, it


def _fused_step(xp, matrix):
    """The compiled CUDA C++ step for CuPy inputs, when the library is built; None means the library path."""
    if xp is np or not hasattr(matrix, "indptr") or matrix.indptr.dtype != np.int32:
        return None
    from ..kernels import cuda_lib

    lib = cuda_lib.load()
    return None if lib is None else (lambda *args: cuda_lib.ppr_step(lib, *args))
