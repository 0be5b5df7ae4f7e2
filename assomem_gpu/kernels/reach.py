"""The nodes within a few hops of seed nodes (Numba): a breadth-first search over a CSR adjacency, one pass over the
edges it meets.

Local importance (``scoring.importance``) asks for the neighbourhood of each part of a batch's candidates, and of
its halves while it splits the batch: with numpy each hop gathered every edge of the frontier into new arrays and
scanned masks of every node (a batch of 256 questions at 25,000 sessions: ~0.8 ms a question).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _reach(indptr, indices, seeds, hops, seen):
    frontier = np.empty(len(seen), np.int64)
    n = 0
    for s in seeds:
        if not seen[s]:
            seen[s] = True
            frontier[n] = s
            n += 1
    lo = 0
    for _ in range(hops):
        hi = n
        for f in range(lo, hi):
            v = frontier[f]
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                if not seen[u]:
                    seen[u] = True
                    frontier[n] = u
                    n += 1
        if n == hi:
            break
        lo = hi


def reach(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, hops: int) -> np.ndarray:
    """The nodes (int64, ascending) within ``hops`` edges of the ``seeds`` (node ids) in the CSR graph of
    ``indptr`` / ``indices`` (int64)."""
    seen = np.zeros(len(indptr) - 1, np.bool_)
    _reach(indptr, indices, np.asarray(seeds, np.int64), hops, seen)
    return np.flatnonzero(seen)
