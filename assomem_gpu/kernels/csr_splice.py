"""Splicing a graph's CSR after a write (Numba): the rows the write did not touch are copied from the old matrix,
their columns renamed, the others taken from freshly made rows, and the transition matrix's values (each edge's
weight over its column's degree) written in the same pass.

An add or a remove changes a few hundred rows of a matrix with millions of entries; rebuilding it with scipy (COO
to CSR, the transpose, the elementwise maximum, the column scaling) costs several passes and sorts over all of it.
Here each output row is one copy, in parallel over rows.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import call_parallel


@njit(parallel=True, cache=True, nogil=True)
def _splice(old_indptr, old_indices, old_data, source, fresh_indptr, fresh_indices, fresh_data, col_map, same,
            inv, indptr, indices, data, scaled):
    for r in prange(indptr.shape[0] - 1):
        at = indptr[r]
        s = source[r]
        if s >= 0:  # an old row: its columns from ``same`` on renamed
            ind, dat, lo, hi, cut = old_indices, old_data, old_indptr[s], old_indptr[s + 1], same
        else:
            f = -s - 1
            ind, dat, lo, hi, cut = fresh_indices, fresh_data, fresh_indptr[f], fresh_indptr[f + 1], inv.shape[0]
        for k in range(lo, hi):
            c = ind[k]
            if c >= cut:
                c = col_map[c]
            v = dat[k]
            indices[at] = c
            data[at] = v
            scaled[at] = v * inv[c]
            at += 1


@njit(cache=True, nogil=True)
def _row_bounds(old_indptr, source, fresh_indptr, indptr):
    at = 0
    for r in range(source.shape[0]):
        s = source[r]
        if s >= 0:
            at += old_indptr[s + 1] - old_indptr[s]
        else:
            at += fresh_indptr[-s] - fresh_indptr[-s - 1]
        indptr[r + 1] = at


def splice(old_indptr: np.ndarray, old_indices: np.ndarray, old_data: np.ndarray, source: np.ndarray,
           fresh_indptr: np.ndarray, fresh_indices: np.ndarray, fresh_data: np.ndarray, col_map: np.ndarray,
           inv: np.ndarray, same: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of a new CSR matrix and their values scaled by ``inv`` of their column: (indptr, indices, data,
    scaled), int64 / int64 / float32 / float32.

    Row ``r`` is the old matrix's row ``source[r]`` when that is >= 0, its columns renamed by ``col_map`` (old node
    -> new node; the columns below ``same`` keep their number, which spares most of the lookups); else the fresh row
    ``-source[r] - 1``, whose columns are new nodes already. ``inv`` (float32) is indexed by new column. Copied rows
    keep their order, so a row whose renamed columns would no longer ascend (or that has a column with no new node)
    must be given fresh.
    """
    source = np.ascontiguousarray(source, np.int64)
    fresh_indptr = fresh_indptr.astype(np.int64, copy=False)
    indptr = np.zeros(len(source) + 1, np.int64)
    _row_bounds(old_indptr, source, fresh_indptr, indptr)
    nnz = int(indptr[-1])
    indices, data, scaled = np.empty(nnz, np.int64), np.empty(nnz, np.float32), np.empty(nnz, np.float32)
    call_parallel(_splice, old_indptr, old_indices, old_data.astype(np.float32, copy=False), source, fresh_indptr,
                  fresh_indices.astype(np.int64, copy=False), fresh_data.astype(np.float32, copy=False),
                  np.ascontiguousarray(col_map, np.int64), same, np.ascontiguousarray(inv, np.float32),
                  indptr, indices, data, scaled)
    return indptr, indices, data, scaled
