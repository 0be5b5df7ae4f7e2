import numpy as np
import pytest
from numba import njit

from assomem_gpu.kernels.lanes import LANES, dots, paired_dots
from assomem_gpu.kernels.pair_cosines import pair_cosines


@njit(cache=False)
def _tile(x, q, r, j):
    return dots(x, q, (r, r + 1, r + 2), (j, j + 1, j + 2, j + 3))


@njit(cache=False)
def _one(x, q, r, j):
    return dots(x, q, (r,), (j,))[0]


@njit(cache=False)
def _scattered(x, q, r, js):
    return dots(x, q, (r,), (js[0], js[1], js[2], js[3]))


@njit(cache=False)
def _paired(x, q, rs, js):
    return paired_dots(x, q, (rs[0], rs[1], rs[2]), (js[0], js[1], js[2]))


@njit(cache=False)
def _unpaired(x, q):
    return paired_dots(x, q, (0, 1), (0,))


def _documented(a: np.ndarray, b: np.ndarray) -> np.float32:
    """The module's order, each fused multiply-add in float64 (a float32 product is exact there) rounded to float32:
    a sum that lands on a float32 halfway point would round twice (about one in 2^29; the seeds are fixed)."""
    def fma(x, y, z):
        return np.float32(np.float64(x) * np.float64(y) + np.float64(z))

    full = len(a) - len(a) % LANES
    lanes = np.zeros(LANES, np.float32)
    for d in range(full):
        lanes[d % LANES] = fma(a[d], b[d], lanes[d % LANES])
    while len(lanes) > 1:
        lanes = lanes[: len(lanes) // 2] + lanes[len(lanes) // 2 :]
    rest = np.float32(0.0)
    for d in range(full, len(a)):
        rest = fma(a[d], b[d], rest)
    return lanes[0] + rest


@pytest.mark.parametrize("dim", [1, LANES - 1, LANES, 2 * LANES + 3, 384])
def test_a_pair_is_summed_in_the_documented_order_alone_and_in_any_tile(dim):
    rng = np.random.default_rng(dim)
    x = rng.normal(size=(5, dim)).astype(np.float32)
    q = rng.normal(size=(6, dim)).astype(np.float32)
    tile = _tile(x, q, 1, 2)
    scattered = _scattered(x, q, 4, np.array([5, 0, 5, 3]))
    for a in range(3):
        for b in range(4):
            alone = _one(x, q, 1 + a, 2 + b)
            assert tile[4 * a + b] == alone == _documented(x[1 + a], q[2 + b])  # to the bit
    assert [scattered[t] for t in range(4)] == [_one(x, q, 4, j) for j in (5, 0, 5, 3)]
    paired = _paired(x, q, np.array([0, 4, 4]), np.array([5, 1, 5]))
    assert list(paired) == [_one(x, q, 0, 5), _one(x, q, 4, 1), _one(x, q, 4, 5)]
    assert np.isclose(_one(x, q, 0, 0), x[0].astype(np.float64) @ q[0], rtol=1e-5, atol=1e-5)
    # the kernels Numba caches on disk (keyed on their own file, not on this module's) sum as a fresh compile does
    questions, rows = np.repeat(np.arange(6), 5), np.tile(np.arange(5), 6)
    assert pair_cosines(x, q, questions, rows).tolist() == [_one(x, q, r, j) for j, r in zip(questions, rows)]


def test_dots_refuses_what_it_cannot_read():
    from numba.core.errors import TypingError

    x = np.ones((2, 8), np.float32)
    with pytest.raises(TypingError):
        _one(x.astype(np.float64), x, 0, 0)  # float64 rows
    with pytest.raises(TypingError):
        _one(x, np.asfortranarray(np.ones((2, 8), np.float32)), 0, 0)  # not C-ordered
    with pytest.raises(TypingError):
        _unpaired(x, x)  # two rows, one question: not pairs
