"""LongMemEval (S, M, oracle; ``.json`` or ``.json.gz``): one memory per question, sessions pooled across haystacks.

Utterance id ``"<session_id>:<turn_index>"`` (0-based over all turns); evidence = turns with ``has_answer: true``. A
session id that a later haystack holds with other content is kept apart (one copy for each other content, which every
haystack holding that content shares; its utterance ids the same: each memory holds one of them), an id a haystack lists
again with other turns is that listing's session ``"<session_id>#<place in the haystack>"`` (or the one an earlier
listing of the same turns became), and a date that cannot be read is taken as undated; each is reported once per file
(``DataFormatWarning``). Texts have lone surrogates repaired (``_io.prose``). A preference question's answer is a rubric
(``Question.rubric``): what a good reply does ("The user would prefer responses that suggest ..."), which answers are
judged by, not matched with.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..memory import Dataset, Memory, MemoryBank, Question
from ._io import field, prose, read_json, repaired, timestamp, warn_unread
from .errors import DataFormatError, DataFormatWarning

RUBRIC_TYPE = "single-session-preference"  # the question type whose answers are rubrics


def load_longmemeval(path: str) -> Dataset:
    items = read_json(path)
    if not isinstance(items, list):
        raise DataFormatError(path, f"expected a JSON list of questions, got {type(items).__name__}")
    bank, memories, questions, seen = MemoryBank(), [], [], set()
    unread, apart, copies, twice = [], [], {}, []  # dates not read; (question, session id) of each copy kept apart;
    # their names; (question, session id) of each id a haystack lists again with other turns
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
        rows, when, evidence, here = [], [], [], {}  # here: the row of each session id this haystack lists
        listed, renamed = {s for s in sids if isinstance(s, str)}, {}  # renamed: the names given to an id's listings
        # with other turns than its first (``_listed_again``)
        for j, (sid, session) in enumerate(zip(sids, sessions)):
            if not isinstance(sid, str):
                raise DataFormatError(path, f"session id {j} is not a string", rec, "haystack_session_ids")
            if not isinstance(session, list):
                raise DataFormatError(path, f"session {sid!r} is not a list of turns", rec, "haystack_sessions")
            turns = []
            for t, turn in enumerate(session):
                where = f"{rec}, session {sid!r} turn {t}"
                turns.append((f"{sid}:{t}", prose(path, where, turn, "role"), prose(path, where, turn, "content")))
            date = timestamp(path, rec, {"haystack_dates": dates[j]}, "haystack_dates", unread)
            try:
                row, made = _session_row(bank, sid, qid, date, turns, here, copies)
            except _ListedTwice:
                twice.append((qid, sid))
                row, made, sid = _listed_again(bank, sid, j, qid, date, turns, here, copies, listed, renamed)
            if made:
                apart.append((qid, sid))
            here.setdefault(sid, row)
            rows.append(row)
            when.append(date)
            lo = bank.offsets[row]
            evidence += [lo + t for t, turn in enumerate(session) if turn.get("has_answer") is True]
        answer = item.get("answer")
        labelled = field(path, rec, item, "answer_session_ids", list, optional=True) or []
        evidence_sessions = {here.get(s, bank.session_index(s)) for s in labelled} - {None}
        evidence_sessions |= {row for row, session in zip(rows, sessions)
                              if any(t.get("has_answer") is True for t in session)}
        questions.append(Question(
            id=qid, text=prose(path, rec, item, "question"),
            date=timestamp(path, rec, item, "question_date", unread),
            type=field(path, rec, item, "question_type", str, optional=True),
            evidence=np.unique(np.asarray(evidence, dtype=np.int64)), memory=len(memories),
            answer=None if answer is None else repaired(str(answer)), abstention=qid.endswith("_abs"),
            rubric=item.get("question_type") == RUBRIC_TYPE,
            evidence_sessions=np.asarray(sorted(evidence_sessions), dtype=np.int64)))
        memories.append(Memory(np.asarray(rows, dtype=np.int64), np.asarray(when, dtype=np.float64)))
    warn_unread(path, unread)
    if apart:
        warnings.warn(f"{path}: {len(apart)} haystack session(s) hold other content than the session of the same id "
                      f"that an earlier question's haystack holds, and are kept apart (one copy for each other "
                      f"content); the first: question {apart[0][0]!r}, session {apart[0][1]!r}", DataFormatWarning,
                      stacklevel=2)
    if twice:
        warnings.warn(f"{path}: {len(twice)} haystack session(s) repeat a session id that their haystack listed "
                      f"before with other content; each is kept as a session '<id>#<its place in the haystack>' "
                      f"(utterances '<id>#<place>:<turn>'); the first: question {twice[0][0]!r}, session "
                      f"{twice[0][1]!r}", DataFormatWarning, stacklevel=2)
    return Dataset("longmemeval", bank, memories, questions)


def _listed_again(bank: MemoryBank, sid: str, j: int, qid: str, date: float, turns: list, here: dict[str, int],
                  copies: dict[str, list[str]], listed: set[str], renamed: dict[str, list[str]]
                  ) -> tuple[int, bool, str]:
    """``_session_row`` of the ``j``-th listing of a haystack, session ``sid`` with other turns than the haystack's
    first listing of it, and the name it goes by: the session an earlier such listing with the same turns became,
    else a new one, ``"<sid>#<j>"`` (``"#<j>"`` added again while the haystack lists that name itself); its turns'
    ids ``"<name>:<turn>"``."""
    for name in renamed.get(sid, []):
        try:
            return *_session_row(bank, name, qid, date, _named(name, turns), here, copies), name
        except _ListedTwice:
            pass
    name = f"{sid}#{j}"
    while name in listed or name in here:
        name += f"#{j}"
    renamed.setdefault(sid, []).append(name)
    return *_session_row(bank, name, qid, date, _named(name, turns), here, copies), name


def _named(sid: str, turns: list) -> list:
    """``turns`` (id, speaker, text) with the ids of session ``sid``'s turns."""
    return [(f"{sid}:{t}", speaker, text) for t, (_, speaker, text) in enumerate(turns)]


class _ListedTwice(ValueError):
    """A haystack lists a session id again with other turns."""


def _session_row(bank: MemoryBank, sid: str, qid: str, date: float, turns: list, here: dict[str, int],
                 copies: dict[str, list[str]]) -> tuple[int, bool]:
    """The bank row of session ``sid`` of question ``qid``'s haystack, and whether a copy was made for it: the
    session this haystack listed under that id already (``here``), else the bank's session of that id or a copy kept
    apart for another question (``copies``: their names by id) that holds the same turns, else a new copy
    ``"<sid>@<qid>"``. ``_ListedTwice`` where the haystack lists an id twice with other turns."""
    if sid in here:
        try:
            return bank.add_session(bank.session_ids[here[sid]], date, turns), False
        except ValueError:
            raise _ListedTwice(sid) from None
    for name in [sid, *copies.get(sid, [])]:
        try:
            return bank.add_session(name, date, turns), False
        except ValueError:
            pass
    row = bank.add_session(f"{sid}@{qid}", date, turns)
    copies.setdefault(sid, []).append(f"{sid}@{qid}")
    return row, True
