"""The plain format for a user's own memories: JSON Lines (or one JSON object with ``sessions`` and ``questions``).

Each line is a session or a question::

    {"type": "session", "id": "s1", "date": "2024-03-01T10:00", "memory": "alice",
     "utterances": [{"id": "s1:0", "speaker": "Alice", "text": "..."}, ...]}
    {"type": "question", "id": "q1", "text": "...", "date": "2024-03-09", "memory": "alice",
     "question_type": "temporal", "evidence": ["s1:0"], "answer": "..."}

``memory`` (default ``"default"``) groups sessions and the questions that search them; ``date`` is any absolute date
(ISO 8601 best) and optional; utterance ``id`` defaults to ``"<session id>:<index>"``, ``speaker`` to none; a session's
optional ``metadata`` (an object) is kept with it (``Dataset.session_metadata``).
Evidence ids must name utterances of the question's memory.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..memory import Dataset, Memory, MemoryBank, Question
from ._io import field, prose, read_json, repaired, timestamp
from .errors import DataFormatError


def load_jsonl(path: str) -> Dataset:
    records = _records(path)
    bank, metadata = MemoryBank(), {}
    sessions: dict[str, list[tuple[int, float]]] = {}
    utt_rows: dict[str, dict[str, int]] = {}
    raw_questions = []
    for rec, obj in records:
        kind = field(path, rec, obj, "type", str)
        given = field(path, rec, obj, "memory", (str, int), optional=True)
        memory = "default" if given is None else str(given)
        if kind == "question":
            raw_questions.append((rec, obj, memory))
            continue
        if kind != "session":
            raise DataFormatError(path, f"type must be 'session' or 'question', got {kind!r}", rec, "type")
        sid = str(field(path, rec, obj, "id", (str, int)))
        turns = []
        for t, utt in enumerate(field(path, rec, obj, "utterances", list)):
            where = f"{rec}, utterances[{t}]"
            given_id = field(path, where, utt, "id", (str, int), optional=True)
            uid = f"{sid}:{t}" if given_id is None else str(given_id)
            speaker = prose(path, where, utt, "speaker", optional=True) or ""
            turns.append((uid, speaker, prose(path, where, utt, "text")))
        known = utt_rows.setdefault(memory, {})
        clash = next((u for u, _, _ in turns if u in known), None) or _first_duplicate([u for u, _, _ in turns])
        if clash is not None:
            raise DataFormatError(path, f"utterance id {clash!r} is used twice in memory {memory!r}", rec, "utterances")
        date = timestamp(path, rec, obj, "date")
        if bank.session_index(sid) is not None:
            raise DataFormatError(path, f"session id {sid!r} is used twice", rec, "id")
        row = bank.add_session(sid, date, turns)
        metadata[sid] = field(path, rec, obj, "metadata", dict, optional=True) or {}
        sessions.setdefault(memory, []).append((row, date))
        known.update({u: bank.offsets[row] + t for t, (u, _, _) in enumerate(turns)})
    names = list(sessions)
    memories = [Memory(np.asarray([r for r, _ in sessions[m]], np.int64), np.asarray([d for _, d in sessions[m]]))
                for m in names]
    questions, seen = [], set()
    for rec, obj, memory in raw_questions:
        qid = str(field(path, rec, obj, "id", (str, int)))
        if qid in seen:
            raise DataFormatError(path, f"question id {qid!r} is used twice", rec, "id")
        seen.add(qid)
        if memory not in sessions:
            raise DataFormatError(path, f"memory {memory!r} has no sessions", rec, "memory")
        evidence = []
        for uid in field(path, rec, obj, "evidence", list, optional=True) or []:
            if str(uid) not in utt_rows[memory]:
                raise DataFormatError(path, f"evidence id {uid!r} is not an utterance of memory {memory!r}", rec, "evidence")
            evidence.append(utt_rows[memory][str(uid)])
        answer = obj.get("answer")
        questions.append(Question(
            id=qid, text=prose(path, rec, obj, "text"), date=timestamp(path, rec, obj, "date"),
            type=field(path, rec, obj, "question_type", str, optional=True),
            evidence=np.unique(np.asarray(evidence, dtype=np.int64)), memory=names.index(memory),
            answer=None if answer is None else repaired(str(answer))))
    return Dataset(Path(path).stem, bank, memories, questions, metadata)


def _records(path: str) -> list[tuple[str, dict]]:
    p = Path(path)
    if p.suffix == ".json":
        doc = read_json(p)
        if not isinstance(doc, dict):
            raise DataFormatError(path, "expected an object with 'sessions' and 'questions'")
        out = []
        for key, kind in (("sessions", "session"), ("questions", "question")):
            for n, obj in enumerate(field(path, None, doc, key, list, optional=True) or []):
                if not isinstance(obj, dict):
                    raise DataFormatError(path, "expected an object", f"{key}[{n}]")
                out.append((f"{key}[{n}]", {"type": kind, **obj}))
        return out
    if not p.is_file():
        raise DataFormatError(path, "no such file")
    out = []
    with open(p, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")  # (a byte-order mark opens some files)
            except UnicodeDecodeError as exc:
                raise DataFormatError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})", f"line {n}") from None
            if not line.strip():
                continue
            try:
                out.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DataFormatError(path, f"not valid JSON: {exc}", f"line {n}") from exc
    return out


def _first_duplicate(ids: list[str]) -> str | None:
    seen = set()
    for u in ids:
        if u in seen:
            return u
        seen.add(u)
    return None
