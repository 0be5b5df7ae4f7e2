"""Selecting similarity pairs from a block of products (Numba): the per-row floor and the pick in one pass each.

``ivf.candidate_pairs`` multiplies the queries that probe a list by the list's members (a GEMM) and keeps, per
query, the products above ``max(radius, keep-th largest − doubt)``. With numpy that is a partition, a comparison
and a ``nonzero`` over the whole block (three passes and two block-sized temporaries, more time than the GEMM);
here each row finds its keep-th largest value in a buffer of ``keep`` and then picks its pairs, in parallel over
rows for a large block and in this thread for a small one.

``list_pairs`` does the same over every list at once where the products are few (up to
``ivf.LIST_KERNEL_PRODUCTS``: an add's new rows, the rows a removal searches again, a small memory's build): the
products are computed in the kernel, straight from the rows (no per-list gather of members and no Python loop over
lists, which cost an add at 25,000 sessions ~10 ms for ~50k products). Its float32 products
round differently from BLAS's; the pairs that can reach a row's neighbour list do not depend on that (a floor's
``doubt`` and the radius's margin are far above float32 rounding, and the pairs kept are scored exactly after).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import drive

MAX_KEEP = 64  # above this many values per row's buffer, select_pairs partitions with numpy
PARALLEL_PRODUCTS = 1 << 14  # products (of 384 dims) in a list_pairs call from which its lists run on the pool
PARALLEL_VALUES = 1 << 17  # products in a block from which select_pairs runs its rows on the thread pool: an add's
# blocks (a new row against a list's ~400 members) cost ~5 us of work and ~165 us for two parallel launches


@njit(cache=True, nogil=True)
def _floor(row, radius, keep, doubt):
    """``radius``, raised to the keep-th largest value of ``row`` less ``doubt`` (>= 0) when the row has more than
    ``keep`` values (float32 throughout, as numpy computes it). A first pass counts the values above ``radius``:
    where fewer than ``keep`` pass, the keep-th largest is at most ``radius``; where exactly ``keep`` pass it is
    the smallest of them; only where more pass does a buffer of the ``keep`` largest (of those that pass) find it,
    so a row of mostly dissimilar products costs one comparing pass."""
    if keep >= row.shape[0]:
        return radius
    above, smallest = 0, np.float32(np.inf)
    for j in range(row.shape[0]):
        v = row[j]
        if v > radius:
            above += 1
            smallest = min(smallest, v)
    if above < keep:
        return radius
    if above == keep:
        low = smallest - doubt
        return low if low > radius else radius
    top = np.empty(keep, np.float32)  # the keep largest so far, ascending
    filled = 0
    for j in range(row.shape[0]):
        v = row[j]
        if not v > radius:
            continue
        if filled < keep:
            i = filled
            while i > 0 and top[i - 1] > v:
                top[i] = top[i - 1]
                i -= 1
            top[i] = v
            filled += 1
        elif v > top[0]:
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
    ``radius``). In row-major order, as ``np.nonzero`` gives them. ``keep`` >= 1; ``keep`` >= the row length keeps
    every value above ``radius`` (a range search's block: one counting pass and one gathering pass)."""
    sims = np.ascontiguousarray(sims, dtype=np.float32)
    if MAX_KEEP < keep < sims.shape[1]:  # the buffer's insertions cost O(keep) each: numpy's partition wins
        kth = np.partition(sims, sims.shape[1] - keep, axis=1)[:, sims.shape[1] - keep]
        rows, cols = np.nonzero(sims > np.maximum(np.float32(radius), kth - np.float32(doubt))[:, None])
        return rows.astype(np.int64), cols.astype(np.int64)
    n = sims.shape[0]
    floors, counts = np.empty(n, np.float32), np.empty(n, np.int64)
    pool = sims.size >= PARALLEL_VALUES
    drive(_select_parallel, _select_serial, pool, sims, np.float32(radius), keep, np.float32(doubt), floors, counts)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows, cols = np.empty(int(starts[-1]), np.int64), np.empty(int(starts[-1]), np.int64)
    drive(_gather_parallel, _gather_serial, pool, sims, floors, starts[:-1], rows, cols)
    return rows, cols


def pairs_above(sims: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) int64 of every entry of ``sims`` above ``radius``, in row-major order: ``select_pairs`` with no
    per-row cap (a range search's block)."""
    return select_pairs(sims, radius, max(np.shape(sims)[-1], 1), 0.0)


@njit(cache=True, nogil=True, fastmath=True)
def _dot(x, a, b):
    s = np.float32(0.0)
    for d in range(x.shape[1]):
        s += x[a, d] * x[b, d]
    return s


@njit(cache=True, nogil=True, fastmath=True)
def _dot8(x, a, b):
    """The products of row ``a`` with the eight rows ``b``: eight rows stream from memory at once (an add reads
    rows scattered over the memory, each from DRAM, and one row at a time leaves the memory idle between them)."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = np.float32(0.0)
    for d in range(x.shape[1]):
        v = x[a, d]
        s0 += v * x[b[0], d]
        s1 += v * x[b[1], d]
        s2 += v * x[b[2], d]
        s3 += v * x[b[3], d]
        s4 += v * x[b[4], d]
        s5 += v * x[b[5], d]
        s6 += v * x[b[6], d]
        s7 += v * x[b[7], d]
    return s0, s1, s2, s3, s4, s5, s6, s7


@njit(cache=True, nogil=True)
def _products(x, qs, ms, block):
    """``block[a, b]`` = x[qs[a]] · x[ms[b]]. The longer side is read from memory once, eight rows at a time; the
    few rows of the other side stay in cache (member-major for a list's members against the new rows that probe it,
    query-major for an add's old rows against its few new ones). The product of minor row j and major row i lands at
    ``j · step_minor + i · step_major`` of the flat block, the orientation chosen once."""
    n_q, n_m = len(qs), len(ms)
    if n_m >= n_q:
        major, minor, step_major, step_minor = ms, qs, 1, n_m
    else:
        major, minor, step_major, step_minor = qs, ms, n_m, 1
    flat = block.reshape(-1)
    done = len(major) - len(major) % 8
    for lo in range(0, done, 8):
        for j in range(len(minor)):
            s = _dot8(x, minor[j], major[lo : lo + 8])
            for t in range(8):
                flat[j * step_minor + (lo + t) * step_major] = s[t]
    for i in range(done, len(major)):
        for j in range(len(minor)):
            flat[j * step_minor + i * step_major] = _dot(x, minor[j], major[i])


@njit(cache=True, nogil=True)
def _list_block(lst, x, members, bounds, q_rows, q_bounds, radius, keep, doubt, starts, rows, cols):
    """List ``lst``: the products of the queries that probe it with its members, and each query's pairs above its
    floor, written from ``starts[lst]`` (query after query, members in order)."""
    m_lo, n_m = bounds[lst], bounds[lst + 1] - bounds[lst]
    q_lo, n_q = q_bounds[lst], q_bounds[lst + 1] - q_bounds[lst]
    block = np.empty((n_q, n_m), np.float32)
    _products(x, q_rows[q_lo : q_lo + n_q], members[m_lo : m_lo + n_m], block)
    at = starts[lst]
    for a in range(n_q):
        f = _floor(block[a], radius, keep, doubt)
        for b in range(n_m):
            if block[a, b] > f:
                rows[at], cols[at] = q_rows[q_lo + a], members[m_lo + b]
                at += 1


@njit(parallel=True, cache=True, nogil=True)
def _list_pairs_parallel(lists, x, members, bounds, q_rows, q_bounds, radius, keep, doubt, starts, rows, cols):
    for i in prange(len(lists)):
        _list_block(lists[i], x, members, bounds, q_rows, q_bounds, radius, keep, doubt, starts, rows, cols)


@njit(cache=True, nogil=True)
def _list_pairs_serial(lists, x, members, bounds, q_rows, q_bounds, radius, keep, doubt, starts, rows, cols):
    for i in range(len(lists)):
        _list_block(lists[i], x, members, bounds, q_rows, q_bounds, radius, keep, doubt, starts, rows, cols)


def list_pairs(x: np.ndarray, members: np.ndarray, bounds: np.ndarray, q_rows: np.ndarray, q_bounds: np.ndarray,
               radius: float, keep: int, doubt: float) -> tuple[np.ndarray, np.ndarray]:
    """(query row, member row) int64 pairs: for each list ``l`` (its members ``members[bounds[l]:bounds[l + 1]]``,
    the queries that probe it ``q_rows[q_bounds[l]:q_bounds[l + 1]]``), each query's members whose product with it
    (float32) is above ``select_pairs``'s floor. List by list, each list's queries in order, members in order: what
    ``select_pairs`` gives for each list's block of products. ``keep`` >= 1."""
    x = np.ascontiguousarray(x, np.float32)
    products = np.diff(bounds) * np.diff(q_bounds)
    lists = np.flatnonzero(products > 0)
    starts = np.concatenate([[0], np.cumsum(products)]).astype(np.int64)  # room for every product of a list
    rows, cols = np.full(int(starts[-1]), -1, np.int64), np.empty(int(starts[-1]), np.int64)  # -1: room not used
    drive(_list_pairs_parallel, _list_pairs_serial, int(starts[-1]) >= PARALLEL_PRODUCTS, lists, x,
          np.asarray(members, np.int64), np.asarray(bounds, np.int64), np.asarray(q_rows, np.int64),
          np.asarray(q_bounds, np.int64), np.float32(radius), keep, np.float32(doubt), starts[:-1], rows, cols)
    used = rows >= 0  # each list's pairs, one list after the other
    return rows[used], cols[used]
