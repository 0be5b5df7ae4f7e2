"""Per-row scans of runs of entries, on the CPU (Numba, without the GIL); each replaces numpy expressions that copied
or sorted every entry (figures: a batch of 32 questions, 25,000 utterances, 2 cores). Each kernel is a function of
one row and two drivers: rows in parallel from ``PARALLEL_ROWS`` rows on, else in this thread (waking the thread
pool cost a lone question more than its rows' work: the lexical signal of one question, 850 candidates, 0.29-0.59
ms in numpy against 0.52-0.82 ms with a parallel launch per call). Two drivers, not one compiled twice: Numba's
cache keys a function by its name and line, not by ``parallel``.

``segment_max``: the maximum of each run of gathered columns (a clue's best utterance), numpy's
``maximum.reduceat(values[:, columns], starts, axis=1)`` without the (B, n) copy the gather makes (8.2 -> 2.7 ms).
``group_max``: each row's maximum per group of its entries' rows (a clue's best probed utterance) and its minimum,
where numpy's key arrays, masks and ``maximum.at`` took ~0.25 ms a question (256 questions × 12,800 probed members).
``row_top``: each row's ``k`` best entries of a dense matrix (a question's most similar utterances, its best clues)
in one pass and a list of ``k``, where numpy's partition of every row took 17 ms for 256 rows of 8,000.
``row_matches``: the nonzeros of CSR rows whose column is among their question's sorted keys (a candidate's terms
that its question holds), where gathering every nonzero of every candidate's row took ~20 ms.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .fused_topk import _insert_cpu  # a change there needs this module's cached kernels cleared: Numba's cache
# follows only the file of the function it compiles
from .parallel import drive

PARALLEL_ROWS = 8  # rows (questions) from which a kernel runs its rows on the thread pool


def _drive(parallel, serial, rows: int, *args) -> None:
    """A kernel's parallel driver on ``rows`` of ``PARALLEL_ROWS`` or more, else its serial one."""
    drive(parallel, serial, rows >= PARALLEL_ROWS, *args)


@njit(cache=True, nogil=True)
def _segment_max_row(b, values, columns, starts, out):
    n_runs = len(starts)
    for s in range(n_runs):
        end = starts[s + 1] if s + 1 < n_runs else len(columns)
        best = values[b, columns[starts[s]]]
        for j in range(starts[s] + 1, end):
            v = values[b, columns[j]]
            if v != v:  # NaN propagates, as numpy's maximum does
                best = v
                break
            if v > best:
                best = v
        out[b, s] = best


@njit(cache=True, nogil=True, parallel=True)
def _segment_max_parallel(values, columns, starts, out):
    for b in prange(values.shape[0]):
        _segment_max_row(b, values, columns, starts, out)


@njit(cache=True, nogil=True)
def _segment_max_serial(values, columns, starts, out):
    for b in range(values.shape[0]):
        _segment_max_row(b, values, columns, starts, out)


def segment_max(values: np.ndarray, columns: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(B, len(starts)): per row of ``values`` (B, n), the maximum of ``values[b, columns[starts[i]:starts[i + 1]]]``
    (the last run to the end of ``columns``); ``starts`` ascending from 0, no run empty."""
    values = np.ascontiguousarray(values)
    out = np.empty((values.shape[0], len(starts)), values.dtype)
    if len(starts):
        _drive(_segment_max_parallel, _segment_max_serial, len(values), values, np.asarray(columns, np.int64),
               np.asarray(starts, np.int64), out)
    return out


@njit(cache=True, nogil=True)
def _group_max_row(b, values, rows, groups, best, floor):
    low = np.float32(np.inf)
    for j in range(rows.shape[1]):
        r = rows[b, j]
        if r < 0:
            continue
        v = values[b, j]
        g = groups[r]
        if v != v or v > best[b, g]:  # NaN propagates, as numpy's maximum and min do
            best[b, g] = v
        if v != v or v < low:
            low = v
    floor[b] = low


@njit(cache=True, nogil=True, parallel=True)
def _group_max_parallel(values, rows, groups, best, floor):
    for b in prange(values.shape[0]):
        _group_max_row(b, values, rows, groups, best, floor)


@njit(cache=True, nogil=True)
def _group_max_serial(values, rows, groups, best, floor):
    for b in range(values.shape[0]):
        _group_max_row(b, values, rows, groups, best, floor)


def group_max(values: np.ndarray, rows: np.ndarray, groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``values`` (B, S) float32, whose entries belong to ``rows`` (B, S; -1: none): the maximum over each
    group of rows (``groups`` (n,), each row's group), (B, n_groups) float64, -inf where a group has none; and the
    minimum over every entry, (B,) float32, inf where there is none."""
    if rows.size and rows.max() >= len(groups):  # the kernel does not check bounds (numpy's gather did)
        raise IndexError(f"rows: an index outside 0..{len(groups) - 1}")
    best = np.full((values.shape[0], n_groups), -np.inf)
    floor = np.empty(values.shape[0], np.float32)
    _drive(_group_max_parallel, _group_max_serial, len(values), np.ascontiguousarray(values, np.float32),
           np.ascontiguousarray(rows, np.int64), np.ascontiguousarray(groups, np.int64), best, floor)
    return best, floor


@njit(cache=True, nogil=True)
def _dense_top_row(r, scores, out):
    k = out.shape[1]
    top_s = np.full(k, -np.inf)
    top_i = np.full(k, scores.shape[1], np.int64)  # past every column: -inf entries still fill the list, in order
    for j in range(scores.shape[1]):
        v = scores[r, j]
        _insert_cpu(top_s, top_i, k, v if v == v else -np.inf, j)  # NaN ranks as -inf
    for j in range(k):
        out[r, j] = top_i[j]


@njit(cache=True, nogil=True, parallel=True)
def _row_top_parallel(scores, out):
    for r in prange(out.shape[0]):
        _dense_top_row(r, scores, out)


@njit(cache=True, nogil=True)
def _row_top_serial(scores, out):
    for r in range(out.shape[0]):
        _dense_top_row(r, scores, out)


def row_top(scores: np.ndarray, k: int) -> np.ndarray:
    """(rows, k) int64: per row of ``scores`` (rows, n) float, the columns of its ``k`` best values (k <= n), highest
    first, ties to the lower column, NaN as -inf: a full stable sort's first ``k``. Cheap for ``k`` much below n (each
    value that enters the list costs O(k))."""
    out = np.empty((scores.shape[0], k), np.int64)
    if k and len(out):
        _drive(_row_top_parallel, _row_top_serial, len(out), np.ascontiguousarray(scores), out)
    return out


@njit(cache=True, nogil=True)
def _match_question(b, at, indptr, indices, keys, bounds, n_terms, write, starts, out_flat, out_nz, out_pos, counts):
    """Question ``b``'s candidates' nonzeros whose key ``b · n_terms + column`` is in its ``keys`` (a binary search
    each): counted into ``counts[b]``, and with ``write`` (the second pass) written from ``starts[b]``."""
    width, lo, hi = at.shape[1], bounds[b], bounds[b + 1]
    found = 0
    for c in range(width):
        row = at[b, c]
        for nz in range(indptr[row], indptr[row + 1]):
            key = b * n_terms + indices[nz]
            a, z = lo, hi
            while a < z:
                mid = (a + z) // 2
                if keys[mid] < key:
                    a = mid + 1
                else:
                    z = mid
            if a < hi and keys[a] == key:
                if write:
                    out_flat[starts[b] + found] = b * width + c
                    out_nz[starts[b] + found] = nz
                    out_pos[starts[b] + found] = a
                found += 1
    counts[b] = found


@njit(cache=True, nogil=True, parallel=True)
def _row_matches_parallel(at, indptr, indices, keys, bounds, n_terms, write, starts, out_flat, out_nz, out_pos,
                          counts):
    for b in prange(at.shape[0]):
        _match_question(b, at, indptr, indices, keys, bounds, n_terms, write, starts, out_flat, out_nz, out_pos,
                        counts)


@njit(cache=True, nogil=True)
def _row_matches_serial(at, indptr, indices, keys, bounds, n_terms, write, starts, out_flat, out_nz, out_pos,
                        counts):
    for b in range(at.shape[0]):
        _match_question(b, at, indptr, indices, keys, bounds, n_terms, write, starts, out_flat, out_nz, out_pos,
                        counts)


def row_matches(at: np.ndarray, indptr: np.ndarray, indices: np.ndarray, keys: np.ndarray,
                n_terms: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For ``at`` (B, C) rows of a CSR matrix (``indptr``, ``indices``: int64) and ``keys`` sorted int64 of the form
    ``question · n_terms + column``: every nonzero of row ``at[b, c]`` whose key ``b · n_terms + column`` is in
    ``keys``, as (``b · C + c``, its position in ``indices``, the key's position in ``keys``), entry after entry of
    ``at`` (row-major) and each row's nonzeros in order."""
    at = np.ascontiguousarray(at, np.int64)
    keys = np.asarray(keys, np.int64)
    bounds = np.searchsorted(keys, np.arange(at.shape[0] + 1, dtype=np.int64) * n_terms)
    counts = np.zeros(at.shape[0], np.int64)
    args = (at, np.asarray(indptr, np.int64), np.asarray(indices, np.int64), keys, bounds, np.int64(n_terms))
    none = np.zeros(0, np.int64)
    _drive(_row_matches_parallel, _row_matches_serial, len(at), *args, False, none, none, none, none, counts)
    starts = np.cumsum(counts) - counts
    out = [np.empty(int(counts.sum()), np.int64) for _ in range(3)]
    _drive(_row_matches_parallel, _row_matches_serial, len(at), *args, True, starts, *out, counts)
    return tuple(out)
