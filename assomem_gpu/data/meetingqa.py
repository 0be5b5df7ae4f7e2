"""MeetingQA raw (``meeting_qa_raw.json``): all 50 meetings form one memory, sessions are meetings, no dates.

Utterance id = ``entry_id``; question id ``"mqa:<n>"`` counting QA pairs in file order; evidence = the entry holding
the QA pair and every entry with exactly the same ``transcript_message``.
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from ..memory import Dataset, Memory, MemoryBank, Question
from ._io import field, prose, read_json, repaired
from .errors import DataFormatError


def load_meetingqa(path: str) -> Dataset:
    doc = read_json(path)
    entries = field(path, None, doc, "entries", list)
    meetings: dict[str, list[tuple[str, str, str]]] = {}
    qa: list[tuple[str, str, object]] = []  # (entry_id, question, answer)
    seen = set()
    for n, entry in enumerate(entries):
        rec = f"entries[{n}]"
        eid = field(path, rec, entry, "entry_id", str)
        if eid in seen:
            raise DataFormatError(path, f"duplicate entry_id {eid!r}", rec, "entry_id")
        seen.add(eid)
        session = field(path, rec, entry, "session_id", str)
        speaker = prose(path, rec, entry, "speaker_id", optional=True) or ""
        meetings.setdefault(session, []).append((eid, speaker, prose(path, rec, entry, "transcript_message")))
        for k, pair in enumerate(field(path, rec, entry, "qa_pairs", list, optional=True) or []):
            qa.append((eid, prose(path, f"{rec}.qa_pairs[{k}]", pair, "question"), pair.get("answer")))
    bank = MemoryBank()
    rows = [bank.add_session(sid, math.nan, turns) for sid, turns in meetings.items()]
    row_of = {u: i for i, u in enumerate(bank.utt_ids)}
    by_text = defaultdict(list)
    for i, text in enumerate(bank.utt_texts):
        by_text[text].append(i)
    questions = []
    for n, (eid, question, answer) in enumerate(qa):
        evidence = np.asarray(sorted(by_text[bank.utt_texts[row_of[eid]]]), dtype=np.int64)
        questions.append(Question(id=f"mqa:{n}", text=question, date=math.nan, type=None, evidence=evidence,
                                  memory=0, answer=None if answer is None else repaired(str(answer))))
    memory = Memory(np.asarray(rows, dtype=np.int64), np.full(len(rows), math.nan))
    return Dataset("meetingqa", bank, [memory], questions)
