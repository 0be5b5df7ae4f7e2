"""Cosines of questions to rows read in place, on the CPU (Numba, without the GIL): of (question, row) pairs, and of
the questions that probe an inverted list to the list's members.

A probed search needs a question's cosines to utterances outside the lists it probed (the other turns of a clue's
sessions, their context turns). Gathered into a copy and multiplied by the question, each 1.5 KB row is read, written
and read again for a 4-byte result. Here each pair's dot product reads the row where it lies: 256,000 pairs of 384
dimensions 127 -> 20 ms on 2 cores. Each kernel runs on the thread pool from ``PARALLEL_PAIRS`` products (or, for
the sort, members) on, else in this thread (a parallel launch costs ~80 us, about 1,000 products' work).

Every product is ``lanes.dots``' (or ``paired_dots``'), summed in one fixed order: a question's cosine to a row is
the same bits from every kernel, alone or in a batch, so its hits do not depend on its batch. Pairs that share rows
or questions are summed in tiles that share their loads (3 rows × 4 questions).

``all_cosines`` is a batch's cosines to every row (every utterance: ``Backend.cosines``), blocks of rows against
all the batch's questions (256 questions × 25,032 rows on 2 cores: 78 ms one pair at a time, 30 ms in tiles, numpy's
BLAS 27 ms: ``benchmarks/results/kernels_cpu_cosines_lanes_{before,after}.json``). ``list_cosines`` is a probed
batch's relevance (``ivf.probed_cosines``):
numpy gathered each probed list's members and multiplied them by the questions that probe it, one product per list,
then sorted each question's members by row (an argsort and two gathers of the (B, S) arrays). Here the lists run in
parallel, each member, read once, meets each of its list's questions, and each question's members are sorted in
place by merging its lists' runs (each list's members ascend; an argsort of each question's ~12,500 members at
25,000 sessions took a third of the stage).

``exact_pair_cosines`` is the graph's float64 cosine of a pair of rows (``graph.exact_cosines``, which every build and
write scores its candidate pairs with): numpy's gathers and float64 temporaries, summed in numpy's pairwise order so
that the bits are numpy's.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from .lanes import dots, paired_dots
from .parallel import drive

PARALLEL_PAIRS = 2048  # pairs from which the thread pool runs them
BLOCK_ROWS = 24  # rows of a block of ``all_cosines``: eight tiles of three
PAIR_SPAN = 64  # pairs of a task of ``pair_cosines``' thread pool


@njit(cache=True, nogil=True)
def _dot(vectors, q, question, row):
    return dots(vectors, q, (row,), (question,))[0]


@njit(cache=True, nogil=True)
def _row_times(x, q, row, questions, at, lo, hi, offset, out):
    """``x[row]`` times ``q[questions[j]]`` into ``out[at[j] + offset]``, for j in lo:hi, four questions a pass over
    the row (``lanes.dots``)."""
    j = lo
    while j + 4 <= hi:
        v = dots(x, q, (row,), (questions[j], questions[j + 1], questions[j + 2], questions[j + 3]))
        for t in range(4):
            out[at[j + t] + offset] = v[t]
        j += 4
    for t in range(j, hi):
        out[at[t] + offset] = _dot(x, q, questions[t], row)


@njit(cache=True, nogil=True)
def _pairs_span(c, vectors, q, questions, rows, out):
    """Pairs ``PAIR_SPAN * c`` on (``PAIR_SPAN`` of them), four side by side (``lanes.paired_dots``)."""
    lo = c * PAIR_SPAN
    hi = min(lo + PAIR_SPAN, rows.shape[0])
    i = lo
    while i + 4 <= hi:
        v = paired_dots(vectors, q, (rows[i], rows[i + 1], rows[i + 2], rows[i + 3]),
                        (questions[i], questions[i + 1], questions[i + 2], questions[i + 3]))
        for t in range(4):
            out[i + t] = v[t]
        i += 4
    for t in range(i, hi):
        out[t] = _dot(vectors, q, questions[t], rows[t])


@njit(cache=True, nogil=True, parallel=True)
def _pairs_parallel(vectors, q, questions, rows, out):
    for c in prange((rows.shape[0] + PAIR_SPAN - 1) // PAIR_SPAN):
        _pairs_span(c, vectors, q, questions, rows, out)


@njit(cache=True, nogil=True)
def _pairs_serial(vectors, q, questions, rows, out):
    for c in range((rows.shape[0] + PAIR_SPAN - 1) // PAIR_SPAN):
        _pairs_span(c, vectors, q, questions, rows, out)


def pair_cosines(vectors: np.ndarray, q: np.ndarray, questions: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(n,) float32: ``vectors[rows[i]] · q[questions[i]]`` (``vectors`` (N, dim), ``q`` (B, dim) float32, C-ordered;
    summed in ``lanes``' order: equal to a BLAS product within float32 rounding)."""
    _as_wide(q, vectors)
    if len(questions) != len(rows):
        raise ValueError(f"questions: one per row ({len(rows)}), got {len(questions)}")
    _within(rows, len(vectors), "rows"), _within(questions, len(q), "questions")
    out = np.empty(len(rows), np.float32)
    drive(_pairs_parallel, _pairs_serial, len(rows) >= PARALLEL_PAIRS, np.ascontiguousarray(vectors, np.float32),
          np.ascontiguousarray(q, np.float32), np.ascontiguousarray(questions, np.int64),
          np.ascontiguousarray(rows, np.int64), out)
    return out


def _pairwise_plan(n: int) -> np.ndarray:
    """numpy's pairwise summation of ``n`` values (``pairwise_sum`` in its ``loops_utils.h.src``: blocks of at most
    128 values, halves above, each half a multiple of 8) as a postfix program of (start, length) blocks and (-1, 0)
    for "add the last two sums": the kernels run it without recursion (Numba's cache does not load recursive
    functions safely)."""
    plan = []

    def walk(lo: int, size: int) -> None:
        if size <= 128:
            plan.append((lo, size))
            return
        half = size // 2
        half -= half % 8
        walk(lo, half)
        walk(lo + half, size - half)
        plan.append((-1, 0))

    walk(0, n)
    return np.array(plan, np.int64).reshape(-1, 2)


@njit(cache=True, nogil=True)
def _block(x, a, b, lo, n):
    """The sum of the float64 products ``x[a, t] * x[b, t]``, t in lo:lo+n (n <= 128), as numpy adds a block."""
    if n < 8:
        res = 0.0
        for t in range(lo, lo + n):
            res += np.float64(x[a, t]) * np.float64(x[b, t])
        return res
    r0, r1 = np.float64(x[a, lo]) * np.float64(x[b, lo]), np.float64(x[a, lo + 1]) * np.float64(x[b, lo + 1])
    r2, r3 = np.float64(x[a, lo + 2]) * np.float64(x[b, lo + 2]), np.float64(x[a, lo + 3]) * np.float64(x[b, lo + 3])
    r4, r5 = np.float64(x[a, lo + 4]) * np.float64(x[b, lo + 4]), np.float64(x[a, lo + 5]) * np.float64(x[b, lo + 5])
    r6, r7 = np.float64(x[a, lo + 6]) * np.float64(x[b, lo + 6]), np.float64(x[a, lo + 7]) * np.float64(x[b, lo + 7])
    i = lo + 8
    while i < lo + n - n % 8:  # eight running sums
        r0 += np.float64(x[a, i]) * np.float64(x[b, i])
        r1 += np.float64(x[a, i + 1]) * np.float64(x[b, i + 1])
        r2 += np.float64(x[a, i + 2]) * np.float64(x[b, i + 2])
        r3 += np.float64(x[a, i + 3]) * np.float64(x[b, i + 3])
        r4 += np.float64(x[a, i + 4]) * np.float64(x[b, i + 4])
        r5 += np.float64(x[a, i + 5]) * np.float64(x[b, i + 5])
        r6 += np.float64(x[a, i + 6]) * np.float64(x[b, i + 6])
        r7 += np.float64(x[a, i + 7]) * np.float64(x[b, i + 7])
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for t in range(i, lo + n):
        res += np.float64(x[a, t]) * np.float64(x[b, t])
    return res


@njit(cache=True, nogil=True)
def _exact(x, a, b, plan, sums):
    """One pair's sum by ``plan``; ``sums``: the program's stack (its depth: the halvings, ~log2(dim / 128))."""
    top = 0
    for s in range(plan.shape[0]):
        if plan[s, 0] < 0:
            top -= 1
            sums[top - 1] = sums[top - 1] + sums[top]
        else:
            sums[top] = _block(x, a, b, plan[s, 0], plan[s, 1])
            top += 1
    return 0.0 + sums[0]  # numpy's reduction adds the sum to its identity: -0.0 becomes 0.0


@njit(cache=True, nogil=True)
def _exact_chunk(c, n_chunks, x, rows, cols, plan, out):
    sums = np.empty(64, np.float64)  # one stack for the chunk's pairs
    for k in range(c * len(rows) // n_chunks, (c + 1) * len(rows) // n_chunks):
        out[k] = _exact(x, rows[k], cols[k], plan, sums)


@njit(cache=True, nogil=True, parallel=True)
def _exact_parallel(x, rows, cols, plan, n_chunks, out):
    for c in prange(n_chunks):
        _exact_chunk(c, n_chunks, x, rows, cols, plan, out)


@njit(cache=True, nogil=True)
def _exact_serial(x, rows, cols, plan, n_chunks, out):
    for c in range(n_chunks):
        _exact_chunk(c, n_chunks, x, rows, cols, plan, out)


def exact_pair_cosines(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """(n,) float64: ``x[rows[i]] · x[cols[i]]`` in float64, the same bits as numpy's
    ``(x[rows].astype(np.float64) * x[cols]).sum(axis=1)``, each pair's rows read in place (numpy's gathers and
    float64 temporaries cost a 2,500-session memory's add ~2 ms for its ~1,500 candidate pairs)."""
    if len(rows) != len(cols):
        raise ValueError(f"cols: {len(cols)} columns for {len(rows)} rows")
    _within(rows, len(x), "rows"), _within(cols, len(x), "cols")
    out = np.empty(len(rows), np.float64)
    pool = len(rows) >= PARALLEL_PAIRS
    drive(_exact_parallel, _exact_serial, pool, np.ascontiguousarray(x), np.ascontiguousarray(rows, np.int64),
          np.ascontiguousarray(cols, np.int64), _pairwise_plan(x.shape[1]), numba.get_num_threads() if pool else 1,
          out)
    return out


def _as_wide(q: np.ndarray, x: np.ndarray) -> None:
    """The kernels read as many values of a question's row as of ``x``'s: ``ValueError`` unless ``q`` is as wide."""
    if np.ndim(q) != 2 or np.shape(q)[1:] != np.shape(x)[1:]:
        raise ValueError(f"q: its rows must be as wide as x's ({np.shape(x)[1:]}), got {np.shape(q)[1:]}")


def _within(index: np.ndarray, n: int, name: str) -> None:
    """The kernels do not check bounds (numpy's gathers did): an index outside 0..n-1 raises here instead."""
    if len(index) and (index.min() < 0 or index.max() >= n):
        raise IndexError(f"{name}: an index outside 0..{n - 1}")


@njit(cache=True, nogil=True)
def _list(g, x, q, order, lo, hi, first, pair_b, pair_at, rows, cos):
    """List ``g``'s members against the questions that probe it, in tiles of 3 members × 4 questions (``lanes``);
    the members past the last full tile a row at a time."""
    f0, f1, m0 = first[g], first[g + 1], lo[g]
    for k in range(m0, hi[g]):
        for j in range(f0, f1):
            rows[pair_at[j] + k - m0] = order[k]
    k = m0
    while k + 3 <= hi[g]:
        j = f0
        while j + 4 <= f1:
            v = dots(x, q, (order[k], order[k + 1], order[k + 2]), (pair_b[j], pair_b[j + 1], pair_b[j + 2],
                                                                     pair_b[j + 3]))
            for a in range(3):
                for b in range(4):
                    cos[pair_at[j + b] + k + a - m0] = v[4 * a + b]
            j += 4
        for jj in range(j, f1):  # one question a tile: three pairs side by side
            v = dots(x, q, (order[k], order[k + 1], order[k + 2]), (pair_b[jj],))
            for a in range(3):
                cos[pair_at[jj] + k + a - m0] = v[a]
        k += 3
    for r in range(k, hi[g]):
        _row_times(x, q, order[r], pair_b, pair_at, f0, f1, r - m0, cos)


@njit(cache=True, nogil=True, parallel=True)
def _lists_parallel(x, q, order, lo, hi, first, pair_b, pair_at, rows, cos):
    for g in prange(lo.shape[0]):
        _list(g, x, q, order, lo, hi, first, pair_b, pair_at, rows, cos)


@njit(cache=True, nogil=True)
def _lists_serial(x, q, order, lo, hi, first, pair_b, pair_at, rows, cos):
    for g in range(lo.shape[0]):
        _list(g, x, q, order, lo, hi, first, pair_b, pair_at, rows, cos)


@njit(cache=True, nogil=True)
def _ascending_row(b, rows, cos, counts, run_starts, run_ptr):
    """Question ``b``'s members sorted by row: its runs (one per probed list, each ascending, starting at
    ``run_starts[run_ptr[b]:run_ptr[b + 1]]`` in its row) merged pairwise until one is left."""
    n = counts[b]
    bounds = np.empty(run_ptr[b + 1] - run_ptr[b] + 1, np.int64)
    bounds[:-1] = run_starts[run_ptr[b]:run_ptr[b + 1]]
    bounds[-1] = n
    r, c = rows[b, :n].copy(), cos[b, :n].copy()
    r2, c2 = np.empty_like(r), np.empty_like(c)
    n_runs = len(bounds) - 1
    while n_runs > 1:
        k = 0
        for i in range(0, n_runs, 2):
            lo, mid = bounds[i], bounds[i + 1]
            hi = bounds[i + 2] if i + 2 <= n_runs else mid
            a, e, o = lo, mid, lo
            while a < mid and e < hi:  # a question's rows are distinct: no ties
                if r[a] < r[e]:
                    r2[o], c2[o] = r[a], c[a]
                    a += 1
                else:
                    r2[o], c2[o] = r[e], c[e]
                    e += 1
                o += 1
            while a < mid:
                r2[o], c2[o] = r[a], c[a]
                a += 1
                o += 1
            while e < hi:
                r2[o], c2[o] = r[e], c[e]
                e += 1
                o += 1
            bounds[k] = lo
            k += 1
        bounds[k] = n
        n_runs = k
        r, r2, c, c2 = r2, r, c2, c
    rows[b, :n] = r
    cos[b, :n] = c


@njit(cache=True, nogil=True, parallel=True)
def _ascending_parallel(rows, cos, counts, run_starts, run_ptr):
    for b in prange(rows.shape[0]):
        _ascending_row(b, rows, cos, counts, run_starts, run_ptr)


@njit(cache=True, nogil=True)
def _ascending_serial(rows, cos, counts, run_starts, run_ptr):
    for b in range(rows.shape[0]):
        _ascending_row(b, rows, cos, counts, run_starts, run_ptr)


def list_cosines(x: np.ndarray, q: np.ndarray, order: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 first: np.ndarray, pair_b: np.ndarray, pair_at: np.ndarray,
                 counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows (B, S) int64, cosines (B, S) float32), S = ``counts.max()``: for each list ``g`` (members
    ``order[lo[g]:hi[g]]``) and each of its questions ``pair_b[j]``, ``j`` in ``first[g]:first[g + 1]``, the
    member's row and its cosine to the question at the flat position ``pair_at[j]`` plus the member's place in the
    list; then each question's ``counts[b]`` members sorted by row, -1 / -inf after them."""
    _as_wide(q, x)
    n_b, width = len(counts), int(counts.max(initial=0))
    rows, cos = np.full((n_b, width), -1, np.int64), np.full((n_b, width), -np.inf, np.float32)
    sizes = hi - lo
    _within(pair_b, n_b, "pair_b")
    ends = pair_at + np.repeat(sizes, np.diff(first))  # where each (list, question)'s members end
    if len(ends) and (pair_at.min() < 0 or ends.max() > rows.size):
        raise IndexError(f"pair_at: members written outside the {n_b} x {width} result")
    drive(_lists_parallel, _lists_serial, int((sizes * np.diff(first)).sum()) >= PARALLEL_PAIRS,
          np.ascontiguousarray(x, np.float32), np.ascontiguousarray(q, np.float32),
          *(np.ascontiguousarray(a, np.int64) for a in (order, lo, hi, first, pair_b, pair_at)), rows.reshape(-1),
          cos.reshape(-1))
    counts = np.ascontiguousarray(counts, np.int64)
    starts = np.sort(pair_at)  # where each (list, question)'s members start: a question's runs, in its row's order
    run_ptr = np.searchsorted(starts // max(width, 1), np.arange(n_b + 1)).astype(np.int64)
    drive(_ascending_parallel, _ascending_serial, n_b > 1 and int(counts.sum()) >= PARALLEL_PAIRS, rows, cos, counts,
          starts - starts // max(width, 1) * width, run_ptr)
    return rows, cos


@njit(cache=True, nogil=True)
def _all_block(blk, x, q, out):
    """Rows ``BLOCK_ROWS * blk`` on (``BLOCK_ROWS`` of them: 36 KB at 384 dimensions, about a core's L1 cache, read
    again by every question) against every question, in tiles of 3 rows × 4 questions (``lanes``). A row past the last
    full tile of three goes 1 row × 4 questions; the questions past the last four go one pair at a time (3 adjacent
    rows × 1 question read 2.6× slower, ad hoc: docs/scale-history.md)."""
    n_q = q.shape[0]
    q4 = n_q - n_q % 4
    lo = blk * BLOCK_ROWS
    hi = min(lo + BLOCK_ROWS, x.shape[0])
    r3 = hi - (hi - lo) % 3
    for j in range(0, q4, 4):
        for r in range(lo, r3, 3):
            v = dots(x, q, (r, r + 1, r + 2), (j, j + 1, j + 2, j + 3))
            for a in range(3):
                for b in range(4):
                    out[j + b, r + a] = v[4 * a + b]
        for r in range(r3, hi):
            v = dots(x, q, (r,), (j, j + 1, j + 2, j + 3))
            for b in range(4):
                out[j + b, r] = v[b]
    for j in range(q4, n_q):
        for r in range(lo, hi):
            out[j, r] = _dot(x, q, j, r)


@njit(cache=True, nogil=True, parallel=True)
def _all_parallel(x, q, out):
    for blk in prange((x.shape[0] + BLOCK_ROWS - 1) // BLOCK_ROWS):
        _all_block(blk, x, q, out)


@njit(cache=True, nogil=True)
def _all_serial(x, q, out):
    for blk in range((x.shape[0] + BLOCK_ROWS - 1) // BLOCK_ROWS):
        _all_block(blk, x, q, out)


def all_cosines(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(len(q), len(x)) float32: ``q @ x.T``, blocks of rows against every question in tiles (``_all_block``), each
    product the bits of ``pair_cosines``' (``lanes.dots``)."""
    _as_wide(q, x)
    out = np.empty((len(q), len(x)), np.float32)
    drive(_all_parallel, _all_serial, len(q) * len(x) >= PARALLEL_PAIRS, np.ascontiguousarray(x, np.float32),
          np.ascontiguousarray(q, np.float32), out)
    return out
