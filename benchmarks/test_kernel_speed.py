"""pytest-benchmark suites for the kernels: ``python -m pytest benchmarks/test_kernel_speed.py --benchmark-json
benchmarks/results/kernels_cpu.json``. Compares, in one run, the Numba twin with plain numpy (fused top-K), and on a
2,500-session-sized graph the CPU backend's PPR (Numba, cache-sized column blocks) with the library path (scipy SpMM
per iteration, batched) and with one question at a time."""
import numpy as np
import pytest
import scipy.sparse as sp

from assomem_gpu.kernels.fused_topk import fused_topk_cpu, fused_topk_reference
from assomem_gpu.kernels.ppr_cpu import personalized_pagerank_cpu
from assomem_gpu.signals.importance import personalized_pagerank

B, C, S, K = 256, 1000, 4, 50


@pytest.fixture(scope="module")
def signals():
    rng = np.random.default_rng(0)
    w = rng.random((B, S)).astype(np.float32)
    return rng.normal(size=(B, C, S)).astype(np.float32), np.full(B, C), w / w.sum(axis=1, keepdims=True)


@pytest.mark.benchmark(group="fused-topk")
def test_fused_topk_numba_cpu(benchmark, signals):
    fused_topk_cpu(*signals, 4.0, K)  # compile outside the timing
    benchmark(fused_topk_cpu, *signals, 4.0, K)


@pytest.mark.benchmark(group="fused-topk")
def test_fused_topk_numpy_reference(benchmark, signals):
    benchmark(fused_topk_reference, *signals, 4.0, K)


@pytest.fixture(scope="module")
def graph():
    n = 27_000  # ~2,500 sessions of ~10 utterances, plus clue nodes
    a = sp.random(n, n, density=12 / n, random_state=0, dtype=np.float32)
    a = (a + a.T + sp.eye(n, dtype=np.float32)).tocsr()
    m = (a @ sp.diags(1 / np.asarray(a.sum(axis=0)).ravel())).tocsr().astype(np.float32)
    m.indptr, m.indices = m.indptr.astype(np.int64), m.indices.astype(np.int64)  # as MemoryGraph.transition() has them
    t = np.random.default_rng(1).random((n, 64)).astype(np.float32)
    return m, t / t.sum(axis=0)


@pytest.mark.benchmark(group="ppr-64-questions")
def test_ppr_cpu_twin(benchmark, graph):
    personalized_pagerank_cpu(graph[0], graph[1], 0.5, 1e-6, 100)  # compile outside the timing
    benchmark(personalized_pagerank_cpu, graph[0], graph[1], 0.5, 1e-6, 100)


@pytest.mark.benchmark(group="ppr-64-questions")
def test_ppr_batched(benchmark, graph):
    benchmark(personalized_pagerank, graph[0], graph[1], 0.5, 1e-6, 100)


@pytest.mark.benchmark(group="ppr-64-questions")
def test_ppr_one_at_a_time(benchmark, graph):
    m, t = graph
    benchmark(lambda: [personalized_pagerank(m, t[:, [j]], 0.5, 1e-6, 100) for j in range(t.shape[1])])
