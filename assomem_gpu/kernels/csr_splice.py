"""Splicing a graph's rows after a write (Numba): the rows the write did not touch are copied from the old pools
(``slotted_csr.SlottedCSR``), their columns renamed, the others taken from freshly made rows, into new packed pools,
and the transition's values (each edge's weight over its column's degree) written in the same pass.

A removal changes a few hundred rows of a matrix with millions of entries but renumbers the nodes after the first one
it removes, so every row is copied (an add appends the rows it changes instead: ``SlottedCSR.appended``; it splices
only where a clue is renumbered or the pools would hold more garbage than live entries, ``graph.GARBAGE_SHARE``).
Rebuilding the matrix with scipy (COO to CSR, the transpose, the elementwise maximum, the column scaling) costs
several passes and sorts over all of it. Here the rows whose sources follow one another in a pool (most of the
matrix, between the few changed rows) are one block of entries each, copied in pieces of ``CHUNK`` in parallel: a row
at a time cost ~10 ns a row (253,000 rows of ~4 entries at 25,000 sessions: 2.7 ms).

Columns are stored columns (``slotted_csr.encode``): an utterance's below ``same`` keep their number, the others are
renamed by ``col_map``; a clue's (negative) by ``clue_map``; the scaling reads ``inv`` at the node number.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import call_parallel


CHUNK = 1 << 15  # entries a piece of the copy holds at most: the pieces share the thread pool evenly


@njit(cache=True, nogil=True)
def _pieces(old_start, old_end, source, fresh_indptr, chunk, indptr, at, src, length, fresh):
    """``indptr`` of the new matrix, and its entries cut into pieces: a run of rows whose sources follow one another
    in one pool (old, or fresh), each row's entries right after the last's, is one block there and here, cut every
    ``chunk`` entries. Piece ``p`` copies ``length[p]`` entries from ``src[p]`` of the old (``fresh[p]`` False) or
    fresh arrays to ``at[p]``. Returns the number of pieces, or -1 where they would not fit ``at`` (a row given
    twice)."""
    n, n_p, r = source.shape[0], 0, 0
    while r < n:
        s = source[r]
        e = r + 1
        if s >= 0:
            while e < n and source[e] == s + (e - r) and old_start[source[e]] == old_end[source[e] - 1]:
                e += 1
            for q in range(r, e):
                i = s + q - r
                indptr[q + 1] = indptr[q] + old_end[i] - old_start[i]
            k, hi = old_start[s], old_end[s + e - r - 1]
        else:
            while e < n and source[e] == s - (e - r):
                e += 1
            first = -s - 1
            for q in range(r, e):
                i = first + q - r
                indptr[q + 1] = indptr[q] + fresh_indptr[i + 1] - fresh_indptr[i]
            k, hi = fresh_indptr[first], fresh_indptr[first + e - r]
        out = indptr[r]
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
def _copy(at, src, length, fresh, old_indices, old_data, fresh_indices, fresh_data, col_map, clue_map, same, n_utt,
          inv, indices, data, scaled):
    for p in prange(at.shape[0]):
        o, s = at[p], src[p]
        if fresh[p]:  # fresh rows: their columns are the new graph's already
            for i in range(length[p]):
                c = fresh_indices[s + i]
                v = fresh_data[s + i]
                indices[o + i] = c
                data[o + i] = v
                scaled[o + i] = v * inv[c if c >= 0 else n_utt - 1 - c]
        else:  # old rows: utterance columns from ``same`` on and clue columns renamed
            for i in range(length[p]):
                c = old_indices[s + i]
                if c >= same:
                    c = col_map[c]
                elif c < 0:
                    c = -1 - clue_map[-1 - c]
                v = old_data[s + i]
                indices[o + i] = c
                data[o + i] = v
                scaled[o + i] = v * inv[c if c >= 0 else n_utt - 1 - c]


def splice(old_start: np.ndarray, old_end: np.ndarray, old_indices: np.ndarray, old_data: np.ndarray,
           source: np.ndarray, fresh_indptr: np.ndarray, fresh_indices: np.ndarray, fresh_data: np.ndarray,
           col_map: np.ndarray, clue_map: np.ndarray, n_utt: int, inv: np.ndarray,
           same: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of a new matrix, packed, and their values scaled by ``inv`` of their column: (indptr, indices, data,
    scaled), int64 / int64 / float32 / float32; the last three are buffers with room for as many entries again, the
    first ``indptr[-1]`` written.

    Row ``r`` is the old matrix's row ``source[r]`` when that is >= 0 (its entries ``old_start`` .. ``old_end`` of the
    old pools), its columns renamed (an utterance column ``c >= same`` to ``col_map[c]``, a clue column ``-1 - k`` to
    ``-1 - clue_map[k]``); else the fresh row ``-source[r] - 1``, whose columns are the new graph's already. ``inv``
    (float32) is indexed by the new node number (``n_utt`` the new graph's utterances). Copied rows keep their order,
    so a row whose renamed columns would no longer ascend (or that has a column with no new node) must be given
    fresh. Each old and fresh row is given once at most.
    """
    source = np.ascontiguousarray(source, np.int64)
    old_start, old_end = np.ascontiguousarray(old_start, np.int64), np.ascontiguousarray(old_end, np.int64)
    fresh_indptr = fresh_indptr.astype(np.int64, copy=False)
    room = len(source) + (len(old_indices) + len(fresh_indices)) // CHUNK + 1  # runs, and the cuts within them
    indptr = np.zeros(len(source) + 1, np.int64)
    at, src, length, fresh = (np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room, np.int64),
                              np.empty(room, np.bool_))
    n_p = _pieces(old_start, old_end, source, fresh_indptr, CHUNK, indptr, at, src, length, fresh)
    if n_p < 0:
        raise ValueError("source: an old or fresh row given for two rows")
    nnz = int(indptr[-1])
    size = 2 * nnz + 256
    indices, data, scaled = np.empty(size, np.int64), np.empty(size, np.float32), np.empty(size, np.float32)  # the
    # room is never read before it is written (np.zeros would clear it: a memset where the memory is reused)
    call_parallel(_copy, at[:n_p], src[:n_p], length[:n_p], fresh[:n_p], old_indices,
                  old_data.astype(np.float32, copy=False), fresh_indices.astype(np.int64, copy=False),
                  fresh_data.astype(np.float32, copy=False), np.ascontiguousarray(col_map, np.int64),
                  np.ascontiguousarray(clue_map, np.int64), same, n_utt, np.ascontiguousarray(inv, np.float32),
                  indices, data, scaled)
    return indptr, indices, data, scaled
