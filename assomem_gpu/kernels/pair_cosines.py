"""Cosines of (question, row) pairs read in place, on the CPU (Numba, without the GIL).

A probed search needs a question's cosines to utterances outside the lists it probed (the other turns of a clue's
sessions, their context turns). Gathered into a copy and multiplied by the question, each 1.5 KB row is read, written
and read again for a 4-byte result. Here each pair's dot product reads the row where it lies: 256,000 pairs of 384
dimensions 127 -> 20 ms on 2 cores. Pairs run in parallel from ``PARALLEL_PAIRS`` on, else in this thread (a parallel
launch costs ~80 us, about 1,000 pairs' work).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import call_parallel

PARALLEL_PAIRS = 2048  # pairs from which the thread pool runs them


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dot(vectors, q, question, row):
    a, b = vectors[row], q[question]
    s = np.float32(0.0)
    for d in range(a.shape[0]):
        s += a[d] * b[d]
    return s


@njit(cache=True, nogil=True, parallel=True)
def _pairs_parallel(vectors, q, questions, rows, out):
    for i in prange(rows.shape[0]):
        out[i] = _dot(vectors, q, questions[i], rows[i])


@njit(cache=True, nogil=True)
def _pairs_serial(vectors, q, questions, rows, out):
    for i in range(rows.shape[0]):
        out[i] = _dot(vectors, q, questions[i], rows[i])


def pair_cosines(vectors: np.ndarray, q: np.ndarray, questions: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(n,) float32: ``vectors[rows[i]] · q[questions[i]]`` (``vectors`` (N, dim), ``q`` (B, dim) float32, C-ordered;
    the sum in an order of the compiler's choosing: equal to a BLAS product within float32 rounding)."""
    out = np.empty(len(rows), np.float32)
    args = (np.ascontiguousarray(vectors, np.float32), np.ascontiguousarray(q, np.float32),
            np.ascontiguousarray(questions, np.int64), np.ascontiguousarray(rows, np.int64), out)
    if len(rows) >= PARALLEL_PAIRS:
        call_parallel(_pairs_parallel, *args)
    else:
        _pairs_serial(*args)
    return out
