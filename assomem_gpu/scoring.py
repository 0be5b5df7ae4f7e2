"""Signal scoring: a batch of questions against one memory's state, up to each question's candidates and their
normalised signals (relevance, importance, temporal, lexical).

The result does not depend on the fusion weights, so calibration and cross-validation score once and fuse many times.
Arrays go through the backend (``backend.ppr`` runs on the CPU twin or the GPU).
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from .backend import Backend
from .config import AssoMemConfig
from .graph import MemoryGraph
from .retrieve import top_k
from .signals.temporal import parse_constraint, temporal_scores
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
class Features:
    """One question's candidates (utterance rows) with their z-scored signals, and the rest of its memory."""

    candidates: np.ndarray
    scores: np.ndarray  # (n_candidates, n_signals)
    active: np.ndarray  # (n_signals,) bool: signals this question has
    rest: np.ndarray  # the memory's other (allowed) utterances, in memory order
    rest_relevance: np.ndarray  # their cosine to the question: they follow the candidates in this order


def zscore(x: np.ndarray, owner: np.ndarray, n_groups: int) -> np.ndarray:
    """Each column of ``x`` (rows, signals) z-scored within the groups ``owner`` gives its rows (float64); a group
    whose column is constant gets zeros."""
    counts = np.maximum(np.bincount(owner, minlength=n_groups), 1)
    out = np.empty_like(x, dtype=np.float64)
    for s in range(x.shape[1]):
        col = x[:, s].astype(np.float64)
        d = col - (np.bincount(owner, col, n_groups) / counts)[owner]
        sd = np.sqrt(np.bincount(owner, d * d, n_groups) / counts)
        ok = sd > 1e-12
        out[:, s] = np.where(ok[owner], d / np.where(ok, sd, 1.0)[owner], 0.0)
    return out


def features(state: MemoryState, queries: Queries, config: AssoMemConfig, backend: Backend,
             stage=None) -> list[Features]:
    """Candidates and normalised signals of each question, in passes of at most ``backend.max_batch``.
    ``stage(name)``, when given, is a context manager that times each stage."""
    step = backend.max_batch
    return [f for lo in range(0, len(queries), step)
            for f in _features(state, queries.part(lo, lo + step), config, backend,
                               stage or (lambda name: nullcontext()))]


def _features(state: MemoryState, queries: Queries, config: AssoMemConfig, backend: Backend, stage) -> list[Features]:
    g = state.graph
    if g is None:  # an empty memory
        empty = np.zeros(0, np.int64)
        return [Features(empty, np.zeros((0, len(config.signals))), np.ones(len(config.signals), bool), empty,
                         np.zeros(0)) for _ in range(len(queries))]
    with stage("candidates"):
        rel = queries.emb @ state.emb.view.T  # (B, n_utt)
        masked = rel if queries.allowed is None else np.where(queries.allowed, rel, -np.inf)
        local = candidates(g, masked, queries, config)
    counts = np.fromiter(map(len, local), np.int64, len(local))
    rows = np.concatenate(local)
    owner = np.repeat(np.arange(len(local)), counts)  # the question of each candidate
    signals = np.empty((len(rows), len(config.signals)))
    for s, name in enumerate(config.signals):
        if name == "relevance":
            signals[:, s] = rel[owner, rows]
        elif name == "importance":
            with stage("ppr"):
                signals[:, s] = np.log(np.maximum(importance(g, masked, rows, owner, config, backend), 1e-30))
        elif name == "lexical":
            with stage("lexical"):
                signals[:, s] = state.lexical.scores(queries.texts, local)
        else:
            with stage("temporal"):
                signals[:, s] = np.concatenate([temporal(state, queries.texts[j], float(queries.dates[j]), local[j])
                                                for j in range(len(local))])
    z = zscore(signals, owner, len(local))
    active = np.ones((len(local), len(config.signals)), bool)
    if "temporal" in config.signals:  # a question without a time constraint has no temporal signal
        t = config.signals.index("temporal")
        active[:, t] = np.bincount(owner, z[:, t] != 0, len(local)) > 0
    out = []
    for j, (cand, lo) in enumerate(zip(local, np.cumsum(counts) - counts)):
        rest_mask = np.ones(g.n_utt, bool) if queries.allowed is None else queries.allowed[j].copy()
        rest_mask[cand] = False
        rest = np.flatnonzero(rest_mask)
        out.append(Features(cand, z[lo : lo + len(cand)], active[j], rest, rel[j, rest]))
    return out


def candidates(g: MemoryGraph, rel: np.ndarray, queries: Queries, config: AssoMemConfig) -> list[np.ndarray]:
    """Per question (rows of ``rel``, its cosines to the memory's utterances; -inf where a filter excludes one), the
    utterance rows of the two-step candidates: the utterances of the top clues, more clues (best first) until there
    are ``min_candidates``."""
    allowed = queries.allowed
    if not config.clues or g.n_clues == 0:
        every = np.arange(g.n_utt)
        return [every if allowed is None else np.flatnonzero(allowed[j]) for j in range(len(rel))]
    clue_cos = queries.emb @ g.clue_emb.T  # (B, n_clues)
    out = []
    for j in range(len(rel)):
        sizes = g.clue_sizes if allowed is None else np.bincount(g.utt_clue[allowed[j]], minlength=g.n_clues)
        score = config.clue_mix * clue_cos[j] + (1 - config.clue_mix) * g.clue_max(rel[j])
        if allowed is not None:
            score[sizes == 0] = -np.inf
        order = top_k(score[None], min(config.top_clues, g.n_clues))[0]
        if sizes[order].sum() < config.min_candidates:  # rarely: the full order decides how many more
            order = top_k(score[None], g.n_clues)[0]
        enough = int(np.searchsorted(np.cumsum(sizes[order]), config.min_candidates)) + 1
        members = g.members(order[: max(config.top_clues, enough)])
        out.append(members if allowed is None else members[allowed[j, members]])
    return out


def teleport(cosines: np.ndarray, n_nodes: int) -> np.ndarray:
    """Eq. 2's t for a batch: the clipped query–utterance cosines on the utterance nodes (the first rows), 0 on the
    others, each column summing to 1.

    ``cosines`` (B, n_utt) -> (n_nodes, B), F-ordered (made row by row from the cosines, without a transpose).
    A question similar to nothing teleports uniformly over the utterances.
    """
    b, n_utt = cosines.shape
    t = np.zeros((b, n_nodes), np.float32)
    np.maximum(cosines, 0.0, out=t[:, :n_utt])
    mass = t.sum(axis=1)
    t[mass == 0, :n_utt] = 1.0 / max(n_utt, 1)
    t /= np.maximum(t.sum(axis=1, keepdims=True), 1e-30)
    return t.T


def importance(g: MemoryGraph, rel: np.ndarray, rows: np.ndarray, owner: np.ndarray, config: AssoMemConfig,
               backend: Backend) -> np.ndarray:
    """PPR scores of the utterance ``rows`` for the questions ``owner`` (rows of ``rel``), every question in one
    batched power iteration over the memory's graph."""
    tele = teleport(rel, g.n_nodes)  # a filter's -inf clips to 0 like any negative cosine
    r, _ = backend.ppr(backend.csr(g.transition), backend.asarray(tele), config.damping, config.tol, config.max_iter)
    return backend.to_host(r[backend.asarray(rows), backend.asarray(owner)])  # one gather and copy for the batch


def temporal(state: MemoryState, text: str, date: float, cand: np.ndarray) -> np.ndarray:
    """The temporal signal of the candidate rows ``cand`` for a question asked at ``date``."""
    constraint = parse_constraint(text, date)
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
