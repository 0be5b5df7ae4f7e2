import numpy as np
import pytest

from assomem_gpu.backend import cuda_unavailable_reason, get_backend


def test_auto_falls_back_to_cpu_and_says_why():
    reason = cuda_unavailable_reason()
    backend = get_backend("auto")
    if reason is None:  # a real GPU machine
        assert backend.name == "cuda"
    else:
        assert backend.name == "cpu" and backend.xp is np and isinstance(reason, str) and reason
        with pytest.raises(RuntimeError, match="CUDA backend unavailable"):
            get_backend("cuda")


def test_cpu_backend_parts():
    b = get_backend("cpu")
    idx, *_ = b.fused_topk(np.array([[[1.0], [3.0], [2.0]]], np.float32), np.array([3]), np.ones((1, 1), np.float32), 1.0,
                           2)
    assert idx.tolist() == [[1, 2]] and b.to_host(b.asarray([1, 2])).tolist() == [1, 2]
    with pytest.raises(ValueError, match="device must be"):
        get_backend("tpu")


def test_cugraph_ppr_option_says_why_when_missing_and_rejects_unknown_names():
    from assomem_gpu.signals.importance_graph import cugraph_available

    reason = cugraph_available()
    if reason is None:  # nx-cugraph installed
        assert get_backend("cpu", ppr="cugraph").ppr.__name__ == "personalized_pagerank_graph"
    else:
        with pytest.raises(RuntimeError, match="nx-cugraph"):
            get_backend("cpu", ppr="cugraph")
    with pytest.raises(ValueError, match="ppr must be"):
        get_backend("cpu", ppr="sparse")


def test_graph_api_ppr_ranks_like_the_batched_one():
    """The cuGraph option's code, run on networkx's own backend, gives the batched PPR's scores and rankings."""
    import dataclasses
    import functools

    import scipy.sparse as sp

    from assomem_gpu.assomem import AssoMem
    from assomem_gpu.config import AssoMemConfig
    from assomem_gpu.bench import synthetic_memory
    from assomem_gpu.fusion import fixed_weights
    from assomem_gpu.signals.importance import personalized_pagerank
    from assomem_gpu.signals.importance_graph import personalized_pagerank_graph

    rng = np.random.default_rng(2)
    a = sp.random(40, 40, density=0.15, random_state=2, dtype=np.float32)
    a = (a + a.T + sp.eye(40, dtype=np.float32)).tocsr()
    m = (a @ sp.diags(1 / np.asarray(a.sum(axis=0)).ravel())).tocsr().astype(np.float32)
    t = rng.random((40, 3)).astype(np.float32)
    t /= t.sum(axis=0)
    graph_api, _ = personalized_pagerank_graph(m, t, 0.5, 1e-7, 200, backend="networkx")
    assert np.allclose(graph_api, personalized_pagerank(m, t, 0.5, 1e-7, 200)[0], atol=1e-6)

    data = synthetic_memory(30, 12, dim=32)
    config = AssoMemConfig(clue_mode="centroid", ppr_hops=0)  # the graph API runs PageRank to convergence only
    fusion = fixed_weights(config.signals)
    batched = AssoMem(config, fusion, device=get_backend("cpu"))
    nx_backend = dataclasses.replace(get_backend("cpu"), ppr_steps=False,
                                     ppr=functools.partial(personalized_pagerank_graph, backend="networkx"))
    with pytest.raises(ValueError, match="ppr_hops"):
        AssoMem(AssoMemConfig(clue_mode="centroid"), fusion, device=nx_backend).index(data, 0)
    one_by_one = AssoMem(config, fusion, device=nx_backend)
    questions = list(range(len(data.dataset.questions)))
    for x, y in zip(batched.rank(data, questions, 10), one_by_one.rank(data, questions, 10)):
        assert x.tolist() == y.tolist()


def test_every_component_says_what_runs_it_and_why():
    described = get_backend("auto").describe()
    assert set(described["components"]) == {"arrays", "ppr_step", "local_importance", "fused_topk",
                                             "similarity_search"}
    for choice in described["components"].values():
        assert choice["impl"].split(":")[0] in ("cpu", "cuda") and choice["reason"]
    if cuda_unavailable_reason() is not None:  # auto on a machine without CUDA: the reason is CuPy's
        assert cuda_unavailable_reason() in described["components"]["arrays"]["reason"]
    cpu = get_backend("cpu").describe()["components"]
    assert cpu["fused_topk"] == {"impl": "cpu: Numba parallel twin", "reason": "device='cpu'"}


@pytest.mark.skipif(__import__("shutil").which("gcc") is None, reason="gcc not installed")
def test_a_library_missing_a_symbol_is_refused_with_its_path(tmp_path, monkeypatch):
    """A CUDA C++ library of the right ABI that lacks a symbol is not used: the reason names the path and symbol."""
    import subprocess

    from assomem_gpu.kernels import cuda_lib

    src = tmp_path / "lib.c"
    src.write_text(f"int assomem_kernels_abi_version(void) {{ return {cuda_lib.ABI_VERSION}; }}\n")
    lib = tmp_path / "libassomem_kernels.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    monkeypatch.setattr(cuda_lib, "LIBRARY", lib)
    cuda_lib._load.cache_clear()
    try:
        assert cuda_lib.load() is None
        reason = cuda_lib.unavailable_reason()
        assert str(lib) in reason and "assomem_kernels_cuda_runtime_version" in reason
    finally:
        cuda_lib._load.cache_clear()


@pytest.mark.parametrize("pool", [True, False])
def test_pair_and_all_cosines_equal_the_products_on_the_cpu_and_pairs_in_the_device_form(pool, monkeypatch):
    """The CPU kernels (rows on the thread pool and in this thread) and the device forms (run here on numpy arrays)
    give each pair's dot product, in any order of pairs, and some questions' products with every row."""
    import dataclasses

    from assomem_gpu.backend import get_backend
    from assomem_gpu.kernels import pair_cosines

    monkeypatch.setattr(pair_cosines, "PARALLEL_PAIRS", 1 if pool else 10**9)
    cpu = get_backend("cpu")
    device_like = dataclasses.replace(cpu, name="cuda-like")
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(500, 384)).astype(np.float32)
    q = rng.normal(size=(7, 384)).astype(np.float32)
    questions, rows = rng.integers(0, 7, size=3000), rng.integers(0, 500, size=3000)
    want = np.einsum("ij,ij->i", vectors[rows].astype(np.float64), q[questions].astype(np.float64))
    for backend in (cpu, device_like):
        got = backend.pair_cosines(vectors, q, questions, rows)
        assert got.dtype == np.float32 and got.shape == (3000,)
        assert np.allclose(got, want, rtol=0, atol=2e-4)
        assert len(backend.pair_cosines(vectors, q, questions[:0], rows[:0])) == 0
    part = np.array([3, 0, 6])
    every = pair_cosines.all_cosines(vectors, q[part])
    assert every.shape == (3, 500) and np.allclose(every, q[part].astype(np.float64) @ vectors.T, atol=2e-4)
    assert pair_cosines.all_cosines(vectors, q[:0]).shape == (0, 500)


def test_a_cosine_is_the_same_bits_from_every_cpu_kernel_in_any_batch():
    """The pair, every-row and probed-list kernels give a question's cosine to a row to the bit, alone or in a batch
    of any size (so a question's hits do not depend on its batch, and a probed cosine read equals one computed)."""
    from assomem_gpu import ivf
    from assomem_gpu.backend import get_backend
    from assomem_gpu.kernels.pair_cosines import all_cosines

    cpu = get_backend("cpu")
    rng = np.random.default_rng(1)
    for dim in (383, 384):  # a width that leaves a remainder past the vector lanes, and the encoder's
        x = rng.normal(size=(400, dim)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        q = rng.normal(size=(9, dim)).astype(np.float32)
        for size in range(1, 10):
            part = rng.permutation(9)[:size]
            every = all_cosines(x, q[part])
            for i, b in enumerate(part):
                assert np.array_equal(every[i], cpu.pair_cosines(x, q, np.full(len(x), b), np.arange(len(x))))
                assert np.array_equal(every[i], all_cosines(x, q[b : b + 1])[0])
    with pytest.raises(ValueError, match="wide"):
        all_cosines(x, q[:, :100])
    with pytest.raises(ValueError, match="wide"):  # the kernels would read past a narrower question's row
        cpu.pair_cosines(x, q[:, :100], np.zeros(3, np.int64), np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="questions: one per row"):
        cpu.pair_cosines(x, q, np.zeros(2, np.int64), np.zeros(5, np.int64))
    book = ivf.train(x, 20)
    order, bounds = ivf.members(ivf.probes(book, x, 2), book.n_lists)
    q = rng.normal(size=(40, dim)).astype(np.float32)  # ~12 questions a list: the kernel's tiles of 4 and the rest
    lists = ivf.probes(book, q, 6)
    found, cos = ivf.probed_cosines(x, q, lists, order, bounds, cpu)
    for b in range(40):
        held = found[b] >= 0
        assert np.array_equal(cos[b][held], cpu.pair_cosines(x, q, np.full(int(held.sum()), b), found[b][held]))
        members = np.concatenate([order[bounds[g]:bounds[g + 1]] for g in lists[b]])
        assert found[b][held].tolist() == sorted(members.tolist())  # its lists' runs merged, ascending


def test_every_cosine_and_fusion_weight_of_a_question_is_the_same_bits_in_any_batch():
    """BLAS picks its kernels by the shape, so a product's row moved in its last bits with the batch it came in, and
    near ties with it (a served question's hits changed with the questions batched beside it): the memory-wide
    relevance, the clue scores and the fusion weights now give each question the same bits alone or in a batch."""
    from assomem_gpu.backend import get_backend
    from assomem_gpu.fusion import FusionModel
    from assomem_gpu.kernels.pair_cosines import all_cosines

    cpu = get_backend("cpu")
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 384)).astype(np.float32)
    q = rng.normal(size=(37, 384)).astype(np.float32)
    batch = cpu.cosines(x, q)
    assert batch.shape == (37, 300) and np.allclose(batch, q @ x.T, atol=1e-4)
    for b in range(37):
        assert np.array_equal(batch[b], cpu.cosines(x, q[b : b + 1])[0])
        assert np.array_equal(batch[b], all_cosines(x, q[b : b + 1])[0])
    model = FusionModel(list("abcdefgh"), [f"t{t}" for t in range(9)], rng.random((9, 8)), 0.05,
                        rng.normal(size=(9, 384)).astype(np.float32), rng.normal(size=9).astype(np.float32))
    active = rng.random((37, 8)) < 0.8  # eight signals and nine types: as many as the default, and more
    weights = model.weights(q, active)
    assert np.allclose(weights.sum(axis=1)[active.any(axis=1)], 1.0)
    for b in range(37):
        assert np.array_equal(weights[b], model.weights(q[b : b + 1], active[b : b + 1])[0])


def test_the_device_forms_of_segment_max_repeat_and_spans_equal_numpy():
    """CuPy's reduceat takes only ``add`` and its repeat no array of counts: the device forms (run here on numpy
    arrays) equal numpy's (and the host's ``rows.spans``)."""
    import dataclasses

    from assomem_gpu.backend import get_backend

    cpu = get_backend("cpu")
    device_like = dataclasses.replace(cpu, name="cuda-like")
    rng = np.random.default_rng(0)
    values = rng.normal(size=(3, 10)).astype(np.float32)
    columns, starts = rng.permutation(10)[:8], np.array([0, 2, 3, 7])
    want = np.maximum.reduceat(values[:, columns], starts, axis=1)
    assert np.array_equal(device_like.segment_max(values, columns, starts), want)
    assert np.array_equal(cpu.segment_max(values, columns, starts), want)
    counts = np.array([2, 0, 3, 1])
    assert np.array_equal(device_like.repeat(np.arange(4), counts), np.repeat(np.arange(4), counts))
    assert len(device_like.repeat(np.arange(0), np.zeros(0, np.int64))) == 0
    starts = np.array([5, 0, 9, 2])  # spans: the host helper (the CPU's) and the device form
    want = [5, 6, 9, 10, 11, 2]  # 2 from 5, none from 0, 3 from 9, 1 from 2
    for backend in (cpu, device_like):
        assert backend.spans(starts, counts).tolist() == want
        assert backend.spans(starts[:0], counts[:0]).tolist() == []


@pytest.mark.parametrize("pool", [False, True])
def test_zscore_kernel_is_the_array_expressions_bits(pool, monkeypatch):
    """The CPU's z-scores (``Backend.zscore``: a Numba kernel, the expression itself for one signal) are the device's
    array expression's on numpy to the bit: ties, signed zeros, constant and non-finite signals, questions without
    candidates, none at all."""
    from assomem_gpu.kernels import zscore

    monkeypatch.setattr(zscore, "PARALLEL_ENTRIES", 1 if pool else 1 << 62)
    rng = np.random.default_rng(3)
    cpu = get_backend("cpu")
    for trial in range(60):
        b, c, s = int(rng.integers(1, 20)), int(rng.integers(0, 200)), int(rng.integers(1, 8))
        x = rng.normal(size=(b, c, s)) * rng.choice([1e-14, 1.0, 1e6], size=s)
        x[:, :, 0] = np.round(x[:, :, 0])  # ties; signed zeros; a signal constant over the candidates
        x[:, : c // 2, s - 1] = -0.0
        x[:, :, s // 2] = 7.0 if trial % 3 == 0 else x[:, :, s // 2]
        if trial % 4 == 1 and c:
            x[-1, rng.integers(c), rng.integers(s)] = rng.choice([np.nan, np.inf, -np.inf])
        valid = rng.random((b, c)) < rng.uniform(0, 1)
        valid[0] = False
        with np.errstate(invalid="ignore"):  # (inf - inf in the expression)
            got, want = cpu.zscore(x, valid), zscore.zscore_array(x, valid, np)
        assert got.shape == want.shape and got.dtype == np.float64
        assert np.array_equal(got.view(np.int64), want.view(np.int64)), trial
        assert not got[0].any() and not got[~valid].any()


@pytest.mark.parametrize("module", ["ppr_cpu", "fused_topk", "csr_splice", "pair_select", "segments",
                                    "pair_cosines", "row_lists", "local_ppr", "zscore", "neighbours", "bm25_top"])
def test_cpu_kernels_release_the_interpreter_lock(module):
    """A search's kernels run in a worker thread of the service: holding the GIL, they would stall its event loop
    (and every other search) for as long as they run."""
    from importlib import import_module

    from numba.core.registry import CPUDispatcher

    kernels = [k for k in vars(import_module(f"assomem_gpu.kernels.{module}")).values()
               if isinstance(k, CPUDispatcher)]
    assert kernels and all(k.targetoptions.get("nogil") for k in kernels), \
        [k.__name__ for k in kernels if not k.targetoptions.get("nogil")]
