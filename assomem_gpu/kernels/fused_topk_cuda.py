"""The fused score + top-K CUDA kernel (see ``fused_topk``, which holds its per-candidate functions, its checks and
its CPU twin): one block per question; block reductions for the per-signal max and sum in shared memory, a
per-thread local top-K, then a shared-memory tree merge; no warp shuffles, so it runs under
``NUMBA_ENABLE_CUDASIM=1``."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float64, int32, int64

from .fused_topk import MAX_K, MAX_SIGNALS, THREADS, better, check_inputs, fused_one, insert


def _cuda_kernel():
    """Compile the CUDA kernel on first use (the simulator or a real device)."""
    fused_dev = cuda.jit(device=True)(fused_one)
    better_dev = cuda.jit(device=True)(better)
    insert_dev = cuda.jit(device=True)(insert)

    @cuda.jit
    def kernel(scores, counts, weights, inv_t, k, out_idx, out_score, out_max, out_sum):
        b = cuda.blockIdx.x
        t = cuda.threadIdx.x
        n = counts[b]
        n_signals = scores.shape[2]
        red = cuda.shared.array(THREADS, float64)
        maxes = cuda.shared.array(MAX_SIGNALS, float64)
        sums = cuda.shared.array(MAX_SIGNALS, float64)
        for d in range(n_signals):  # block reductions: max, then the sum of exponentials
            m = -math.inf
            for c in range(t, n, THREADS):
                m = max(m, float64(scores[b, c, d]))
            red[t] = m
            cuda.syncthreads()
            step = THREADS // 2
            while step > 0:
                if t < step:
                    red[t] = max(red[t], red[t + step])
                cuda.syncthreads()
                step //= 2
            if t == 0:
                maxes[d] = red[0]
            cuda.syncthreads()
            s = 0.0
            for c in range(t, n, THREADS):
                s += math.exp((float64(scores[b, c, d]) - maxes[d]) * inv_t)
            red[t] = s
            cuda.syncthreads()
            step = THREADS // 2
            while step > 0:
                if t < step:
                    red[t] += red[t + step]
                cuda.syncthreads()
                step //= 2
            if t == 0:
                sums[d] = red[0]
                out_max[b, d] = maxes[d]
                out_sum[b, d] = red[0]
            cuda.syncthreads()
        # per-thread local top-k over a strided share of the candidates
        top_s = cuda.local.array(MAX_K, float64)
        top_i = cuda.local.array(MAX_K, int64)
        for j in range(k):
            top_s[j] = -math.inf
            top_i[j] = -1
        w = weights[b]
        for c in range(t, n, THREADS):
            insert_dev(top_s, top_i, k, fused_dev(scores[b], c, n_signals, maxes, sums, w, inv_t), c)
        # tree merge of the sorted lists in shared memory
        sh_s = cuda.shared.array((THREADS, MAX_K), float64)
        sh_i = cuda.shared.array((THREADS, MAX_K), int32)
        for j in range(k):
            sh_s[t, j] = top_s[j]
            sh_i[t, j] = top_i[j]
        cuda.syncthreads()
        step = 1
        while step < THREADS:
            if t % (2 * step) == 0:
                a, o = 0, 0
                for j in range(k):  # merge row t and row t + step into the local buffer
                    if better_dev(sh_s[t, a], sh_i[t, a], sh_s[t + step, o], sh_i[t + step, o]):
                        top_s[j] = sh_s[t, a]
                        top_i[j] = sh_i[t, a]
                        a += 1
                    else:
                        top_s[j] = sh_s[t + step, o]
                        top_i[j] = sh_i[t + step, o]
                        o += 1
                for j in range(k):
                    sh_s[t, j] = top_s[j]
                    sh_i[t, j] = top_i[j]
            cuda.syncthreads()
            step *= 2
        if t == 0:
            for j in range(k):
                out_score[b, j] = sh_s[0, j]
                out_idx[b, j] = sh_i[0, j]

    return kernel


_KERNEL = None


def fused_topk_cuda(scores, counts, weights, temperature: float, k: int):
    """The CUDA kernel, one block per question; same signature and results as ``fused_topk_cpu``.

    Takes host (numpy) or device (CuPy) arrays and returns the same kind: device arrays stay on the device.
    """
    global _KERNEL
    if hasattr(scores, "__cuda_array_interface__"):
        import cupy as xp
    else:
        xp = np
    scores = xp.ascontiguousarray(scores, dtype=np.float32)
    counts = xp.ascontiguousarray(counts, dtype=np.int64)
    weights = xp.ascontiguousarray(weights, dtype=np.float32)
    check_inputs(scores, counts, weights, temperature, k, xp)
    if _KERNEL is None:
        _KERNEL = _cuda_kernel()
    out_idx = xp.empty((len(scores), k), np.int64)
    out_score = xp.empty((len(scores), k), np.float64)
    out_max, out_sum = xp.empty((len(scores), scores.shape[2])), xp.empty((len(scores), scores.shape[2]))
    if len(scores):  # numpy arrays are copied to the device and back by Numba; CuPy arrays are used in place
        _KERNEL[len(scores), THREADS](scores, counts, weights, 1.0 / temperature, k, out_idx, out_score, out_max,
                                      out_sum)
    return out_idx, out_score, out_max, out_sum
