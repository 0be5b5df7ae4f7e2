"""LoCoMo format: a list of conversations, each one memory for all its questions.

Utterance id = the turn's ``dia_id``; question id ``"<sample_id>:<index in qa>"``; evidence = ids in the QA's
``evidence`` list (each entry may join several ids with ``;``, ``,`` or spaces; an id not in the conversation is read
without its zero padding or stray colon, ``D30:05`` and ``D:11:26`` as ``D30:5`` and ``D11:26``, else dropped).
A date that cannot be read is taken as undated, and a turn that repeats a ``dia_id`` its conversation holds already
is kept as ``"<dia_id>#<n>"`` (its n-th holder, or the next n that no turn holds; evidence naming the id reads the
first): one ``DataFormatWarning`` a file for each. Texts have lone surrogates repaired (``_io.prose``).
Questions carry no date in this format: they are taken as asked at the conversation's last session date. Category 5
(adversarial: the conversation does not hold the answer) questions are abstention questions: their reference is none
(the ``adversarial_answer`` they carry is the trap), and LongMemEval's session metrics leave them out, as its
``_abs`` questions.
"""
from __future__ import annotations

import re
import warnings

import numpy as np

from ..memory import Dataset, Memory, MemoryBank, Question
from ._io import field, prose, read_json, repaired, timestamp, warn_unread
from .errors import DataFormatError, DataFormatWarning

_SESSION = re.compile(r"session_(\d+)$")
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")  # a dia_id as the evidence lists write it, padded or with a stray colon


def load_locomo(path: str) -> Dataset:
    samples = read_json(path)
    if not isinstance(samples, list):
        raise DataFormatError(path, f"expected a JSON list of conversations, got {type(samples).__name__}")
    bank, memories, questions, unread, seen, repeated = MemoryBank(), [], [], [], set(), []
    for n, sample in enumerate(samples):
        sample_id = str(field(path, n, sample, "sample_id", (str, int)))
        rec = f"{n} ({sample_id})"
        if sample_id in seen:
            raise DataFormatError(path, f"duplicate sample_id {sample_id!r}", rec, "sample_id")
        seen.add(sample_id)
        conv = field(path, rec, sample, "conversation", dict)
        keys = sorted((int(m.group(1)), key) for key in conv if (m := _SESSION.match(key)))  # session_1, session_01
        rows, dates, dia_rows, repeats = [], [], {}, {}  # repeats: how many turns of the conversation hold a dia_id
        given_ids = {turn["dia_id"] for _, key in keys if isinstance(conv[key], list) for turn in conv[key]
                     if isinstance(turn, dict) and isinstance(turn.get("dia_id"), str)}  # a repeat's name is none
        for _, key in keys:
            turns_raw = field(path, rec, conv, key, list)
            turns, held = [], set()
            for t, turn in enumerate(turns_raw):
                where = f"{rec}, {key}[{t}]"
                dia_id = given = field(path, where, turn, "dia_id", str)
                if dia_id in dia_rows or dia_id in held:  # a repeat: its own id, '<dia_id>#<n>'
                    repeated.append(where)
                    while dia_id in dia_rows or dia_id in held or dia_id in given_ids:
                        repeats[given] = repeats.get(given, 1) + 1
                        dia_id = f"{given}#{repeats[given]}"
                held.add(dia_id)
                turns.append((dia_id, prose(path, where, turn, "speaker"), _turn_text(path, where, turn)))
            date = timestamp(path, rec, conv, f"{key}_date_time", unread)
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
                for given in re.split(r"[;,\s]+", ev):
                    if (i := _dia_id(given, dia_rows)) in dia_rows:
                        evidence.append(dia_rows[i])
            answer = qa.get("answer")  # category 5's "adversarial_answer" is the trap, not a reference
            category = field(path, where, qa, "category", (int, str), optional=True)
            questions.append(Question(
                id=f"{sample_id}:{k}", text=prose(path, where, qa, "question"), date=asked,
                type=None if category is None else f"category-{category}",
                evidence=np.unique(np.asarray(evidence, dtype=np.int64)), memory=len(memories),
                answer=None if answer is None else repaired(str(answer)), abstention=str(category) == "5"))
        if not rows:
            raise DataFormatError(path, "conversation has no session_<n> lists", rec, "conversation")
        memories.append(Memory(np.asarray(rows, dtype=np.int64), np.asarray(dates, dtype=np.float64)))
    warn_unread(path, unread)
    if repeated:
        warnings.warn(f"{path}: {len(repeated)} turn(s) repeat a dia_id that their conversation holds already; each "
                      f"is kept as '<dia_id>#<n>' (its n-th holder), evidence naming the id reads the first; the "
                      f"first: record {repeated[0]}", DataFormatWarning, stacklevel=2)
    return Dataset("locomo", bank, memories, questions)


def _dia_id(given: str, held) -> str:
    """Evidence id ``given`` as the conversation's ``dia_id`` it names: itself if ``held``, else unpadded."""
    m = None if given in held else _DIA_ID.fullmatch(given)
    return given if m is None else f"D{int(m.group(1))}:{int(m.group(2))}"


def _turn_text(path, where, turn: dict) -> str:
    text = prose(path, where, turn, "text")
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {repaired(caption)}]" if isinstance(caption, str) and caption else text
