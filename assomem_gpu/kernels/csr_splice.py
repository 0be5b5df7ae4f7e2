"""Splicing a graph's CSR after a write (Numba): the rows the write did not touch are copied from the old matrix,
their columns renamed, the others taken from freshly made rows, and the transition matrix's values (each edge's
weight over its column's degree) written in the same pass.

An add or a remove changes a few hundred rows of a matrix with millions of entries; rebuilding it with scipy (COO
to CSR, the transpose, the elementwise maximum, the column scaling) costs several passes and sorts over all of it.
Here the rows whose sources follow one another (most of the matrix, between the few changed rows) are one block of
entries each, copied in pieces of ``CHUNK`` in parallel: a row at a time cost ~10 ns a row (253,000 rows of ~4
entries at 25,000 sessions: 2.7 ms).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import call_parallel


CHUNK = 1 << 15  # entries a piece of the copy holds at most: the pieces share the thread pool evenly


@njit(cache=True, nogil=True)
def _pieces(old_indptr, source, fresh_indptr, chunk, indptr, at, src, length, fresh):
    """``indptr`` of the new matrix, and its entries cut into pieces: a run of rows whose sources follow one another
    in one matrix (old, or fresh) is one block of entries there and here, cut every ``chunk`` entries. Piece ``p``
    copies ``length[p]`` entries from ``src[p]`` of the old (``fresh[p]`` False) or fresh arrays to ``at[p]``.
    Returns the number of pieces, or -1 where they would not fit ``at`` (a row given twice)."""
    n, n_p, r = source.shape[0], 0, 0
    while r < n:
        s = source[r]
        e = r + 1
        if s >= 0:
            while e < n and source[e] == s + (e - r):
                e += 1
            ptr, first = old_indptr, s
        else:
            while e < n and source[e] == s - (e - r):
                e += 1
            ptr, first = fresh_indptr, -s - 1
        for q in range(r, e):
            i = first + q - r
            indptr[q + 1] = indptr[q] + ptr[i + 1] - ptr[i]
        k, hi, out = ptr[first], ptr[first + e - r], indptr[r]
        while k < hi:
            if n_p == at.shape[0]:  # more pieces than rows and chunks: a source row given twice
                return -1
            m = min(chunk, hi - k)
            at[n_p], src[n_p], length[n_p], fresh[n_p] = out, k, m, s < 0
            n_p += 1
            k += m
            out += m
        r = e
    return n_p


@njit(parallel=True, cache=True, nogil=True)
def _copy(at, src, length, fresh, old_indices, old_data, fresh_indices, fresh_data, col_map, same, inv, indices,
          data, scaled):
    for p in prange(at.shape[0]):
        if fresh[p]:  # fresh rows: their columns are new nodes already
            ind, dat, cut = fresh_indices, fresh_data, inv.shape[0]
        else:  # old rows: their columns from ``same`` on renamed
            ind, dat, cut = old_indices, old_data, same
        o, s = at[p], src[p]
        for i in range(length[p]):
            c = ind[s + i]
            if c >= cut:
                c = col_map[c]
            v = dat[s + i]
            indices[o + i] = c
            data[o + i] = v
            scaled[o + i] = v * inv[c]


def splice(old_indptr: np.ndarray, old_indices: np.ndarray, old_data: np.ndarray, source: np.ndarray,
           fresh_indptr: np.ndarray, fresh_indices: np.ndarray, fresh_data: np.ndarray, col_map: np.ndarray,
           inv: np.ndarray, same: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of a new CSR matrix and their values scaled by ``inv`` of their column: (indptr, indices, data,
    scaled), int64 / int64 / float32 / float32.

    Row ``r`` is the old matrix's row ``source[r]`` when that is >= 0, its columns renamed by ``col_map`` (old node
    -> new node; the columns below ``same`` keep their number, which spares most of the lookups); else the fresh row
    ``-source[r] - 1``, whose columns are new nodes already. ``inv`` (float32) is indexed by new column. Copied rows
    keep their order, so a row whose renamed columns would no longer ascend (or that has a column with no new node)
    must be given fresh. Each old and fresh row is given once at most.
    """
    source, old_indptr = np.ascontiguousarray(source, np.int64), np.ascontiguousarray(old_indptr, np.int64)
    fresh_indptr = fresh_indptr.astype(np.int64, copy=False)
    room = len(source) + (len(old_indices) + len(fresh_indices)) // CHUNK + 1  # runs, and the cuts within them
    indptr = np.zeros(len(source) + 1, np.int64)
    at, src, length, fresh = (np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room, np.int64),
                              np.empty(room, np.bool_))
    n_p = _pieces(old_indptr, source, fresh_indptr, CHUNK, indptr, at, src, length, fresh)
    if n_p < 0:
        raise ValueError("source: an old or fresh row given for two rows")
    nnz = int(indptr[-1])
    indices, data, scaled = np.empty(nnz, np.int64), np.empty(nnz, np.float32), np.empty(nnz, np.float32)
    call_parallel(_copy, at[:n_p], src[:n_p], length[:n_p], fresh[:n_p], old_indices,
                  old_data.astype(np.float32, copy=False), fresh_indices.astype(np.int64, copy=False),
                  fresh_data.astype(np.float32, copy=False), np.ascontiguousarray(col_map, np.int64), same,
                  np.ascontiguousarray(inv, np.float32), indices, data, scaled)
    return indptr, indices, data, scaled
