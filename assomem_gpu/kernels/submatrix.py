"""The square part of a CSR matrix on a set of nodes (Numba): the rows of the nodes, each keeping its entries whose
column is one of them, renumbered, in their order.

Local importance (``scoring.importance``) runs PPR on the transition matrix of each part's neighbourhood. scipy's
``m[nodes][:, nodes]`` gathers the rows into a new matrix and then selects its columns through a map it builds over
every node (1.1 ms for a 30,669-node neighbourhood at 25,000 sessions, once for each part of a batch); here one pass
over the rows does both (0.5 ms).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit


@njit(cache=True, nogil=True)
def _within(indptr, indices, data, nodes, n):
    local = np.full(n, -1, np.int32)
    for i in range(nodes.shape[0]):
        local[nodes[i]] = i
    room = 0
    for i in range(nodes.shape[0]):
        room += indptr[nodes[i] + 1] - indptr[nodes[i]]
    out_indptr = np.zeros(nodes.shape[0] + 1, np.int64)
    out_indices = np.empty(room, np.int64)
    out_data = np.empty(room, data.dtype)
    at = 0
    for i in range(nodes.shape[0]):
        v = nodes[i]
        for p in range(indptr[v], indptr[v + 1]):
            c = local[indices[p]]
            if c >= 0:
                out_indices[at] = c
                out_data[at] = data[p]
                at += 1
        out_indptr[i + 1] = at
    return out_indptr, out_indices[:at], out_data[:at]


def within(m: sp.csr_matrix, nodes: np.ndarray) -> sp.csr_matrix:
    """``m[nodes][:, nodes]`` of a square CSR matrix ``m`` and distinct ``nodes`` (int64), with int64 indices: row
    ``i`` is ``m``'s row ``nodes[i]`` without the columns outside ``nodes``, the others renumbered by their place in
    ``nodes``, in the order they had (ascending where ``m``'s rows ascend and ``nodes`` does)."""
    nodes = np.ascontiguousarray(nodes, np.int64)
    indptr, indices, data = _within(m.indptr.astype(np.int64, copy=False), m.indices.astype(np.int64, copy=False),
                                    m.data, nodes, m.shape[0])
    out = sp.csr_matrix((len(nodes), len(nodes)), dtype=m.dtype)  # set, not passed: the constructor would check
    out.data, out.indices, out.indptr = data, indices, indptr  # and copy them to int32 first
    return out
