"""``MemoryIndex``: a live memory you add sessions to, remove them from, search with free text, save and load.

The small verb API over one memory (as a FAISS index is over vectors)::

    index = MemoryIndex()                                   # bundled MiniLM encoder, default config and weights
    index.add_sessions([Session("s1", "2024-03-01", [Utterance("I booked flights to Lisbon.", "Alice")])])
    hits = index.search("Where am I flying?", k=5)          # [Hit(utterance_id, session_id, text, score, ...)]
    index.remove_sessions(["s1"])
    index.save("alice.npz"); index = MemoryIndex.load("alice.npz")

Every write leaves the index equal to one built from scratch from the sessions it holds (graph, clues, BM25, time
mentions), and bad input raises ``ValueError`` / ``TypeError`` naming the field before anything changes.

Concurrency: searches may run in parallel threads; ``add_sessions``, ``remove_sessions`` and ``calibrate`` are
exclusive (a readers–writer lock; a waiting write holds back new searches). Utterances are encoded, and a session's
clue, BM25 counts, time marks and context embeddings made (``MemoryState.derive``), outside the lock; only the
index's own update runs inside it. A search changes nothing but
a cache of the times an utterance mentions, which it fills on first use (the same value whoever fills it).

Equality with a fresh build holds for the same vectors: an encoder that rounds a text differently in another batch
(padding changes the shapes its matrices multiply) can move a pair across a threshold.
"""
from __future__ import annotations

import copy
import functools
import json
import math
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date as Date, datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .backend import Backend, get_backend
from .config import AssoMemConfig
from .encode import DEFAULT_MODEL, Encoder, prompted, text_encoder
from .fusion import FusionModel, Ranking, calibrate_fusion, default_fusion, rank
from .llm import LLM, make_llm, reply_fitting
from .locking import ReadWriteLock
from .prompts import ANSWER_TOKENS, day, final_answer, generation_prompt
from .scoring import Queries, Scored, score
from .snapshot import SnapshotError, read as read_snapshot, write as write_snapshot
from .state import Derived, MemoryState, Turn


@dataclass(frozen=True)
class Utterance:
    text: str
    speaker: str = ""
    id: str | None = None  # default "<session id>:<index in the session>"


@dataclass(frozen=True)
class Session:
    """A dated session. ``date``: a timezone-aware ``datetime``, an ISO 8601 string with an offset (``...Z`` or
    ``+02:00``), a calendar day (``date`` or ``"YYYY-MM-DD"``, read as UTC midnight) or POSIX seconds."""

    id: str
    date: Any
    utterances: Sequence[Utterance | str | Mapping]
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LabelledQuestion:
    """A question with the utterances that answer it, for ``calibrate``."""

    text: str
    evidence: Sequence[str]  # utterance ids
    type: str | None = None  # question type (the fusion weights are per type)
    date: Any = None  # as Session.date; None: now


@dataclass(frozen=True)
class Hit:
    utterance_id: str
    session_id: str
    speaker: str
    text: str
    date: str | None  # the session's date, ISO 8601 with its UTC offset; None when undated
    score: float | None  # fused score (eq. 4) for candidates ranked by fusion; None for those ranked after them
    signals: dict[str, float]  # each signal's share of the score (they sum to it); empty when score is None
    metadata: Mapping[str, Any] = field(default_factory=dict)  # the session's

    def fields(self) -> dict[str, Any]:
        """Every field but the text, as plain data (a framework document's metadata)."""
        return {"utterance_id": self.utterance_id, "session_id": self.session_id, "speaker": self.speaker,
                "date": self.date, "score": self.score, "signals": dict(self.signals),
                "session_metadata": dict(self.metadata)}


@dataclass(frozen=True)
class Answer:
    text: str  # the answer in the LLM's reply (``prompts.final_answer``); "IDK" when the memories are of no use
    hits: list[Hit]  # the utterances it was shown, best first
    prompt: str


class MemoryIndex:
    """One memory, searchable (see the module docstring).

    ``encoder``: an ``Encoder``, a transformers model id or folder (default the bundled all-MiniLM-L6-v2), or None
    to work with vectors only (``add_sessions(..., embeddings=)``, ``search_embeddings``; needs
    ``clue_mode="centroid"``). ``fusion``: signal weights (default: the shipped weights calibrated on LongMemEval,
    see ``assomem_gpu/weights/README.md``). ``device``: ``auto``, ``cpu``, ``cuda`` or a ``Backend``
    (``backend.get_backend``). ``dated=False`` lets sessions
    and questions go without dates (meeting transcripts): such sessions match no time window. ``llm_cache``: in the
    ``llm`` clue mode, keep the LLM's clue texts in the on-disk cache for later runs (benchmarks); off by default, so
    that a removed session leaves nothing behind.
    """

    def __init__(self, encoder: Encoder | str | None = DEFAULT_MODEL, config: AssoMemConfig | None = None,
                 fusion: FusionModel | None = None, device: str | Backend = "auto", dated: bool = True,
                 dim: int | None = None, llm_cache: bool = False):
        self.config = AssoMemConfig() if config is None else config
        if not isinstance(self.config, AssoMemConfig):
            raise TypeError(f"config must be an AssoMemConfig, got {type(self.config).__name__}")
        self.encoder_model = encoder if isinstance(encoder, str) else None
        self.encoder: Encoder | None = text_encoder(encoder) if isinstance(encoder, str) else encoder
        if self.encoder is None and self.config.clue_mode != "centroid":
            raise ValueError(f"config.clue_mode {self.config.clue_mode!r} embeds clue texts and needs an encoder; "
                             "pass one or use clue_mode='centroid'")
        self.dim = self.encoder.dim if self.encoder is not None else dim
        if self.dim is None:
            raise ValueError("dim: an index without an encoder needs the embedding dimension")
        self.fusion = default_fusion(self.config.signals, self._encoder_name) if fusion is None else fusion
        check_fusion(self.fusion, self.config)
        self.backend = device if isinstance(device, Backend) else get_backend(device)
        if self.config.ppr_hops and not self.backend.ppr_steps:
            raise ValueError(f"config.ppr_hops: {self.backend.components['ppr_step'].impl} runs PageRank to "
                             "convergence over the whole graph; use ppr_hops=0 with it")
        self.dated = dated
        self.stage_seconds: dict[str, float] = defaultdict(float)  # wall time per stage, summed over calls
        self._lock = ReadWriteLock()
        self._timing = threading.Lock()
        self._state = MemoryState(self.config, self.dim, self.encoder, llm_cache)

    @property
    def _encoder_name(self) -> str | None:
        return None if self.encoder is None else self.encoder.name

    # ---- what it holds -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Sessions held."""
        with self._lock.read():  # a removal edits the bank in place
            return self._state.bank.n_sessions

    @property
    def n_utterances(self) -> int:
        with self._lock.read():
            return self._state.n_utterances

    @property
    def session_ids(self) -> list[str]:
        with self._lock.read():
            return list(self._state.bank.session_ids)

    def get_session(self, session_id: str) -> Session:
        """The session as held (its date as POSIX seconds, exactly as stored; NaN when undated). ``KeyError`` if
        the index does not hold it."""
        with self._lock.read():
            bank = self._state.bank
            row = bank.session_index(session_id)
            if row is None:
                raise KeyError(session_id)
            lo, hi = bank.offsets[row], bank.offsets[row + 1]
            utts = [Utterance(t, s, u) for u, s, t in zip(bank.utt_ids[lo:hi], bank.utt_speakers[lo:hi],
                                                          bank.utt_texts[lo:hi])]
            return Session(session_id, bank.session_dates[row], utts, copy.deepcopy(self._state.metadata[row]))

    @contextmanager
    def _stage(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._timing:  # parallel searches add up their times too
                self.stage_seconds[name] += time.perf_counter() - start

    # ---- writes --------------------------------------------------------------------------------------------------
    def add_sessions(self, sessions: Iterable[Session | Mapping], embeddings: np.ndarray | None = None,
                     journal: Callable[[list, np.ndarray, Derived], None] | None = None) -> None:
        """Add sessions (``Session`` records or dicts of the same fields). Their utterances are embedded as
        ``"<speaker>: <text>"`` in batches (after the encoder's passage prompt, ``encode.prompted``), unless
        ``embeddings`` gives one row per utterance (all sessions' utterances in order, read with the same prompt; rows
        are L2-normalised); each session's clue is made and embedded, and with ``config.sentences`` each utterance's
        sentences (also when ``embeddings`` are given). Raises before any change if any session is bad.
        ``journal(records, vectors, derived)`` (``state.Derived``: the clue and sentence vectors among it), when
        given, runs under the write lock once every check has passed and before the index changes (a store commits
        the write there): if it raises, nothing changes."""
        records = [_session(s, f"sessions[{i}]", self.dated) for i, s in enumerate(_listed(sessions, "sessions"))]
        _no_duplicates(records)
        n = sum(len(r[2]) for r in records)
        with self._stage("encode"):
            if embeddings is None:
                if self.encoder is None:
                    raise ValueError("embeddings: this index has no encoder; pass one vector per utterance")
                emb = self.encoder.encode(prompted(self.encoder, "passage",
                                                   [f"{s}: {t}" if s else t for r in records for _, s, t in r[2]]))
            else:
                emb = _vectors(embeddings, "embeddings", n, self.dim)
            derived = self._state.derive(records, emb)
        with self._lock.write():
            self._add(records, emb, journal=journal, derived=derived)

    def _add(self, records: list[tuple[str, float, list[Turn], dict]], emb: np.ndarray,
             clue_emb: np.ndarray | None = None, journal=None, derived: Derived | None = None,
             sentences: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Add checked records with their utterance vectors, and their clue vectors and sentence vectors (counts,
        vectors) or everything ``derive`` makes of them (made here when None); the caller holds the write lock, or
        owns the index alone."""
        bank = self._state.bank
        for sid, _, turns, _ in records:
            if bank.session_index(sid) is not None:
                raise ValueError(f"sessions: session id {sid!r} is already in the index")
            clash = next((u for u, _, _ in turns if bank.holds_utterance(u)), None)
            if clash is not None:
                raise ValueError(f"sessions: utterance id {clash!r} is already in the index")
        if derived is None:
            derived = self._state.derive(records, emb, clue_emb, sentences)
        if journal is not None:
            journal(records, emb, derived)
        if records:
            with self._stage("add"):
                self._state.add(records, emb, derived)

    def remove_sessions(self, session_ids: Iterable[str], journal: Callable[[list[str]], None] | None = None) -> None:
        """Remove these sessions; afterwards the index equals one built without them. Unknown ids raise
        ``ValueError`` and remove nothing. ``journal(ids)``: as in ``add_sessions``."""
        ids = _listed(session_ids, "session_ids")
        for i, sid in enumerate(ids):
            if not isinstance(sid, str):
                raise TypeError(f"session_ids[{i}]: must be a string, got {type(sid).__name__}")
        with self._lock.write():
            rows = [self._state.bank.session_index(s) for s in ids]
            missing = [s for s, r in zip(ids, rows) if r is None]
            if missing:
                raise ValueError(f"session_ids: not in the index: {', '.join(map(repr, missing[:5]))}")
            if journal is not None:
                journal(ids)
            if rows:
                with self._stage("remove"):
                    self._state.remove(np.unique(np.asarray(rows, np.int64)))

    def calibrate(self, questions: Iterable[LabelledQuestion | Mapping]) -> FusionModel:
        """Fit the fusion weights (CMI per question type, their temperature by an inner cross-validation where the
        config gives several, the signals that same cross-validation leaves out with ``config.select_signals``, and
        the type classifier) on labelled questions about this memory, use them from now on, and return them.
        Questions whose evidence is empty are skipped."""
        qs = [_labelled(q, f"questions[{i}]") for i, q in enumerate(_listed(questions, "questions"))]
        if self.encoder is None:
            raise ValueError("questions: calibrating needs an encoder for the question texts")
        emb = self.encoder.encode(prompted(self.encoder, "query", [q.text for q in qs]))
        with self._lock.read():  # the features and evidence rows of one state; the fit reads them alone
            row_of = {u: i for i, u in enumerate(self._state.bank.utt_ids)}
            for i, q in enumerate(qs):
                unknown = [e for e in q.evidence if e not in row_of]
                if unknown:
                    raise ValueError(f"questions[{i}].evidence: not utterances of the index: {unknown[:5]}")
            dates = np.asarray([_when(q.date, f"questions[{i}].date", self.dated, now=True) for i, q in enumerate(qs)])
            feats = [f for part in score(self._state, Queries(emb, [q.text for q in qs], dates), self.config,
                                         self.backend) for f in part.features(self.backend)]
        keep = [i for i, q in enumerate(qs) if q.evidence]
        evidence = [np.asarray([row_of[e] for e in qs[i].evidence], np.int64) for i in keep]
        fusion = calibrate_fusion(self.config.signals, [qs[i].type for i in keep], [feats[i] for i in keep], evidence,
                                  emb[keep], self.config, self.backend)
        with self._lock.write():
            self.fusion = fusion
        return fusion

    # ---- search --------------------------------------------------------------------------------------------------
    def search(self, questions: str | Sequence[str], k: int = 10, question_date: Any = None,
               sessions: Iterable[str] | None = None, since: Any = None, until: Any = None) -> list:
        """The ``k`` best utterances for one question (a list of ``Hit``) or for each of a batch (a list of lists).

        ``question_date``: when the question is asked (resolves "last month"; one for all or one per question;
        default now). ``sessions`` (ids), ``since`` and ``until`` (dates, inclusive; a calendar day ``until`` covers
        that whole day) restrict the candidates before ranking (not a filter of the top k).
        """
        single = isinstance(questions, str)
        texts = _texts([questions] if single else _listed(questions, "questions"))
        if self.encoder is None:
            raise ValueError("questions: this index has no encoder; use search_embeddings")
        positive_k(k)
        with self._stage("encode"):
            emb = self.encoder.encode(prompted(self.encoder, "query", texts))
        hits = self._search(emb, texts, k, question_date, sessions, since, until)
        return hits[0] if single else hits

    def answer(self, question: str, k: int = 6, llm: str | LLM = "smollm2", question_date: Any = None,
               sessions: Iterable[str] | None = None, since: Any = None, until: Any = None,
               max_new_tokens: int = ANSWER_TOKENS) -> Answer:
        """An answer to ``question`` by ``llm`` (a ``make_llm`` spec or an ``llm.LLM``; made once per spec and kept)
        from its ``k`` best utterances (default 6, the paper's choice; fewer, the best, where the LLM could not take
        them all: ``llm.reply_fitting``), with the paper's generation prompt; the other arguments as ``search``.
        Nothing of it is cached on disk. ``RuntimeError`` when the LLM cannot be loaded or reached; ``ValueError``
        naming the field for bad input, and where the LLM takes no prompt of the question's (too long)."""
        if not isinstance(question, str):
            raise TypeError(f"question: expected a string, got {type(question).__name__}")
        if not _string(question, "question").strip():
            raise ValueError("question: empty or whitespace-only text")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: must be a positive integer, got {max_new_tokens!r}")
        model = make_llm(llm) if isinstance(llm, str) else llm
        asked = _question_dates(question_date, 1, self.dated)[0]
        found = self.search(question, k, asked, sessions, since, until)

        def prompt_of(n: int) -> str:
            return generation_prompt(question, [(h.date and h.date[:10], h.speaker, h.text) for h in found[:n]],
                                     day(asked))

        n, prompt, reply = reply_fitting(model, prompt_of, len(found), max_new_tokens)
        return Answer(final_answer(reply), found[:n], prompt)

    def search_embeddings(self, embeddings: np.ndarray, texts: Sequence[str] | None = None, k: int = 10,
                          question_date: Any = None, sessions: Iterable[str] | None = None, since: Any = None,
                          until: Any = None) -> list[list[Hit]]:
        """``search`` for questions given as vectors (B, dim), read as ``search`` reads them (after the encoder's query
        prompt, ``encode.prompted``); ``texts`` (optional, without the prompt) feed BM25 and time expressions."""
        emb = _real(embeddings, "embeddings")
        emb = _vectors(emb[None] if emb.ndim == 1 else emb, "embeddings", None, self.dim)
        if texts is None:
            texts = [""] * len(emb)
        else:
            texts = _listed(texts, "texts")
            if len(texts) != len(emb):
                raise ValueError(f"texts: one string per embedding row ({len(emb)}), got {len(texts)} items")
            for i, t in enumerate(texts):
                _string(t, f"texts[{i}]")
        positive_k(k)
        return self._search(emb, texts, k, question_date, sessions, since, until)

    def _search(self, emb, texts, k, question_date, sessions, since, until) -> list[list[Hit]]:
        dates = _question_dates(question_date, len(texts), self.dated)
        lo = None if since is None else _when(since, "since", True)
        hi = None if until is None else _when(until, "until", True, end_of_day=True)
        wanted = None if sessions is None else _listed(sessions, "sessions")
        with self._lock.read():
            state = self._state
            allowed = self._allowed(wanted, lo, hi)
            queries = Queries(emb, list(texts), dates,
                              None if allowed is None else np.broadcast_to(allowed, (len(texts), len(allowed))))
            hits, done = [], 0
            for part in self.score(queries):
                with self._stage("fusion+topk"):
                    ranked = rank(part, emb[done : done + len(part)], self.fusion, self.config.temperature, k,
                                  self.backend, shares=True)
                hits += [self._hits(state, r) for r in ranked]
                done += len(part)
            return hits

    def _allowed(self, sessions: list | None, since: float | None, until: float | None) -> np.ndarray | None:
        if sessions is None and since is None and until is None:
            return None
        bank = self._state.bank
        keep = np.ones(bank.n_sessions, bool)
        if sessions is not None:
            rows = []
            for i, sid in enumerate(sessions):
                if not isinstance(sid, str):
                    raise TypeError(f"sessions[{i}]: must be a string, got {type(sid).__name__}")
                if bank.session_index(sid) is None:
                    raise ValueError(f"sessions[{i}]: {sid!r} is not in the index")
                rows.append(bank.session_index(sid))
            keep[:] = False
            keep[rows] = True
        dates = np.asarray(bank.session_dates, np.float64)
        with np.errstate(invalid="ignore"):
            if since is not None:
                keep &= dates >= since
            if until is not None:
                keep &= dates <= until
        return np.repeat(keep, np.diff(bank.offset_array))

    def score(self, queries: Queries) -> list[Scored]:
        """Candidates and normalised signals of each question, in the backend's passes (the read lock is the
        caller's)."""
        return score(self._state, queries, self.config, self.backend, self._stage)

    def _hits(self, state: MemoryState, r: Ranking) -> list[Hit]:
        bank = state.bank
        session_of = np.searchsorted(bank.offset_array, r.rows, side="right") - 1
        n, signals = len(r.scores), self.config.signals
        scores, shares = r.scores.tolist(), r.shares.tolist() if n else []  # (one conversion a ranking, not a hit)
        out = []
        for i, (row, s) in enumerate(zip(r.rows.tolist(), session_of.tolist())):
            fused = i < n
            out.append(Hit(bank.utt_ids[row], bank.session_ids[s], bank.utt_speakers[row], bank.utt_texts[row],
                           _iso(bank.session_dates[s]), scores[i] if fused else None,
                           dict(zip(signals, shares[i])) if fused else {},
                           copy.deepcopy(state.metadata[s]) if state.metadata[s] else {}))
        return out

    # ---- persistence ---------------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the index to one file (see ``snapshot.py``), atomically; ``load`` restores it exactly."""
        with self._lock.read():
            documents, arrays = self._state.to_snapshot()
            documents["index"] = {"config": self.config.to_json(), "fusion": self.fusion.to_json(),
                                  "encoder": {"name": self._encoder_name, "model": self.encoder_model},
                                  "dim": self.dim, "dated": self.dated}
            write_snapshot(path, documents, arrays)

    @classmethod
    def load(cls, path: str | Path, encoder: Encoder | str | None = None,
             device: str | Backend = "auto") -> "MemoryIndex":
        """An index saved by ``save``. ``encoder``: default the model it was saved with (when it was made from a
        model id or folder); an encoder of another name raises ``ValueError``."""
        documents, arrays = read_snapshot(path)
        try:
            head = documents["index"]
            config = AssoMemConfig.from_json(head["config"])
            fusion = FusionModel.from_json(head["fusion"])
            saved_name, saved_model = head["encoder"]["name"], head["encoder"]["model"]
            dated, dim = bool(head["dated"]), int(head["dim"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotError(f"{path}: the snapshot's header is not readable ({exc!r})") from exc
        if encoder is None and saved_name is not None:
            if saved_model is None:
                raise ValueError(f"encoder: {path} was saved with the encoder {saved_name!r}; pass it to load")
            encoder = saved_model
        index = cls(encoder, config, fusion, device, dated, dim)
        if index._encoder_name != saved_name and getattr(index.encoder, "legacy_name", None) != saved_name:  # (the
            # second: saved before encoders named their model's files, by this model as given)
            raise ValueError(f"encoder: {path} was saved with {saved_name!r}, not {index._encoder_name!r}")
        try:
            index._state = MemoryState.from_snapshot(config, index.encoder, documents, arrays)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise SnapshotError(f"{path}: the snapshot is inconsistent ({exc.__class__.__name__}: {exc})") from exc
        return index


def _iso(ts: float) -> str | None:
    return None if math.isnan(ts) else _iso_date(float(ts))


@functools.lru_cache(maxsize=1 << 14)  # a batch's hits share their sessions' dates (2,560 hits: 38 ms uncached)
def _iso_date(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


# ---- input checks -------------------------------------------------------------------------------------------------
def check_fusion(fusion: FusionModel, config: AssoMemConfig) -> None:
    """``ValueError`` unless ``fusion`` weighs exactly ``config``'s signals, in its order."""
    if list(fusion.signals) != list(config.signals):
        raise ValueError(f"fusion.signals {fusion.signals} differ from config.signals {config.signals} (weights "
                         "fitted before a signal was added: pass a config with their signals, "
                         "AssoMemConfig(signals=tuple(fusion.signals)))")


def session_records(sessions: Iterable[Session | Mapping]) -> list[dict]:
    """Sessions checked as ``MemoryIndex.add_sessions`` checks them (``ValueError`` / ``TypeError`` naming the field),
    dates optional (whether a memory needs them is its own to say), as plain JSON data: each date in POSIX seconds
    (None when undated), an utterance's id where it is not the default (``"<session id>:<position>"``, which the
    memory gives again)."""
    out = []
    for i, s in enumerate(_listed(sessions, "sessions")):
        sid, when, turns, meta = _session(s, f"sessions[{i}]", dated=False)
        out.append({"id": sid, "date": None if math.isnan(when) else when, "metadata": meta,
                    "utterances": [{"speaker": speaker, "text": text} | ({} if u == f"{sid}:{t}" else {"id": u})
                                   for t, (u, speaker, text) in enumerate(turns)]})
    return out


def _listed(items, name: str) -> list:
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise TypeError(f"{name}: expected a list, got {type(items).__name__}")
    return list(items)


def positive_k(k) -> None:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k: must be a positive integer, got {k!r}")


def _texts(texts: list, name: str = "questions") -> list[str]:
    for i, t in enumerate(texts):
        _string(t, f"{name}[{i}]")
        if not t.strip():
            raise ValueError(f"{name}[{i}]: empty or whitespace-only text")
    return texts


def _get(obj, name: str, where: str, default=...):
    value = obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)
    if value is ...:
        raise ValueError(f"{where}.{name}: missing")
    return value


def _string(value, where: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{where}: must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where}: not valid Unicode text ({exc.reason})") from None
    return value


def _session(obj, where: str, dated: bool) -> tuple[str, float, list[Turn], dict]:
    if not isinstance(obj, (Session, Mapping)):
        raise TypeError(f"{where}: expected a Session or a mapping, got {type(obj).__name__}")
    if isinstance(obj, Mapping):
        extra = set(obj) - {"id", "date", "utterances", "metadata"}
        if extra:
            raise ValueError(f"{where}: unknown fields {sorted(extra)}")
    sid = _string(_get(obj, "id", where), f"{where}.id")
    if not sid.strip():
        raise ValueError(f"{where}.id: empty")
    when = _when(_get(obj, "date", where, None), f"{where}.date", dated)
    utts = _listed(_get(obj, "utterances", where), f"{where}.utterances")
    if not utts:
        raise ValueError(f"{where}.utterances: a session needs at least one utterance")
    turns = []
    for t, u in enumerate(utts):
        at = f"{where}.utterances[{t}]"
        if isinstance(u, str):
            u = Utterance(u)
        if not isinstance(u, (Utterance, Mapping)):
            raise TypeError(f"{at}: expected an Utterance, a mapping or a string, got {type(u).__name__}")
        if isinstance(u, Mapping) and set(u) - {"text", "speaker", "id"}:
            raise ValueError(f"{at}: unknown fields {sorted(set(u) - {'text', 'speaker', 'id'})}")
        text = _string(_get(u, "text", at), f"{at}.text")
        if not text.strip():
            raise ValueError(f"{at}.text: empty or whitespace-only")
        speaker = _get(u, "speaker", at, "")
        speaker = "" if speaker is None else _string(speaker, f"{at}.speaker")
        uid = _get(u, "id", at, None)
        uid = f"{sid}:{t}" if uid is None else _string(uid, f"{at}.id")
        if not uid.strip():
            raise ValueError(f"{at}.id: empty")
        turns.append((uid, speaker, text))
    meta = _get(obj, "metadata", where, None)
    meta = {} if meta is None else meta
    if not isinstance(meta, Mapping):
        raise TypeError(f"{where}.metadata: must be a mapping, got {type(meta).__name__}")
    return sid, when, turns, _plain_json(meta, f"{where}.metadata")


def _plain_json(meta: Mapping, where: str) -> dict:
    """A deep copy of ``meta`` as JSON gives it back (so the caller's later changes never reach the index, and a
    save and load return it unchanged); string keys only, no NaN, text that UTF-8 can hold (a lone surrogate,
    JSON's ``"\\ud800"``, was stored, then failed every search, read and save of the memory)."""
    def keys_ok(x) -> bool:
        if isinstance(x, Mapping):
            return all(isinstance(k, str) and keys_ok(v) for k, v in x.items())
        return all(keys_ok(v) for v in x) if isinstance(x, (list, tuple)) else True

    try:
        if keys_ok(meta):
            text = json.dumps(meta, allow_nan=False, ensure_ascii=False)
            text.encode("utf-8")
            return json.loads(text)
    except RecursionError:  # deeper than the interpreter's stack
        raise ValueError(f"{where}: nested too deeply") from None
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where}: not valid Unicode text ({exc.reason})") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: must be JSON-serialisable ({exc})") from exc
    raise ValueError(f"{where}: keys must be strings")


def _no_duplicates(records) -> None:
    sessions, utterances = set(), set()
    for i, (sid, _, turns, _) in enumerate(records):
        if sid in sessions:
            raise ValueError(f"sessions[{i}].id: {sid!r} appears twice")
        sessions.add(sid)
        for t, (uid, _, _) in enumerate(turns):
            if uid in utterances:
                raise ValueError(f"sessions[{i}].utterances[{t}].id: {uid!r} appears twice")
            utterances.add(uid)


def _labelled(obj, where: str) -> LabelledQuestion:
    if isinstance(obj, Mapping):
        extra = set(obj) - {"text", "evidence", "type", "date"}
        if extra:
            raise ValueError(f"{where}: unknown fields {sorted(extra)}")
        obj = LabelledQuestion(_get(obj, "text", where), _get(obj, "evidence", where), obj.get("type"),
                               obj.get("date"))
    if not isinstance(obj, LabelledQuestion):
        raise TypeError(f"{where}: expected a LabelledQuestion or a mapping, got {type(obj).__name__}")
    _texts([obj.text], f"{where}.text")
    evidence = _listed(obj.evidence, f"{where}.evidence")
    for i, e in enumerate(evidence):
        _string(e, f"{where}.evidence[{i}]")
    if obj.type is not None:
        _string(obj.type, f"{where}.type")
    return LabelledQuestion(obj.text, evidence, obj.type, obj.date)


def _when(value, where: str, dated: bool, now: bool = False, end_of_day: bool = False) -> float:
    """POSIX seconds of a date (see ``Session``), between the years 1 and 9999. None: now if ``now``, else NaN where
    dates are optional. A calendar day is its midnight (UTC), or with ``end_of_day`` its last instant."""
    ts = _posix(value, where, dated, now)
    if not math.isnan(ts):
        try:
            datetime.fromtimestamp(ts, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"{where}: {value!r} lies outside the years 1 to 9999") from None
        if end_of_day and (isinstance(value, Date) and not isinstance(value, datetime)
                           or isinstance(value, str) and len(value.strip()) == 10):
            ts = math.nextafter(ts + 86_400.0, -math.inf)  # the last float before the next midnight, in any year
    return ts


def _posix(value, where: str, dated: bool, now: bool) -> float:
    if value is None:
        if now:
            return time.time()
        if dated:
            raise ValueError(f"{where}: missing (sessions need a date; MemoryIndex(dated=False) makes them optional)")
        return math.nan
    if isinstance(value, bool):
        raise TypeError(f"{where}: not a date: {value!r}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        if not math.isfinite(value):
            if not dated and math.isnan(value):
                return math.nan
            raise ValueError(f"{where}: not a finite POSIX time: {value!r}")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            value = Date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{where}: not an ISO 8601 date: {text!r}") from None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{where}: naive datetime {value.isoformat()!r}; give a time zone (e.g. 'Z' or +00:00)")
        return value.timestamp()
    if isinstance(value, Date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp()
    raise TypeError(f"{where}: not a date: {type(value).__name__}")


def _question_dates(value, n: int, dated: bool) -> np.ndarray:
    if isinstance(value, (list, tuple, np.ndarray)):
        if len(value) != n:
            raise ValueError(f"question_date: one date for all or one per question ({n}), got {len(value)}")
        return np.asarray([_when(v, f"question_date[{i}]", dated, now=dated) for i, v in enumerate(value)], np.float64)
    return np.full(n, _when(value, "question_date", dated, now=dated), np.float64)


def _real(x, where: str) -> np.ndarray:
    """``x`` as a float32 array; ``TypeError`` naming ``where`` unless it holds real numbers (not strings, booleans
    or complex numbers) in a rectangular shape."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:  # ragged rows
        raise TypeError(f"{where}: not a rectangular numeric array ({exc})") from None
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{where}: expected real numbers, got an array of {arr.dtype}")
    return arr.astype(np.float32, copy=False)


def _vectors(x, where: str, rows: int | None, dim: int) -> np.ndarray:
    """Finite, non-zero rows of width ``dim`` (``rows`` of them when given), L2-normalised (rows within 1e-4 of unit
    norm are kept as given, so vectors that are normalised already keep their bits)."""
    arr = _real(x, where)
    if arr.ndim != 2 or arr.shape[1] != dim or (rows is not None and len(arr) != rows):
        want = f"({rows if rows is not None else 'n'}, {dim})"
        raise ValueError(f"{where}: expected shape {want}, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{where}: row {int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])} is not finite")
    norms = np.linalg.norm(arr, axis=1)
    if np.any(norms == 0):
        raise ValueError(f"{where}: row {int(np.flatnonzero(norms == 0)[0])} has zero norm")
    off = np.abs(norms - 1) > 1e-4
    if off.any():
        arr = np.array(arr)
        arr[off] /= norms[off, None]
    return np.ascontiguousarray(arr)
