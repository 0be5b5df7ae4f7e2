"""The associative memory graph (paper §3.2.1), built in one vectorised pass per memory.

Nodes are ``[utterances | clues | speakers]``. Edges (symmetric, weighted, CSR):
- ownership: utterance — the (merged) clue of its session;
- similarity: clue — clue and utterance — utterance pairs with cosine above γ, the ``max_neighbors`` strongest per
  node (all pairs compared below ``exact_limit`` utterances; above it, the candidates come from an inverted file,
  ``ivf.py``);
- turn adjacency: consecutive utterances of a session (the dialogue's own structure; weight 0 turns it off);
- speakers (optional, the paper's metadata extension): utterance — the person who said it.

Clues: one per session (``clues.py`` makes their text and embeddings), merged when their cosine exceeds δ
(``GraphConfig.clue_merge``): around leaders (the default): in session order, a session joins the clue of the first
earlier leader it is δ-similar to, or leads a clue of its own, so every member is δ-similar to its leader and no chain
grows a clue; or transitively, the connected components of the δ-graph (the paper's rule: in a dense memory one
component holds most sessions, 1,123 of a 2,500-session LongMemEval haystack, whose largest leader clue holds 26, so
the clue cut no longer selects).
A merged clue's embedding is the normalised mean of its members'.
"""
from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import ivf, sets
from .clue_vectors import ClueVectors
from .ivf import Codebook
from .memory import MemoryBank
from .rows import Rows, spans
from .slotted_csr import SlottedCSR, decode, encode


CLUE_MERGES = ("components", "leaders")


@dataclass(frozen=True)
class GraphConfig:
    delta: float = 0.7  # clue merge threshold δ
    clue_merge: str = "leaders"  # how δ-similar clues merge: "leaders" (no chains) or "components" (transitively)
    gamma: float = 0.7  # similarity-edge threshold γ (clue–clue and utterance–utterance)
    max_neighbors: int = 10  # similarity edges kept per node (the strongest above γ)
    adjacency_weight: float = 1.0  # weight of edges between consecutive turns; 0 = none
    speakers: bool = False  # add a node per named speaker
    exact_limit: int = 10_000  # utterances; from this many on, similarity candidates come from an IVF (ivf.py)
    n_probe: int = 8  # IVF lists an utterance searches for its neighbours
    list_size: int = 256  # utterances per IVF list, on average, when the codebook is trained

    def __post_init__(self):
        for name in ("delta", "gamma"):  # cosines: above 1 means "never" (the hybrid baselines' δ = 1.01)
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                    and value >= -1):
                raise ValueError(f"GraphConfig.{name} must be a finite cosine threshold >= -1, got {value!r}")
        for name, low in (("max_neighbors", 0), ("exact_limit", 0), ("n_probe", 1), ("list_size", 1)):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
                raise ValueError(f"GraphConfig.{name} must be an integer >= {low}, got {value!r}")
        if self.clue_merge not in CLUE_MERGES:
            raise ValueError(f"GraphConfig.clue_merge must be one of {CLUE_MERGES}, got {self.clue_merge!r}")
        if not (isinstance(self.adjacency_weight, (int, float)) and not isinstance(self.adjacency_weight, bool)
                and 0 <= self.adjacency_weight < math.inf):
            raise ValueError(f"GraphConfig.adjacency_weight must be finite and >= 0, got {self.adjacency_weight!r}")
        if not isinstance(self.speakers, bool):
            raise ValueError(f"GraphConfig.speakers must be true or false, got {self.speakers!r}")


@dataclass(frozen=True)
class ClueState:
    """What growing a memory's clues needs: the clue of each session, the clue embeddings, and every clue pair above
    γ (both directions, before the per-node top-k), so that a merge can drop a clue's pairs and find its new ones."""

    labels: np.ndarray  # clue of each memory session (int64)
    vectors: ClueVectors  # each clue's embedding (float32, L2-normalised), in an appendable pool
    candidates: tuple[np.ndarray, np.ndarray, np.ndarray]  # (i, j, cosine) clue pairs above γ
    # leaders: each clue's first session's embedding, in clue order, which ``grow_clue_state`` appends to in place
    # (only writes read it) and makes where it is None (after a build or a load) or holds another number of clues;
    # ``shrink_clue_state`` makes them anew
    leader_rows: Rows | None = None

    @property
    def emb(self) -> np.ndarray:
        """(n_clues, dim) the clue embeddings in clue order (``ClueVectors.packed``)."""
        return self.vectors.packed

    @property
    def n_clues(self) -> int:
        return self.vectors.n_clues


@dataclass(frozen=True)
class UttSearch:
    """The inverted file a large memory's utterance pairs (and its questions' relevance) come from: the codebook,
    every utterance's probes, ``lists`` (the lists' members and bounds, ``ivf.members``), ``held`` (the lists
    that have members, and a codebook of their centroids, which questions probe) and ``probers`` (the rows that probe
    each list, which adds read)."""

    codebook: Codebook
    probe: np.ndarray  # (n_utt, n_probe) int32, nearest list first
    lists: tuple[np.ndarray, np.ndarray] | None = None  # ``ivf.members(probe)``, made here when None
    room: Rows | None = None  # the appendable buffer ``probe`` is the view of, where ``grown`` made it
    held: tuple[np.ndarray, Codebook] | None = None  # made here when None
    probers: ivf.Probers | None = None  # made here when None; ``grown`` appends to it in place where it is the newest

    def __post_init__(self):  # made with the search: questions only read them
        if self.lists is None:
            object.__setattr__(self, "lists", ivf.members(self.probe, self.codebook.n_lists))
        if self.held is None:
            held = np.flatnonzero(np.diff(self.lists[1]) > 0)  # removals can empty a list: questions probe the others
            object.__setattr__(self, "held", (held, Codebook(self.codebook.centroids[held], self.codebook.rows)))
        if self.probers is None:
            object.__setattr__(self, "probers", ivf.Probers(self.probe, self.codebook.n_lists))

    def grown(self, probe: np.ndarray) -> "UttSearch":
        """This search with rows of these probes appended: each joins the end of its list (rows ascend in a list),
        without sorting the lists again. The probes are appended to this search's buffer where its rows end there
        (this search keeps its view of the rows it had), else to a copy. The held lists are kept where each new row
        joins one."""
        order, bounds = self.lists
        own = probe[:, 0]
        held = self.held if (np.diff(bounds)[own] > 0).all() else None
        by_list = sets.stable_order(own, self.codebook.n_lists)  # lists between two new rows' may be empty: their
        # ends are one place, where the rows go in the order given, so list by list
        order = np.insert(order, bounds[own[by_list] + 1], len(self.probe) + by_list)
        bounds = bounds + np.concatenate([[0], np.cumsum(np.bincount(own, minlength=self.codebook.n_lists))])
        room = self.room
        if room is None or room.n != len(self.probe) or not np.may_share_memory(room.view, self.probe):
            room = Rows(self.probe.shape[1:], self.probe.dtype, self.probe)
        probers = self.probers if self.probers.rows == len(self.probe) else None  # None: made anew from the rows
        if probers is not None:
            probers.append(probe)
        room.append(probe)
        return UttSearch(self.codebook, room.view, (order, bounds), room, held, probers)

    def kept(self, keep: np.ndarray) -> "UttSearch":
        """This search without the rows where ``keep`` is False: the lists filtered and renumbered (rows still
        ascend in each), not sorted again; the kept probes in a new buffer with room for the next adds."""
        order, bounds = self.lists
        stay = keep[order]
        held = np.repeat(np.arange(self.codebook.n_lists), np.diff(bounds))[stay]  # each kept member's list
        bounds = np.concatenate([[0], np.cumsum(np.bincount(held, minlength=self.codebook.n_lists))])
        room = Rows.selected(self.probe, keep)
        return UttSearch(self.codebook, room.view, ((np.cumsum(keep) - 1)[order[stay]], bounds), room)

    def members_of(self, lists: np.ndarray) -> np.ndarray:
        """The rows (int64) of these lists, list by list, ascending within each."""
        order, bounds = self.lists
        return order[_entries(bounds, lists)]


@dataclass
class MemoryGraph:
    """The graph of one memory. Utterance node ``i`` is the memory's utterance ``i``; clue node ``n_utt + c``."""

    utt_clue: np.ndarray  # clue of each utterance node (int64)
    clue_vectors: ClueVectors  # each clue's embedding (float32, L2-normalised): row ``clue_row[c]`` of ``clue_view``
    edges: SlottedCSR  # the symmetric adjacency (float32 weights) and the column-stochastic transition M of eq. 2
    degree: np.ndarray  # float64 sum of each node's edge weights
    n_speakers: int = 0
    utt_pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # directed top-k similarity pairs, by row
    clues: ClueState | None = None  # what grow_graph / shrink_graph update (kept when the clue nodes are dropped)
    search: UttSearch | None = None  # how the utterance pairs were found (None: all pairs compared)
    by_clue: np.ndarray | None = None  # utterance nodes grouped by clue, in node order (made here when None)
    clue_sizes: np.ndarray | None = None  # int64 utterances of each clue (made here when None)

    def __post_init__(self):
        if self.by_clue is None:
            self.by_clue = np.argsort(self.utt_clue, kind="stable")
        if self.clue_sizes is None:
            self.clue_sizes = np.bincount(self.utt_clue, minlength=self.n_clues)
        self.owning = np.flatnonzero(self.clue_sizes > 0)  # clues that own an utterance (a session may have none)
        self.owning_starts = (np.cumsum(self.clue_sizes) - self.clue_sizes)[self.owning]  # where each starts in by_clue

    @property
    def n_utt(self) -> int:
        return len(self.utt_clue)

    @property
    def n_clues(self) -> int:
        return self.clue_vectors.n_clues

    @property
    def clue_emb(self) -> np.ndarray:
        """(n_clues, dim) the clue embeddings in clue order (``ClueVectors.packed``: a search reads ``clue_view`` and
        ``clue_row`` instead)."""
        return self.clue_vectors.packed

    @property
    def clue_view(self) -> np.ndarray:
        return self.clue_vectors.view

    @property
    def clue_row(self) -> np.ndarray:
        return self.clue_vectors.row

    @property
    def n_nodes(self) -> int:
        return self.n_utt + self.n_clues + self.n_speakers

    @functools.cached_property
    def adjacency(self) -> sp.csr_matrix:
        """The adjacency as scipy CSR (int64 indices), made on first use (a node without edges holds an explicit 0
        on its diagonal, where the transition keeps its mass)."""
        return self.edges.csr("data")

    @functools.cached_property
    def transition(self) -> sp.csr_matrix:
        """The column-stochastic M of eq. 2 as scipy CSR (int64 indices; device copies take int32), made on first
        use (the whole-graph PPR reads it; a question's ball reads ``edges`` in place)."""
        return self.edges.csr("scaled")


def graph_of(utt_clue: np.ndarray, clue_vectors: ClueVectors, adj: sp.csr_matrix, n_speakers: int = 0, utt_pairs=None,
             clues: ClueState | None = None, search: UttSearch | None = None,
             by_clue: np.ndarray | None = None) -> MemoryGraph:
    """The graph on this symmetric adjacency (float32, sorted indices). Its transition holds each edge's weight over
    its column's degree (the adjacency is symmetric: a column's degree is its row's sum); a node without edges keeps
    its mass through a self-loop, stored in the adjacency as an explicit 0 (the two share one pattern)."""
    degree = _row_sums(adj.indptr, adj.data)
    lonely = np.flatnonzero(degree == 0)
    pattern, deg = adj, degree
    if len(lonely):
        pattern = (adj + sp.csr_matrix((np.ones(len(lonely), np.float32), (lonely, lonely)), shape=adj.shape)).tocsr()
        pattern.sort_indices()
        deg = _row_sums(pattern.indptr, pattern.data)
    scaled = pattern.data * (1.0 / deg).astype(np.float32)[pattern.indices]
    data = pattern.data.copy()
    if len(lonely):
        row = np.repeat(np.arange(adj.shape[0]), np.diff(pattern.indptr))
        data[(row == pattern.indices) & (degree[row] == 0)] = 0.0
    edges = SlottedCSR.packed(pattern.indptr, pattern.indices, data, scaled, len(utt_clue))
    return MemoryGraph(utt_clue, clue_vectors, edges, degree, n_speakers, utt_pairs, clues, search, by_clue)


def _row_sums(indptr: np.ndarray, data: np.ndarray) -> np.ndarray:
    """float64 sum of each row's stored values of a CSR matrix (0 for an empty row)."""
    out = np.zeros(len(indptr) - 1)
    full = np.flatnonzero(np.diff(indptr) > 0)
    if len(full):  # consecutive starts of non-empty rows bound each one's values
        out[full] = np.add.reduceat(data.astype(np.float64), indptr[full])
    return out


def exact_cosines(emb: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """float64 cosines of the pairs (rows[i], cols[i]) of ``emb``, one pair at a time (symmetric to the bit): the same
    bits whichever search found the pair (a GEMM, a GEMV, a Numba kernel), so rounding, thresholds and ties agree
    between a build and an update (``kernels.pair_cosines.exact_pair_cosines``: numpy's float64 sum, to the bit)."""
    from .kernels.pair_cosines import exact_pair_cosines  # Numba loads on the first build, not on import

    return exact_pair_cosines(emb, np.asarray(rows), np.asarray(cols))


def similarity_pairs(emb: np.ndarray, threshold: float, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (i, j, cosine), i != j, with cosine > threshold, at most the ``k`` most similar per row.

    A range search over all pairs (``_range_search``) finds the candidate pairs; their cosines are recomputed exactly
    (``exact_cosines``) and rounded to 1e-6 so that equal vectors tie exactly, and ties are broken by the lower index,
    which makes the edge set independent of BLAS rounding.
    """
    n = len(emb)
    if n < 2 or k < 1:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    x = np.ascontiguousarray(emb, dtype=np.float32)
    rows, cols, sims = _range_search(x, float(threshold) - 1e-4)
    return select_top(rows, cols, sims, threshold, k)


def select_top(rows: np.ndarray, cols: np.ndarray, sims: np.ndarray, threshold: float,
               k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of candidate pairs, those above the threshold (cosines rounded to 1e-6), the ``k`` most similar per row."""
    sims = np.round(sims.astype(np.float64), 6)
    keep = (cols != rows) & (sims > threshold)
    rows, cols, sims = rows[keep], cols[keep], sims[keep]
    order = np.lexsort((cols, -sims, rows))  # per row: most similar first, then lower index
    rows, cols, sims = rows[order], cols[order], sims[order]
    starts = np.searchsorted(rows, rows, side="left")
    top = np.arange(len(rows)) - starts < k
    return rows[top], cols[top], sims[top].astype(np.float32)


RANGE_BLOCK = (2048, 8192)  # rows × columns of one product block of the exact pair search (64 MB of float32)


def _range_search(x: np.ndarray, radius: float,
                  block: tuple[int, int] = RANGE_BLOCK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (i, j, x_i·x_j), i != j, with inner product above ``radius`` (the products as ``exact_cosines`` gives them).

    The products are symmetric, so only the upper triangle is searched: each block of rows against the columns from
    the block on, one BLAS product of ``block`` at most at a time, its entries above ``radius`` picked in one Numba
    pass (``pair_select.pairs_above``); each pair is mirrored. (FAISS's flat range search found the same pairs 2–4×
    slower on this project's 2-core machine, from 500 to 24,000 rows.)
    """
    from .kernels.pair_select import pairs_above  # Numba loads on the first build, not on import

    height, width = block
    rows, cols = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for lo in range(0, len(x), height):
        query = x[lo : lo + height]
        for at in range(lo, len(x), width):
            r, c = pairs_above(query @ x[at : at + width].T, radius)
            r, c = lo + r, at + c
            upper = c > r
            rows.append(r[upper]), cols.append(c[upper])
    i, j = np.concatenate(rows), np.concatenate(cols)
    s = exact_cosines(x, i, j)
    return np.concatenate([i, j]), np.concatenate([j, i]), np.concatenate([s, s])


def merge_clues(session_emb: np.ndarray, delta: float, how: str = "components") -> np.ndarray:
    """Clue label of each session, labels in the order of each clue's first session: ``how="components"``, the
    connected components of the graph of clue pairs with cosine > δ; ``"leaders"``, clues around leaders (see the
    module docstring)."""
    n = len(session_emb)
    if n == 0:
        return np.zeros(0, np.int64)
    if how == "leaders":
        return _leader_labels(np.ascontiguousarray(session_emb, np.float32), delta)
    i, j, _ = similarity_pairs(session_emb, delta, k=n)
    graph = sp.csr_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    from scipy.sparse.csgraph import connected_components  # imports scipy.linalg (~0.1 s): not at a server's start

    _, labels = connected_components(graph, directed=False)
    return labels.astype(np.int64)


LEADER_PRODUCTS = 1 << 24  # products of a block of sessions with the leaders before it (64 MB of float32)
LEADER_BLOCK = (64, 2048)  # sessions in a block, at least and at most (past 262,144 leaders a block of 64 holds
# more than LEADER_PRODUCTS)


def _leader_labels(x: np.ndarray, delta: float) -> np.ndarray:
    """Leader clue labels of the sessions ``x`` (float32 rows; ``delta`` the cosine threshold δ), each session
    compared with the leaders before it only (as an add compares a new one, ``grow_clue_state``), not with every
    session: a block of sessions against the leaders of the blocks before it (one product), then within the block
    in session order. A pair counts as every δ-pair does: a product above δ − 1e-4 found, its cosine from
    ``exact_cosines`` rounded to 1e-6 above δ, so the labels are those of all pairs searched; the products are
    n × leaders, not n² / 2 (25,000 synthetic sessions of 3,458 clues: 0.7 s, against 5.7 s of range search over
    all pairs)."""
    from .kernels.pair_select import pairs_above  # Numba loads on the first build, not on import

    n = len(x)
    labels = np.empty(n, np.int64)
    leader = np.zeros(0, np.int64)  # the leaders so far, ascending
    leader_rows = Rows((x.shape[1],), np.float32)  # their embeddings
    lo = 0
    while lo < n:
        hi = min(n, lo + int(np.clip(LEADER_PRODUCTS // max(len(leader), 1), *LEADER_BLOCK)))
        block = x[lo:hi]
        first = np.full(hi - lo, -1, np.int64)  # each session's first δ-similar leader of the blocks before
        s, at = pairs_above(block @ leader_rows.view.T, delta - 1e-4)  # by session, then leader ascending
        ok = np.round(exact_cosines(x, leader[at], lo + s), 6) > delta
        s, at = s[ok], at[ok]
        found, where = np.unique(s, return_index=True)
        first[found] = leader[at[where]]
        a, b = np.nonzero(np.tril(block @ block.T > delta - 1e-4, -1))  # pairs within the block, b < a ascending
        ok = np.round(exact_cosines(x, lo + a, lo + b), 6) > delta
        a, b = a[ok], b[ok]
        bounds = np.searchsorted(a, np.arange(hi - lo + 1))
        leads = np.zeros(hi - lo, bool)
        n_clues = len(leader)
        for t in range(hi - lo):
            if first[t] >= 0:
                labels[lo + t] = labels[first[t]]
                continue
            near = b[bounds[t] : bounds[t + 1]]
            near = near[leads[near]]
            if len(near):
                labels[lo + t] = labels[lo + near[0]]
            else:
                leads[t], labels[lo + t] = True, n_clues
                n_clues += 1
        new = lo + np.flatnonzero(leads)
        leader = np.concatenate([leader, new])
        leader_rows.append(x[new])
        lo = hi
    return labels


def _clue_means(session_emb: np.ndarray, labels: np.ndarray, n_clues: int) -> np.ndarray:
    """Normalised sum of each clue's session embeddings, added in session order (so a subset gives the same bits)."""
    emb = np.zeros((n_clues, session_emb.shape[1]), np.float32)
    np.add.at(emb, labels, session_emb)
    emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    return emb


def _no_pairs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)


def clue_state(session_emb: np.ndarray, config: GraphConfig) -> ClueState:
    """Clues of a memory from its sessions' clue embeddings: δ-merged, with their candidate similarity pairs."""
    labels = merge_clues(session_emb, config.delta, config.clue_merge)
    emb = _clue_means(session_emb, labels, int(labels.max()) + 1 if len(labels) else 0)
    pairs = _range_search(emb, config.gamma - 1e-4) if len(emb) > 1 else _no_pairs()
    return ClueState(labels, ClueVectors.packed_from(emb), pairs)


def grow_clue_state(state: ClueState, session_emb: np.ndarray, config: GraphConfig) -> ClueState:
    """``state`` with the sessions ``session_emb[len(state.labels):]`` added one by one, equal to ``clue_state``
    (bit for bit: both take their cosines from ``exact_cosines``).

    A new session either starts a clue (clues are numbered by their first session, so it comes last) or joins
    every clue it links to into the first of them (components), or the clue of the first leader it links to
    (leaders); only that clue's embedding and pairs are recomputed, its embedding appended to the pool
    (``ClueVectors``: the other clues' vectors are not copied).
    """
    labels, vectors, (ci, cj, cs) = state.labels, state.vectors, state.candidates
    leaders = config.clue_merge == "leaders"
    # leaders: each clue's first session, where the labels first reach a clue (clues are numbered by their first
    # session; an add never merges leader clues, so a new clue's is appended); a session is compared to them alone
    leader = _first_sessions(labels) if leaders else None
    rows = state.leader_rows
    if leaders and (rows is None or rows.n != len(leader)):  # (a gather of the leaders: ~1 ms at 25,000 sessions)
        rows = _leader_rows(session_emb, leader)
    for s in range(len(labels), len(session_emb)):
        if leaders:
            near = leader[rows.view @ session_emb[s] > config.delta - 1e-4]
        else:
            near = np.flatnonzero(session_emb[:s] @ session_emb[s] > config.delta - 1e-4)
        sims = np.round(exact_cosines(session_emb, near, np.full(len(near), s)), 6)  # as select_top rounds
        near = near[sims > config.delta][:1] if leaders else near[sims > config.delta]
        linked = sets.unique(labels[near])
        n_c = vectors.n_clues
        remap = np.arange(n_c)
        if len(linked) == 0:
            target, stale = n_c, np.zeros(0, np.int64)
            if leaders:
                leader = np.append(leader, s)
                rows.append(session_emb[s : s + 1])
            row = np.append(vectors.row, -1)
        else:
            target, removed = int(linked[0]), linked[1:]
            remap = remap - np.searchsorted(removed, remap)
            remap[removed] = target
            stale = linked
            row = np.delete(vectors.row, removed) if len(removed) else vectors.row
        labels = np.append(remap[labels], target)
        vectors = vectors.with_vector(row, target, _clue_means(session_emb[: s + 1][labels == target],
                                                               np.zeros(int((labels == target).sum()), np.int64), 1)[0])
        keep = ~(np.isin(ci, stale) | np.isin(cj, stale))
        others = np.flatnonzero(vectors.cosines(vectors.of(target)) > config.gamma - 1e-4)
        others = others[others != target]
        mine = np.full(len(others), target, np.int64)
        sims = exact_cosines(vectors.view, vectors.row[mine], vectors.row[others])
        ci = np.concatenate([remap[ci[keep]], mine, others])
        cj = np.concatenate([remap[cj[keep]], others, mine])
        cs = np.concatenate([cs[keep], sims, sims])
    return ClueState(labels, vectors, (ci, cj, cs), rows if leaders else None)


def build_graph(bank: MemoryBank, utt_emb: np.ndarray, session_clue_emb: np.ndarray, config: GraphConfig,
                codebook: Codebook | None = None) -> MemoryGraph:
    """The graph of the memory whose sessions ``bank`` holds (``utt_emb`` per utterance, ``session_clue_emb`` per
    session, both aligned with the bank). ``codebook``: search the utterance pairs through this one (a rebuild with
    the codebook of a graph that shrank) rather than by the size rule of ``ivf.codebook_rows``."""
    pairs, search = utterance_pairs(utt_emb, config, codebook)
    return assemble(bank, pairs, clue_state(session_clue_emb, config), config, search)


def utterance_pairs(emb: np.ndarray, config: GraphConfig, codebook: Codebook | None = None):
    """The directed top-``max_neighbors`` similarity pairs of a memory's utterances and how they were searched: all
    pairs below ``exact_limit`` utterances, else through the inverted file of ``codebook`` (trained here when None)."""
    rows = ivf.codebook_rows(len(emb), config.exact_limit)
    if config.max_neighbors < 1 or (codebook is None and rows == 0):
        return similarity_pairs(emb, config.gamma, config.max_neighbors), None
    if codebook is None:
        codebook = ivf.train(emb[:rows], config.list_size)
    search = UttSearch(codebook, ivf.probes(codebook, emb, config.n_probe))
    every = np.arange(len(emb))
    r, c = ivf.candidate_pairs(emb, search.probe, every, every, config.gamma - 1e-4, config.max_neighbors)
    return select_top(r, c, exact_cosines(emb, r, c), config.gamma, config.max_neighbors), search


def _merged(kept: tuple[np.ndarray, np.ndarray, np.ndarray],
            top: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs ``kept`` and the lists ``top`` of the rows searched again (no row in both; each in row order, each
    list in ``select_top``'s order), in row order: a merge, where a sort of all of them cost an add O(P log P)."""
    at = np.searchsorted(kept[0], top[0])
    return tuple(np.insert(x, at, t) for x, t in zip(kept, top))


def grow_graph(g: MemoryGraph, bank: MemoryBank, utt_emb: np.ndarray, session_clue_emb: np.ndarray,
               config: GraphConfig) -> MemoryGraph:
    """``g`` grown by the sessions appended to ``bank`` since it was built, equal to ``build_graph`` of the bank.

    Only the new utterances are searched (against every utterance, or through their probes' lists); an old
    utterance's neighbour list is chosen again only where a new utterance is a candidate of it (exact search: one
    within γ; IVF: one in a list it probes). At the add that crosses a codebook size (``ivf.codebook_rows``) the
    codebook is trained and every pair searched anew. Clues grow by ``grow_clue_state``.
    """
    clues = grow_clue_state(g.clues, session_clue_emb, config)
    n_old, n = g.n_utt, len(utt_emb)
    trained = g.search.codebook.rows if g.search is not None else 0
    if config.max_neighbors > 0 and ivf.codebook_rows(n, config.exact_limit) > trained:
        pairs, search = utterance_pairs(utt_emb, config)
        return assemble(bank, pairs, clues, config, search)
    new = np.arange(n_old, n)
    radius = config.gamma - 1e-4
    search = g.search
    if config.max_neighbors < 1:  # no similarity edges (no importance signal): nothing to search
        fr = fc = br = bc = np.zeros(0, np.int64)
    elif search is None:
        new_r, all_c = np.nonzero(np.ascontiguousarray(utt_emb[n_old:]) @ utt_emb.T > radius)
        fr, fc = n_old + new_r, all_c
        back = fc < n_old
        br, bc = fc[back], fr[back]  # old utterance -> new utterance candidates
    else:
        search = search.grown(ivf.probes(search.codebook, utt_emb[n_old:], config.n_probe))
        reached = search.members_of(sets.unique(search.probe[new]))  # the rows of the lists the new rows probe
        fr, fc = ivf.candidate_pairs(utt_emb, search.probe, new, reached, radius, config.max_neighbors)
        own = sets.unique(search.probe[new, 0])
        hit, lists = search.probers.of(own, n_old)  # the old rows that probe a new row's list, with that list
        br, bc = ivf.probing_pairs(utt_emb, search.probe, hit, lists, new, radius, config.max_neighbors)
    rows, cols, sims = g.utt_pairs
    affected = np.zeros(n, bool)
    affected[new], affected[br] = True, True
    mine = affected[rows]
    cand_r, cand_c = np.concatenate([fr, br]), np.concatenate([fc, bc])
    top = select_top(np.concatenate([rows[mine], cand_r]), np.concatenate([cols[mine], cand_c]),
                     np.concatenate([sims[mine], exact_cosines(utt_emb, cand_r, cand_c)]), config.gamma,
                     config.max_neighbors)
    pairs = _merged((rows[~mine], cols[~mine], sims[~mine]), top)
    if config.speakers:  # a new name renumbers the speaker nodes
        return assemble(bank, pairs, clues, config, search)
    fresh = np.zeros(n, bool)
    fresh[n_old:] = True
    changed = sets.setxor(rows[mine] * n + cols[mine], top[0] * n + top[1])  # pairs made or lost
    fresh[changed // n], fresh[changed % n] = True, True
    n_sessions = len(g.clues.labels)
    clue_map = np.empty(g.n_clues, np.int64)
    clue_map[g.clues.labels] = clues.labels[:n_sessions]
    grouped = touched = None
    if np.array_equal(clue_map, np.arange(g.n_clues)):  # no clue merged (leaders never merge): each new utterance
        # joins the end of its clue's group, clue by clue (new clues after the old ones), rows ascending in each
        new_clue = np.repeat(clues.labels[n_sessions:], np.diff(bank.offset_array)[n_sessions:])
        order = np.argsort(new_clue, kind="stable")
        ends = np.concatenate([np.cumsum(g.clue_sizes), np.full(clues.n_clues - g.n_clues, n_old)])
        sizes = np.concatenate([g.clue_sizes, np.zeros(clues.n_clues - g.n_clues, np.int64)])
        grouped = (np.concatenate([g.utt_clue, new_clue]), np.insert(g.by_clue, ends[new_clue[order]], n_old + order),
                   sizes + np.bincount(new_clue, minlength=len(sizes)))
        # the clues the new sessions joined or started (their members, embeddings and pairs changed) and every clue
        # they had or have a candidate pair with: no other clue's candidates changed
        joined = sets.unique(clues.labels[n_sessions:])
        touched = sets.unique(np.concatenate([joined] + [j[np.isin(i, joined)] for i, j, _ in (g.clues.candidates,
                                                                                            clues.candidates)]))
    return _spliced(g, bank, pairs, clues, config, search, None, clue_map, fresh, grouped, touched)


def shrink_graph(g: MemoryGraph, bank: MemoryBank, keep_utt: np.ndarray, keep_sessions: np.ndarray,
                 utt_emb: np.ndarray, session_clue_emb: np.ndarray, config: GraphConfig) -> MemoryGraph:
    """``g`` without the utterances and sessions whose ``keep_*`` mask is False, equal to ``build_graph`` of what is
    left (``bank``, ``utt_emb`` and ``session_clue_emb`` already hold only that; with an IVF, a build given this
    graph's codebook: a removal keeps the codebook, so the lists and probes of the kept utterances stay).

    A kept utterance's neighbour list changes only if it lost a neighbour; those lists are searched again. Clues
    change by ``shrink_clue_state``.
    """
    new_of = np.cumsum(keep_utt) - 1  # old node -> new node
    rows, cols, sims = g.utt_pairs
    affected = np.zeros(len(keep_utt), bool)
    affected[rows[~keep_utt[cols]]] = True
    affected &= keep_utt
    stay = keep_utt[rows] & keep_utt[cols] & ~affected[rows]
    redo = new_of[np.flatnonzero(affected)]
    radius = config.gamma - 1e-4
    search = g.search
    if search is None:
        r, c = np.nonzero(np.ascontiguousarray(utt_emb[redo]) @ utt_emb.T > radius)
        r = redo[r]
    else:
        search = search.kept(keep_utt)
        r, c = ivf.candidate_pairs(utt_emb, search.probe, redo, np.arange(len(utt_emb)), radius,
                                    config.max_neighbors)
    top = select_top(r, c, exact_cosines(utt_emb, r, c), config.gamma, config.max_neighbors)
    pairs = _merged((new_of[rows[stay]], new_of[cols[stay]], sims[stay]), top)
    clues = shrink_clue_state(g.clues, keep_sessions, session_clue_emb, config)
    if config.speakers:  # a name no one says any more renumbers the speaker nodes
        return assemble(bank, pairs, clues, config, search)
    n = len(utt_emb)
    fresh = np.zeros(n, bool)
    lost = affected[rows] & keep_utt[cols]  # the kept pairs of the lists searched again
    changed = sets.setxor(new_of[rows[lost]] * n + new_of[cols[lost]], top[0] * n + top[1])
    fresh[changed // n], fresh[changed % n] = True, True
    gone = np.flatnonzero(~keep_utt)
    near = g.edges.nodes(gone)
    near = near[near < len(keep_utt)]
    fresh[new_of[near[keep_utt[near]]]] = True  # rows that had an edge to a removed utterance
    touched = np.zeros(g.n_clues, bool)
    touched[g.clues.labels[~keep_sessions]] = True  # clues that lost a session (they may split) ...
    before, after = g.clues.labels[keep_sessions], clues.labels
    both = sets.unique(before * (clues.n_clues + 1) + after)  # ... and, with leaders, clues whose sessions part or
    was, now = both // (clues.n_clues + 1), both % (clues.n_clues + 1)  # meet others' (a freed follower leads)
    touched[was[(np.bincount(was, minlength=g.n_clues) > 1)[was] | (np.bincount(now)[now] > 1)]] = True
    fresh[touched[g.utt_clue[keep_utt]]] = True
    clue_map = np.full(g.n_clues, -1, np.int64)
    clue_map[g.clues.labels[keep_sessions]] = clues.labels
    clue_map[touched] = -1
    return _spliced(g, bank, pairs, clues, config, search, np.where(keep_utt, new_of, -1), clue_map, fresh)


def shrink_clue_state(state: ClueState, keep: np.ndarray, session_emb: np.ndarray, config: GraphConfig) -> ClueState:
    """``state`` without the sessions whose ``keep`` mask is False, equal to ``clue_state(session_emb)`` (the kept
    sessions' clue embeddings). Only the clues whose members change are made anew (components: the δ-components
    among the remaining sessions of a clue that lost one; leaders: ``_leaders_after_removal``); their embeddings and
    pairs are recomputed, the others keep theirs."""
    labels, vectors, (ci, cj, cs) = state.labels, state.vectors, state.candidates
    kept_labels = labels[keep]
    touched = np.zeros(vectors.n_clues, bool)
    touched[labels[~keep]] = True
    pieces = []  # the kept sessions of each clue made anew
    if config.clue_merge == "leaders":
        new = _leaders_after_removal(labels, keep, session_emb, config.delta)
        touched[kept_labels[new != _leaders(kept_labels)]] = True  # a session moved: its old clue ...
        touched[kept_labels[new[touched[kept_labels]]]] = True  # ... and the one it joins change
        mine = np.flatnonzero(touched[kept_labels])
        pieces = [mine[new[mine] == lead] for lead in np.unique(new[mine])]
    present, first = np.unique(kept_labels, return_index=True)
    untouched, firsts = present[~touched[present]], list(first[~touched[present]])
    if config.clue_merge == "components":
        for c in present[touched[present]]:
            members = np.flatnonzero(kept_labels == c)
            sub = merge_clues(session_emb[members], config.delta)
            pieces += [members[sub == p] for p in range(int(sub.max()) + 1)]
    firsts += [p[0] for p in pieces]
    rank = np.empty(len(firsts), np.int64)
    rank[np.argsort(np.asarray(firsts, np.int64), kind="stable")] = np.arange(len(firsts))  # numbered by first session
    old_to_new = np.full(vectors.n_clues, -1, np.int64)
    old_to_new[untouched] = rank[: len(untouched)]
    new_labels = old_to_new[kept_labels]
    new_emb = np.zeros((len(firsts), session_emb.shape[1]), np.float32)
    new_emb[rank[: len(untouched)]] = vectors.of(untouched)
    fresh = np.zeros(len(firsts), bool)
    for n, members in zip(rank[len(untouched) :], pieces):
        new_labels[members], fresh[n] = n, True
        new_emb[n] = _clue_means(session_emb[members], np.zeros(len(members), np.int64), 1)[0]
    stay = (old_to_new[ci] >= 0) & (old_to_new[cj] >= 0)
    ci, cj, cs = [old_to_new[ci[stay]]], [old_to_new[cj[stay]]], [cs[stay]]
    for target in np.flatnonzero(fresh):
        others = np.flatnonzero(new_emb @ new_emb[target] > config.gamma - 1e-4)
        others = others[(others != target) & ~(fresh[others] & (others < target))]  # fresh pairs once
        mine = np.full(len(others), target, np.int64)
        sims = exact_cosines(new_emb, mine, others)
        ci += [mine, others]
        cj += [others, mine]
        cs += [sims, sims]
    leader_rows = _leader_rows(session_emb, _first_sessions(new_labels)) if config.clue_merge == "leaders" else None
    return ClueState(new_labels, ClueVectors.packed_from(new_emb),
                     (np.concatenate(ci), np.concatenate(cj), np.concatenate(cs)), leader_rows)


def _first_sessions(labels: np.ndarray) -> np.ndarray:
    """The first session of each clue, in clue order (clues are numbered by their first session)."""
    return np.flatnonzero(np.diff(np.maximum.accumulate(labels), prepend=-1) > 0)


def _leader_rows(session_emb: np.ndarray, leader: np.ndarray) -> Rows:
    """The leaders' embeddings, one copy, with room for the adds that append to them (``ClueState.leader_rows``).
    A removal makes them (it passes over the memory anyway), so that the add after it does not."""
    return Rows.holding(session_emb, 256, np.float32, take=leader)


def _leaders(labels: np.ndarray) -> np.ndarray:
    """Per session, the first session of its clue (its leader), by position in ``labels``."""
    present, first = np.unique(labels, return_index=True)
    return first[np.searchsorted(present, labels)]


def _leaders_after_removal(labels: np.ndarray, keep: np.ndarray, session_emb: np.ndarray, delta: float) -> np.ndarray:
    """The leader (a kept position) of each kept session once the sessions ``~keep`` are gone, equal to a fresh
    ``merge_clues(session_emb, delta, "leaders")``. Only what a removed leader set loose is redone, in session order:
    its followers look for their first leader again; a session that becomes or stops being a leader sends the later
    sessions δ-similar to it to do the same."""
    position = np.cumsum(keep) - 1
    old = _leaders(labels)
    lead = np.where(keep[old], position[old], -1)[keep]
    queue = list(np.flatnonzero(lead < 0))
    queued = set(queue)
    heapq.heapify(queue)
    while queue:
        a = heapq.heappop(queue)
        near = np.flatnonzero(session_emb @ session_emb[a] > delta - 1e-4)
        near = near[np.round(exact_cosines(session_emb, near, np.full(len(near), a)), 6) > delta]  # as select_top
        earlier = near[near < a]
        earlier = earlier[lead[earlier] == earlier]
        was = lead[a] == a
        lead[a] = earlier[0] if len(earlier) else a
        if was != (lead[a] == a):
            for s in near[near > a]:
                if s not in queued:
                    queued.add(s)
                    heapq.heappush(queue, s)
    return lead


def assemble(bank: MemoryBank, utt_pairs, clues: ClueState, config: GraphConfig,
             search: UttSearch | None = None) -> MemoryGraph:
    """The CSR graph from its parts: the utterance similarity pairs (directed top-k), the clues and the bank's
    sessions (ownership, turn adjacency, speakers)."""
    counts = np.diff(bank.offset_array)
    n_u, n_c = bank.n_utterances, clues.n_clues
    utt_clue = np.repeat(clues.labels, counts)

    rows, cols, vals = [], [], []
    # ownership
    rows.append(np.arange(n_u)), cols.append(n_u + utt_clue), vals.append(np.ones(n_u, np.float32))
    # similarity: clue–clue and utterance–utterance
    ci, cj, cv = select_top(*clues.candidates, config.gamma, config.max_neighbors)
    rows.append(n_u + ci), cols.append(n_u + cj), vals.append(cv)
    ui, uj, uv = utt_pairs
    rows.append(ui), cols.append(uj), vals.append(uv)
    # consecutive turns of a session
    if config.adjacency_weight > 0 and n_u > 1:
        starts = np.cumsum(counts) - counts
        same = np.ones(n_u - 1, bool)
        b = starts[1:]
        same[(b - 1)[(b > 0) & (b < n_u)]] = False  # no edge across a session boundary
        a = np.flatnonzero(same)
        rows.append(a), cols.append(a + 1), vals.append(np.full(len(a), config.adjacency_weight, np.float32))
    n_p = 0
    if config.speakers:
        names = np.asarray(bank.utt_speakers, dtype=object)
        idx = np.flatnonzero(names != "")
        people, who = np.unique(names[idx], return_inverse=True)
        n_p = len(people)
        rows.append(idx), cols.append(n_u + n_c + who), vals.append(np.ones(len(idx), np.float32))
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals).astype(np.float32)
    n = n_u + n_c + n_p
    return graph_of(utt_clue, clues.vectors, _symmetric(r, c, v, n), n_p, utt_pairs, clues, search,
                    _by_clue(bank, clues.labels))


def _symmetric(r: np.ndarray, c: np.ndarray, v: np.ndarray, n: int) -> sp.csr_matrix:
    """The (n, n) adjacency of directed edges (r → c, weight v, float32): edge types meeting on one pair add up, and
    the pair's weight is the larger of its two directions'."""
    directed = sp.csr_matrix((v, (r, c)), shape=(n, n))
    adj = directed.maximum(directed.T).tocsr().astype(np.float32)
    adj.sort_indices()
    return adj


def _by_clue(bank: MemoryBank, labels: np.ndarray) -> np.ndarray:
    """Utterance rows grouped by clue (``labels``: each session's), ascending within a clue: its sessions in order."""
    return bank.session_utterances(np.argsort(labels, kind="stable"))


def _entries(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The positions of the CSR rows ``rows``' entries (``indptr``), row after row (int64)."""
    return spans(indptr[rows], indptr[rows + 1] - indptr[rows])


def _spliced(g: MemoryGraph, bank: MemoryBank, utt_pairs, clues: ClueState, config: GraphConfig,
             search: UttSearch | None, utt_map: np.ndarray | None, clue_map: np.ndarray, fresh: np.ndarray,
             grouped: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
             touched: np.ndarray | None = None) -> MemoryGraph:
    """``assemble(bank, utt_pairs, clues, config, search)`` for ``g`` after a write, made from ``g``'s rows without
    rebuilding the matrix (no speaker nodes). ``utt_map``: each of ``g``'s utterances' new node (-1: removed; the
    kept ones come first, in their order, then the new ones; None: an add, each old utterance keeps its node);
    ``clue_map``: each of ``g``'s clues' new clue (read only for the rows copied); ``fresh``: the utterances whose
    rows the write changed (every new one; the ends of similarity pairs made or lost; those whose clue changed other
    than by its name); ``grouped``: the new graph's ``utt_clue``, ``by_clue`` and ``clue_sizes`` where the caller has
    them (made here when None); ``touched``: where no clue was renumbered (``clue_map`` the identity), the clues
    (int64) whose members, embedding or candidate pairs changed (None: every clue row is made again).

    Fresh utterance rows come from ``_utterance_rows``, fresh clue rows (the touched ones and their clue–clue
    neighbours before and after) from ``_clue_rows``, and every other row is the old one: where no clue was
    renumbered in an add, left where it lies in the pools, the rows whose transition values change appended with the
    fresh ones (``_appended``); else copied, its columns renamed (``kernels/csr_splice.py``, which also writes the
    transition's values: degrees of copied rows are kept).
    """
    n_old, n, n_c = g.n_utt, bank.n_utterances, clues.n_clues
    if grouped is None:
        utt_clue = np.repeat(clues.labels, np.diff(bank.offset_array))
        grouped = utt_clue, _by_clue(bank, clues.labels), np.bincount(utt_clue, minlength=n_c)
    utt_clue, by_clue, clue_sizes = grouped
    adding = utt_map is None
    if adding:  # no pass over a mask of the old utterances: each keeps its node
        old_of = None
        kept_degree, same = g.degree[:n_old], n_old
    else:
        kept = np.flatnonzero(utt_map >= 0)
        old_of = np.concatenate([kept, np.full(n - len(kept), -1)])  # new utterance -> old
        kept_degree, same = g.degree[kept], None
    rows_f = np.flatnonzero(fresh)
    u_indptr, u_indices, u_data = _utterance_rows(g, bank, utt_pairs, config, utt_map, old_of, fresh, utt_clue)
    if touched is None:
        clues_f, clue_edges = np.arange(n_c), _clue_edges(clues.candidates, config, n_c)
    else:
        clues_f, clue_edges = _changed_clues(g, clues.candidates, config, n_c, touched)
    c_indptr, c_indices, c_data = _clue_rows(bank.n_utterances, clue_sizes, clue_edges, by_clue, clues_f)
    f_indptr = np.concatenate([u_indptr, u_indptr[-1] + c_indptr[1:]])
    f_indices, f_data = np.concatenate([u_indices, c_indices]), np.concatenate([u_data, c_data])
    degree = np.empty(n + n_c)
    degree[: len(kept_degree)], degree[len(kept_degree) : n] = kept_degree, 0.0
    if touched is not None:  # no clue renumbered: the clues not fresh keep their degree
        degree[n : n + g.n_clues] = g.degree[n_old : n_old + g.n_clues]
    fresh_degree = _row_sums(f_indptr, f_data)
    degree[rows_f], degree[n + clues_f] = fresh_degree[: len(rows_f)], fresh_degree[len(rows_f) :]
    if (degree == 0).any():  # a lonely node keeps its mass through a self-loop: the full build makes that
        return assemble(bank, utt_pairs, clues, config, search)
    f_indices = encode(f_indices, n)
    written = np.concatenate([rows_f, n + clues_f])
    edges = _appended(g, n, written, f_indptr, f_indices, f_data, degree) if adding and touched is not None else None
    if edges is None:
        if adding:
            utt_map = np.arange(n_old)
            old_of = np.concatenate([utt_map, np.full(n - n_old, -1)])
        source = np.concatenate([old_of, n_old + np.arange(n_c)])  # rows not fresh: their old rows
        source[written] = -1 - np.arange(len(written))
        if same is None:
            moved = np.flatnonzero(utt_map != np.arange(n_old))
            same = int(moved[0]) if len(moved) else n_old
        from .kernels.csr_splice import splice  # Numba loads on the first write, not on import

        old = g.edges
        indptr, indices, data, scaled = splice(old.start, old.end, old.indices, old.data, source, f_indptr, f_indices,
                                               f_data, utt_map, clue_map, n, (1.0 / degree).astype(np.float32), same)
        nnz = int(indptr[-1])
        edges = SlottedCSR.spliced(indptr, *(Rows.over(x, nnz) for x in (indices, data, scaled)), n)
    return MemoryGraph(utt_clue, clues.vectors, edges, degree, 0, utt_pairs, clues, search, by_clue, clue_sizes)


GARBAGE_SHARE = 1.0  # an add splices the whole matrix anew (leaving the garbage behind) where the pools would hold
# more garbage than this share of the rows' entries: amortised, each entry an add writes is copied about once more


def _appended(g: MemoryGraph, n: int, written: np.ndarray, f_indptr: np.ndarray, f_indices: np.ndarray,
              f_data: np.ndarray, degree: np.ndarray) -> SlottedCSR | None:
    """The rows of the graph after an add that renumbers no clue, ``g``'s rows where they lie but for these appended:
    the fresh rows (``written``, int64 ascending: their nodes, ``f_indptr`` / stored columns ``f_indices`` /
    ``f_data`` their entries) and the rows whose transition values change (the neighbours of a node whose degree
    changed, their entries as they were, rescaled). ``n``: utterances after the add; ``degree``: every node's after
    it. None where the pools would then hold more garbage than ``GARBAGE_SHARE`` of the rows' entries (the caller
    splices). The entries cost O(the rows written); the arrays of a row's bounds, O(nodes), are copied."""
    old, n_old = g.edges, g.n_utt
    old_node = np.where(written < n, written, written - n + n_old)  # each fresh row's node in ``g``
    existed = np.where(written < n, written < n_old, written - n < g.n_clues)
    changed = ~existed
    changed[existed] = degree[written[existed]] != g.degree[old_node[existed]]
    lengths = np.diff(f_indptr)
    near = decode(f_indices[spans(f_indptr[:-1][changed], lengths[changed])], n)  # a row holding a changed column
    rescale = np.setdiff1d(sets.unique(near), written, assume_unique=True)  # is the column's row's neighbour
    source = np.where(rescale < n, rescale, rescale - n + n_old)  # old rows, copied as they are
    kept = old.lengths(source)
    dropped = int(old.lengths(old_node[existed]).sum() + kept.sum())
    nnz = old.nnz - dropped + len(f_indices) + int(kept.sum())
    if old.garbage + dropped > GARBAGE_SHARE * nnz:
        return None
    at = spans(old.start[source], kept)
    indices, data = np.concatenate([f_indices, old.indices[at]]), np.concatenate([f_data, old.data[at]])
    scaled = data * (1.0 / degree[decode(indices, n)]).astype(np.float32)
    n_c = len(degree) - n
    start, end = ((np.concatenate([x[:n_old], np.zeros(n - n_old, np.int64), x[n_old:],
                                   np.zeros(n_c - g.n_clues, np.int64)])) for x in (old.start, old.end))
    indptr = np.concatenate([f_indptr, f_indptr[-1] + np.cumsum(kept)])
    return old.appended(start, end, n, np.concatenate([written, rescale]), indptr, indices, data, scaled, nnz)


def _utterance_rows(g: MemoryGraph, bank: MemoryBank, utt_pairs, config: GraphConfig, utt_map: np.ndarray | None,
                    old_of: np.ndarray | None, fresh: np.ndarray, utt_clue: np.ndarray):
    """The rows (CSR: indptr, int64 indices, float32 data) of the ``fresh`` utterances (new numbering), as
    ``assemble`` makes them: their similarity and turn edges, then the ownership edge (clue nodes follow the
    utterances). Made from the directed edges that touch them: the lists of the fresh rows and of their old
    neighbours (a pair into a fresh row from a row that kept its list is an old edge), and the turns beside them.
    ``utt_map`` / ``old_of``: old utterance -> new and new -> old (-1: none); None: an add (each keeps its node)."""
    n_old, n = g.n_utt, bank.n_utterances
    off = bank.offset_array
    rows_f = np.flatnonzero(fresh)
    was = rows_f[rows_f < n_old] if old_of is None else old_of[rows_f]
    was = was[was >= 0]
    near = g.edges.nodes(was)
    near = near[near < n_old]
    if utt_map is not None:
        near = utt_map[near]
    reach = sets.unique(np.concatenate([rows_f, near[near >= 0]]))
    pr, pc, ps = utt_pairs
    lo = np.searchsorted(pr, reach)
    at = spans(lo, np.searchsorted(pr, reach, side="right") - lo)
    r, c, v = pr[at], pc[at], ps[at]
    touch = fresh[r] | fresh[c]
    r, c, v = [r[touch]], [c[touch]], [v[touch]]
    if config.adjacency_weight > 0:  # consecutive turns of a session, beside a fresh row
        a = sets.unique(np.concatenate([rows_f, rows_f - 1]))
        a = a[(a >= 0) & (a + 1 < n)]
        a = a[np.searchsorted(off, a, side="right") == np.searchsorted(off, a + 1, side="right")]
        r.append(a), c.append(a + 1), v.append(np.full(len(a), config.adjacency_weight, np.float32))
    r, c = np.concatenate(r), np.concatenate(c)
    ids = sets.unique(np.concatenate([r, c, rows_f]))  # the nodes involved, renumbered in order: rows stay sorted
    sym = _symmetric(np.searchsorted(ids, r), np.searchsorted(ids, c), np.concatenate(v).astype(np.float32),
                     len(ids))[np.searchsorted(ids, rows_f)]
    indptr = np.concatenate([[0], np.cumsum(np.diff(sym.indptr) + 1)])  # and the ownership edge, last
    indices, data = np.empty(indptr[-1], np.int64), np.empty(indptr[-1], np.float32)
    own = indptr[1:] - 1
    inner = np.ones(len(indices), bool)
    inner[own] = False
    indices[inner], data[inner] = ids[sym.indices], sym.data
    indices[own], data[own] = n + utt_clue[rows_f], 1.0
    return indptr, indices, data


def _changed_clues(g: MemoryGraph, candidates, config: GraphConfig, n_c: int, touched: np.ndarray):
    """The clue rows (int64, ascending) a write changes where no clue was renumbered, given the ``touched`` clues,
    and the clue–clue matrix with those rows made (``_clue_edges``): only a touched clue's top-k list can change, so
    a clue–clue edge made or lost has a touched end, and its other end is among that clue's neighbours in ``g`` or
    among its candidates (where its new edges are)."""
    n_old = g.n_utt
    before = g.edges.nodes(touched[touched < g.n_clues] + n_old)
    before = before[before >= n_old] - n_old
    ci, cj, _ = candidates
    mark = np.zeros(n_c, bool)
    mark[touched] = True
    clue_edges = _clue_edges(candidates, config, n_c, sets.unique(np.concatenate([touched, before, cj[mark[ci]]])))
    after = clue_edges.indices[_entries(clue_edges.indptr, touched)]
    return sets.unique(np.concatenate([touched, before, after])), clue_edges


def _clue_edges(candidates, config: GraphConfig, n_c: int, rows: np.ndarray | None = None) -> sp.csr_matrix:
    """The symmetric clue–clue matrix (n_c, n_c) of the clues' candidate pairs (``select_top``'s lists, as
    ``assemble`` makes them; ``ClueState.candidates`` holds each pair both ways). With ``rows`` (int64) only those
    rows are whole (the others hold at most some of their edges): an edge r–c is in r's list or in c's, and c is
    among r's candidates, so the lists of ``rows`` and of their candidates are enough (an add reads its clues'
    neighbourhood, not every clue's pairs: the add stages' ``_spliced`` at 25,000 sessions 7.0–7.1 → 6.5–6.8
    ms)."""
    ci, cj, cs = candidates
    if rows is not None:
        mine = np.zeros(n_c, bool)
        mine[rows] = True
        lists = mine.copy()
        lists[cj[mine[ci]]] = True
        at = lists[ci]
        ci, cj, cs = ci[at], cj[at], cs[at]
    r, c, v = select_top(ci, cj, cs, config.gamma, config.max_neighbors)
    if rows is not None:
        keep = mine[r] | mine[c]
        r, c, v = r[keep], c[keep], v[keep]
    return _symmetric(r, c, v, n_c)


def _clue_rows(n: int, sizes: np.ndarray, clue_edges: sp.csr_matrix, by_clue: np.ndarray, which: np.ndarray):
    """The rows of the clue nodes ``which`` (int64, ascending; CSR: indptr, int64 indices, float32 data, as
    ``assemble`` makes them) of a graph of ``n`` utterances: each clue's members (ascending; ``by_clue`` holds the
    members of each clue in turn, ``sizes`` (int64) how many), then its clue–clue edges (``clue_edges``: the
    symmetric clue–clue matrix)."""
    starts = np.cumsum(sizes) - sizes
    counts, edge_counts = sizes[which], clue_edges.indptr[which + 1] - clue_edges.indptr[which]
    indptr = np.concatenate([[0], np.cumsum(counts + edge_counts)])
    indices, data = np.empty(indptr[-1], np.int64), np.empty(indptr[-1], np.float32)
    members = spans(indptr[:-1], counts)
    indices[members], data[members] = by_clue[spans(starts[which], counts)], 1.0
    edges = spans(indptr[:-1] + counts, edge_counts)
    at = _entries(clue_edges.indptr, which)
    indices[edges], data[edges] = n + clue_edges.indices[at], clue_edges.data[at]
    return indptr, indices, data
