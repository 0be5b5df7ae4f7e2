"""Importance: query-personalised PageRank (paper eq. 2), for a batch of questions in one product per iteration."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp


def teleport(cosines: np.ndarray, n_nodes: int) -> np.ndarray:
    """Eq. 2's t for a batch: the clipped query–utterance cosines on the utterance nodes (the first rows), 0 on the
    others, each column summing to 1.

    ``cosines`` (B, n_utt) -> (n_nodes, B), F-ordered (made row by row from the cosines, without a transpose).
    A question similar to nothing teleports uniformly over the utterances.
    """
    b, n_utt = cosines.shape
    t = np.zeros((b, n_nodes), np.float32)
    np.maximum(cosines, 0.0, out=t[:, :n_utt])
    mass = t.sum(axis=1)
    t[mass == 0, :n_utt] = 1.0 / max(n_utt, 1)
    t /= np.maximum(t.sum(axis=1, keepdims=True), 1e-30)
    return t.T


def personalized_pagerank(transition, teleports, damping: float = 0.85, tol: float = 1e-6, max_iter: int = 100,
                          xp=np) -> tuple[np.ndarray, int]:
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


def stack_block_diagonal(transitions: Sequence[sp.spmatrix], teleports: Sequence[np.ndarray]) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """Different graphs as one block-diagonal system: graph g's teleport columns fill the first columns of its rows.

    Returns the stacked matrix, the stacked teleports (sum N_g, max B_g) and each graph's first row.
    """
    sizes = np.array([m.shape[0] for m in transitions])
    starts = np.concatenate([[0], np.cumsum(sizes)])
    width = max((t.shape[1] for t in teleports), default=0)
    stacked = np.zeros((int(starts[-1]), width), np.float32)
    for g, t in enumerate(teleports):
        stacked[starts[g] : starts[g + 1], : t.shape[1]] = t
    return sp.block_diag(transitions, format="csr", dtype=np.float32), stacked, starts[:-1]
