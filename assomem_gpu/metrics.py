"""Retrieval metrics.

Utterance level (the AssoMem paper's): R@k = share of a question's evidence utterances in its top k, Rany@k = 1 if any
is, nDCG@k with binary gains and the standard 1/log2(rank + 1) discount. Session level as LongMemEval's official
evaluation: the utterance ranking becomes a session ranking (first occurrence order), then recall_any@k, recall_all@k
and ndcg_any@k (its DCG discounts rank r >= 2 by log2(r), rank 1 not at all).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

import numpy as np

DEFAULT_KS = (1, 3, 5, 6, 10)


def utterance_metrics(ranked: np.ndarray, evidence: np.ndarray, ks: Sequence[int]) -> dict[str, float]:
    """R@k, Rany@k and nDCG@k of ``ranked`` (utterance rows or ids, best first; an id again after its first place
    counts for nothing) against ``evidence``."""
    ranked = np.asarray(ranked)
    first = np.zeros(len(ranked), bool)
    first[np.unique(ranked, return_index=True)[1]] = True
    hits = np.isin(ranked, evidence) & first
    n = len(evidence)
    out = {}
    for k in ks:
        top = hits[:k]
        out[f"R@{k}"] = float(top.sum() / n)
        out[f"Rany@{k}"] = float(top.any())
        ideal = (1.0 / np.log2(np.arange(2, min(n, k) + 2))).sum()
        out[f"nDCG@{k}"] = float((top / np.log2(np.arange(2, len(top) + 2))).sum() / ideal)
    return out


def _official_dcg(rel: np.ndarray) -> float:
    if rel.size == 0:
        return 0.0
    return float(rel[0] + (rel[1:] / np.log2(np.arange(2, rel.size + 1))).sum())


def session_metrics(ranked_sessions: np.ndarray, evidence_sessions: np.ndarray, ks: Sequence[int]) -> dict[str, float]:
    """``ranked_sessions``: session rows of the ranked utterances (duplicates allowed, first occurrence counts)."""
    _, first = np.unique(ranked_sessions, return_index=True)
    order = ranked_sessions[np.sort(first)]
    hits = np.isin(order, evidence_sessions)
    n = len(evidence_sessions)
    out = {}
    for k in ks:
        found = int(hits[:k].sum())
        out[f"session_recall_any@{k}"] = float(found > 0)
        out[f"session_recall_all@{k}"] = float(found == n)
        ideal = _official_dcg(np.ones(min(n, k)))
        out[f"session_ndcg_any@{k}"] = _official_dcg(hits[:k].astype(float)) / ideal
    return out


def mean_by_type(rows: Iterable[tuple[str | None, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Averages over all rows (key ``"all"``) and per question type, each key's over the rows that hold it; each with
    ``n``, the rows, and ``n_<key>`` for a key fewer of them hold (a rubric question has no EM)."""
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for qtype, metrics in rows:
        groups["all"].append(metrics)
        if qtype is not None:
            groups[qtype].append(metrics)
    return {name: _means(ms) for name, ms in groups.items()}


def _means(rows: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {"n": len(rows)}
    for key in dict.fromkeys(k for m in rows for k in m):
        held = [m[key] for m in rows if key in m]
        out[key] = float(np.mean(held))
        if len(held) < len(rows):
            out[f"n_{key}"] = len(held)
    return out
