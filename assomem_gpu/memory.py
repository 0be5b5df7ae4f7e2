"""The columnar memory model.

A ``Dataset`` is one pool of distinct sessions (``MemoryBank``), the memories that questions ask (``Memory``: a view
listing sessions of the pool with the dates they carry in that memory) and the questions. Utterances are rows of the
bank's arrays; everything downstream addresses them by row index, and only exports turn rows back into ids.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import compress
from typing import Iterable, Sequence

import numpy as np

from .rows import spans


SLICED_REMOVALS = 8  # ``MemoryBank.remove`` of up to this many sessions deletes slices; more, one pass


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    date: float  # POSIX seconds (UTC); NaN when unknown
    type: str | None
    evidence: np.ndarray  # bank utterance rows that answer it (int64, sorted)
    memory: int  # index into Dataset.memories
    answer: str | None = None
    abstention: bool = False  # LongMemEval '_abs' questions: the answer is not in the memory
    evidence_sessions: np.ndarray | None = None  # bank session rows labelled as evidence, when the data says so
    rubric: bool = False  # the answer says what a good reply does (LongMemEval's preference questions), not what
    # it says


@dataclass(frozen=True)
class Memory:
    """The sessions one question (or a group of questions) can search, with their dates in this memory. A session
    listed twice (some LongMemEval haystacks do) is held once, at its first place and date."""

    sessions: np.ndarray  # bank session rows (int64)
    dates: np.ndarray  # float64 POSIX seconds per listed session; NaN when unknown

    def __post_init__(self):
        sessions, dates = np.asarray(self.sessions, np.int64), np.asarray(self.dates, np.float64)
        first = np.sort(np.unique(sessions, return_index=True)[1])
        object.__setattr__(self, "sessions", sessions[first])
        object.__setattr__(self, "dates", dates[first])


@dataclass
class MemoryBank:
    """Distinct sessions and their utterances, stored column-wise. Session ``s`` owns rows ``offsets[s]:offsets[s+1]``."""

    session_ids: list[str] = field(default_factory=list)
    session_dates: list[float] = field(default_factory=list)  # the date a session was first seen with
    offsets: list[int] = field(default_factory=lambda: [0])
    utt_ids: list[str] = field(default_factory=list)
    utt_speakers: list[str] = field(default_factory=list)
    utt_texts: list[str] = field(default_factory=list)
    _by_id: dict[str, int] = field(default_factory=dict, repr=False)  # session id -> row
    _utt_ids: set[str] = field(default_factory=set, repr=False)  # the utterance ids held
    _offset_array: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64), repr=False, compare=False)

    @property
    def offset_array(self) -> np.ndarray:
        """``offsets`` as an int64 array (extended by the sessions added since, else remade where its length
        differs; ``remove`` and ``reindex`` remake it)."""
        held = len(self._offset_array)
        if held < len(self.offsets):
            self._offset_array = np.concatenate([self._offset_array, np.asarray(self.offsets[held:], np.int64)])
        elif held > len(self.offsets):
            self._offset_array = np.asarray(self.offsets, np.int64)
        return self._offset_array

    @property
    def n_sessions(self) -> int:
        return len(self.session_ids)

    @property
    def n_utterances(self) -> int:
        return len(self.utt_ids)

    def session_index(self, session_id: str) -> int | None:
        return self._by_id.get(session_id)

    def holds_utterance(self, utt_id: str) -> bool:
        return utt_id in self._utt_ids

    def reindex(self) -> "MemoryBank":
        """Remake the id lookups from the columns (after they were set directly); returns the bank."""
        self._by_id = {sid: i for i, sid in enumerate(self.session_ids)}
        self._utt_ids = set(self.utt_ids)
        self._offset_array = np.asarray(self.offsets, np.int64)
        return self

    def add_session(self, session_id: str, date: float, turns: Sequence[tuple[str, str, str]]) -> int:
        """Add a session of ``(utterance_id, speaker, text)`` turns, or return the row of an identical one already held.

        Raises ``ValueError`` when a session with this id but other content exists.
        """
        turns = [tuple(t) for t in turns]
        if any(len(t) != 3 for t in turns):
            raise ValueError(f"session {session_id!r}: turns must be (utterance id, speaker, text)")
        known = self._by_id.get(session_id)
        if known is not None:
            lo, hi = self.offsets[known], self.offsets[known + 1]
            held = list(zip(self.utt_ids[lo:hi], self.utt_speakers[lo:hi], self.utt_texts[lo:hi]))
            if held != turns:
                raise ValueError(f"session {session_id!r} appears twice with different content")
            return known
        row = len(self.session_ids)
        self._by_id[session_id] = row
        self.session_ids.append(session_id)
        self.session_dates.append(date)
        for utt_id, speaker, text in turns:
            self._utt_ids.add(utt_id)
            self.utt_ids.append(utt_id)
            self.utt_speakers.append(speaker)
            self.utt_texts.append(text)
        self.offsets.append(len(self.utt_ids))
        return row

    def select(self, sessions: Sequence[int]) -> "MemoryBank":
        """A new bank holding only these session rows, in this order."""
        rows = self.session_utterances(sessions).tolist()
        counts = np.diff(self.offset_array)[np.asarray(sessions, np.int64)]
        out = MemoryBank([self.session_ids[s] for s in sessions], [self.session_dates[s] for s in sessions],
                         [0, *np.cumsum(counts).tolist()], [self.utt_ids[i] for i in rows],
                         [self.utt_speakers[i] for i in rows], [self.utt_texts[i] for i in rows])
        return out.reindex()

    def remove(self, sessions: np.ndarray) -> None:
        """Drop these session rows (distinct) in place. A few are slices deleted from the columns (a move of the
        pointers after each), so a small removal from a large bank is not a copy of its lists; many, one pass."""
        sessions = np.asarray(sessions, np.int64)
        unique = len(self._utt_ids) == self.n_utterances
        if len(sessions) > SLICED_REMOVALS:
            keep_s = np.ones(self.n_sessions, bool)
            keep_s[sessions] = False
            keep = np.repeat(keep_s, np.diff(self.offset_array)).tolist()
            gone = list(compress(self.utt_ids, [not k for k in keep]))
            self.utt_ids, self.utt_speakers, self.utt_texts = (list(compress(column, keep)) for column in
                                                               (self.utt_ids, self.utt_speakers, self.utt_texts))
            self.session_ids = list(compress(self.session_ids, keep_s.tolist()))
            self.session_dates = list(compress(self.session_dates, keep_s.tolist()))
            if unique:
                self._utt_ids.difference_update(gone)
        else:
            for s in sorted(sessions.tolist(), reverse=True):
                lo, hi = self.offsets[s], self.offsets[s + 1]
                if unique:
                    self._utt_ids.difference_update(self.utt_ids[lo:hi])
                del self.utt_ids[lo:hi], self.utt_speakers[lo:hi], self.utt_texts[lo:hi]
                del self.session_ids[s], self.session_dates[s]
        self.offsets = [0, *np.cumsum(np.delete(np.diff(self.offset_array), sessions)).tolist()]
        self._offset_array = np.asarray(self.offsets, np.int64)
        self._by_id = {sid: i for i, sid in enumerate(self.session_ids)}
        if not unique:
            self._utt_ids = set(self.utt_ids)

    def utt_session(self) -> np.ndarray:
        """Session row of every utterance (int64)."""
        off = self.offset_array
        return np.repeat(np.arange(self.n_sessions), np.diff(off))

    def encoded_texts(self, rows: Iterable[int] | None = None) -> list[str]:
        """The text each utterance (or each of ``rows``) is embedded as: ``"<speaker>: <text>"``, or the bare text."""
        rows = range(self.n_utterances) if rows is None else rows
        return [f"{self.utt_speakers[i]}: {self.utt_texts[i]}" if self.utt_speakers[i] else self.utt_texts[i] for i in rows]

    def session_utterances(self, sessions: Iterable[int]) -> np.ndarray:
        """Utterance rows of the given sessions, in session then turn order."""
        off = self.offset_array
        s = np.asarray(list(sessions) if not isinstance(sessions, np.ndarray) else sessions, dtype=np.int64)
        return spans(off[s], off[s + 1] - off[s])


@dataclass
class Dataset:
    name: str
    bank: MemoryBank
    memories: list[Memory]
    questions: list[Question]
    session_metadata: dict[str, dict] = field(default_factory=dict)  # session id -> what the data says of it
    # beyond its turns (the JSONL format's ``metadata``: a store import keeps it)

    def memory_utterances(self, memory: int) -> np.ndarray:
        return self.bank.session_utterances(self.memories[memory].sessions)

    def utterance_times(self, memory: int) -> np.ndarray:
        """Per utterance of ``memory_utterances(memory)``: its session's date in that memory."""
        mem = self.memories[memory]
        counts = np.diff(self.bank.offset_array)[mem.sessions]
        return np.repeat(mem.dates, counts)

    def subset(self, question_rows: Sequence[int]) -> "Dataset":
        """A compact dataset holding only these questions and the sessions their memories reach."""
        rows = list(question_rows)
        mem_rows = sorted({self.questions[q].memory for q in rows})
        keep = np.unique(np.concatenate([self.memories[m].sessions for m in mem_rows])) if mem_rows else np.zeros(0, int)
        bank, sess_map, utt_map = MemoryBank(), np.full(self.bank.n_sessions, -1), np.full(self.bank.n_utterances, -1)
        old = self.bank
        for s in keep:
            lo, hi = old.offsets[s], old.offsets[s + 1]
            sess_map[s] = bank.add_session(old.session_ids[s], old.session_dates[s],
                                           list(zip(old.utt_ids[lo:hi], old.utt_speakers[lo:hi], old.utt_texts[lo:hi])))
            utt_map[lo:hi] = np.arange(bank.offsets[-2], bank.offsets[-1])
        mem_map = {m: i for i, m in enumerate(mem_rows)}
        memories = [Memory(sess_map[self.memories[m].sessions], self.memories[m].dates) for m in mem_rows]
        questions = [replace(self.questions[q], evidence=np.sort(utt_map[self.questions[q].evidence]),
                             memory=mem_map[self.questions[q].memory],
                             evidence_sessions=None if self.questions[q].evidence_sessions is None
                             else _mapped(sess_map, self.questions[q].evidence_sessions)) for q in rows]
        return Dataset(self.name, bank, memories, questions,
                       {sid: m for sid, m in self.session_metadata.items() if bank.session_index(sid) is not None})



def _mapped(mapping: np.ndarray, rows: np.ndarray) -> np.ndarray:
    new = mapping[rows]
    return np.sort(new[new >= 0])
