"""Retrieval methods over an embedded dataset. Every method ranks a batch of questions at once.

A method's ``rank(data, questions, depth)`` returns, per question, the bank utterance rows of its memory, best first,
``min(depth, candidates)`` long. Ties keep the memory's utterance order (session then turn), so rankings are reproducible.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from .encode import Encoder, prompted
from .memory import Dataset


@dataclass
class EmbeddedDataset:
    """A dataset with one L2-normalised embedding per utterance and per question."""

    dataset: Dataset
    utterances: np.ndarray  # (n_utterances, dim) float32, rows aligned with the bank
    questions: np.ndarray  # (n_questions, dim) float32

    @classmethod
    def build(cls, ds: Dataset, encoder: Encoder) -> "EmbeddedDataset":
        return cls(ds, encoder.encode(prompted(encoder, "passage", ds.bank.encoded_texts())),
                   encoder.encode(prompted(encoder, "query", [q.text for q in ds.questions])))


class Method(Protocol):
    name: str

    def rank(self, data: EmbeddedDataset, questions: Sequence[int], depth: int) -> list[np.ndarray]: ...


ROW_TOP_MAX_K = 64  # up to this k a long row's top takes one pass with a list of k (each entry into it costs O(k))


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's ``k`` best scores, best first; ties broken by the lower index. NaN ranks last.

    Rows much longer than ``k`` take one pass with a list of ``k`` (``kernels.segments.row_top``, up to
    ``ROW_TOP_MAX_K``) or are partitioned first, keeping every score tied with the k-th one; the others are sorted in
    full. All give what a full stable sort gives.
    """
    n = scores.shape[-1]
    if k < 1 or k >= n // 8 or scores.ndim != 2:
        return np.argsort(-np.where(np.isnan(scores), -np.inf, scores), axis=-1, kind="stable")[..., :k]
    if k <= ROW_TOP_MAX_K:
        from .kernels.segments import row_top  # Numba loads on the first long ranking, not on import

        return row_top(scores, k)
    scores = np.where(np.isnan(scores), -np.inf, scores)
    out = np.empty((len(scores), k), np.int64)
    for r, row in enumerate(scores):
        kth = np.partition(row, n - k)[n - k]
        keep = np.flatnonzero(row >= kth)
        out[r] = keep[np.argsort(-row[keep], kind="stable")[:k]]
    return out


def by_memory(ds: Dataset, questions: Sequence[int]) -> dict[int, list[int]]:
    """Question rows grouped by the memory they ask, in first-seen order."""
    groups: dict[int, list[int]] = {}
    for q in questions:
        groups.setdefault(ds.questions[q].memory, []).append(q)
    return groups


def rank_by_memory(data: EmbeddedDataset, questions: Sequence[int], depth: int,
                   score: Callable[[np.ndarray, list[int]], np.ndarray]) -> list[np.ndarray]:
    """Shared driver: ``score(candidates, group)`` gives a (len(group), len(candidates)) matrix per memory."""
    out: dict[int, np.ndarray] = {}
    for memory, group in by_memory(data.dataset, questions).items():
        cand = data.dataset.memory_utterances(memory)
        best = top_k(score(cand, group), depth)
        out.update({q: cand[row] for q, row in zip(group, best)})
    return [out[q] for q in questions]


class FlatDense:
    """``flat-dense``: every utterance of the memory ranked by cosine similarity to the question."""

    name = "flat-dense"

    def rank(self, data: EmbeddedDataset, questions: Sequence[int], depth: int) -> list[np.ndarray]:
        return rank_by_memory(data, questions, depth, lambda cand, group: data.questions[group] @ data.utterances[cand].T)


class SessionFlat:
    """``session-flat``: sessions ranked by the cosine of their mean utterance embedding; each session's utterances
    follow in order of their own similarity."""

    name = "session-flat"

    def rank(self, data: EmbeddedDataset, questions: Sequence[int], depth: int) -> list[np.ndarray]:
        bank = data.dataset.bank
        utt_session = bank.utt_session()

        def score(cand: np.ndarray, group: list[int]) -> np.ndarray:
            _, first, local = np.unique(utt_session[cand], return_index=True, return_inverse=True)
            local = np.argsort(np.argsort(first))[local]  # sessions numbered in the memory's order: ties keep it
            centroid = np.zeros((len(first), data.utterances.shape[1]), np.float32)
            np.add.at(centroid, local, data.utterances[cand])
            centroid /= np.maximum(np.linalg.norm(centroid, axis=1, keepdims=True), 1e-12)
            q = data.questions[group]
            session_rank = np.argsort(np.argsort(-(q @ centroid.T), axis=1, kind="stable"), axis=1)  # 0 = best
            utt_sim = q @ data.utterances[cand].T  # in [-1, 1]: a session's rank dominates, similarity orders within
            return -np.take_along_axis(session_rank, np.broadcast_to(local, utt_sim.shape), axis=1) * 4.0 + utt_sim

        return rank_by_memory(data, questions, depth, score)


class BM25:
    """``bm25``: Okapi BM25 (bm25s, English stop words, Snowball stemming) over the memory's utterances."""

    name = "bm25"

    def rank(self, data: EmbeddedDataset, questions: Sequence[int], depth: int) -> list[np.ndarray]:
        from .signals.lexical import BM25Index

        def score(cand: np.ndarray, group: list[int]) -> np.ndarray:
            index = BM25Index(data.dataset.bank.encoded_texts(cand))
            return index.scores([data.dataset.questions[q].text for q in group])

        return rank_by_memory(data, questions, depth, score)


METHODS: dict[str, Callable[[], Method]] = {m.name: m for m in (FlatDense, SessionFlat, BM25)}


def make_method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name]()
