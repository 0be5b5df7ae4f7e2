"""pytest-benchmark suites for the kernels: ``python -m pytest benchmarks/test_kernel_speed.py --benchmark-json
benchmarks/results/kernels_cpu.json``. Compares, in one run, the Numba twin with plain numpy (fused top-K), and on a
2,500-session-sized graph the CPU backend's PPR (Numba, cache-sized column blocks) with the library path (scipy SpMM
per iteration, batched) and with one question at a time; at that size too, BM25's best texts from the postings
(``kernels/bm25_top.py``) with scipy's product and a sort of each row, and the batch-stable cosines with every row
(``pair_cosines.all_cosines``) with BLAS's product, and the cosines of the probed inverted lists' members
(``ivf.probed_cosines``) at 10,000 sessions."""
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
    m.indptr, m.indices = m.indptr.astype(np.int64), m.indices.astype(np.int64)  # as MemoryGraph.transition has them
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


@pytest.fixture(scope="module")
def bm25():
    """A 2,500-session synthetic memory's BM25 index and its questions' texts."""
    from assomem_gpu.bench import synthetic_memory
    from assomem_gpu.signals.lexical import BM25Index

    ds = synthetic_memory(2500, 300).dataset
    return BM25Index(ds.bank.utt_texts), [q.text for q in ds.questions]


def scipy_top(index, post: sp.csc_matrix, queries: list[str], n: int) -> list[np.ndarray]:
    """The library path to each query's ``n`` best texts: the queries' term matrix times the weights of their terms'
    postings (``post``, the counts by term: scipy), then a sort of each row's nonzero scores."""
    keys, times = index.query_terms(queries)
    q, term = divmod(keys, len(index.vocab))
    used, col = np.unique(term, return_inverse=True)
    sub = post[:, used]
    w = index.weights_of(sub.data.astype(np.float64), index.array("df")[np.repeat(used, np.diff(sub.indptr))],
                         index.array("lengths")[sub.indices])
    by_term = sp.csr_matrix((w, sub.indices, sub.indptr), shape=(len(used), sub.shape[0]))
    s = (sp.csr_matrix((times, (q, col)), shape=(len(queries), len(used))) @ by_term).tocsr()
    s.sort_indices()  # ties to the lower text under a stable sort
    scores = s.data.astype(np.float32)  # ranked as the kernel ranks them
    return [s.indices[s.indptr[r]:s.indptr[r + 1]][np.argsort(-scores[s.indptr[r]:s.indptr[r + 1]], kind="stable")[:n]]
            for r in range(len(queries))]


@pytest.mark.parametrize("questions", [1, 256])
@pytest.mark.benchmark(group="bm25-top")
def test_bm25_top_kernel(benchmark, bm25, questions):
    index, texts = bm25
    queries = [texts[i % len(texts)] for i in range(questions)]
    index.top(queries, 10)  # compile and make the postings outside the timing
    benchmark(index.top, queries, 10)


@pytest.mark.parametrize("questions", [1, 256])
@pytest.mark.benchmark(group="bm25-top")
def test_bm25_top_scipy(benchmark, bm25, questions):
    index, texts = bm25
    queries, post = [texts[i % len(texts)] for i in range(questions)], index.counts.tocsc()
    for got, want in zip(index.top(queries, 10), scipy_top(index, post, queries, 10)):  # the same texts
        assert got[: len(want)].tolist() == want.tolist() and (got[len(want):] == -1).all()
    benchmark(scipy_top, index, post, queries, 10)


@pytest.fixture(scope="module")
def rows():
    """25,032 unit rows of 384 dimensions (a 2,500-session memory's utterances) and 256 questions."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(25_032, 384)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True), rng.normal(size=(256, 384)).astype(np.float32)


@pytest.mark.parametrize("questions", [1, 16, 256])
@pytest.mark.benchmark(group="cosines-every-row")
def test_all_cosines_kernel(benchmark, rows, questions):
    from assomem_gpu.kernels.pair_cosines import all_cosines

    x, q = rows
    all_cosines(x, q[:questions])  # compile outside the timing
    benchmark(all_cosines, x, q[:questions])


@pytest.mark.parametrize("questions", [1, 16, 256])
@pytest.mark.benchmark(group="cosines-every-row")
def test_all_cosines_blas(benchmark, rows, questions):
    """BLAS's product: faster, but a question's bits move with its batch (``Backend.cosines``)."""
    x, q = rows
    benchmark(lambda: q[:questions] @ x.T)


@pytest.fixture(scope="module")
def probed():
    """A 10,000-session memory's 100,000 unit rows in inverted lists of ~256, and 256 questions' 32 nearest lists
    (past ``exact_limit`` a question's relevance is its probed lists' members: ``ivf.probed_cosines``)."""
    from assomem_gpu import ivf

    rng = np.random.default_rng(3)
    x = rng.normal(size=(100_000, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    book = ivf.train(x, 256)
    q = rng.normal(size=(256, 384)).astype(np.float32)
    return x, q, ivf.probes(book, q, 32), *ivf.members(ivf.probes(book, x, 1), book.n_lists)


@pytest.mark.parametrize("questions", [1, 16, 256])
@pytest.mark.benchmark(group="cosines-probed-lists")
def test_probed_cosines_kernel(benchmark, probed, questions):
    from assomem_gpu import ivf
    from assomem_gpu.backend import get_backend

    x, q, lists, order, bounds = probed
    args = x, q[:questions], lists[:questions], order, bounds, get_backend("cpu")
    ivf.probed_cosines(*args)  # compile outside the timing
    benchmark(ivf.probed_cosines, *args)
