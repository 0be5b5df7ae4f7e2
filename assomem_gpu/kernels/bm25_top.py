"""A batch's best texts by BM25 from the postings of its terms (Numba, without the GIL): ``BM25Index.top``'s kernel.

Each query's score of a text is the sum, over the query's terms in ascending order, of how often the query holds
the term times the term's weight in the text (``BM25Index.weights_of``, each operation in its order, in float64),
so the scores are the bits scipy's product of the query and posting matrices gives (on x86-64; where the C compiler
fuses a multiply and an add, as GCC does on aarch64, ties could differ from ``BM25Index.scores``); each query's best
are then kept in one pass and a list of ``width`` (ties to the lower text). scipy's slicing of the batch's postings,
two matrices and their product, then a sort of each row, take 3.0× the kernel's time for one question at 2,500
sessions and 2.0× for 256 (``benchmarks/test_kernel_speed.py``).

Queries run in a chunk per thread of the pool, each chunk with scratch arrays over the texts (a text's stamp says
which query last touched it, so nothing is reset between queries).
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from .fused_topk import _insert_cpu  # a change there needs this module's cached kernels cleared: Numba's cache
# follows only the file of the function it compiles
from .parallel import drive

PARALLEL_POSTINGS = 4096  # postings a batch reads from which the thread pool runs it (a launch costs ~80 us)


@njit(cache=True, nogil=True)
def _query(b, key_ptr, terms, times, idf, p_indptr, p_indices, p_data, lengths, k1, b_, mean, allowed, use_allowed,
           score, stamp, touched, out):
    n = 0
    for j in range(key_ptr[b], key_ptr[b + 1]):  # the query's terms, ascending
        t, v, f = terms[j], times[j], idf[j]
        for p in range(p_indptr[t], p_indptr[t + 1]):
            text = p_indices[p]
            tf = np.float64(p_data[p])
            w = f * tf / (tf + k1 * (1 - b_ + b_ * lengths[text] / mean))
            if stamp[text] != b + 1:
                stamp[text] = b + 1
                score[text] = 0.0
                touched[n] = text
                n += 1
            score[text] += v * w
    width = out.shape[1]
    top_s = np.full(width, -np.inf)
    top_i = np.full(width, -1, np.int64)
    for i in range(n):
        text = touched[i]
        s = np.float32(score[text])
        if s > 0 and (not use_allowed or allowed[b, text]):
            _insert_cpu(top_s, top_i, width, s, text)
    for i in range(width):
        out[b, i] = top_i[i]


@njit(cache=True, nogil=True)
def _chunk(c, n_chunks, key_ptr, terms, times, idf, p_indptr, p_indices, p_data, lengths, k1, b_, mean, allowed,
           use_allowed, out):
    n_q, n_texts = len(key_ptr) - 1, len(lengths)
    score, stamp, touched = np.empty(n_texts), np.zeros(n_texts, np.int32), np.empty(n_texts, np.int64)
    for b in range(c * n_q // n_chunks, (c + 1) * n_q // n_chunks):
        _query(b, key_ptr, terms, times, idf, p_indptr, p_indices, p_data, lengths, k1, b_, mean, allowed,
               use_allowed, score, stamp, touched, out)


@njit(cache=True, nogil=True, parallel=True)
def _parallel(n_chunks, key_ptr, terms, times, idf, p_indptr, p_indices, p_data, lengths, k1, b_, mean, allowed,
              use_allowed, out):
    for c in prange(n_chunks):
        _chunk(c, n_chunks, key_ptr, terms, times, idf, p_indptr, p_indices, p_data, lengths, k1, b_, mean, allowed,
               use_allowed, out)


@njit(cache=True, nogil=True)
def _serial(n_chunks, key_ptr, terms, times, idf, p_indptr, p_indices, p_data, lengths, k1, b_, mean, allowed,
            use_allowed, out):
    for c in range(n_chunks):
        _chunk(c, n_chunks, key_ptr, terms, times, idf, p_indptr, p_indices, p_data, lengths, k1, b_, mean, allowed,
               use_allowed, out)


def bm25_top(key_ptr: np.ndarray, terms: np.ndarray, times: np.ndarray, idf: np.ndarray, p_indptr: np.ndarray,
             p_indices: np.ndarray, p_data: np.ndarray, lengths: np.ndarray, k1: float, b: float, mean: float,
             width: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """(queries, width) int64: each query's ``width`` best texts by BM25, highest first, ties to the lower text,
    only scores above 0 and, with ``allowed`` (queries, texts) bool, allowed texts; -1 after them.

    Query ``q``'s terms are ``terms[key_ptr[q]:key_ptr[q + 1]]`` (ascending), each held ``times`` times (float64)
    with the inverse document frequency ``idf`` (float64, per term of the query); the postings (CSC of the term
    counts: ``p_indptr`` by term, ``p_indices`` the texts, ``p_data`` the counts) and each text's length
    (``lengths``, float64, in tokens) give each term's weight in a text, with BM25's ``k1``, ``b`` and the mean
    length ``mean``."""
    n_q = len(key_ptr) - 1
    out = np.full((n_q, width), -1, np.int64)
    if width == 0 or n_q == 0:
        return out
    if allowed is not None and np.shape(allowed) != (n_q, len(lengths)):
        raise ValueError(f"allowed: must be (queries, texts) = ({n_q}, {len(lengths)}), got {np.shape(allowed)}")
    key_ptr, terms = np.ascontiguousarray(key_ptr, np.int64), np.ascontiguousarray(terms, np.int64)
    p_indptr = np.ascontiguousarray(p_indptr, np.int64)
    read = int((p_indptr[terms + 1] - p_indptr[terms]).sum())
    pool = n_q > 1 and read >= PARALLEL_POSTINGS
    mask = np.zeros((1, 1), np.bool_) if allowed is None else np.asarray(allowed, np.bool_)  # (a broadcast: no copy)
    drive(_parallel, _serial, pool, min(n_q, get_num_threads()) if pool else 1, key_ptr, terms,
          np.ascontiguousarray(times, np.float64), np.ascontiguousarray(idf, np.float64), p_indptr,
          np.ascontiguousarray(p_indices, np.int64), np.ascontiguousarray(p_data, np.float32),
          np.ascontiguousarray(lengths, np.float64), float(k1), float(b), float(mean), mask, allowed is not None, out)
    return out
