"""Each question's signals z-scored over its valid candidates: on the CPU a Numba kernel, one pass per question
(the array expression's eight temporaries of (B, C, S) float64 took ~45 of ~350 ms a batch of 256 questions at 2,500
sessions, an ad hoc line profile); on the device, and for a single signal, the array expression (``zscore_array``).

The kernel's sums run over the candidates in order from the first, as numpy reduces an axis that is not the
innermost, so its values are the expression's bits on numpy; with one signal that axis is the innermost, which numpy
sums pairwise, so the expression runs there.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import drive

PARALLEL_ENTRIES = 1 << 15  # entries (B·C·S) from which the thread pool runs a batch (a launch costs ~80 us)
SD_FLOOR = 1e-12  # a signal whose deviation is at most this is constant over the candidates: 0


@njit(cache=True, nogil=True)
def _question(x, valid, b, out):
    n_c, n_s = x.shape[1], x.shape[2]
    n = 0
    for c in range(n_c):
        n += valid[b, c]
    n = max(n, 1)
    for s in range(n_s):
        total = x[b, 0, s] if valid[b, 0] else 0.0
        for c in range(1, n_c):
            total += x[b, c, s] if valid[b, c] else 0.0
        mean = total / n
        for c in range(n_c):
            out[b, c, s] = x[b, c, s] - mean if valid[b, c] else 0.0
        squares = out[b, 0, s] * out[b, 0, s]
        for c in range(1, n_c):
            squares += out[b, c, s] * out[b, c, s]
        sd = np.sqrt(squares / n)
        for c in range(n_c):
            out[b, c, s] = out[b, c, s] / sd if sd > SD_FLOOR else 0.0


@njit(cache=True, nogil=True, parallel=True)
def _parallel(x, valid, out):
    for b in prange(x.shape[0]):
        _question(x, valid, b, out)


@njit(cache=True, nogil=True)
def _serial(x, valid, out):
    for b in range(x.shape[0]):
        _question(x, valid, b, out)


def zscore(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(B, C, S) float64: each question's signals ``x`` (B, C, S) z-scored over its candidates where ``valid`` (B,
    C) bool, 0 elsewhere and for a signal constant over them (deviation at most ``SD_FLOOR``)."""
    x = np.ascontiguousarray(x, np.float64)
    if x.shape[2] == 1:
        return zscore_array(x, valid, np)
    out = np.empty_like(x)
    if x.shape[1] > 0:  # (no candidate: nothing to write)
        drive(_parallel, _serial, x.size >= PARALLEL_ENTRIES, x, np.ascontiguousarray(valid, np.bool_), out)
    return out


def zscore_array(x, valid, xp):
    """``zscore`` as array operations of ``xp`` (numpy or CuPy)."""
    n = xp.maximum(valid.sum(axis=1), 1)[:, None]
    w = valid[:, :, None]
    d = xp.where(w, x - (xp.where(w, x, 0.0).sum(axis=1) / n)[:, None, :], 0.0)
    sd = xp.sqrt((d * d).sum(axis=1) / n)
    return xp.where(sd[:, None, :] > SD_FLOOR, d / xp.where(sd > SD_FLOOR, sd, 1.0)[:, None, :], 0.0)
