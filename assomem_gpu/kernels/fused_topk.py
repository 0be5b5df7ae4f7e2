"""Fused score + top-K: eq. 4 over a batch of questions, one kernel (Numba CUDA) and its CPU twin (Numba, parallel).

Input per question b: z-scored signals ``scores[b, :counts[b], :]`` (padded to one width), fusion weights
``weights[b]`` and the temperature T. Each signal becomes a softmax over the question's candidates at temperature T;
the fused score is their weighted sum. Output: the ``k`` best candidate indices (ties: lower index first) and
scores, ``-1`` / ``-inf`` past the question's candidate count; and each signal's softmax normaliser, its max and its
sum of exponentials over the question's candidates, from which a candidate's share of its fused score by signal
follows (``fusion.contributions``) without a second pass over every candidate.

Both paths call the same per-candidate function (``fused_one``, compiled for each target). The CUDA kernel
(``fused_topk_cuda.py``, apart so that a CPU process never imports ``numba.cuda``, about a second) runs one
block per question: block reductions for the per-signal max and sum in shared memory, a per-thread local top-K,
then a shared-memory tree merge; no warp shuffles, so it runs under ``NUMBA_ENABLE_CUDASIM=1``.
Non-finite inputs are rejected (ValueError naming the question) before either path runs.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .parallel import call_parallel

MAX_SIGNALS = 12  # (two float64 of shared memory each in the CUDA kernel)
MAX_K = 64
THREADS = 32  # threads per block; static shared memory: THREADS * MAX_K (float64 score, int32 index) pairs = 24 KiB
# (resources.py compiles the kernel to SASS and holds it to 48 KiB, no spills, the launch within limits)


def fused_one(scores, c, n_signals, maxes, sums, weights, inv_t):
    """Eq. 4 for candidate ``c``: sum_d w_d · exp((z_cd − max_d) / T) / sum_d."""
    total = 0.0
    for d in range(n_signals):
        total += float(weights[d]) * math.exp((scores[c, d] - maxes[d]) * inv_t) / sums[d]  # (float64, as hardware)
    return total


def better(score_a, idx_a, score_b, idx_b):
    """Does (score_a, idx_a) rank before (score_b, idx_b)? Higher score first, then lower index."""
    return score_a > score_b or (score_a == score_b and idx_a < idx_b)


def insert(top_s, top_i, k, score, idx):
    """Insert into a sorted top-``k`` list (kept in place) if it belongs there (the order of ``better``, inlined)."""
    last_s, last_i = top_s[k - 1], top_i[k - 1]
    if not (score > last_s or (score == last_s and idx < last_i)):
        return
    pos = k - 1
    while pos > 0 and (score > top_s[pos - 1] or (score == top_s[pos - 1] and idx < top_i[pos - 1])):
        top_s[pos] = top_s[pos - 1]
        top_i[pos] = top_i[pos - 1]
        pos -= 1
    top_s[pos] = score
    top_i[pos] = idx


_fused_cpu = njit(cache=True, nogil=True)(fused_one)
_insert_cpu = njit(cache=True, nogil=True)(insert)


@njit(cache=True, nogil=True)
def _fused_topk_question(b, scores, counts, weights, inv_t, k, out_idx, out_score, out_max, out_sum):
    """Question ``b``: per-signal max and sum of exponentials, then every candidate through the top-``k`` list."""
    n_signals = scores.shape[2]
    n = counts[b]
    maxes = np.full(n_signals, -np.inf)
    sums = np.zeros(n_signals)
    for d in range(n_signals):
        for c in range(n):
            maxes[d] = max(maxes[d], scores[b, c, d])
        for c in range(n):
            sums[d] += math.exp((scores[b, c, d] - maxes[d]) * inv_t)
    top_s = np.full(k, -np.inf)
    top_i = np.full(k, -1, np.int64)
    for c in range(n):
        _insert_cpu(top_s, top_i, k, _fused_cpu(scores[b], c, n_signals, maxes, sums, weights[b], inv_t), c)
    for j in range(k):
        out_score[b, j] = top_s[j]
        out_idx[b, j] = top_i[j]
    for d in range(n_signals):
        out_max[b, d] = maxes[d]
        out_sum[b, d] = sums[d]


# Two drivers, not one function compiled twice: Numba's on-disk cache keys a function by its name and line, not by
# ``parallel``, so one function compiled both ways would load whichever variant was cached first.
@njit(parallel=True, cache=True, nogil=True)
def _fused_topk_parallel(scores, counts, weights, inv_t, k, out_idx, out_score, out_max, out_sum):
    for b in prange(scores.shape[0]):
        _fused_topk_question(b, scores, counts, weights, inv_t, k, out_idx, out_score, out_max, out_sum)


@njit(cache=True, nogil=True)
def _fused_topk_serial(scores, counts, weights, inv_t, k, out_idx, out_score, out_max, out_sum):
    """Small batches: no thread-pool start-up per call."""
    for b in range(scores.shape[0]):
        _fused_topk_question(b, scores, counts, weights, inv_t, k, out_idx, out_score, out_max, out_sum)


PARALLEL_FROM = 8  # questions per call from which the parallel twin pays off


def check_inputs(scores, counts, weights, temperature: float, k: int, xp=np) -> None:
    """Shapes, limits and finiteness of a fused top-K call (ValueError naming what is wrong); both paths run it."""
    if scores.ndim != 3 or weights.shape != (scores.shape[0], scores.shape[2]) or counts.shape != (scores.shape[0],):
        raise ValueError(f"shapes do not fit: scores {scores.shape}, counts {counts.shape}, weights {weights.shape}")
    if scores.shape[2] > MAX_SIGNALS or not 1 <= k <= MAX_K:
        raise ValueError(f"at most {MAX_SIGNALS} signals and 1 <= k <= {MAX_K}, got {scores.shape[2]} and {k}")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if bool(xp.any((counts < 0) | (counts > scores.shape[1]))):
        raise ValueError("counts must lie between 0 and the padded candidate width")
    valid = xp.arange(scores.shape[1]) < counts[:, None]
    bad = xp.any(valid & ~xp.isfinite(scores).all(axis=2), axis=1) | ~xp.isfinite(weights).all(axis=1)
    if bool(bad.any()):
        raise ValueError(f"question {int(xp.argmax(bad))}: non-finite signal or weight (NaN/inf are rejected)")


def fused_topk_cpu(scores, counts, weights, temperature: float, k: int) -> tuple[np.ndarray, ...]:
    """CPU twin: indices (B, k) int64, scores (B, k) float64, and per signal its max (B, S) float64, -inf without
    candidates, and its sum of exp((z − max) / T) (B, S) float64, 0 without candidates."""
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    weights = np.ascontiguousarray(weights, dtype=np.float32)
    check_inputs(scores, counts, weights, temperature, k)
    out_idx = np.empty((len(scores), k), np.int64)
    out_score = np.empty((len(scores), k), np.float64)
    out_max, out_sum = np.empty((len(scores), scores.shape[2])), np.empty((len(scores), scores.shape[2]))
    args = (scores, counts, weights, 1.0 / temperature, k, out_idx, out_score, out_max, out_sum)
    if len(scores) >= PARALLEL_FROM:
        call_parallel(_fused_topk_parallel, *args)
    else:
        _fused_topk_serial(*args)
    return out_idx, out_score, out_max, out_sum


def fused_topk_reference(scores, counts, weights, temperature: float, k: int) -> tuple[np.ndarray, ...]:
    """Plain numpy, one question at a time: what both kernels must return."""
    idx = np.full((len(scores), k), -1, np.int64)
    out = np.full((len(scores), k), -np.inf)
    maxes, sums = np.full((len(scores), scores.shape[2]), -np.inf), np.zeros((len(scores), scores.shape[2]))
    for b in range(len(scores)):
        z = np.asarray(scores[b, : counts[b]], dtype=np.float64)
        if len(z) == 0:
            continue
        maxes[b] = z.max(axis=0)
        e = np.exp((z - maxes[b]) / temperature)
        sums[b] = e.sum(axis=0)
        fused = (e / sums[b]) @ np.asarray(weights[b], dtype=np.float64)
        order = np.lexsort((np.arange(len(fused)), -fused))[:k]
        idx[b, : len(order)], out[b, : len(order)] = order, fused[order]
    return idx, out, maxes, sums
