"""Inverted-file (IVF) search of similarity pairs: how a large memory finds its utterance–utterance edges without
comparing all pairs.

A codebook of spherical k-means centroids cuts the utterances into lists; an utterance lives in the list of its
nearest centroid and looks for neighbours in the lists of its ``n_probe`` nearest centroids (its probes). Its
candidates are the members of those lists, so a memory of n utterances costs about n · n_probe · list size products
instead of n²/2.

Everything is a function of the vectors and the codebook, never of the order in which rows arrived: a row's probes
are settled by exactly recomputed products where float32 leaves them in doubt (ties to the lower centroid), and the
codebook is trained on the memory's first ``codebook_rows(n)`` rows, a power-of-two multiple of ``exact_limit``. An
index grown row by row therefore trains the same codebook, at the add that crosses each doubling, as a build of the
same rows does; a removal keeps the codebook it has (see ``graph.shrink_graph``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import sets

TRAIN_PER_LIST = 64  # k-means training rows per centroid (a seeded sample of the codebook's rows)
ITERATIONS = 10  # k-means iterations
DOUBT = 1e-4  # a float32 gap between centroid products below this is settled in float64
TWO_LEVEL_LISTS = 1024  # lists from which a codebook is trained in two levels (a 100,000-session memory's 2,500)
TWO_LEVEL_ROUNDS = 2  # rounds over every centroid after the groups' own (on 100,000 real turns, lists of 64: the
# edge recall 97.15% with one level, 96.24% in two levels, 96.87% with two such rounds; benchmarks/scale_agreement.py)
LIST_KERNEL_PRODUCTS = 1 << 21  # products up to which candidate_pairs computes them in one kernel call
# (``kernels.pair_select.list_pairs``); above, a BLAS product per list (a build's millions of rows)


class Probers:
    """For each list, the rows that probe it (by any of their probes), ascending: an inverted file of the probes,
    appendable in amortised O(rows) (``kernels/row_lists.py``), so an add finds the old rows that probe its new
    rows' lists without a pass over every row's probes (~1.5 ms an add at 25,000 sessions).

    An add appends in place, and the searches before and after it share the lists (only writes read them, one at a
    time); ``rows`` says how many rows they hold, so a search that is not the newest (a write that failed after the
    append, a branch from an older search) makes its own instead."""

    def __init__(self, probe: np.ndarray, n_lists: int):
        from .kernels.row_lists import RowLists

        self._lists = RowLists(n_lists)
        self.rows = 0
        self.append(probe)

    def append(self, probe: np.ndarray) -> None:
        """The next rows' probes (n, n_probe): rows ``rows``, ``rows + 1``, ..."""
        self._lists.append(probe, self.rows)
        self.rows += len(probe)

    def of(self, lists: np.ndarray, below: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows below ``below`` that probe each of ``lists`` (int64, distinct): (row, list) pairs (int64), list
        after list, each list's rows ascending."""
        rows, counts = self._lists.gather(lists)
        lists = np.repeat(np.asarray(lists, np.int64), counts)
        keep = rows < below
        return rows[keep].astype(np.int64), lists[keep]


@dataclass(frozen=True)
class Codebook:
    """Centroids (n_lists, dim) float32, L2-normalised, trained on a memory's first ``rows`` utterances."""

    centroids: np.ndarray
    rows: int

    @property
    def n_lists(self) -> int:
        return len(self.centroids)


def codebook_rows(n: int, exact_limit: int) -> int:
    """How many of a memory's first rows its codebook is trained on: 0 (exact search) below ``exact_limit``, else
    the largest ``exact_limit`` · 2^m ≤ n, so a growing memory retrains at each doubling."""
    if n < max(exact_limit, 1):
        return 0
    rows = max(exact_limit, 1)
    while rows * 2 <= n:
        rows *= 2
    return rows


def train(x: np.ndarray, list_size: int, seed: int = 0, two_level_lists: int | None = None) -> Codebook:
    """Spherical k-means over ``x`` (all of it is the codebook's rows): ``len(x) // list_size`` centroids (at least
    one; in two levels about as many, a group's share rounded), initialised from a seeded sample of rows and refined
    on a sample of ``TRAIN_PER_LIST`` rows per centroid.

    From ``two_level_lists`` lists on (None: ``TWO_LEVEL_LISTS``, read at the call), where ``ITERATIONS`` rounds over
    every centroid (the sample times the centroids, both growing with the memory) would cost the build more than its
    pairs: ⌊√lists⌋ group centroids over the sample, in each group its share of the lists (by its sample rows, at least
    one where it has rows) over the sample rows nearest it, then ``TWO_LEVEL_ROUNDS`` rounds over every centroid, which
    mend the groups' borders. A row's probes are its nearest of all the lists either way."""
    n_lists = max(1, len(x) // list_size)
    rng = np.random.default_rng(seed)
    sample = x[np.sort(rng.choice(len(x), size=min(len(x), TRAIN_PER_LIST * n_lists), replace=False))]
    if n_lists < (TWO_LEVEL_LISTS if two_level_lists is None else two_level_lists):
        return Codebook(_kmeans(sample, _seeded(sample, n_lists, rng), ITERATIONS), len(x))
    groups = _kmeans(sample, _seeded(sample, math.isqrt(n_lists), rng), ITERATIONS)
    group = np.argmax(sample @ groups.T, axis=1)
    held = np.bincount(group)
    share = n_lists * held / len(sample)
    lists = np.where(held > 0, np.maximum(np.floor(share), 1), 0).astype(np.int64)
    rest = np.where(lists == np.floor(share), share - np.floor(share), -1.0)  # a group raised to one list: no more
    lists[np.argsort(-rest, kind="stable")[: max(n_lists - int(lists.sum()), 0)]] += 1
    lists = np.minimum(lists, held)  # (lists of one or two rows: a share can round up past the group's rows)
    parts = []
    for g in np.flatnonzero(lists):
        rows = sample[group == g]
        parts.append(_kmeans(rows, _seeded(rows, int(lists[g]), rng), ITERATIONS))
    return Codebook(_kmeans(sample, np.concatenate(parts), TWO_LEVEL_ROUNDS), len(x))


def _seeded(sample: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct rows of ``sample`` (k <= its rows), in their order: k-means' first centroids."""
    return sample[np.sort(rng.choice(len(sample), size=k, replace=False))].copy()


def _kmeans(sample: np.ndarray, centroids: np.ndarray, rounds: int) -> np.ndarray:
    """``centroids`` after ``rounds`` rounds of spherical k-means over ``sample`` (float32, L2-normalised); a
    centroid that wins no row stays where it was."""
    k = len(centroids)
    for _ in range(rounds):
        nearest = np.argmax(sample @ centroids.T, axis=1)
        sums = sp.csr_matrix((np.ones(len(sample), np.float32), (nearest, np.arange(len(sample)))),
                             shape=(k, len(sample))) @ sample
        empty = np.bincount(nearest, minlength=k) == 0
        sums[empty] = centroids[empty]
        centroids = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return centroids.astype(np.float32)


def probes(codebook: Codebook, x: np.ndarray, n_probe: int, block: int = 8192) -> np.ndarray:
    """(len(x), n_probe) int32: each row's ``n_probe`` nearest centroids, its own list (the nearest) first and the
    others in increasing order.

    A float32 product ranks the centroids. Where it leaves the nearest or the last probed one in doubt (a gap under
    ``DOUBT``, far above float32 rounding), the row's shortlist is scored again one pair at a time in float64,
    rounded to 1e-6, ties to the lower centroid: so a row's probes do not depend on the batch it came in.
    """
    n_probe = min(n_probe, codebook.n_lists)
    out = np.empty((len(x), n_probe), np.int32)
    for lo in range(0, len(x), block):
        part = x[lo : lo + block]
        s = part @ codebook.centroids.T
        near = _best(s, min(n_probe + 1, codebook.n_lists))
        ranked = np.take_along_axis(s, near, axis=1)
        doubt = ranked[:, 0] - ranked[:, min(1, near.shape[1] - 1)] < DOUBT
        if near.shape[1] > n_probe:
            doubt |= ranked[:, n_probe - 1] - ranked[:, n_probe] < DOUBT
        doubt &= near.shape[1] > 1
        if doubt.any():
            short = _best(s[doubt], min(n_probe + 4, codebook.n_lists))
            exact = np.round((codebook.centroids[short].astype(np.float64)
                              * part[doubt].astype(np.float64)[:, None, :]).sum(axis=2), 6)
            near[doubt, :n_probe] = np.take_along_axis(short, np.lexsort((short, -exact))[:, :n_probe], axis=1)
        out[lo : lo + block, 0] = near[:, 0]
        out[lo : lo + block, 1:] = np.sort(near[:, 1:n_probe], axis=1)
    return out


def _best(s: np.ndarray, k: int) -> np.ndarray:
    """Column indices (int64) of each row's ``k`` largest values, largest first, ties to the lower column: one pass a
    row (``segments.row_top``), where numpy's partition and sort took 11 of a 100,000-session build's 149 s (a
    profile)."""
    from .kernels.segments import row_top  # Numba loads on the first search, not on import

    return row_top(s, k)


def candidate_pairs(x: np.ndarray, probe: np.ndarray, queries: np.ndarray, members: np.ndarray, radius: float,
                    k: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (query row, member row), with x_q · x_m > ``radius``, of the query rows and the member rows whose list
    the query probes (``probe`` of every row of ``x``; a row's list is its column 0). One product per list.

    Of a query's members in one list only its ``k`` most similar others are kept, with every member within
    ``DOUBT`` of the k-th (float32 cannot order those): its ``k`` best pairs overall are among them, whatever the
    lists. This bounds the pairs in memories full of near-duplicates ("Thanks!"), where most members pass the radius.
    Only the members of probed lists, and the queries of lists with members, are sorted, so a few queries or a few
    members (an add) cost little beyond one pass over them; their products (up to ``LIST_KERNEL_PRODUCTS``) are one
    kernel call.
    """
    return probing_pairs(x, probe, np.repeat(queries, probe.shape[1]), probe[queries].ravel(), members, radius, k)


def probing_pairs(x: np.ndarray, probe: np.ndarray, q_rows: np.ndarray, q_lists: np.ndarray, members: np.ndarray,
                  radius: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``candidate_pairs`` with the queries' probes given: query row ``q_rows[i]`` probes list ``q_lists[i]`` (each
    list's queries in the order given). An add gives the old rows that probe its new rows' lists this way
    (``Probers.of``), not the rows whose probes would have to be read and most of them dropped (~1.4 ms for 20,000
    such rows, ad hoc)."""
    lists = probe[members, 0]
    n_lists = int(max(q_lists.max(initial=-1), lists.max(initial=-1))) + 1
    probed, held = np.zeros(n_lists, bool), np.zeros(n_lists, bool)
    probed[q_lists], held[lists] = True, True
    keep = probed[lists]  # members of lists no query probes, and queries of lists with no member, do nothing
    members, lists = members[keep], lists[keep]
    keep = held[q_lists]
    q_rows, q_lists = q_rows[keep], q_lists[keep]
    order = sets.stable_order(lists, n_lists)
    members, lists = members[order], lists[order]
    q_order = sets.stable_order(q_lists, n_lists)
    q_rows, q_lists = q_rows[q_order], q_lists[q_order]
    bounds = np.searchsorted(lists, np.arange(n_lists + 1))
    q_bounds = np.searchsorted(q_lists, np.arange(n_lists + 1))
    from .kernels.pair_select import list_pairs, select_pairs  # Numba loads on the first search, not on import

    if int((np.diff(bounds) * np.diff(q_bounds)).sum()) <= LIST_KERNEL_PRODUCTS:  # few products (an add, a small build)
        return list_pairs(x, members, bounds, q_rows, q_bounds, radius, k + 1, DOUBT)
    rows, cols = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for lst in np.flatnonzero((np.diff(bounds) > 0) & (np.diff(q_bounds) > 0)):
        m = members[bounds[lst] : bounds[lst + 1]]
        q = q_rows[q_bounds[lst] : q_bounds[lst + 1]]
        # k + 1: a query may be a member of the list, and its pair with itself never counts
        r, c = select_pairs(x[q] @ x[m].T, radius, k + 1, DOUBT)
        rows.append(q[r].astype(np.int64)), cols.append(m[c].astype(np.int64))
    return np.concatenate(rows), np.concatenate(cols)


def members(probe: np.ndarray, n_lists: int) -> tuple[np.ndarray, np.ndarray]:
    """The inverted lists themselves: rows (int64) grouped by their list (``probe[:, 0]``), ascending within a list,
    and where each list starts (n_lists + 1 bounds)."""
    order = sets.stable_order(probe[:, 0], n_lists)
    return order, np.searchsorted(probe[order, 0], np.arange(n_lists + 1)).astype(np.int64)


def probed_cosines(x, q, lists: np.ndarray, order, bounds: np.ndarray, backend):
    """Each question's cosines to the members of the lists it probes: (B, S) rows (int64, ascending, -1 past a
    question's members) and their cosines (float32, -inf there), S the most members any question probes.

    ``x`` (n, dim) and ``q`` (B, dim) are the backend's arrays; ``lists`` (B, P) the probed lists (host, distinct
    per question) and ``order``/``bounds`` the lists' members (``members``; ``order`` on the backend). The products
    and the sort are the backend's ``list_cosines``, list by list, each list with the questions that probe it.
    """
    n_b, n_p = lists.shape
    sizes = np.diff(bounds)[lists]
    width = int(sizes.sum(axis=1).max(initial=0))
    start = (np.cumsum(sizes, axis=1) - sizes).ravel()  # where each probed list's members start in the question's row
    flat = lists.ravel()
    by_list = np.argsort(flat, kind="stable")  # (question, probe) pairs grouped by list
    first = np.flatnonzero(np.r_[True, np.diff(flat[by_list]) != 0, True]) if len(flat) else np.zeros(1, np.int64)
    used = flat[by_list[first[:-1]]]
    pair_b = by_list // n_p
    return backend.list_cosines(x, q, order, bounds[used], bounds[used + 1], first, pair_b,
                                pair_b * width + start[by_list], sizes.sum(axis=1))
