"""The fused score + top-K kernel: CUDA (simulator in CI, device in gpu_check.sh) and CPU twin against numpy."""
import numpy as np
import pytest

from assomem_gpu.kernels.fused_topk import MAX_K, fused_topk_cpu, fused_topk_reference
from assomem_gpu.kernels.fused_topk_cuda import fused_topk_cuda

PATHS = {"cpu": fused_topk_cpu, "cuda": fused_topk_cuda}


def random_batch(rng, b, width, s, ties=False):
    scores = rng.normal(size=(b, width, s)).astype(np.float32)
    counts = rng.integers(0, width + 1, size=b)
    if ties:  # exact duplicates of candidate 0 at several positions: ranked by index
        scores[:, 3::4] = scores[:, :1]
    weights = rng.random((b, s)).astype(np.float32)
    return scores, counts, weights / weights.sum(axis=1, keepdims=True)


def assert_same(got, want):
    gi, gs, gm, gz = got
    wi, ws, wm, wz = want
    assert np.array_equal(gi, wi)
    for g, w in ((gs, ws), (gm, wm), (gz, wz)):  # the top scores, each signal's max and its sum of exponentials
        assert np.allclose(np.where(np.isinf(g), 0, g), np.where(np.isinf(w), 0, w), rtol=1e-5, atol=1e-9)
        assert np.array_equal(np.isinf(g), np.isinf(w))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed, b, width, s, k, ties", [
    (0, 5, 40, 4, 10, False),
    (1, 3, 130, 3, 7, True),  # more candidates than threads: strided loads and a full tree merge
    (2, 4, 6, 2, 20, False),  # k larger than the candidate count
    (3, 2, 70, 1, MAX_K, True),
])
def test_matches_numpy_reference(path, seed, b, width, s, k, ties):
    rng = np.random.default_rng(seed)
    scores, counts, weights = random_batch(rng, b, width, s, ties)
    counts[0] = width
    for t in (0.5, 4.0):
        assert_same(PATHS[path](scores, counts, weights, t, k), fused_topk_reference(scores, counts, weights, t, k))


def test_the_cuda_kernel_and_the_cpu_twin_agree_at_a_sharp_temperature():
    """Both compute eq. 4 in float64 (the CUDA kernel's float32 weight times a float64 exponential is float64 on the
    device, and in the simulator too): at T = 0.01, where float32 products would round scores apart and underflow the
    tail, the same ranking and scores within float64 summation order."""
    rng = np.random.default_rng(9)
    scores, counts, weights = random_batch(rng, 4, 90, 3)
    for t in (0.01, 0.05):
        (gi, gs, _, _), (wi, ws, _, _) = fused_topk_cuda(scores, counts, weights, t, 12), \
            fused_topk_cpu(scores, counts, weights, t, 12)
        assert np.array_equal(gi, wi)
        assert np.allclose(gs, ws, rtol=1e-12, atol=0) and np.array_equal(gs > 0, ws > 0)


@pytest.mark.parametrize("path", PATHS)
def test_empty_candidate_sets_and_ties(path):
    scores = np.zeros((2, 5, 2), np.float32)  # all candidates tie
    counts = np.array([0, 5])
    idx, val, maxes, sums = PATHS[path](scores, counts, np.full((2, 2), 0.5, np.float32), 1.0, 3)
    assert idx[0].tolist() == [-1, -1, -1] and np.all(np.isneginf(val[0]))
    assert np.all(np.isneginf(maxes[0])) and sums[0].tolist() == [0.0, 0.0]
    assert idx[1].tolist() == [0, 1, 2] and np.allclose(val[1], 0.2)
    assert maxes[1].tolist() == [0.0, 0.0] and sums[1].tolist() == [5.0, 5.0]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_rejected(path, bad):
    scores = np.zeros((2, 4, 2), np.float32)
    scores[1, 2, 0] = bad
    with pytest.raises(ValueError, match="question 1: non-finite"):
        PATHS[path](scores, np.array([4, 4]), np.full((2, 2), 0.5, np.float32), 1.0, 2)
    scores[1, 2, 0] = 0
    scores[0, 3, 1] = bad  # beyond question 0's count: padding is never read
    PATHS[path](scores, np.array([3, 4]), np.full((2, 2), 0.5, np.float32), 1.0, 2)


def test_bad_shapes_and_k():
    scores = np.zeros((1, 4, 2), np.float32)
    with pytest.raises(ValueError, match="1 <= k"):
        fused_topk_cpu(scores, np.array([4]), np.ones((1, 2), np.float32), 1.0, MAX_K + 1)
    with pytest.raises(ValueError, match="shapes do not fit"):
        fused_topk_cpu(scores, np.array([4]), np.ones((1, 3), np.float32), 1.0, 2)
    with pytest.raises(ValueError, match="temperature"):
        fused_topk_cpu(scores, np.array([4]), np.ones((1, 2), np.float32), 0.0, 2)
