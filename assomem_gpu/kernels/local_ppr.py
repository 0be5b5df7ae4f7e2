"""Local importance on the CPU (Numba): each question's H PPR iterations on its own ball, the nodes within H hops of
its candidates, for a whole batch in parallel.

H iterations from r = t give a node values read from nodes at most H hops away, so a question's candidates get from
its ball the values H iterations over the whole graph give them (``scoring.importance``). A ball is small: at 25,000
sessions a question's holds ~2,300 of 253,000 nodes, where 16 questions' joint neighbourhood (on which a batched
product would run them) holds ~33,000. Each question's ball is found by a breadth-first search and iterated with
its nodes' rows of the whole transition matrix read in place (``slotted_csr.SlottedCSR``: stored clue columns
decoded as they are read), a column outside the ball skipped: no sub-matrix is copied. A node's sum runs over its
row in the matrix's order with ``kernels/ppr_cpu.py``'s arithmetic (float32, d folded into each value), so a
candidate's value is the same bits as that kernel's on any part of the graph that holds the ball (every neighbour of
a node that its candidates read lies in the ball).

Questions run in a chunk per thread of the pool, each with scratch arrays over the graph's nodes (a node's stamp
says which question last saw it, so nothing is reset between questions).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from ..slotted_csr import SlottedCSR
from .parallel import drive

PARALLEL_SEEDS = 512  # seeds (candidates) from which the thread pool runs a batch (a launch costs ~80 us)


@njit(cache=True, nogil=True)
def _ball(start, end, indices, n_utt, seeds, hops, stamp, mark, out):
    """The nodes within ``hops`` edges of ``seeds``, breadth first, into ``out``; returns their count. ``stamp[v] ==
    mark`` marks a node seen."""
    n = 0
    for s in seeds:
        if stamp[s] != mark:
            stamp[s] = mark
            out[n] = s
            n += 1
    lo = 0
    for _ in range(hops):
        hi = n
        for f in range(lo, hi):
            v = out[f]
            for e in range(start[v], end[v]):
                u = indices[e]
                if u < 0:  # a stored clue column (``slotted_csr.encode``)
                    u = n_utt - 1 - u
                if stamp[u] != mark:
                    stamp[u] = mark
                    out[n] = u
                    n += 1
        if n == hi:
            break
        lo = hi
    return n


@njit(cache=True, nogil=True)
def _sizes_chunk(c, n_chunks, start, end, indices, n_utt, seed_ptr, seeds, hops, sizes):
    n_q = len(seed_ptr) - 1
    stamp = np.zeros(len(start), np.int32)
    scratch = np.empty(len(start), np.int64)
    for b in range(c * n_q // n_chunks, (c + 1) * n_q // n_chunks):
        sizes[b] = _ball(start, end, indices, n_utt, seeds[seed_ptr[b]:seed_ptr[b + 1]], hops, stamp, b + 1, scratch)


@njit(cache=True, nogil=True, parallel=True)
def _sizes_parallel(start, end, indices, n_utt, seed_ptr, seeds, hops, n_chunks, sizes):
    for c in prange(n_chunks):
        _sizes_chunk(c, n_chunks, start, end, indices, n_utt, seed_ptr, seeds, hops, sizes)


@njit(cache=True, nogil=True)
def _sizes_serial(start, end, indices, n_utt, seed_ptr, seeds, hops, n_chunks, sizes):
    for c in range(n_chunks):
        _sizes_chunk(c, n_chunks, start, end, indices, n_utt, seed_ptr, seeds, hops, sizes)


@njit(cache=True, nogil=True)
def _nodes_chunk(c, n_chunks, start, end, indices, n_utt, seed_ptr, seeds, hops, ball_ptr, nodes):
    n_q = len(seed_ptr) - 1
    stamp = np.zeros(len(start), np.int32)
    for b in range(c * n_q // n_chunks, (c + 1) * n_q // n_chunks):
        _ball(start, end, indices, n_utt, seeds[seed_ptr[b]:seed_ptr[b + 1]], hops, stamp, b + 1,
              nodes[ball_ptr[b]:ball_ptr[b + 1]])


@njit(cache=True, nogil=True, parallel=True)
def _nodes_parallel(start, end, indices, n_utt, seed_ptr, seeds, hops, n_chunks, ball_ptr, nodes):
    for c in prange(n_chunks):
        _nodes_chunk(c, n_chunks, start, end, indices, n_utt, seed_ptr, seeds, hops, ball_ptr, nodes)


@njit(cache=True, nogil=True)
def _nodes_serial(start, end, indices, n_utt, seed_ptr, seeds, hops, n_chunks, ball_ptr, nodes):
    for c in range(n_chunks):
        _nodes_chunk(c, n_chunks, start, end, indices, n_utt, seed_ptr, seeds, hops, ball_ptr, nodes)


@njit(cache=True, nogil=True)
def _ppr_chunk(c, n_chunks, start, end, indices, n_utt, values, damping, one_minus_d, hops, ball_ptr, nodes, tele,
               seed_ptr, seeds, out):
    n_q = len(seed_ptr) - 1
    stamp = np.zeros(len(start), np.int32)
    local = np.empty(len(start), np.int32)
    for b in range(c * n_q // n_chunks, (c + 1) * n_q // n_chunks):
        lo, hi = ball_ptr[b], ball_ptr[b + 1]
        for i in range(lo, hi):
            stamp[nodes[i]] = b + 1
            local[nodes[i]] = i - lo
        t = tele[lo:hi]
        r, nxt = t.copy(), np.empty(hi - lo, np.float32)
        for _ in range(hops):
            for i in range(hi - lo):
                v = nodes[lo + i]
                acc = one_minus_d * t[i]
                for p in range(start[v], end[v]):
                    u = indices[p]
                    if u < 0:
                        u = n_utt - 1 - u
                    if stamp[u] == b + 1:
                        acc += np.float32(values[p] * damping) * r[local[u]]
                nxt[i] = acc
            r, nxt = nxt, r
        for j in range(seed_ptr[b], seed_ptr[b + 1]):
            out[j] = r[local[seeds[j]]]


@njit(cache=True, nogil=True, parallel=True)
def _ppr_parallel(start, end, indices, n_utt, values, damping, one_minus_d, hops, ball_ptr, nodes, tele, seed_ptr,
                  seeds, n_chunks, out):
    for c in prange(n_chunks):
        _ppr_chunk(c, n_chunks, start, end, indices, n_utt, values, damping, one_minus_d, hops, ball_ptr, nodes, tele,
                   seed_ptr, seeds, out)


@njit(cache=True, nogil=True)
def _ppr_serial(start, end, indices, n_utt, values, damping, one_minus_d, hops, ball_ptr, nodes, tele, seed_ptr,
                seeds, n_chunks, out):
    for c in range(n_chunks):
        _ppr_chunk(c, n_chunks, start, end, indices, n_utt, values, damping, one_minus_d, hops, ball_ptr, nodes, tele,
                   seed_ptr, seeds, out)


def _chunks(seed_ptr: np.ndarray) -> tuple[bool, int]:
    """(run on the pool, chunks) for a batch of these seeds."""
    pool = int(seed_ptr[-1]) >= PARALLEL_SEEDS and len(seed_ptr) > 2
    return pool, min(numba.get_num_threads(), len(seed_ptr) - 1) if pool else 1


def ball_sizes(rows: SlottedCSR, seed_ptr: np.ndarray, seeds: np.ndarray, hops: int) -> np.ndarray:
    """(B,) int64 the number of nodes within ``hops`` edges of each question's seeds, question ``b``'s being
    ``seeds[seed_ptr[b]:seed_ptr[b + 1]]`` (node ids), in the graph ``rows`` (a symmetric pattern)."""
    sizes = np.zeros(len(seed_ptr) - 1, np.int64)
    pool, n_chunks = _chunks(seed_ptr)
    drive(_sizes_parallel, _sizes_serial, pool, rows.start, rows.end, rows.indices, rows.n_utt, seed_ptr, seeds, hops,
          n_chunks, sizes)
    return sizes


def ball_nodes(rows: SlottedCSR, seed_ptr: np.ndarray, seeds: np.ndarray, hops: int,
               ball_ptr: np.ndarray) -> np.ndarray:
    """The nodes (int64) of each question's ball (``ball_sizes``), question ``b``'s at ``ball_ptr[b]:ball_ptr[b +
    1]``, breadth first from its seeds."""
    nodes = np.empty(int(ball_ptr[-1]), np.int64)
    pool, n_chunks = _chunks(seed_ptr)
    drive(_nodes_parallel, _nodes_serial, pool, rows.start, rows.end, rows.indices, rows.n_utt, seed_ptr, seeds, hops,
          n_chunks, ball_ptr, nodes)
    return nodes


def ball_ppr(rows: SlottedCSR, damping: float, hops: int, ball_ptr: np.ndarray, nodes: np.ndarray, tele: np.ndarray,
             seed_ptr: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """(len(seeds),) float32: each seed's value after ``hops`` iterations r ← d·M·r + (1−d)·t from r = t on its
    question's ball (``ball_nodes``; ``tele`` (len(nodes),) float32 the question's teleport at each of them), M the
    column-stochastic transition (``rows.scaled``)."""
    out = np.empty(len(seeds), np.float32)
    pool, n_chunks = _chunks(seed_ptr)
    drive(_ppr_parallel, _ppr_serial, pool, rows.start, rows.end, rows.indices, rows.n_utt, rows.scaled,
          np.float32(damping), np.float32(1.0 - damping), hops, ball_ptr, nodes,
          np.ascontiguousarray(tele, np.float32), seed_ptr, seeds, n_chunks, out)
    return out
