"""LoCoMo format: a list of conversations, each one memory for all its questions.

Utterance id = the turn's ``dia_id``; question id ``"<sample_id>:<index in qa>"``; evidence = ids in the QA's
``evidence`` list (each entry may join several ids with ``;``, ``,`` or spaces; ids not in the conversation are dropped).
Questions carry no date in this format: they are taken as asked at the conversation's last session date. Category 5
(adversarial: the conversation does not hold the answer) questions are abstention questions: their reference is none
(the ``adversarial_answer`` they carry is the trap), and LongMemEval's session metrics leave them out, as its
``_abs`` questions.
"""
from __future__ import annotations

import re

import numpy as np

from ..memory import Dataset, Memory, MemoryBank, Question
from ._io import field, read_json, timestamp
from .errors import DataFormatError

_SESSION = re.compile(r"session_(\d+)$")


def load_locomo(path: str) -> Dataset:
    samples = read_json(path)
    if not isinstance(samples, list):
        raise DataFormatError(path, f"expected a JSON list of conversations, got {type(samples).__name__}")
    bank, memories, questions = MemoryBank(), [], []
    for n, sample in enumerate(samples):
        sample_id = str(field(path, n, sample, "sample_id", (str, int)))
        rec = f"{n} ({sample_id})"
        conv = field(path, rec, sample, "conversation", dict)
        numbers = sorted(int(m.group(1)) for key in conv if (m := _SESSION.match(key)))
        rows, dates, dia_rows = [], [], {}
        for s in numbers:
            key = f"session_{s}"
            turns_raw = field(path, rec, conv, key, list)
            turns = []
            for t, turn in enumerate(turns_raw):
                where = f"{rec}, {key}[{t}]"
                dia_id = field(path, where, turn, "dia_id", str)
                if dia_id in dia_rows or dia_id in {u for u, _, _ in turns}:
                    raise DataFormatError(path, f"duplicate dia_id {dia_id!r}", where, "dia_id")
                turns.append((dia_id, field(path, where, turn, "speaker", str), _turn_text(path, where, turn)))
            date = timestamp(path, rec, conv, f"{key}_date_time")
            row = bank.add_session(f"{sample_id}:{key}", date, turns)
            rows.append(row)
            dates.append(date)
            dia_rows.update({u: bank.offsets[row] + t for t, (u, _, _) in enumerate(turns)})
        asked = float(np.nanmax(dates)) if dates and not np.isnan(dates).all() else float("nan")
        for k, qa in enumerate(field(path, rec, sample, "qa", list)):
            where = f"{rec}, qa[{k}]"
            evidence = []
            for ev in field(path, where, qa, "evidence", list, optional=True) or []:
                if not isinstance(ev, str):
                    raise DataFormatError(path, f"evidence entries must be strings, got {type(ev).__name__}", where, "evidence")
                evidence += [dia_rows[i] for i in re.split(r"[;,\s]+", ev) if i in dia_rows]
            answer = qa.get("answer")  # category 5's "adversarial_answer" is the trap, not a reference
            category = field(path, where, qa, "category", (int, str), optional=True)
            questions.append(Question(
                id=f"{sample_id}:{k}", text=field(path, where, qa, "question", str), date=asked,
                type=None if category is None else f"category-{category}",
                evidence=np.unique(np.asarray(evidence, dtype=np.int64)), memory=len(memories),
                answer=None if answer is None else str(answer), abstention=str(category) == "5"))
        if not rows:
            raise DataFormatError(path, "conversation has no session_<n> lists", rec, "conversation")
        memories.append(Memory(np.asarray(rows, dtype=np.int64), np.asarray(dates, dtype=np.float64)))
    return Dataset("locomo", bank, memories, questions)


def _turn_text(path, where, turn: dict) -> str:
    text = field(path, where, turn, "text", str)
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]" if isinstance(caption, str) and caption else text
