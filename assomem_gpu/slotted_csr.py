"""``SlottedCSR``: a graph's sparse rows in appendable pools, so that a write appends the rows it changes and leaves
every other row where it lies (issue 14: an add's entries cost O(the rows it changes), not O(the memory); each row's
bounds, two integers a node, are still copied).

Row ``r`` is ``indices[start[r]:end[r]]``, its values ``data`` (the adjacency's weights) and ``scaled`` (the
transition's: each weight over its column's degree) at the same positions, its columns in ascending node order. A
row that a later write changes is appended anew; its old entries stay behind as garbage (``len(indices) - nnz``),
which a full splice (``kernels/csr_splice.py``) drops. The pools are appended to in place only where they end this
matrix's buffers (``appended`` checks the columns' pool, which is appended first), so a matrix keeps reading what it
held when another is grown from it, once or twice.

Columns are stored so that an add leaves them as they are: an utterance node ``c`` (below ``n_utt``) as ``c``, a
later node (a clue, a speaker) as ``n_utt - 1 - c``, that is −1 minus its number among the later nodes. An add
numbers its utterances before the clue nodes, which moves every clue's node number but not its stored column.
``nodes`` decodes them; the kernels that read rows in place (``kernels/local_ppr.py``) decode as they read.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .rows import Rows, spans


def encode(nodes: np.ndarray, n_utt: int) -> np.ndarray:
    """Stored columns (int64) of these node numbers in a graph of ``n_utt`` utterances."""
    nodes = np.asarray(nodes, np.int64)
    return np.where(nodes < n_utt, nodes, n_utt - 1 - nodes)


def decode(stored: np.ndarray, n_utt: int) -> np.ndarray:
    """Node numbers (int64) of these stored columns in a graph of ``n_utt`` utterances."""
    stored = np.asarray(stored, np.int64)
    return np.where(stored >= 0, stored, n_utt - 1 - stored)


@dataclass(frozen=True)
class SlottedCSR:
    """A square sparse matrix with two sets of values on one pattern, rows in appendable pools (module docstring)."""

    start: np.ndarray  # (n_nodes,) int64 each row's first entry in the pools
    end: np.ndarray  # (n_nodes,) int64 one past its last
    n_utt: int  # nodes below this are stored as they are, the others encoded (``encode``)
    indices: np.ndarray  # int64 stored columns: the part of the pool this matrix may read
    data: np.ndarray  # float32 adjacency weights, at the same positions
    scaled: np.ndarray  # float32 transition values
    nnz: int  # entries the rows hold (the rest of the pools is garbage)
    room: tuple[Rows, Rows, Rows] | None = None  # the buffers the pools are views of, for appends (None: copied)

    @classmethod
    def packed(cls, indptr: np.ndarray, nodes: np.ndarray, data: np.ndarray, scaled: np.ndarray,
               n_utt: int) -> "SlottedCSR":
        """From CSR arrays (columns as node numbers), row after row, in pools with room for as many entries again."""
        nnz = int(indptr[-1])
        pools = tuple(Rows.holding(x, nnz) for x in (encode(nodes[:nnz], n_utt), data[:nnz], scaled[:nnz]))
        indptr = np.asarray(indptr, np.int64)
        return cls(indptr[:-1].copy(), indptr[1:].copy(), n_utt, *(p.view for p in pools), nnz, pools)

    @classmethod
    def spliced(cls, indptr: np.ndarray, indices: Rows, data: Rows, scaled: Rows, n_utt: int) -> "SlottedCSR":
        """From a splice's output: rows after one another, stored columns, in buffers with room."""
        return cls(indptr[:-1], indptr[1:], n_utt, indices.view, data.view, scaled.view, int(indptr[-1]),
                   (indices, data, scaled))

    @property
    def n_nodes(self) -> int:
        return len(self.start)

    @property
    def garbage(self) -> int:
        """Pool entries no row holds any more."""
        return len(self.indices) - self.nnz

    def lengths(self, rows: np.ndarray | None = None) -> np.ndarray:
        """int64 entries of these rows (default: every row)."""
        return self.end - self.start if rows is None else self.end[rows] - self.start[rows]

    def entries(self, rows: np.ndarray) -> np.ndarray:
        """The pool positions (int64) of these rows' entries, row after row."""
        return spans(self.start[rows], self.lengths(rows))

    def nodes(self, rows: np.ndarray) -> np.ndarray:
        """The columns (node numbers, int64) of these rows' entries, row after row."""
        return decode(self.indices[self.entries(rows)], self.n_utt)

    def csr(self, values: str) -> sp.csr_matrix:
        """The matrix as scipy CSR (int64 indices, columns as node numbers, rows packed), of ``values``: "data" (the
        adjacency) or "scaled" (the transition)."""
        if values not in ("data", "scaled"):
            raise ValueError(f"values: 'data' or 'scaled', got {values!r}")
        lengths = self.lengths()
        at = spans(self.start, lengths)
        n = self.n_nodes
        m = sp.csr_matrix((n, n), dtype=np.float32)  # set, not passed: the constructor would copy to int32 first
        m.data, m.indices = getattr(self, values)[at], decode(self.indices[at], self.n_utt)
        m.indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return m

    def appended(self, start: np.ndarray, end: np.ndarray, n_utt: int, rows: np.ndarray, indptr: np.ndarray,
                 indices: np.ndarray, data: np.ndarray, scaled: np.ndarray, nnz: int) -> "SlottedCSR":
        """A matrix whose rows ``rows`` (int64) are the CSR rows given (``indptr``; ``indices`` stored columns of a
        graph of ``n_utt`` utterances) and whose other rows are where ``start`` / ``end`` (its own arrays, which this
        writes the rows' bounds into) say in this matrix's pools; ``nnz`` the entries its rows hold. The entries are
        appended to this matrix's buffers where its pools end there (it keeps its view of what it had), else to a
        copy: the other rows are not copied."""
        pools = self.room
        if pools is None or pools[0].n != len(self.indices) or not np.may_share_memory(pools[0].view, self.indices):
            pools = tuple(Rows.holding(x, len(x)) for x in (self.indices, self.data, self.scaled))
        base = pools[0].n
        for pool, x in zip(pools, (indices, data, scaled)):
            pool.append(x)
        start[rows], end[rows] = base + indptr[:-1], base + indptr[1:]
        return SlottedCSR(start, end, n_utt, *(p.view for p in pools), nnz, pools)

