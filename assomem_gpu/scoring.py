"""Signal scoring: a batch of questions against one memory's state, up to each question's candidates and their
normalised signals (relevance, importance, temporal, lexical), padded to the batch's widest candidate list.

Every stage runs on the backend's arrays (``backend.xp``: numpy, or CuPy on the device, where the memory's
embeddings, graph and BM25 weights are uploaded once per index version), so a batch stays where it is scored; only
time expressions are read on the host, for the few questions that have one. The result does not depend on the
fusion weights: calibration and cross-validation score once and fuse many times.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from .backend import Backend
from .config import AssoMemConfig
from .graph import MemoryGraph
from .signals.temporal import TimeConstraint, parse_constraint, temporal_scores
from .state import MemoryState


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
    z-scored signals, padded to the widest; and its cosines to every utterance, for what follows the candidates."""

    candidates: Any  # (B, C) int64, -1 past counts[b]
    counts: Any  # (B,) int64
    signals: Any  # (B, C, n_signals) float64 z-scores, 0 past counts[b]
    active: Any  # (B, n_signals) bool: the signals each question has (no time constraint: no temporal signal)
    relevance: Any  # (B, n_utt) float32 cosines, -inf where a filter excludes the utterance
    relevance_rows: Any = None  # (B, n) the rows of relevance's columns, where they are not 0 .. n_utt − 1

    def __len__(self) -> int:
        return len(self.counts)

    def features(self, backend: Backend) -> list["Features"]:
        """The batch per question, on the host (what calibration reads)."""
        cand, counts, z, active, rel = (backend.to_host(x) for x in (self.candidates, self.counts, self.signals,
                                                                      self.active, self.relevance))
        out = []
        for b in range(len(counts)):
            rest = np.flatnonzero(rel[b] > -np.inf)
            rest = rest[~np.isin(rest, cand[b, : counts[b]])]
            out.append(Features(cand[b, : counts[b]], z[b, : counts[b]], active[b], rest, rel[b, rest]))
        return out


@dataclass
class Features:
    """One question's candidates (utterance rows) with their z-scored signals, and the rest of its memory."""

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


def _score(state: MemoryState, queries: Queries, config: AssoMemConfig, backend: Backend, stage) -> Scored:
    xp, g, n_sig = backend.xp, state.graph, len(config.signals)
    b = len(queries)
    if g is None:  # an empty memory
        return Scored(xp.zeros((b, 0), np.int64), xp.zeros(b, np.int64), xp.zeros((b, 0, n_sig)),
                      xp.ones((b, n_sig), bool), xp.zeros((b, 0), np.float32))
    with stage("candidates"):
        q = backend.asarray(queries.emb, np.float32)
        emb = backend.resident(state.emb, "view", state.version, lambda: state.emb.view)
        rel = q @ emb.T  # (B, n_utt)
        allowed = None if queries.allowed is None else backend.asarray(queries.allowed)
        if allowed is not None:
            rel = xp.where(allowed, rel, np.float32(-np.inf))
        cand, counts = candidates(g, q, rel, allowed, config, backend)
    valid = xp.arange(cand.shape[1]) < counts[:, None]
    at = xp.where(valid, cand, 0)  # padding reads row 0, then counts for nothing
    signals = xp.zeros(cand.shape + (n_sig,))
    for s, name in enumerate(config.signals):
        if name == "relevance":
            signals[:, :, s] = xp.take_along_axis(rel, at, axis=1)
        elif name == "importance":
            with stage("ppr"):
                signals[:, :, s] = xp.log(xp.maximum(importance(g, rel, at, valid, config, backend), 1e-30))
        elif name == "lexical":
            with stage("lexical"):
                signals[:, :, s] = lexical(state, queries.texts, at, backend)
        else:
            with stage("temporal"):
                signals[:, :, s] = temporal(state, queries, cand, counts, backend)
    z = zscore(signals, valid, xp)
    active = xp.ones((b, n_sig), bool)
    if "temporal" in config.signals:  # a question without a time constraint has no temporal signal
        t = config.signals.index("temporal")
        active[:, t] = xp.any(z[:, :, t] != 0, axis=1)
    return Scored(cand, counts, z, active, rel)


def zscore(x, valid, xp):
    """Each question's signals (B, C, S) z-scored over its valid candidates (float64); a constant signal gets 0."""
    n = xp.maximum(valid.sum(axis=1), 1)[:, None]
    w = valid[:, :, None]
    d = xp.where(w, x - (xp.where(w, x, 0.0).sum(axis=1) / n)[:, None, :], 0.0)
    sd = xp.sqrt((d * d).sum(axis=1) / n)
    return xp.where(sd[:, None, :] > 1e-12, d / xp.where(sd > 1e-12, sd, 1.0)[:, None, :], 0.0)


def candidates(g: MemoryGraph, q, rel, allowed, config: AssoMemConfig, backend: Backend):
    """The two-step candidates of each question, (B, C) utterance rows ascending (-1 padded) and their counts: the
    utterances of the top ``top_clues`` clues, more clues (best first) until there are ``min_candidates``. A clue
    scores ``clue_mix``·cos(question, clue) + (1 − ``clue_mix``)·its best utterance's cosine (``rel``, -inf where a
    filter excludes one; a clue with no allowed utterance is never taken)."""
    xp = backend.xp
    n_b, n_utt = rel.shape
    utt_clue = backend.resident(g, "utt_clue", 0, lambda: g.utt_clue)
    if not config.clues or g.n_clues == 0:
        take = xp.ones((n_b, n_utt), bool) if allowed is None else allowed
    else:
        clue_emb, by_clue, owning, starts, sizes = (backend.resident(g, name, 0, lambda name=name: getattr(g, name))
                                                    for name in ("clue_emb", "by_clue", "owning", "owning_starts",
                                                                 "clue_sizes"))
        grouped = rel[:, by_clue]
        best = xp.full((n_b, g.n_clues), -np.inf)  # per clue, its best utterance's cosine
        sizes = xp.broadcast_to(sizes, best.shape)
        if len(owning):
            best[:, owning] = xp.maximum.reduceat(grouped, starts, axis=1)
            if allowed is not None:
                sizes = xp.zeros(best.shape, np.int64)
                sizes[:, owning] = xp.add.reduceat(allowed[:, by_clue].astype(np.int64), starts, axis=1)
        score = config.clue_mix * (q @ clue_emb.T) + (1 - config.clue_mix) * best
        if allowed is not None:
            score = xp.where(sizes > 0, score, -np.inf)
        order = backend.top_k(score, g.n_clues)  # every clue, best first
        enough = (xp.cumsum(xp.take_along_axis(sizes, order, axis=1), axis=1) < config.min_candidates).sum(axis=1) + 1
        n_take = xp.minimum(xp.maximum(enough, config.top_clues), g.n_clues)
        chosen = xp.zeros(order.shape, bool)
        chosen[xp.arange(n_b)[:, None], order] = xp.arange(g.n_clues) < n_take[:, None]
        take = chosen[:, utt_clue]
        if allowed is not None:
            take &= allowed
    rows, cols = xp.nonzero(take)  # row-major: each question's utterances ascending
    counts = xp.bincount(rows, minlength=n_b)
    width = int(counts.max()) if n_b else 0
    starts_b = xp.cumsum(counts) - counts
    cand = xp.full((n_b, width), -1, np.int64)
    cand[rows, xp.arange(len(rows)) - starts_b[rows]] = cols
    return cand, counts


def teleport(cosines, n_nodes: int, xp=np, mass=None, n_utt: int | None = None):
    """Eq. 2's t for a batch: the clipped query–utterance cosines on the utterance nodes (the first rows), 0 on the
    others, each column summing to 1.

    ``cosines`` (B, n) -> (n_nodes, B), F-ordered (made row by row from the cosines, without a transpose).
    A question similar to nothing teleports uniformly over the utterances. When ``cosines`` hold a part of a
    memory's utterances (the first of ``n_nodes`` nodes of a neighbourhood), ``mass`` (B,) is the whole memory's
    clipped cosine sum and ``n_utt`` its utterance count: the part's values are then the whole teleport's.
    """
    b, n = cosines.shape
    t = xp.zeros((b, n_nodes), np.float32)
    xp.maximum(cosines, 0.0, out=t[:, :n])
    if mass is None:
        mass = t.sum(axis=1)
    t[:, :n] = xp.where((mass == 0)[:, None], np.float32(1.0 / max(n_utt or n, 1)),
                        t[:, :n] / xp.maximum(mass, 1e-30)[:, None])
    return t.T


def importance(g: MemoryGraph, rel, at, valid, config: AssoMemConfig, backend: Backend):
    """PPR scores (B, C) of the utterance rows ``at`` (where ``valid``) of each question, every question in one
    batched power iteration (a filter's -inf in ``rel`` clips to 0 like any negative cosine).

    ``config.ppr_hops`` = H > 0: H iterations from r = t, on the nodes within H hops of the batch's candidates. A
    node's value after m iterations reads only nodes m hops away, so the candidates get the very values H
    iterations over the whole graph give them (the whole graph runs instead when the neighbourhood holds more than
    half of it); the rest of the series weighs at most d^H of the whole in L1. H = 0: the whole graph, until the
    change is below ``tol``.
    """
    xp = backend.xp
    matrix, rows = g.transition, at
    if config.ppr_hops == 0:
        tele, tol, steps = teleport(rel, g.n_nodes, xp), config.tol, config.max_iter
    else:
        mass, tol, steps = xp.maximum(rel, 0.0).sum(axis=1), 0.0, config.ppr_hops
        nodes = g.reach(backend.to_host(at[valid]), config.ppr_hops)
        if 2 * len(nodes) > g.n_nodes:
            tele = teleport(rel, g.n_nodes, xp, mass)
        else:
            n_utt = int(np.searchsorted(nodes, g.n_utt))  # utterance nodes come first
            tele = teleport(rel[:, backend.asarray(nodes[:n_utt])], len(nodes), xp, mass, g.n_utt)
            matrix = g.transition[nodes][:, nodes]
            rows = xp.minimum(xp.searchsorted(backend.asarray(nodes), at), len(nodes) - 1)
    r, _ = backend.ppr(backend.csr(matrix), tele, config.damping, tol, steps)
    return r[rows, xp.arange(len(at))[:, None]]


def lexical(state: MemoryState, texts: list[str], at, backend: Backend):
    """BM25 scores (B, C) of the utterance rows ``at``: each candidate's weights of its question's terms times how
    often the question holds them. The candidates' weight rows are gathered from the sparse weights (texts × terms)
    and each nonzero finds its question's count of that term by a sorted search of ``question · n_terms + term``."""
    xp = backend.xp
    weights = backend.resident(state.lexical, "weights", state.version, lambda: state.lexical.weights)
    keys, counts = (backend.asarray(x) for x in state.lexical.query_terms(texts))
    picked = weights[at.ravel()]  # (B·C, terms) CSR
    row = xp.repeat(xp.arange(at.size), xp.diff(picked.indptr))
    wanted = (row // at.shape[1]) * weights.shape[1] + picked.indices
    pos = xp.minimum(xp.searchsorted(keys, wanted), max(len(keys) - 1, 0))
    found = keys[pos] == wanted if len(keys) else xp.zeros(len(wanted), bool)
    part = xp.where(found, picked.data * (counts[pos] if len(keys) else 0.0), 0.0)
    return xp.bincount(row, weights=part, minlength=at.size).astype(np.float32).reshape(at.shape)


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
    when = state.times[cand]
    owners, mentioned = [], []
    if constraint.has_window:
        for i in np.flatnonzero(state.has_time[cand] & ~np.isnan(when)):
            found = state.mentioned_times(int(cand[i]))
            owners += [i] * len(found)
            mentioned.append(found)
    mentioned = np.concatenate(mentioned) if mentioned else np.zeros(0)
    return temporal_scores(constraint, when, np.asarray(owners, np.int64), mentioned).astype(np.float64)
