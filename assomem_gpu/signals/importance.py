"""Importance: query-personalised PageRank (paper eq. 2), for a batch of questions in one product per iteration
(the library path: numpy/scipy or CuPy/cuSPARSE, optionally the CUDA C++ step; the teleports come from
``scoring.teleport``). Which step runs is the backend's choice (``backend.py``), not this function's."""
from __future__ import annotations

from typing import Callable

import numpy as np

Step = Callable  # step(scaled, r, base, out, residual): out = scaled @ r + base, residual[col] = L1 change of col


def library_step(scaled, r, base, out, residual) -> None:
    """The step with the array library's own sparse product (scipy, or cupyx, which calls cuSPARSE SpMM)."""
    out[...] = scaled @ r
    out += base
    residual[...] = abs(out - r).sum(axis=0)


def personalized_pagerank(transition, teleports, damping: float, tol: float, max_iter: int, xp=np,
                          step: Step = library_step, check_every: int = 1) -> tuple[np.ndarray, int]:
    """Power iteration r ← d·M·r + (1−d)·t from r⁰ = t for every column of ``teleports`` at once: the CUDA
    backend's PPR (it runs on numpy too; the CPU backend's twin is ``kernels.ppr_cpu``, same signature and results).

    ``transition`` is column-stochastic (N, N), scipy or cupyx CSR; ``teleports`` (N, B) numpy or cupy (``xp``).
    d is folded into the matrix once; every buffer is allocated up front (F-ordered, as cuSPARSE SpMM wants), so an
    iteration is one ``step`` and allocates nothing. Stops when the largest per-column L1 change is below ``tol``
    or after ``max_iter`` iterations. The change is read back every ``check_every`` iterations only (a read is a
    host–device sync on a GPU): up to ``check_every − 1`` iterations more than the CPU twin, each moving the scores
    by less than d·tol in L1 (the map contracts by d). Returns the scores (N, B) and the iterations run.
    """
    scaled = (transition * np.float32(damping)).astype(np.float32)
    base = xp.asfortranarray((1.0 - damping) * teleports, dtype=np.float32)
    r = xp.array(teleports, dtype=np.float32, order="F", copy=True)  # never write into the caller's array
    nxt = xp.empty_like(r, order="F")
    residual = xp.zeros(r.shape[1], np.float32)
    it = 0
    for it in range(1, max_iter + 1):
        step(scaled, r, base, nxt, residual)
        r, nxt = nxt, r
        if (it % check_every == 0 or it == max_iter) and (r.size == 0 or float(residual.max()) < tol):
            break
    return r, it
