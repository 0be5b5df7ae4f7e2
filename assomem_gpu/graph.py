"""The associative memory graph (paper §3.2.1), built in one vectorised pass per memory.

Nodes are ``[utterances | clues | speakers]``. Edges (symmetric, weighted, CSR):
- ownership: utterance — the (merged) clue of its session;
- similarity: clue — clue and utterance — utterance pairs with cosine above γ, the ``max_neighbors`` strongest per
  node (all pairs compared below ``exact_limit`` utterances; above it, the candidates come from an inverted file,
  ``ivf.py``);
- turn adjacency: consecutive utterances of a session (the dialogue's own structure; weight 0 turns it off);
- speakers (optional, the paper's metadata extension): utterance — the person who said it.

Clues: one per session (``clues.py`` makes their text and embeddings), merged when their cosine exceeds δ, transitively
(connected components of the δ-graph); a merged clue's embedding is the normalised mean of its members'.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from . import ivf
from .ivf import Codebook
from .memory import MemoryBank


@dataclass(frozen=True)
class GraphConfig:
    delta: float = 0.7  # clue merge threshold δ
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
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= -1):
                raise ValueError(f"GraphConfig.{name} must be a finite cosine threshold >= -1, got {value!r}")
        for name, low in (("max_neighbors", 0), ("exact_limit", 0), ("n_probe", 1), ("list_size", 1)):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
                raise ValueError(f"GraphConfig.{name} must be an integer >= {low}, got {value!r}")
        if not (isinstance(self.adjacency_weight, (int, float)) and 0 <= self.adjacency_weight < math.inf):
            raise ValueError(f"GraphConfig.adjacency_weight must be finite and >= 0, got {self.adjacency_weight!r}")


@dataclass(frozen=True)
class ClueState:
    """What growing a memory's clues needs: the clue of each session, the clue embeddings, and every clue pair above
    γ (both directions, before the per-node top-k), so that a merge can drop a clue's pairs and find its new ones."""

    labels: np.ndarray  # clue of each memory session (int64)
    emb: np.ndarray  # (n_clues, dim) float32, L2-normalised
    candidates: tuple[np.ndarray, np.ndarray, np.ndarray]  # (i, j, cosine) clue pairs above γ


@dataclass(frozen=True)
class UttSearch:
    """The inverted file a large memory's utterance pairs (and its questions' relevance) come from: the codebook,
    every utterance's probes, ``lists`` (the lists' members and bounds, ``ivf.members``) and ``held`` (the lists
    that have members, and a codebook of their centroids, which questions probe)."""

    codebook: Codebook
    probe: np.ndarray  # (n_utt, n_probe) int32, nearest list first

    def __post_init__(self):  # made with the search, as the graph's transition is: questions only read them
        order, bounds = ivf.members(self.probe, self.codebook.n_lists)
        held = np.flatnonzero(np.diff(bounds) > 0)  # removals can empty a list: questions probe the others
        object.__setattr__(self, "lists", (order, bounds))
        object.__setattr__(self, "held", (held, Codebook(self.codebook.centroids[held], self.codebook.rows)))


@dataclass
class MemoryGraph:
    """The graph of one memory. Utterance node ``i`` is the memory's utterance ``i``; clue node ``n_utt + c``."""

    utt_clue: np.ndarray  # clue of each utterance node (int64)
    clue_emb: np.ndarray  # (n_clues, dim) float32, L2-normalised
    adjacency: sp.csr_matrix  # (n_nodes, n_nodes) float32, symmetric
    n_speakers: int = 0
    utt_pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # directed top-k similarity pairs, by row
    clues: ClueState | None = None  # what grow_graph / shrink_graph update (kept when the clue nodes are dropped)
    search: UttSearch | None = None  # how the utterance pairs were found (None: all pairs compared)

    def __post_init__(self):
        self.by_clue = np.argsort(self.utt_clue, kind="stable")  # utterance nodes grouped by clue, in node order
        self.clue_sizes = np.bincount(self.utt_clue, minlength=self.n_clues)
        self.owning = np.flatnonzero(self.clue_sizes > 0)  # clues that own an utterance (a session may have none)
        self.owning_starts = (np.cumsum(self.clue_sizes) - self.clue_sizes)[self.owning]  # where each starts in by_clue
        self.transition = self._transition()  # made with the graph: searches only read it

    @property
    def n_utt(self) -> int:
        return len(self.utt_clue)

    @property
    def n_clues(self) -> int:
        return len(self.clue_emb)

    @property
    def n_nodes(self) -> int:
        return self.n_utt + self.n_clues + self.n_speakers

    def reach(self, seeds: np.ndarray, hops: int) -> np.ndarray:
        """The nodes within ``hops`` edges of the ``seeds`` (node ids), ascending (utterance nodes first)."""
        indptr, indices = self.adjacency.indptr, self.adjacency.indices
        seen, fresh = np.zeros(self.n_nodes, bool), np.zeros(self.n_nodes, bool)
        seen[seeds] = True
        frontier = np.flatnonzero(seen)
        for _ in range(hops):
            starts, ends = indptr[frontier], indptr[frontier + 1]
            lengths = ends - starts
            at = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
            found = indices[at]
            fresh[found[~seen[found]]] = True  # a mask, not a sort, makes the next frontier distinct
            frontier = np.flatnonzero(fresh)
            if len(frontier) == 0:
                break
            seen[frontier], fresh[frontier] = True, False
        return np.flatnonzero(seen)

    def _transition(self) -> sp.csr_matrix:
        """Column-stochastic transition matrix M of eq. 2 (a node without edges keeps its mass), with int64 indices
        (the CPU PPR kernel runs twice as fast on them; device copies take int32)."""
        m = self._column_stochastic()
        m.indptr, m.indices = m.indptr.astype(np.int64), m.indices.astype(np.int64)
        return m

    def _column_stochastic(self) -> sp.csr_matrix:
        deg = np.asarray(self.adjacency.sum(axis=0)).ravel()
        lonely = np.flatnonzero(deg == 0)
        adj = self.adjacency + sp.csr_matrix((np.ones(len(lonely), np.float32), (lonely, lonely)), shape=self.adjacency.shape)
        deg[lonely] = 1.0
        return (adj @ sp.diags((1.0 / deg).astype(np.float32))).tocsr().astype(np.float32)


def exact_cosines(emb: np.ndarray, rows: np.ndarray, cols: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """float64 cosines of the pairs (rows[i], cols[i]) of ``emb``, one pair at a time (symmetric to the bit): the same
    bits whichever search found the pair (FAISS, a GEMM, a GEMV), so rounding, thresholds and ties agree between a
    build and an update."""
    out = np.empty(len(rows), np.float64)
    for lo in range(0, len(rows), chunk):
        a = emb[rows[lo : lo + chunk]].astype(np.float64)
        out[lo : lo + chunk] = (a * emb[cols[lo : lo + chunk]]).sum(axis=1)
    return out


def similarity_pairs(emb: np.ndarray, threshold: float, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (i, j, cosine), i != j, with cosine > threshold, at most the ``k`` most similar per row.

    FAISS range search finds the candidate pairs; their cosines are recomputed exactly (``exact_cosines``) and rounded
    to 1e-6 so that equal vectors tie exactly, and ties are broken by the lower index, which makes the edge set
    independent of BLAS rounding.
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


def _range_search(x: np.ndarray, radius: float, block: int = 2048) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (i, j, x_i·x_j), i != j, with inner product above ``radius`` (the products as ``exact_cosines`` gives them).

    The products are symmetric, so only the upper triangle is searched (block rows against the rows from the block
    on: half the work of a full search) and each pair is mirrored; FAISS searches when installed, else GEMMs.
    """
    try:
        import faiss
    except ImportError:
        faiss = None
    rows, cols = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for lo in range(0, len(x), block):
        query, base = x[lo : lo + block], x[lo:]
        if faiss is not None:
            index = faiss.IndexFlatIP(x.shape[1])
            index.add(base)
            lims, _, c = index.range_search(query, radius)
            r = np.repeat(np.arange(len(query)), np.diff(lims).astype(np.int64))
        else:
            r, c = np.nonzero(query @ base.T > radius)
        upper = c > r  # base row c is x row lo + c; query row r is x row lo + r
        rows.append(lo + r[upper]), cols.append(lo + c[upper].astype(np.int64))
    i, j = np.concatenate(rows), np.concatenate(cols)
    s = exact_cosines(x, i, j)
    return np.concatenate([i, j]), np.concatenate([j, i]), np.concatenate([s, s])


def merge_clues(session_emb: np.ndarray, delta: float) -> np.ndarray:
    """Clue label of each session: connected components of the graph of clue pairs with cosine > δ (labels in the
    order of each component's first session)."""
    n = len(session_emb)
    if n == 0:
        return np.zeros(0, np.int64)
    i, j, _ = similarity_pairs(session_emb, delta, k=n)
    graph = sp.csr_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    return labels.astype(np.int64)


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
    labels = merge_clues(session_emb, config.delta)
    emb = _clue_means(session_emb, labels, int(labels.max()) + 1 if len(labels) else 0)
    pairs = _range_search(emb, config.gamma - 1e-4) if len(emb) > 1 else _no_pairs()
    return ClueState(labels, emb, pairs)


def grow_clue_state(state: ClueState, session_emb: np.ndarray, config: GraphConfig) -> ClueState:
    """``state`` with the sessions ``session_emb[len(state.labels):]`` added one by one, equal to ``clue_state``
    (bit for bit: both take their cosines from ``exact_cosines``).

    A new session either starts a clue (components are numbered by their first session, so it comes last) or joins
    every clue it links to into the first of them; only that clue's embedding and pairs are recomputed.
    """
    labels, emb, (ci, cj, cs) = state.labels, state.emb, state.candidates
    for s in range(len(labels), len(session_emb)):
        near = np.flatnonzero(session_emb[:s] @ session_emb[s] > config.delta - 1e-4)
        sims = np.round(exact_cosines(session_emb, near, np.full(len(near), s)), 6)  # as select_top rounds
        linked = np.unique(labels[near[sims > config.delta]])
        n_c = len(emb)
        remap = np.arange(n_c)
        if len(linked) == 0:
            target, stale = n_c, np.zeros(0, np.int64)
            emb = np.concatenate([emb, np.zeros((1, emb.shape[1]), np.float32)])
        else:
            target, removed = int(linked[0]), linked[1:]
            remap = remap - np.searchsorted(removed, remap)
            remap[removed] = target
            stale = linked
            emb = np.delete(emb, removed, axis=0)
        labels = np.append(remap[labels], target)
        emb[target] = _clue_means(session_emb[: s + 1][labels == target], np.zeros(int((labels == target).sum()),
                                                                                   np.int64), 1)[0]
        keep = ~(np.isin(ci, stale) | np.isin(cj, stale))
        others = np.flatnonzero(emb @ emb[target] > config.gamma - 1e-4)
        others = others[others != target]
        mine = np.full(len(others), target, np.int64)
        sims = exact_cosines(emb, mine, others)
        ci = np.concatenate([remap[ci[keep]], mine, others])
        cj = np.concatenate([remap[cj[keep]], others, mine])
        cs = np.concatenate([cs[keep], sims, sims])
    return ClueState(labels, emb, (ci, cj, cs))


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


def _by_row(rows: np.ndarray, cols: np.ndarray, sims: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs made of whole rows' lists, each in ``select_top``'s order, put in row order (a stable sort keeps each
    list's order, so the result is what ``select_top`` of all of them gives)."""
    order = np.argsort(rows, kind="stable")
    return rows[order], cols[order], sims[order]


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
    if search is None:
        new_r, all_c = np.nonzero(np.ascontiguousarray(utt_emb[n_old:]) @ utt_emb.T > radius)
        fr, fc = n_old + new_r, all_c
        back = fc < n_old
        br, bc = fc[back], fr[back]  # old utterance -> new utterance candidates
    else:
        search = UttSearch(search.codebook, np.concatenate([search.probe, ivf.probes(search.codebook, utt_emb[n_old:],
                                                                                      config.n_probe)]))
        fr, fc = ivf.candidate_pairs(utt_emb, search.probe, new, np.arange(n), radius, config.max_neighbors)
        probed = np.zeros(search.codebook.n_lists, bool)
        probed[search.probe[new, 0]] = True
        hit = np.flatnonzero(probed[search.probe[:n_old]].any(axis=1))  # old rows that probe a new row's list
        br, bc = ivf.candidate_pairs(utt_emb, search.probe, hit, new, radius, config.max_neighbors)
    rows, cols, sims = g.utt_pairs
    affected = np.zeros(n, bool)
    affected[new], affected[br] = True, True
    mine = affected[rows]
    cand_r, cand_c = np.concatenate([fr, br]), np.concatenate([fc, bc])
    top = select_top(np.concatenate([rows[mine], cand_r]), np.concatenate([cols[mine], cand_c]),
                     np.concatenate([sims[mine], exact_cosines(utt_emb, cand_r, cand_c)]), config.gamma,
                     config.max_neighbors)
    pairs = _by_row(*(np.concatenate([x[~mine], t]) for x, t in zip((rows, cols, sims), top)))
    return assemble(bank, pairs, clues, config, search)


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
        search = UttSearch(search.codebook, search.probe[keep_utt])
        r, c = ivf.candidate_pairs(utt_emb, search.probe, redo, np.arange(len(utt_emb)), radius,
                                    config.max_neighbors)
    top = select_top(r, c, exact_cosines(utt_emb, r, c), config.gamma, config.max_neighbors)
    pairs = _by_row(*(np.concatenate([x, t]) for x, t in zip((new_of[rows[stay]], new_of[cols[stay]], sims[stay]),
                                                              top)))
    return assemble(bank, pairs, shrink_clue_state(g.clues, keep_sessions, session_clue_emb, config), config, search)


def shrink_clue_state(state: ClueState, keep: np.ndarray, session_emb: np.ndarray, config: GraphConfig) -> ClueState:
    """``state`` without the sessions whose ``keep`` mask is False, equal to ``clue_state(session_emb)`` (the kept
    sessions' clue embeddings). Only the clues that lost a session are split again (the δ-components among their
    remaining sessions); their embeddings and pairs are recomputed, the others keep theirs."""
    labels, emb, (ci, cj, cs) = state.labels, state.emb, state.candidates
    kept_labels = labels[keep]
    touched = np.zeros(len(emb), bool)
    touched[labels[~keep]] = True
    present, first = np.unique(kept_labels, return_index=True)
    untouched, firsts = present[~touched[present]], list(first[~touched[present]])
    pieces = []  # the kept sessions of each clue split anew
    for c in present[touched[present]]:
        members = np.flatnonzero(kept_labels == c)
        sub = merge_clues(session_emb[members], config.delta)
        split = [members[sub == p] for p in range(int(sub.max()) + 1)]
        pieces += split
        firsts += [p[0] for p in split]
    rank = np.empty(len(firsts), np.int64)
    rank[np.argsort(np.asarray(firsts, np.int64), kind="stable")] = np.arange(len(firsts))  # numbered by first session
    old_to_new = np.full(len(emb), -1, np.int64)
    old_to_new[untouched] = rank[: len(untouched)]
    new_labels = old_to_new[kept_labels]
    new_emb = np.zeros((len(firsts), session_emb.shape[1]), np.float32)
    new_emb[rank[: len(untouched)]] = emb[untouched]
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
    return ClueState(new_labels, new_emb, (np.concatenate(ci), np.concatenate(cj), np.concatenate(cs)))


def assemble(bank: MemoryBank, utt_pairs, clues: ClueState, config: GraphConfig,
             search: UttSearch | None = None) -> MemoryGraph:
    """The CSR graph from its parts: the utterance similarity pairs (directed top-k), the clues and the bank's
    sessions (ownership, turn adjacency, speakers)."""
    counts = np.diff(bank.offset_array)
    n_u, n_c = bank.n_utterances, len(clues.emb)
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
    directed = sp.csr_matrix((v, (r, c)), shape=(n, n))  # edge types meeting on one pair add up
    adj = directed.maximum(directed.T).tocsr().astype(np.float32)
    return MemoryGraph(utt_clue, clues.emb, adj, n_p, utt_pairs, clues, search)
