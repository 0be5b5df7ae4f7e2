"""Running a method over a whole dataset: batched ranking, per-question metrics, averages, and the ranking export
(written and read back)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..cluster import Workers
from ..memory import Dataset
from ..retrieve import EmbeddedDataset, Method, by_memory
from ..metrics import mean_by_type, session_metrics, utterance_metrics

EXPORT_MIN_DEPTH = 50  # ARCHITECTURE §4: at least the top 50, or every candidate if fewer


@dataclass
class EvalResult:
    method: str
    rankings: list[np.ndarray]  # per question (dataset order): bank utterance rows, best first
    per_question: list[dict[str, float] | None]  # None for questions without evidence
    summary: dict[str, dict[str, float]]  # "all" and per type
    retrieve_s: float
    session_summary: dict[str, dict[str, float]] = field(default_factory=dict)
    weight_temperatures: dict[str, int] = field(default_factory=dict)  # of a cross-validated method: how many
    # questions were ranked with weights at each T_w (what their folds' calibrations chose)
    left_out: dict[str, int] | None = None  # of an AssoMem method: how many questions were ranked with weights that
    # left out each signal (fusion.select_signals; none: {}); None for the others

    def to_json(self) -> dict:
        out = {"method": self.method, "retrieve_s": round(self.retrieve_s, 3), "metrics": self.summary,
               "session_metrics": self.session_summary}
        if self.weight_temperatures:
            out["weight_temperatures"] = self.weight_temperatures
        if self.left_out is not None:
            out["left_out"] = self.left_out
        return out


def evaluate(data: EmbeddedDataset, method: Method, ks: Sequence[int], depth: int = 100, batch_size: int = 64,
             progress: bool = True, folds: int = 5, seed: int = 0, workers: Workers | None = None) -> EvalResult:
    """Rank every question of ``data`` with ``method``, a memory at a time in batches of ``batch_size`` questions,
    and score the rankings. ``workers``: Dask workers holding ``data`` (``cluster.Workers``) to run the memories
    (and folds) on, with the same rankings.

    A method that needs calibration (AssoMem without saved weights) is cross-validated over ``folds`` folds.
    """
    from tqdm.auto import tqdm

    ds = data.dataset
    depth = max(depth, EXPORT_MIN_DEPTH, *ks)
    start = time.perf_counter()
    rows = list(range(len(ds.questions)))
    temperatures: dict[str, int] = {}
    fusion = getattr(method, "fusion", None)  # AssoMem's given weights (a file's, or the hybrid baselines' equal ones)
    left_out = None if fusion is None else {s: len(rows) for s in fusion.left_out}
    if getattr(method, "needs_calibration", False):
        from ..calibrate import cross_validated_rankings

        rankings, used = cross_validated_rankings(method, data, rows, folds, depth, seed, batch_size, progress, workers)
        temperatures, left_out = chosen_counts(used, method.config.signals)
    elif workers is not None:
        rankings = workers.per_memory(method, rows, rank_memory, depth, batch_size, progress=progress)
    else:
        ranked: dict[int, np.ndarray] = {}
        for group in tqdm(list(by_memory(ds, rows).values()), desc=method.name, unit="memory", disable=not progress):
            ranked.update(zip(group, rank_memory(method, data, group, depth, batch_size)))
        rankings = [ranked[q] for q in rows]
    retrieve_s = time.perf_counter() - start
    utt_session = ds.bank.utt_session()
    per_question, typed, session_typed = [], [], []
    for q, ranked in zip(ds.questions, rankings):
        if len(q.evidence) == 0:
            per_question.append(None)
            continue
        m = utterance_metrics(ranked, q.evidence, ks)
        per_question.append(m)
        typed.append((q.type, m))
        if not q.abstention:  # LongMemEval's official evaluation leaves abstention questions out
            session_typed.append((q.type, session_metrics(utt_session[ranked], np.unique(utt_session[q.evidence]), ks)))
    return EvalResult(method.name, rankings, per_question, mean_by_type(typed) if typed else {}, retrieve_s,
                      mean_by_type(session_typed) if session_typed else {}, temperatures, left_out)


def chosen_counts(chosen: Sequence[tuple[float, tuple[str, ...]]],
                  signals: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
    """How many questions each weight temperature ranked, and how many each left-out signal missed (in ``signals``'
    order), from each question's ``(T_w, left_out)`` (``calibrate.Chosen``)."""
    tw = [t for t, _ in chosen]
    out = [s for _, left_out in chosen for s in left_out]
    return {str(t): tw.count(t) for t in sorted(set(tw))}, {s: out.count(s) for s in signals if s in out}


def rank_memory(method: Method, data: EmbeddedDataset, group: Sequence[int], depth: int, batch_size: int = 64
                ) -> list[np.ndarray]:
    """One memory's questions ranked in batches of ``batch_size``: the unit of work, in one process or in a Dask
    task (``cluster``), so both compute the same."""
    return [r for lo in range(0, len(group), batch_size) for r in method.rank(data, group[lo : lo + batch_size], depth)]


def write_rankings(path: str | Path, data: EmbeddedDataset, rankings: Sequence[np.ndarray]) -> None:
    """JSON Lines, one ``{"question_id", "ranked"}`` object per question, best first (ARCHITECTURE §4)."""
    ids = data.dataset.bank.utt_ids
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for q, ranked in zip(data.dataset.questions, rankings):
            fh.write(json.dumps({"question_id": q.id, "ranked": [ids[i] for i in ranked]}) + "\n")


def read_rankings(path: str | Path, ds: Dataset) -> list[np.ndarray]:
    """The rankings of ``ds``'s questions from a ranking export (JSON Lines of ``{"question_id", "ranked"}``, as
    ``python -m assomem_gpu.eval --rankings`` writes): bank rows, best first. Every question needs a line (lines of
    other questions are skipped); a ``question_id`` that is not a string or has a line already, a ``ranked`` that is
    not a list of distinct utterance ids, or ids its question's memory does not hold are an error naming the line and
    the field. An id is read in its question's memory (LoCoMo's ``dia_id`` repeat across conversations)."""
    ids = ds.bank.utt_ids
    memory_of = {q.id: q.memory for q in ds.questions}
    rows_of: dict[int, dict[str, int]] = {}  # memory -> its utterance ids' bank rows
    found: dict[str, np.ndarray] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                qid, ranked = obj["question_id"], obj["ranked"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not a ranking line ({exc})") from None
            if not isinstance(qid, str):
                raise ValueError(f"{path}:{n}: question_id: expected a string, got {type(qid).__name__}")
            if not isinstance(ranked, list) or not all(isinstance(u, str) for u in ranked):
                raise ValueError(f"{path}:{n}: ranked: expected a list of utterance id strings")
            if qid not in memory_of:  # a question left out of ``ds`` (a sample, a held-out side)
                continue
            memory = memory_of[qid]
            if memory not in rows_of:
                rows_of[memory] = {ids[i]: int(i) for i in ds.memory_utterances(memory)}
            row_of = rows_of[memory]
            unknown = [u for u in ranked if u not in row_of]
            if unknown:
                raise ValueError(f"{path}:{n}: ranked: utterance {unknown[0]!r} is not in question {qid!r}'s memory")
            if len(set(ranked)) != len(ranked):
                raise ValueError(f"{path}:{n}: ranked: an utterance is ranked twice")
            if qid in found:
                raise ValueError(f"{path}:{n}: question_id: {qid!r} has a ranking on an earlier line")
            found[qid] = np.asarray([row_of[u] for u in ranked], np.int64)
    missing = [q.id for q in ds.questions if q.id not in found]
    if missing:
        raise ValueError(f"{path}: no ranking for question {missing[0]!r} ({len(missing)} missing)")
    return [found[q.id] for q in ds.questions]
