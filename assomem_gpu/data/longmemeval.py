"""LongMemEval (S, M, oracle; ``.json`` or ``.json.gz``): one memory per question, sessions pooled across haystacks.

Utterance id ``"<session_id>:<turn_index>"`` (0-based over all turns); evidence = turns with ``has_answer: true``.
"""
from __future__ import annotations

import numpy as np

from ..memory import Dataset, Memory, MemoryBank, Question
from ._io import field, read_json, timestamp
from .errors import DataFormatError


def load_longmemeval(path: str) -> Dataset:
    items = read_json(path)
    if not isinstance(items, list):
        raise DataFormatError(path, f"expected a JSON list of questions, got {type(items).__name__}")
    bank, memories, questions, seen = MemoryBank(), [], [], set()
    for n, item in enumerate(items):
        rec = n
        qid = field(path, rec, item, "question_id", str)
        rec = f"{n} ({qid})"
        if qid in seen:
            raise DataFormatError(path, "duplicate question_id", rec, "question_id")
        seen.add(qid)
        sids = field(path, rec, item, "haystack_session_ids", list)
        dates = field(path, rec, item, "haystack_dates", list)
        sessions = field(path, rec, item, "haystack_sessions", list)
        if not len(sids) == len(dates) == len(sessions):
            raise DataFormatError(path, f"haystack_session_ids, haystack_dates and haystack_sessions differ in length "
                                  f"({len(sids)}, {len(dates)}, {len(sessions)})", rec)
        rows, when, evidence = [], [], []
        for j, (sid, session) in enumerate(zip(sids, sessions)):
            if not isinstance(sid, str):
                raise DataFormatError(path, f"session id {j} is not a string", rec, "haystack_session_ids")
            if not isinstance(session, list):
                raise DataFormatError(path, f"session {sid!r} is not a list of turns", rec, "haystack_sessions")
            turns = []
            for t, turn in enumerate(session):
                where = f"{rec}, session {sid!r} turn {t}"
                turns.append((f"{sid}:{t}", field(path, where, turn, "role", str), field(path, where, turn, "content", str)))
            date = timestamp(path, rec, {"haystack_dates": dates[j]}, "haystack_dates")
            try:
                row = bank.add_session(sid, date, turns)
            except ValueError as exc:
                raise DataFormatError(path, str(exc), rec, "haystack_sessions") from exc
            rows.append(row)
            when.append(date)
            lo = bank.offsets[row]
            evidence += [lo + t for t, turn in enumerate(session) if turn.get("has_answer") is True]
        answer = item.get("answer")
        labelled = field(path, rec, item, "answer_session_ids", list, optional=True) or []
        evidence_sessions = {bank.session_index(s) for s in labelled} - {None}
        evidence_sessions |= {bank.session_index(sids[j]) for j in range(len(sids))
                              if any(t.get("has_answer") is True for t in sessions[j])}
        questions.append(Question(
            id=qid, text=field(path, rec, item, "question", str), date=timestamp(path, rec, item, "question_date"),
            type=field(path, rec, item, "question_type", str, optional=True),
            evidence=np.unique(np.asarray(evidence, dtype=np.int64)), memory=len(memories),
            answer=None if answer is None else str(answer), abstention=qid.endswith("_abs"),
            evidence_sessions=np.asarray(sorted(evidence_sessions), dtype=np.int64)))
        memories.append(Memory(np.asarray(rows, dtype=np.int64), np.asarray(when, dtype=np.float64)))
    return Dataset("longmemeval", bank, memories, questions)
