"""The CPU segment kernels equal the numpy expressions they replace."""
import numpy as np
import pytest

from assomem_gpu.kernels import segments
from assomem_gpu.kernels.segments import group_max, segment_max


@pytest.fixture(autouse=True, params=["parallel", "serial"])
def driver(request, monkeypatch):
    """Every test runs each kernel's rows on the thread pool and in the calling thread."""
    monkeypatch.setattr(segments, "PARALLEL_ROWS", 1 if request.param == "parallel" else 10**9)


@pytest.mark.parametrize("seed", range(4))
def test_segment_max_is_reduceat_of_the_gathered_columns(seed):
    rng = np.random.default_rng(seed)
    b, n = rng.integers(1, 40), rng.integers(1, 300)
    values = rng.normal(size=(b, n)).astype(np.float32)
    values[rng.random(values.shape) < 0.01] = np.nan  # propagates, as numpy's maximum does
    columns = rng.permutation(n)[: rng.integers(1, n + 1)]
    starts = np.unique(np.concatenate([[0], rng.integers(0, len(columns), 5)]))
    want = np.maximum.reduceat(values[:, columns], starts, axis=1)
    assert np.array_equal(segment_max(values, columns, starts), want, equal_nan=True)
    assert segment_max(values, columns, starts[:0]).shape == (b, 0)


@pytest.mark.parametrize("seed", range(4))
def test_group_max_is_the_scatter_maximum_of_the_rows_groups(seed):
    rng = np.random.default_rng(seed)
    b, n, n_groups = rng.integers(1, 40), 500, rng.integers(1, 60)
    groups = rng.integers(0, n_groups, n)
    rows = np.stack([rng.choice(n, 80, replace=False) for _ in range(b)])
    rows[rng.random(rows.shape) < 0.2] = -1  # padding
    rows[0] = -1  # a row without entries: -inf everywhere, its minimum inf
    values = rng.normal(size=rows.shape).astype(np.float32)
    values[rng.random(values.shape) < 0.01] = np.nan  # propagates, as numpy's maximum and min do
    seen = rows >= 0
    want = np.full((b, n_groups), -np.inf)
    key = np.arange(b)[:, None] * n_groups + groups[np.maximum(rows, 0)]
    with np.errstate(invalid="ignore"):
        np.maximum.at(want.reshape(-1), key[seen], values[seen].astype(np.float64))
    best, floor = group_max(values, rows, groups, n_groups)
    assert best.dtype == np.float64 and np.array_equal(best, want, equal_nan=True)
    assert np.array_equal(floor, np.where(seen, values, np.inf).min(axis=1), equal_nan=True)


@pytest.mark.parametrize("seed", range(4))
def test_row_matches_equal_the_device_form(seed):
    """The Numba scan and the gather-and-search the device runs find the same matches, in the same order."""
    import dataclasses

    from assomem_gpu.backend import get_backend

    rng = np.random.default_rng(seed)
    n_rows, n_terms, b = 50, 30, int(rng.integers(1, 8))
    counts = rng.integers(0, 6, n_rows)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = np.concatenate([np.sort(rng.choice(n_terms, c, replace=False)) for c in counts]).astype(np.int64)
    keys = np.unique(rng.integers(0, b * n_terms, int(rng.integers(0, 40)))).astype(np.int64)
    at = rng.integers(0, n_rows, (b, int(rng.integers(1, 20))))
    cpu = get_backend("cpu")
    got = cpu.row_matches(at, indptr, indices, keys, n_terms)
    want = dataclasses.replace(cpu, name="cuda-like").row_matches(at, indptr, indices, keys, n_terms)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    flat, nz, pos = got
    assert np.array_equal(keys[pos], flat // at.shape[1] * n_terms + indices[nz])  # each a real match
    assert len(flat) == sum(int(np.isin(q * n_terms + indices[indptr[r]:indptr[r + 1]], keys).sum())
                            for q in range(b) for r in at[q])  # and every one


def test_edge_shapes():
    """No question, no candidate, no key, no term: empty matches."""
    from assomem_gpu.backend import get_backend

    cpu = get_backend("cpu")
    indptr, indices = np.array([0, 2, 3]), np.array([0, 4, 1])
    for at, keys, n_terms in ((np.zeros((0, 3), np.int64), np.array([1]), 5), (np.zeros((2, 0), np.int64),
                              np.array([1]), 5), (np.array([[0, 1]]), np.zeros(0, np.int64), 5),
                              (np.array([[0, 1]]), np.zeros(0, np.int64), 0)):
        assert all(len(x) == 0 for x in cpu.row_matches(at, indptr, indices, keys, n_terms))
