"""Signal scoring: a batch of questions against one memory's state, up to each question's candidates and their
normalised signals (relevance, importance, temporal, lexical, context, session, lexical context, user relevance,
reply), padded to the batch's widest candidate list.

Every stage runs on the backend's arrays (``backend.xp``: numpy, or CuPy on the device, where the memory's
embeddings, graph and BM25 weights are uploaded once per index version), so a batch stays where it is scored; only
time expressions and marks, for the questions with a temporal intent, and the BM25 top of each question that joins
its candidates (``BM25Index.top``, a sparse product over its terms' postings) are computed on the host. The result
does not depend on the fusion weights: calibration and cross-validation score once and fuse many times.
"""
from __future__ import annotations

import functools
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import ivf
from .backend import Backend
from .config import AssoMemConfig
from .graph import MemoryGraph
from .sentences import best_cosines
from .signals.context import context_scores
from .signals.lexical_context import lexical_context_scores
from .signals.reply import reply_scores
from .signals.session import session_scores
from .signals.temporal import RESOLVED, TimeConstraint, parse_constraint, temporal_scores
from .signals.user_relevance import asked_speaker, user_relevance_scores
from .state import MemoryState

CLUE_HEAD = 4  # clues a question ranks first, in multiples of top_clues (``_clue_order``)


@dataclass(frozen=True)
class Queries:
    """A batch of questions: embeddings (B, dim) float32 L2-normalised, texts (for BM25 and time expressions), dates
    (POSIX seconds, NaN unknown) and, optionally, which utterances each may return (B, n_utt) bool."""

    emb: np.ndarray
    texts: list[str]
    dates: np.ndarray
    allowed: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def part(self, lo: int, hi: int) -> "Queries":
        return Queries(self.emb[lo:hi], self.texts[lo:hi], self.dates[lo:hi],
                       None if self.allowed is None else self.allowed[lo:hi])


@dataclass
class Scored:
    """A scored batch, in the backend's arrays: per question its candidates (utterance rows, ascending) and their
    z-scored signals, padded to the widest; and its cosines to the utterances that follow the candidates."""

    candidates: Any  # (B, C) int64, -1 past counts[b]
    counts: Any  # (B,) int64
    signals: Any  # (B, C, n_signals) float64 z-scores, 0 past counts[b]
    active: Any  # (B, n_signals) bool: the signals each question has (no time constraint: no temporal signal)
    relevance: Any  # (B, n) float32 cosines, -inf where a filter excludes the utterance (or past a row's end)
    relevance_rows: Any = None  # (B, n) the utterance rows of relevance's columns (-1: none), where they are not
    # 0 .. n_utt − 1 (a probed relevance: the members of the lists each question probed)
    everything: Callable[[], Any] | None = None  # with relevance_rows: the cosines to every utterance (B, n_utt),
    # computed when a ranking must reach past the probed ones

    def __len__(self) -> int:
        return len(self.counts)

    def features(self, backend: Backend) -> list["Features"]:
        """The batch per question, on the host (what calibration reads)."""
        cand, counts, z, active, rel = (backend.to_host(x) for x in (self.candidates, self.counts, self.signals,
                                                                      self.active, self.relevance))
        rows = None if self.relevance_rows is None else backend.to_host(self.relevance_rows)
        out = []
        for b in range(len(counts)):
            cols = np.flatnonzero(rel[b] > -np.inf)
            if rows is not None:
                cols = cols[np.argsort(rows[b, cols], kind="stable")]  # in memory order
            rest = cols if rows is None else rows[b, cols]
            keep = ~np.isin(rest, cand[b, : counts[b]])
            out.append(Features(cand[b, : counts[b]], z[b, : counts[b]], active[b], rest[keep], rel[b, cols[keep]]))
        return out


@dataclass
class Features:
    """One question's candidates (utterance rows) with their z-scored signals, and the rest of its memory (with a
    probed relevance, the rest of what its lists hold)."""

    candidates: np.ndarray
    scores: np.ndarray  # (n_candidates, n_signals)
    active: np.ndarray  # (n_signals,) bool: signals this question has
    rest: np.ndarray  # the memory's other (allowed) utterances, in memory order
    rest_relevance: np.ndarray  # their cosine to the question: they follow the candidates in this order


def score(state: MemoryState, queries: Queries, config: AssoMemConfig, backend: Backend, stage=None) -> list[Scored]:
    """Candidates and normalised signals of each question, in passes of at most ``backend.max_batch`` questions.
    ``stage(name)``, when given, is a context manager that times each stage."""
    step = backend.max_batch
    return [_score(state, queries.part(lo, lo + step), config, backend, stage or (lambda name: nullcontext()))
            for lo in range(0, len(queries), step)]


@dataclass
class Relevance:
    """A batch's cosines to a memory's utterances, as the stages read them: ``values`` (B, n) float32 over every
    utterance (``rows`` None; -inf where a filter excludes one) or, probed, over the members of the IVF lists each
    question probes (``rows`` (B, n), each question's ascending, -1 past them); ``mass`` (B,) the clipped sum of
    ``values``."""

    backend: Backend
    q: Any  # (B, dim) the questions
    emb: Any  # (n_utt, dim) the memory's utterances
    values: Any
    rows: Any
    mass: Any

    @property
    def xp(self):
        return self.backend.xp

    def everything(self, part=slice(None)):
        """(len(part), n_utt) the cosines of questions ``part`` (default: all) to every utterance (what ``values``
        are when not probed)."""
        return self.values[part] if self.rows is None else self.backend.cosines(self.emb, self.q[part])

    @functools.cached_property
    def _keys(self):
        """Probed: ``question · (n_utt + 1) + row`` of every probed member, ascending over the batch (each question's
        rows ascend; its padding, -1, counts as n_utt, after them)."""
        n = len(self.emb) + 1
        return (self.xp.arange(len(self.rows))[:, None] * n + self.xp.where(self.rows < 0, n - 1, self.rows)).ravel()

    def of_rows(self, at, valid):
        """(B, C) each question's cosines to its utterance rows ``at`` where ``valid`` (elsewhere padding: any
        value)."""
        xp = self.xp
        if self.rows is None:
            return xp.take_along_axis(self.values, at, axis=1)
        out = xp.zeros(at.shape, np.float32)
        qb, cc = xp.nonzero(valid)
        out[qb, cc] = self.of_pairs(qb, at[qb, cc])
        return out

    def of_pairs(self, questions, rows):
        """(n,) the cosine of question ``questions[i]`` to utterance row ``rows[i]`` (1-d arrays). Probed, a row
        among its question's probed members is read from ``values``, only the others computed
        (``Backend.pair_cosines``)."""
        xp = self.xp
        if self.rows is None:
            return self.values[questions, rows]
        held = self._keys
        want = questions * (len(self.emb) + 1) + rows
        if len(held) == 0:
            return self.backend.pair_cosines(self.emb, self.q, questions, rows)
        at = xp.minimum(xp.searchsorted(held, want), len(held) - 1)
        found = held[at] == want
        out = xp.where(found, self.values.ravel()[at], np.float32(0))
        miss = xp.flatnonzero(~found)
        if len(miss):
            out[miss] = self.backend.pair_cosines(self.emb, self.q, questions[miss], rows[miss])
        return out


PROBED_SHARE = 8  # probing pays when the probed lists are at most 1/8 of the memory's lists


def probing(g: MemoryGraph, queries: Queries, config: AssoMemConfig) -> bool:
    """Whether relevance is computed only on the IVF lists each question probes (``config.query_probe``): in a
    memory past ``exact_limit`` utterances (it has an inverted file) of at least ``PROBED_SHARE`` × as many lists
    (probing 41% of a 2,500-session memory's lists costs twice the product with every utterance; 5% of a
    25,000-session memory's, half of it), with clue nodes (the candidates are their utterances) and without a filter
    (a filtered search keeps the exact path)."""
    return (config.query_probe > 0 and g.search is not None and config.clues and g.n_clues > 0
            and queries.allowed is None and PROBED_SHARE * config.query_probe <= g.search.codebook.n_lists)


def relevance(g: MemoryGraph, q, emb, queries: Queries, allowed, config: AssoMemConfig,
              backend: Backend) -> Relevance:
    """The batch's relevance: probed (``probing``) or over every utterance."""
    xp = backend.xp
    if not probing(g, queries, config):
        values = backend.cosines(emb, q)
        if allowed is not None:
            values = xp.where(allowed, values, np.float32(-np.inf))
        return Relevance(backend, q, emb, values, None, xp.maximum(values, 0.0).sum(axis=1))
    order, bounds = g.search.lists
    held, book = g.search.held
    lists = held[ivf.probes(book, queries.emb, config.query_probe)]
    rows, values = ivf.probed_cosines(emb, q, lists, backend.resident(g.search, "order", 0, lambda: order), bounds,
                                      backend)
    return Relevance(backend, q, emb, values, rows, _row_totals(xp.where(rows >= 0, xp.maximum(values, 0.0), 0.0), xp))


def _row_totals(x, xp):
    """(B,) float32 each row's sum, added in order in float64: a row's padding (zeros after its values, as wide as
    the batch's widest row) leaves it as it is, where a pairwise sum's grouping moved with the width."""
    if x.shape[1] == 0:
        return xp.zeros(len(x), np.float32)
    return xp.cumsum(x, axis=1, dtype=np.float64)[:, -1].astype(np.float32)


def _score(state: MemoryState, queries: Queries, config: AssoMemConfig, backend: Backend, stage) -> Scored:
    xp, g, n_sig = backend.xp, state.graph, len(config.signals)
    b = len(queries)
    if g is None:  # an empty memory
        return Scored(xp.zeros((b, 0), np.int64), xp.zeros(b, np.int64), xp.zeros((b, 0, n_sig)),
                      xp.ones((b, n_sig), bool), xp.zeros((b, 0), np.float32))
    with stage("candidates"):
        q = backend.asarray(queries.emb, np.float32)
        emb = backend.resident(state.emb, "view", state.version, lambda: state.emb.view)
        allowed = None if queries.allowed is None else backend.asarray(queries.allowed)
        rel = relevance(g, q, emb, queries, allowed, config, backend)
        lex = state.lexical  # with either lexical signal
        terms = None if lex is None else lex.query_terms(queries.texts)  # tokenised once, for the pool and BM25
        pools = []
        if config.clues and g.n_clues > 0:  # else all are candidates
            if "lexical" in config.signals and config.lexical_pool:
                pools.append(backend.asarray(lex.top(queries.texts, config.lexical_pool, queries.allowed, terms)))
            if config.dense_pool:
                pools.append(dense_top(rel, config.dense_pool, backend))
        pool = xp.concatenate(pools, axis=1) if pools else None
        cand, counts = candidates(g, q, rel.values, rel.rows, allowed, config, backend, pool)
    valid = xp.arange(cand.shape[1]) < counts[:, None]
    at = xp.where(valid, cand, 0)  # padding reads row 0, then counts for nothing
    signals = xp.zeros(cand.shape + (n_sig,))
    rel_at = rel.of_rows(at, valid)
    best = rel_at  # each candidate's relevance: its best passage's (itself or a sentence) with config.sentences
    if state.sentences is not None and len(state.sentences.view):
        with stage("sentences"):
            vectors = backend.resident(state.sentences, "view", state.version, lambda: state.sentences.view)
            starts = backend.resident(state, "sentence_starts", state.version, lambda: state.sentence_starts)
            held = backend.resident(state, "sentence_counts", state.version, lambda: state.sentence_counts)
            best = best_cosines(rel_at, q, at, valid, vectors, starts, held, backend)
    own_bm25 = functools.cache(lambda: lexical(state, terms, at, backend))  # the candidates' BM25, for the lexical
    # signals

    @functools.cache
    def before_bm25():  # the BM25 score of each candidate's turn before (the lexical context), for it and the reply
        session = backend.resident(state, "session_of", state.version, lambda: state.session_of)
        return lexical_context_scores(lambda qb, rows: lexical_pairs(state, terms, qb, rows, b, backend), at,
                                      session, xp, known=own_bm25())

    # whether the speaker each question asks about (the user, or the assistant) said each candidate
    mine = asked_speaker(backend.resident(state, "own", state.version, lambda: state.own)[at], queries.texts, xp) \
        if "user_relevance" in config.signals else None
    for s, name in enumerate(config.signals):
        if name == "relevance":
            signals[:, :, s] = best
        elif name == "importance":
            with stage("ppr"):
                ppr = importance(g, rel, at, valid, config, backend)
                signals[:, :, s] = xp.log(xp.maximum(ppr, 1e-30))
        elif name == "lexical":
            with stage("lexical"):
                signals[:, :, s] = own_bm25()
        elif name == "context":
            with stage("context"):
                norms = backend.resident(state.context, "view", state.version, lambda: state.context.view)
                session = backend.resident(state, "session_of", state.version, lambda: state.session_of)
                signals[:, :, s] = context_scores(rel.of_pairs, at, session, norms, config.context_window, xp,
                                                  known=rel_at)
        elif name == "lexical_context":
            with stage("lexical_context"):
                signals[:, :, s] = before_bm25()
        elif name == "reply":
            with stage("reply"):
                asking = backend.resident(state, "asks", state.version, lambda: state.asks)
                signals[:, :, s] = reply_scores(before_bm25(), at, asking, xp)
        elif name == "session":
            with stage("session"):
                session = backend.resident(state, "session_of", state.version, lambda: state.session_of)
                signals[:, :, s] = session_scores(best, at, valid, session, backend)
        elif name == "temporal":
            with stage("temporal"):
                signals[:, :, s] = temporal(state, queries, cand, counts, backend)
        elif name == "user_relevance":
            signals[:, :, s] = user_relevance_scores(best, mine, valid, xp)
    z = backend.zscore(signals, valid)
    active = xp.ones((b, n_sig), bool)
    if "temporal" in config.signals:  # a question without a temporal intent has no temporal signal
        t = config.signals.index("temporal")
        active[:, t] = xp.any(z[:, :, t] != 0, axis=1)
    if mine is not None:  # nor one whose candidates that speaker said all, or none, a user relevance signal
        u = config.signals.index("user_relevance")
        active[:, u] = xp.any(valid & mine, axis=1) & xp.any(valid & ~mine, axis=1)
    return Scored(cand, counts, z, active, rel.values, rel.rows, None if rel.rows is None else rel.everything)


def dense_top(rel: Relevance, n: int, backend: Backend):
    """(B, min(n, width of ``rel``)) each question's ``n`` most similar utterance rows (ties: the lower row), -1
    where it has fewer (a filter's excluded rows, or fewer probed ones)."""
    xp = backend.xp
    top = backend.top_k(rel.values, min(n, rel.values.shape[1]))
    rows = top if rel.rows is None else xp.take_along_axis(rel.rows, top, axis=1)
    return xp.where(xp.take_along_axis(rel.values, top, axis=1) > -np.inf, rows, -1)


def candidates(g: MemoryGraph, q, rel, rel_rows, allowed, config: AssoMemConfig, backend: Backend, pool=None):
    """The two-step candidates of each question, (B, C) utterance rows ascending (-1 padded) and their counts: the
    utterances of the top ``top_clues`` clues, more clues (best first) until there are ``min_candidates``, and the
    rows of ``pool`` (B, N; -1: none), each question's BM25 and dense tops, joined to them. A clue
    scores ``clue_mix``·cos(question, clue) + (1 − ``clue_mix``)·its best utterance's cosine (``rel``, -inf where a
    filter excludes one; a clue with no allowed utterance is never taken).

    With a probed relevance (``rel_rows``, see ``Scored``) a clue's best utterance is its best probed one; a clue
    the probes reached none of counts as its question's least similar probed utterance (the probed lists are the
    nearest, so what they miss is mostly less similar)."""
    xp = backend.xp
    n_b, n_utt = len(q), g.n_utt
    utt_clue = backend.resident(g, "utt_clue", 0, lambda: g.utt_clue)
    if not config.clues or g.n_clues == 0:  # every (allowed) utterance, each question's ascending
        qb, cols = xp.nonzero(xp.ones((n_b, n_utt), bool) if allowed is None else allowed)
    else:
        clue_view, by_clue, owning, starts, sizes = (
            backend.resident(g, name, 0, lambda name=name: getattr(g, name))
            for name in ("clue_view", "by_clue", "owning", "owning_starts", "clue_sizes"))
        clue_cos = backend.cosines(clue_view, q)
        if not g.clue_vectors.in_order:  # the clues' rows of the pool, in clue order
            clue_cos = clue_cos[:, backend.resident(g, "clue_row", 0, lambda: g.clue_row)]
        sizes = xp.broadcast_to(sizes, (n_b, g.n_clues))
        if rel_rows is not None:  # per clue, its best (probed) utterance's cosine
            best, floor = backend.group_max(rel, rel_rows, utt_clue, g.n_clues)
            best = xp.where((best == -np.inf) & (sizes > 0) & (floor < np.inf)[:, None], floor[:, None], best)
        else:
            best = xp.full((n_b, g.n_clues), -np.inf)
        if rel_rows is None and len(owning):
            best[:, owning] = backend.segment_max(rel, by_clue, starts)
            if allowed is not None:
                sizes = xp.zeros(best.shape, np.int64)
                sizes[:, owning] = xp.add.reduceat(allowed[:, by_clue].astype(np.int64), starts, axis=1)
        score = config.clue_mix * clue_cos + (1 - config.clue_mix) * best
        if allowed is not None:
            score = xp.where(sizes > 0, score, -np.inf)
        order, n_take = _clue_order(score, sizes, config, backend)
        width = int(n_take.max())
        taken = xp.arange(width) < n_take[:, None]
        rows, n = _members(g, order[:, :width][taken], backend)
        qb = backend.repeat(xp.nonzero(taken)[0], n)
        if allowed is not None:
            keep = allowed[qb, rows]
            qb, rows = qb[keep], rows[keep]
        key = qb * n_utt + rows
        if pool is None:
            key = xp.sort(key)  # each question's utterances ascending (a clue's are its own)
        else:
            pb, at = xp.nonzero(pool >= 0)
            key = xp.sort(xp.concatenate([key, pb * n_utt + pool[pb, at]]))  # a pooled row may be a clue's: once
            key = key[xp.concatenate([xp.ones(min(len(key), 1), bool), key[1:] != key[:-1]])]  # (numpy >= 2.3's
            # unique hashes first: 30x the sort's time for a batch of 256 questions' keys)
        qb, cols = key // n_utt, key % n_utt
    counts = xp.bincount(qb, minlength=n_b)
    width = int(counts.max()) if n_b else 0
    starts_b = xp.cumsum(counts) - counts
    cand = xp.full((n_b, width), -1, np.int64)
    cand[qb, xp.arange(len(qb)) - starts_b[qb]] = cols
    return cand, counts


def _clue_order(score, sizes, config: AssoMemConfig, backend: Backend):
    """Each question's best clues, best first (B, W: at least as many as any question takes), and how many each
    takes: ``top_clues``, more until their utterances (``sizes``) reach ``min_candidates``. The best
    ``CLUE_HEAD``·``top_clues`` are ranked first (of thousands of clues); only where those hold too few utterances
    (a filter, tiny clues) is every clue ranked."""
    xp = backend.xp
    n_clues = score.shape[1]
    for width in (min(n_clues, CLUE_HEAD * config.top_clues), n_clues):  # the second only where the first falls short
        order = backend.top_k(score, width)
        held = xp.cumsum(xp.take_along_axis(sizes, order, axis=1), axis=1)
        if width == n_clues or bool((held[:, -1] >= config.min_candidates).all()):
            break
    enough = (held < config.min_candidates).sum(axis=1) + 1
    return order, xp.minimum(xp.maximum(enough, config.top_clues), n_clues)


def _members(g: MemoryGraph, clues, backend: Backend):
    """The utterance rows of the clues ``clues`` (flat), clue after clue (each clue's ascending), and how many each
    clue has."""
    xp = backend.xp
    by_clue, sizes = (backend.resident(g, name, 0, lambda name=name: getattr(g, name))
                      for name in ("by_clue", "clue_sizes"))
    n = sizes[clues]
    return by_clue[backend.spans((xp.cumsum(sizes) - sizes)[clues], n)], n


def teleport(cosines, n_nodes: int, xp=np, mass=None):
    """Eq. 2's t for a batch: the clipped query–utterance cosines on the utterance nodes (the first rows), 0 on the
    others, each column summing to 1 (or over ``mass`` (B,), where given: a probed relevance's clipped sum).

    ``cosines`` (B, n_utt) -> (n_nodes, B), F-ordered (made row by row from the cosines, without a transpose).
    A question similar to nothing teleports uniformly over the utterances.
    """
    b, n = cosines.shape
    t = xp.zeros((b, n_nodes), np.float32)
    part = t[:, :n]
    xp.maximum(cosines, 0.0, out=part)  # in place: no (B, n) temporaries
    _teleport_weights(part, (t.sum(axis=1) if mass is None else mass)[:, None], n, xp)
    return t.T


def _teleport_weights(clipped, mass, n_utt: int, xp) -> None:
    """Eq. 2's teleport in place: the clipped cosines (float32) over their question's ``mass`` (broadcast against
    them), and 1 / ``n_utt`` where the mass is 0 (a question similar to nothing teleports uniformly)."""
    xp.divide(clipped, xp.maximum(mass, 1e-30), out=clipped)
    xp.copyto(clipped, np.float32(1.0 / max(n_utt, 1)), where=mass == 0)  # CuPy: no host sync


def importance(g: MemoryGraph, rel: Relevance, at, valid, config: AssoMemConfig, backend: Backend):
    """PPR scores (B, C) of the utterance rows ``at`` (where ``valid``) of each question, by batched power
    iteration. ``rel``: the batch's relevance (its cosines make the teleports; ``rel.mass`` (B,), the teleport's
    normaliser, is the clipped cosine sum of every, or with a probed relevance every probed, utterance; a filter's
    -inf clips to 0 like any negative cosine). PPR is linear in the teleport, so a question's normaliser scales its
    scores alone and leaves their z-scores as they are.

    ``config.ppr_hops`` = H > 0: H iterations from r = t. A node's value after m iterations reads only nodes m hops
    away, so the candidates get the values of H iterations over the whole graph from the nodes within H hops of
    them; the rest of the series weighs at most d^H of the whole in L1. Where the backend runs balls
    (``Backend.ppr_balls``, the CPU) each question iterates on its own (``_ball_importance``); else, or where the
    balls would hold more than 1 / ``BALL_SHARE`` of the graph on average, the batch iterates on the whole graph.
    H = 0: the whole graph, every question at once, until the change is below ``tol``.
    """
    xp = backend.xp
    if config.ppr_hops and backend.ppr_balls:
        out = _ball_importance(g, rel, at, valid, config, backend)
        if out is not None:
            return out
    tol, iterations = (0.0, config.ppr_hops) if config.ppr_hops else (config.tol, config.max_iter)
    out = xp.empty(at.shape, np.float32)
    step = max(1, WHOLE_GRAPH_ENTRIES // g.n_nodes)
    for lo in range(0, len(at), step):
        part = slice(lo, lo + step)
        tele = teleport(rel.everything(part), g.n_nodes, xp, rel.mass[part] if config.ppr_hops else None)
        r, _ = backend.ppr(backend.csr(g.transition), tele, config.damping, tol, iterations)
        out[part] = r[at[part], xp.arange(r.shape[1])[:, None]]
    return out


WHOLE_GRAPH_ENTRIES = 1 << 26  # nodes × questions of a pass on the whole graph: each of its (n_nodes, B) buffers
# (teleport, iterate, next, base) stays within 256 MB (at 25,000 sessions ~265 questions a pass)


BALL_SHARE = 4  # a batch runs on its questions' balls while they hold on average under 1/4 of the graph: a ball's
# node costs a lookup per edge and vectorises over no questions, where the whole graph's product runs 32 at once


def _ball_importance(g: MemoryGraph, rel: Relevance, at, valid, config: AssoMemConfig, backend: Backend):
    """``importance`` on each question's ball, the nodes within H hops of its candidates (``kernels/local_ppr.py``),
    its teleport computed on the ball's utterances alone; None where the balls are too large (``BALL_SHARE``)."""
    from .kernels.local_ppr import ball_nodes, ball_ppr, ball_sizes  # Numba loads on the first search

    host_at, host_valid = backend.to_host(at), backend.to_host(valid)
    seeds = np.ascontiguousarray(host_at[host_valid], np.int64)  # question by question
    seed_ptr = np.concatenate([[0], np.cumsum(host_valid.sum(axis=1))]).astype(np.int64)
    rows, hops = g.edges, config.ppr_hops
    sizes = ball_sizes(rows, seed_ptr, seeds, hops)
    if BALL_SHARE * int(sizes.sum()) > len(host_at) * g.n_nodes:
        return None
    ball_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    nodes = ball_nodes(rows, seed_ptr, seeds, hops, ball_ptr)
    owner = np.repeat(np.arange(len(host_at)), sizes)
    utt = nodes < g.n_utt  # the teleport's nodes: eq. 2's t, as ``teleport`` makes it, on the ball
    cos = backend.to_host(rel.of_pairs(backend.asarray(owner[utt]), backend.asarray(nodes[utt])))
    clipped = np.maximum(cos, 0.0).astype(np.float32, copy=False)
    _teleport_weights(clipped, backend.to_host(rel.mass)[owner[utt]], g.n_utt, np)
    tele = np.zeros(len(nodes), np.float32)
    tele[utt] = clipped
    out = np.zeros(host_at.shape, np.float32)
    out[host_valid] = ball_ppr(rows, config.damping, hops, ball_ptr, nodes, tele, seed_ptr, seeds)
    return backend.asarray(out)


def lexical(state: MemoryState, terms: tuple[np.ndarray, np.ndarray], at, backend: Backend):
    """BM25 scores (B, C) of the utterance rows ``at`` for the questions' ``terms`` (``BM25Index.query_terms``):
    each candidate's weights of its question's terms times how often the question holds them. The nonzeros of the
    candidates' rows of the term counts (texts × terms, CSR) whose term the question holds are found
    (``Backend.row_matches``) and weighted (``BM25Index.weights_of``)."""
    xp, lex = backend.xp, state.lexical
    data, indices, indptr, df, lengths = (
        backend.resident(lex, name, state.version, lambda name=name: lex.array(name)) for name in lex.ARRAYS)
    keys, times = (backend.asarray(x) for x in terms)
    row, nz, pos = backend.row_matches(at, indptr, indices, keys, len(lex.vocab))
    w = lex.weights_of(data[nz].astype(np.float64), df[indices[nz]], lengths[at.ravel()[row]], xp)
    return xp.bincount(row, weights=w * times[pos], minlength=at.size).astype(np.float32).reshape(at.shape)


def lexical_pairs(state: MemoryState, terms: tuple[np.ndarray, np.ndarray], questions, rows, n_b: int,
                  backend: Backend):
    """(n,) the BM25 score of question ``questions[i]`` (ascending, of a batch of ``n_b``) for utterance row
    ``rows[i]``: each question's rows laid in a row of their own (``lexical``'s grid), padding reading row 0."""
    xp = backend.xp
    counts = xp.bincount(questions, minlength=n_b)
    pos = xp.arange(len(questions)) - (xp.cumsum(counts) - counts)[questions]
    grid = xp.zeros((n_b, int(counts.max()) if len(questions) else 0), np.int64)  # (a question with most of the
    # pairs pads the others' rows: a turn before that is no candidate is rare, a pool's row)
    grid[questions, pos] = rows
    return lexical(state, terms, grid, backend)[questions, pos]


def temporal(state: MemoryState, queries: Queries, cand, counts, backend: Backend):
    """Temporal signal (B, C): the candidates' match with each question's time constraint. Constraints are parsed
    on the host; only questions that have one read their candidates back."""
    out = np.zeros(cand.shape)
    intents = [(j, c) for j, c in enumerate(parse_constraint(t, float(d)) for t, d in zip(queries.texts, queries.dates))
               if c.has_intent]
    if intents:
        rows = backend.to_host(cand[np.asarray([j for j, _ in intents])])
        n = backend.to_host(counts)
        for (j, constraint), row in zip(intents, rows):
            out[j, : n[j]] = question_temporal(state, constraint, row[: n[j]])
    return backend.asarray(out)


def question_temporal(state: MemoryState, constraint: TimeConstraint, cand: np.ndarray) -> np.ndarray:
    """The temporal signal of one question's candidate rows (host arrays), given its parsed time constraint."""
    if not constraint.has_intent:
        return np.zeros(len(cand))
    when, marks = state.times[cand], state.time_marks[cand]
    owners, mentioned = [], []
    if constraint.has_window:
        for i in np.flatnonzero((marks == RESOLVED) & ~np.isnan(when)):
            found = state.mentioned_times(int(cand[i]))
            owners += [i] * len(found)
            mentioned.append(found)
    mentioned = np.concatenate(mentioned) if mentioned else np.zeros(0)
    return temporal_scores(constraint, when, np.asarray(owners, np.int64), mentioned, marks).astype(np.float64)
