"""GPU paths against their CPU twins. Skipped where no CUDA device is usable (CI); run by benchmarks/gpu_check.sh."""
import numpy as np
import pytest
import scipy.sparse as sp

from assomem_gpu.backend import cuda_unavailable_reason, get_backend
from assomem_gpu.signals.importance import personalized_pagerank

pytestmark = pytest.mark.skipif(cuda_unavailable_reason() is not None,
                                reason=f"no usable CUDA backend: {cuda_unavailable_reason()}")


def graph(n, seed):
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.01, random_state=seed, dtype=np.float32)
    a = (a + a.T + sp.eye(n, dtype=np.float32)).tocsr()
    deg = np.asarray(a.sum(axis=0)).ravel()
    t = rng.random((n, 8)).astype(np.float32)
    return (a @ sp.diags(1 / deg)).tocsr().astype(np.float32), t / t.sum(axis=0)


@pytest.mark.parametrize("step", ["cpp", "cusparse", "library"])
def test_ppr_on_cuda_matches_cpu(step):
    """Every PPR step the dispatcher may choose, checked every 4 iterations as the CUDA backend does."""
    import functools

    from assomem_gpu import backend
    from assomem_gpu.kernels import cuda_lib
    from assomem_gpu.signals.importance import library_step

    if step == "cpp" and cuda_lib.load() is None:
        pytest.skip(f"CUDA C++ library unavailable: {cuda_lib.unavailable_reason()}")
    fn = {"cpp": lambda: functools.partial(cuda_lib.ppr_step, cuda_lib.load()), "cusparse": lambda: backend._cusparse_step,
          "library": lambda: library_step}[step]()
    m, t = graph(3000, 0)
    cpu, it_cpu = personalized_pagerank(m, t, 0.5, 1e-6, 100)
    gpu = get_backend("cuda")
    r, it_gpu = personalized_pagerank(gpu.csr(m), gpu.asarray(t), 0.5, 1e-6, 100, gpu.xp, step=fn, check_every=4)
    assert np.allclose(gpu.to_host(r), cpu, atol=1e-6) and it_cpu <= it_gpu < it_cpu + 4


def test_the_graph_is_uploaded_once_per_version():
    m, _ = graph(500, 1)
    gpu = get_backend("cuda")
    first = gpu.csr(m)
    assert gpu.csr(m) is first and gpu.csr(m.copy()) is not first


@pytest.mark.parametrize("probed", [False, True])
def test_assomem_ranks_the_same_on_cuda_and_cpu(probed):
    """With probed relevance too: the device forms of the list, block and pair cosines against the CPU kernels."""
    from assomem_gpu.assomem import AssoMem
    from assomem_gpu.config import AssoMemConfig
    from assomem_gpu.bench import synthetic_memory
    from assomem_gpu.fusion import fixed_weights
    from assomem_gpu.graph import GraphConfig

    data = synthetic_memory(300, 300)
    config = AssoMemConfig(clue_mode="centroid")
    if probed:  # ~3,000 utterances in 62 lists, 4 probed a question
        config = AssoMemConfig(clue_mode="centroid", query_probe=4,
                               graph=GraphConfig(exact_limit=1000, list_size=32))
    fusion = fixed_weights(config.signals)
    questions = list(range(300))
    cpu = AssoMem(config, fusion, device=get_backend("cpu")).rank(data, questions, 10)
    cuda = AssoMem(config, fusion, device=get_backend("cuda")).rank(data, questions, 10)
    same = sum(a.tolist() == b.tolist() for a, b in zip(cpu, cuda))
    assert same >= 0.99 * len(questions)  # float32 sums in another order may swap a near-tie


def test_the_cpu_twin_of_the_fused_top_k_takes_device_arrays(monkeypatch):
    """Where Numba CUDA cannot run, the CUDA backend ranks with the CPU twin on its CuPy arrays (copied to the host
    and back): the same result as the kernel."""
    import cupy

    from assomem_gpu import backend

    rng = np.random.default_rng(3)
    scores = rng.normal(size=(3, 50, 4)).astype(np.float32)
    counts, weights = np.array([50, 7, 0]), np.full((3, 4), 0.25, np.float32)
    monkeypatch.setattr(backend, "numba_cuda_reason", lambda: "Numba CUDA refused (test)")
    twin = backend.cuda_backend()
    assert twin.components["fused_topk"].impl.startswith("cpu:")
    got = twin.fused_topk(*(cupy.asarray(x) for x in (scores, counts, weights)), 0.5, 10)
    want = get_backend("cpu").fused_topk(scores, counts, weights, 0.5, 10)
    assert all(isinstance(g, cupy.ndarray) for g in got)
    assert np.array_equal(cupy.asnumpy(got[0]), want[0]) and np.allclose(cupy.asnumpy(got[1]), want[1])
