"""Selecting similarity pairs from a block of products (Numba): the per-row floor and the pick in one pass each;
and the rows whose probes reach given lists (the old rows an add's new rows may enter the neighbour lists of).

``ivf.candidate_pairs`` multiplies the queries that probe a list by the list's members (a GEMM) and keeps, per
query, the products above ``max(radius, keep-th largest − doubt)``. With numpy that is a partition, a comparison
and a ``nonzero`` over the whole block (three passes and two block-sized temporaries, more time than the GEMM);
here each row finds its keep-th largest value in a buffer of ``keep`` and then picks its pairs, in parallel over
rows for a large block and in this thread for a small one.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import call_parallel, drive

MAX_KEEP = 64  # above this many values per row's buffer, select_pairs partitions with numpy
PARALLEL_VALUES = 1 << 17  # products in a block from which select_pairs runs its rows on the thread pool: an add's
# blocks (a new row against a list's ~400 members) cost ~5 us of work and ~165 us for two parallel launches


@njit(cache=True, nogil=True)
def _floor(row, radius, keep, doubt):
    """``radius``, raised to the keep-th largest value of ``row`` less ``doubt`` when the row has more than ``keep``
    values (float32 throughout, as numpy computes it)."""
    n = row.shape[0]
    if keep >= n:
        return radius
    top = np.empty(keep, np.float32)  # the keep largest so far, ascending
    for j in range(keep):
        v = row[j]
        i = j
        while i > 0 and top[i - 1] > v:
            top[i] = top[i - 1]
            i -= 1
        top[i] = v
    for j in range(keep, n):
        v = row[j]
        if v > top[0]:
            i = 0
            while i < keep - 1 and top[i + 1] < v:
                top[i] = top[i + 1]
                i += 1
            top[i] = v
    low = top[0] - doubt
    return low if low > radius else radius


@njit(cache=True, nogil=True)
def _select_row(r, sims, radius, keep, doubt, floors, counts):
    f = _floor(sims[r], radius, keep, doubt)
    floors[r] = f
    c = 0
    for j in range(sims.shape[1]):
        if sims[r, j] > f:
            c += 1
    counts[r] = c


@njit(cache=True, nogil=True)
def _gather_row(r, sims, floors, starts, rows, cols):
    at = starts[r]
    f = floors[r]
    for j in range(sims.shape[1]):
        if sims[r, j] > f:
            rows[at] = r
            cols[at] = j
            at += 1


@njit(parallel=True, cache=True, nogil=True)
def _select_parallel(sims, radius, keep, doubt, floors, counts):
    for r in prange(sims.shape[0]):
        _select_row(r, sims, radius, keep, doubt, floors, counts)


@njit(cache=True, nogil=True)
def _select_serial(sims, radius, keep, doubt, floors, counts):
    for r in range(sims.shape[0]):
        _select_row(r, sims, radius, keep, doubt, floors, counts)


@njit(parallel=True, cache=True, nogil=True)
def _gather_parallel(sims, floors, starts, rows, cols):
    for r in prange(sims.shape[0]):
        _gather_row(r, sims, floors, starts, rows, cols)


@njit(cache=True, nogil=True)
def _gather_serial(sims, floors, starts, rows, cols):
    for r in range(sims.shape[0]):
        _gather_row(r, sims, floors, starts, rows, cols)


def select_pairs(sims: np.ndarray, radius: float, keep: int, doubt: float) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) int64 of the entries of ``sims`` (float32, 2-d) above each row's floor: ``radius``, or the
    row's ``keep``-th largest value less ``doubt`` where that is higher (rows of at most ``keep`` values:
    ``radius``). In row-major order, as ``np.nonzero`` gives them. ``keep`` >= 1."""
    sims = np.ascontiguousarray(sims, dtype=np.float32)
    if keep > MAX_KEEP:  # the buffer's insertions cost O(keep) each: numpy's partition wins
        floor = np.full(len(sims), radius, np.float32)
        if keep < sims.shape[1]:
            kth = np.partition(sims, sims.shape[1] - keep, axis=1)[:, sims.shape[1] - keep]
            floor = np.maximum(floor, kth - np.float32(doubt))
        rows, cols = np.nonzero(sims > floor[:, None])
        return rows.astype(np.int64), cols.astype(np.int64)
    n = sims.shape[0]
    floors, counts = np.empty(n, np.float32), np.empty(n, np.int64)
    pool = sims.size >= PARALLEL_VALUES
    drive(_select_parallel, _select_serial, pool, sims, np.float32(radius), keep, np.float32(doubt), floors, counts)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows, cols = np.empty(int(starts[-1]), np.int64), np.empty(int(starts[-1]), np.int64)
    drive(_gather_parallel, _gather_serial, pool, sims, floors, starts[:-1], rows, cols)
    return rows, cols


@njit(parallel=True, cache=True, nogil=True)
def _probing(probe, lists, out):
    for r in prange(probe.shape[0]):
        hit = False
        for j in range(probe.shape[1]):
            hit |= lists[probe[r, j]]
        out[r] = hit


def rows_probing(probe: np.ndarray, lists: np.ndarray) -> np.ndarray:
    """Rows (int64, ascending) of ``probe`` (n, n_probe) with a probe among the lists where ``lists`` (bool, one per
    list) is True: one pass, without numpy's (n, n_probe) temporary."""
    out = np.empty(len(probe), np.bool_)
    call_parallel(_probing, np.ascontiguousarray(probe), np.ascontiguousarray(lists, np.bool_), out)
    return np.flatnonzero(out)
