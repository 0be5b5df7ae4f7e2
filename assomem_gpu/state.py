"""The state of one memory: its sessions, embeddings, clues, graph, BM25 index and time mentions, kept exact under
``add`` and ``remove``.

Rows are the memory's own: utterance ``i`` is the bank's row ``i`` and graph node ``i``. Every derived structure is
updated by the write that changes it (never on a later read); searches only read the state, but for the cache of the
times an utterance mentions (``mentioned_times``: filled on first use, the same value whoever fills it). Input is
assumed valid here; ``index.MemoryIndex`` checks it. ``add`` computes everything that can fail before it changes
anything.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import compress
from typing import Sequence

import numpy as np

from .clue_vectors import ClueVectors
from .clues import clue_embeddings, clue_texts
from .config import BM25_SIGNALS, AssoMemConfig
from .encode import Encoder, prompted
from .graph import ClueState, MemoryGraph, UttSearch, assemble, build_graph, graph_of, grow_graph, shrink_graph
from .ivf import Codebook
from .memory import MemoryBank
from .rows import Rows
from .sentences import SENTENCES_VERSION, rows_of, sentence_texts, starts_of
from .signals.context import context_norms
from .signals.lexical import BM25Index, TermCounts
from .signals.reply import asks
from .signals.temporal import TIME_MARKS_VERSION, time_mark, windows
from .signals.user_relevance import own_turns

Turn = tuple[str, str, str]  # (utterance id, speaker, text)


@dataclass(frozen=True)
class Derived:
    """What a write derives from its sessions' texts and vectors alone: each session's clue embedding, and each
    utterance's time mark, BM25 term counts, context norm and sentence vectors. No other session changes it, so a
    caller that builds many memories of shared sessions (benchmark haystacks) derives it once per session and gives
    each memory its ``select`` (the same index as a build of the memory's sessions, for an encoder that embeds a clue
    text and a sentence alike in any batch)."""

    clue_emb: np.ndarray  # (sessions, dim) float32
    time_marks: np.ndarray  # (utterances,) int8: how each anchors events in time (``signals.temporal.time_mark``)
    terms: TermCounts | None  # the utterances' BM25 term counts; None without the lexical signals
    context: np.ndarray | None  # (utterances,) their context norms (signals/context.py); None without the signal
    sentence_counts: np.ndarray | None = None  # (utterances,) int32 each one's sentence vectors (0: one sentence);
    # None without config.sentences
    sentences: np.ndarray | None = None  # (sum of the counts, dim) float32 those vectors, utterance after utterance

    def select(self, sessions: np.ndarray, utterances: np.ndarray) -> "Derived":
        """The part of these session rows and their utterance rows (of the sessions this was derived from)."""
        counts = self.sentence_counts
        return Derived(self.clue_emb[sessions], self.time_marks[utterances],
                       None if self.terms is None else self.terms.rows(utterances),
                       None if self.context is None else self.context[utterances],
                       None if counts is None else counts[utterances],
                       None if counts is None else self.sentences[rows_of(counts, utterances)])


class MemoryState:
    """One memory's sessions and everything derived from them (see the module docstring)."""

    def __init__(self, config: AssoMemConfig, dim: int, encoder: Encoder | None = None, llm_cache: bool = False):
        self.config, self.encoder, self.dim, self.llm_cache = config, encoder, dim, llm_cache
        self.bank = MemoryBank()
        self.metadata: list[dict] = []  # per session
        self.emb = Rows((dim,))  # per utterance
        self.clue_emb = Rows((dim,))  # per session: its own clue, before merging
        self._full: MemoryGraph | None = None  # with clue nodes, whatever config.clues says
        self.graph: MemoryGraph | None = None  # what PPR and candidates read
        self.lexical = BM25Index() if BM25_SIGNALS & set(config.signals) else None
        self.context = Rows(dtype=np.float32) if "context" in config.signals else None  # per utterance: its context
        # norm (signals/context.py)
        self._time_marks = Rows(dtype=np.int8)  # per utterance: its time mark (signals.temporal.time_mark)
        self.sentences = Rows((dim,)) if config.sentences else None  # the utterances' sentence vectors, in order
        self._sentence_counts = Rows(dtype=np.int32)  # per utterance: how many of them it has (sentences.py)
        self._sentence_starts: tuple[int, np.ndarray] | None = None  # (version, each utterance's first row)
        self._mentions: list[np.ndarray | None] = []  # per utterance: times it mentions (made on first use)
        self._times = Rows(dtype=np.float64)  # per utterance: its session's date (NaN unknown)
        self._session_of = Rows(dtype=np.int64)  # per utterance: its session's row
        self._own = Rows(dtype=np.bool_)  # per utterance: whether the memory's user said it (config.user_speakers)
        self._asks = Rows(dtype=np.bool_)  # per utterance: whether it asks a question (signals.reply.asks)
        self.version = 0  # counts the writes: device copies of the embeddings and BM25 weights are kept per version

    @property
    def n_utterances(self) -> int:
        return self.bank.n_utterances

    @property
    def time_marks(self) -> np.ndarray:
        """Per utterance: its time mark (int8, ``signals.temporal.time_mark``; ``RESOLVED``: it holds a time
        expression ``windows`` resolves)."""
        return self._time_marks.view

    @property
    def times(self) -> np.ndarray:
        """Per utterance: its session's date (float64 POSIX seconds; NaN unknown)."""
        return self._times.view

    @property
    def session_of(self) -> np.ndarray:
        """Per utterance: its session's row (int64)."""
        return self._session_of.view

    @property
    def own(self) -> np.ndarray:
        """Per utterance: whether one of ``config.user_speakers`` said it (bool; ``signals.user_relevance``)."""
        return self._own.view

    @property
    def asks(self) -> np.ndarray:
        """Per utterance: whether it asks a question (bool; ``signals.reply``)."""
        return self._asks.view

    @property
    def sentence_counts(self) -> np.ndarray:
        """Per utterance: how many sentence vectors it has (int32; 0 for a single sentence, and all 0 without
        ``config.sentences``)."""
        return self._sentence_counts.view

    @property
    def sentence_starts(self) -> np.ndarray:
        """Per utterance: the row of its first sentence vector (int64; made once per write, on first use)."""
        if self._sentence_starts is None or self._sentence_starts[0] != self.version:
            self._sentence_starts = (self.version, starts_of(self.sentence_counts))
        return self._sentence_starts[1]

    @property
    def graph_config(self):
        if "importance" not in self.config.signals:  # no PageRank: only clues and ownership are needed
            return replace(self.config.graph, max_neighbors=0, adjacency_weight=0.0, speakers=False)
        return self.config.graph

    # ---- writes --------------------------------------------------------------------------------------------------
    def derive(self, sessions: Sequence[tuple[str, float, Sequence[Turn], dict]], emb: np.ndarray,
               clue_emb: np.ndarray | None = None, sentences: tuple[np.ndarray, np.ndarray] | None = None) -> Derived:
        """What ``add`` needs of these sessions (whose utterances have the embeddings ``emb``) beyond their rows:
        computed before any change, without the write lock (see ``Derived``). ``clue_emb``: their clue vectors, and
        ``sentences`` their sentence vectors (counts, vectors, as ``Derived`` holds them), when known (made here
        otherwise)."""
        one = _bank(sessions)
        if clue_emb is None:
            texts = clue_texts(one, range(one.n_sessions), self.config.clue_mode, self.config.llm, self.llm_cache)
            clue_emb = clue_embeddings(one.offset_array, emb, texts, self.encoder)
        marks = _time_marks(one.utt_texts, self.config)
        terms = self.lexical.count(one.encoded_texts()) if self.lexical is not None else None
        context = context_norms(one.offset_array, emb, self.config.context_window) \
            if self.context is not None else None
        if self.sentences is None:
            sentences = (None, None)
        elif sentences is None:
            sentences = self._embed_sentences(one)
        return Derived(np.asarray(clue_emb, np.float32), marks, terms, context, *sentences)

    def _embed_sentences(self, bank: MemoryBank) -> tuple[np.ndarray, np.ndarray]:
        """(counts, vectors) of ``bank``'s utterances' sentences (``sentences.sentence_texts``), embedded after the
        passage prompt; without an encoder none (each utterance's own vector is its only passage)."""
        if self.encoder is None:
            return np.zeros(bank.n_utterances, np.int32), np.zeros((0, self.dim), np.float32)
        texts, counts = sentence_texts(bank.utt_speakers, bank.utt_texts)
        vectors = self.encoder.encode(prompted(self.encoder, "passage", texts)) if texts else \
            np.zeros((0, self.dim), np.float32)
        return counts, np.asarray(vectors, np.float32)

    def add(self, sessions: Sequence[tuple[str, float, Sequence[Turn], dict]], emb: np.ndarray,
            derived: Derived | None = None) -> None:
        """Append sessions ``(id, date, turns, metadata)`` whose utterances have the embeddings ``emb`` (rows in
        order); ``derived``: ``derive`` of them (made here when None, before any change)."""
        if derived is None:
            derived = self.derive(sessions, emb)
        if self.sentences is not None:
            counts, n = derived.sentence_counts, sum(len(turns) for _, _, turns, _ in sessions)
            if counts is None or len(counts) != n or int(np.sum(counts)) != len(derived.sentences):
                raise ValueError("derived: its sentence vectors do not fit these sessions (derived without them, or "
                                 "for other sessions)")
        # nothing below fails on valid input
        self.version += 1
        first = self.bank.n_sessions
        for sid, date, turns, meta in sessions:
            self.bank.add_session(sid, date, turns)
            self.metadata.append(dict(meta))
        counts = [len(turns) for _, _, turns, _ in sessions]
        self._times.append(np.repeat(np.asarray([date for _, date, _, _ in sessions], np.float64), counts))
        self._session_of.append(np.repeat(np.arange(first, first + len(sessions), dtype=np.int64), counts))
        self._own.append(own_turns([speaker for _, _, turns, _ in sessions for _, speaker, _ in turns],
                                   self.config.user_speakers))
        self._asks.append(asks([text for _, _, turns, _ in sessions for _, _, text in turns]))
        self.emb.append(emb)
        self.clue_emb.append(derived.clue_emb)
        self._time_marks.append(derived.time_marks)
        if self.sentences is not None:
            self._sentence_counts.append(derived.sentence_counts)
            self.sentences.append(derived.sentences)
        else:
            self._sentence_counts.grow_to(self.n_utterances)
        self._mentions += [None] * len(derived.time_marks)
        if self.lexical is not None:
            self.lexical.add_counts(derived.terms)
        if self.context is not None:
            self.context.append(derived.context)
        if self._full is None:
            self._set_graph(build_graph(self.bank, self.emb.view, self.clue_emb.view, self.graph_config))
        else:
            self._set_graph(grow_graph(self._full, self.bank, self.emb.view, self.clue_emb.view, self.graph_config))

    def remove(self, sessions: np.ndarray) -> None:
        """Remove these session rows (their utterances, clues, edges, BM25 terms and time mentions)."""
        self.version += 1
        keep_s = np.ones(self.bank.n_sessions, bool)
        keep_s[sessions] = False
        keep_u = np.repeat(keep_s, np.diff(self.bank.offset_array))
        if self.sentences is not None:
            self.sentences.keep(np.repeat(keep_u, self.sentence_counts))
        self.bank.remove(sessions)
        self.metadata = list(compress(self.metadata, keep_s))
        self.emb.keep(keep_u)
        self.clue_emb.keep(keep_s)
        for rows in (self._time_marks, self._times, self._session_of, self._own, self._asks, self._sentence_counts):
            rows.keep(keep_u)
        self.session_of[:] = (np.cumsum(keep_s) - 1)[self.session_of]
        self._mentions = list(compress(self._mentions, keep_u))
        if self.lexical is not None:
            self.lexical.remove(keep_u)
        if self.context is not None:
            self.context.keep(keep_u)
        if self.bank.n_sessions == 0:
            self._full = self.graph = None
            return
        self._set_graph(shrink_graph(self._full, self.bank, keep_u, keep_s, self.emb.view, self.clue_emb.view,
                                     self.graph_config))

    def _set_graph(self, full: MemoryGraph) -> None:
        self._full = full
        self.graph = full if self.config.clues else without_clues(full)

    # ---- reads ---------------------------------------------------------------------------------------------------
    def mentioned_times(self, row: int) -> np.ndarray:
        """Centres of the time windows utterance ``row`` mentions, resolved against its session date (cached)."""
        found = self._mentions[row]
        if found is None:
            spans = windows(self.bank.utt_texts[row], float(self.times[row]))
            found = self._mentions[row] = np.asarray([(s + e) / 2 for s, e in spans], dtype=np.float64)
        return found

    # ---- persistence ---------------------------------------------------------------------------------------------
    def to_snapshot(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(JSON documents, arrays): everything needed to restore the state without recomputing the graph."""
        bank = self.bank
        documents = {"sessions": {"ids": bank.session_ids, "dates": bank.session_dates, "offsets": bank.offsets,
                                  "metadata": self.metadata},
                     "utterances": {"ids": bank.utt_ids, "speakers": bank.utt_speakers, "texts": bank.utt_texts}}
        arrays = {"utt_emb": self.emb.view, "clue_emb": self.clue_emb.view, "time_marks": self.time_marks,
                  "time_marks_version": np.array([TIME_MARKS_VERSION])}
        if self._full is not None:
            (ui, uj, us), clues = self._full.utt_pairs, self._full.clues
            ci, cj, cs = clues.candidates
            arrays.update(utt_pairs_i=ui, utt_pairs_j=uj, utt_pairs_s=us, clue_labels=clues.labels,
                          clue_merged=clues.emb, clue_pairs_i=ci, clue_pairs_j=cj, clue_pairs_s=cs)
            search = self._full.search
            if search is not None:
                arrays.update(ivf_centroids=search.codebook.centroids, ivf_rows=np.array([search.codebook.rows]),
                              ivf_probe=search.probe)
        if self.lexical is not None:
            documents["bm25_vocabulary"], lexical = self.lexical.to_arrays()
            arrays.update(lexical)
        if self.context is not None:
            arrays["context_norms"] = self.context.view
        if self.sentences is not None:
            arrays.update(sentence_counts=self.sentence_counts, sentence_emb=self.sentences.view,
                          sentences_version=np.array([SENTENCES_VERSION]))
        return documents, arrays

    @classmethod
    def from_snapshot(cls, config: AssoMemConfig, encoder: Encoder | None, documents: dict,
                      arrays: dict[str, np.ndarray]) -> "MemoryState":
        state = cls(config, int(arrays["utt_emb"].shape[1]), encoder)
        sessions, utts = documents["sessions"], documents["utterances"]
        _check_snapshot(sessions, utts, arrays)
        bank = state.bank
        bank.session_ids, bank.session_dates = list(sessions["ids"]), [float(d) for d in sessions["dates"]]
        bank.offsets = [int(o) for o in sessions["offsets"]]
        bank.utt_ids, bank.utt_speakers, bank.utt_texts = list(utts["ids"]), list(utts["speakers"]), list(utts["texts"])
        bank.reindex()
        state.metadata = [dict(m) for m in sessions["metadata"]]
        state.emb = Rows((state.dim,), data=arrays["utt_emb"])
        state.clue_emb = Rows((state.dim,), data=arrays["clue_emb"])
        marks = arrays.get("time_marks")  # made again from the texts for a snapshot written before them (which held
        # whether each resolves a time) or under other rules
        if marks is None or arrays.get("time_marks_version", np.array([1])).tolist() != [TIME_MARKS_VERSION]:
            marks = _time_marks(bank.utt_texts, config)
        state._time_marks = Rows(dtype=np.int8, data=marks)
        counts = np.diff(bank.offset_array)
        state._times = Rows(dtype=np.float64, data=np.repeat(np.asarray(bank.session_dates, np.float64), counts))
        state._session_of = Rows(dtype=np.int64, data=bank.utt_session())
        state._own = Rows(dtype=np.bool_, data=own_turns(bank.utt_speakers, config.user_speakers))
        state._asks = Rows(dtype=np.bool_, data=asks(bank.utt_texts))
        state._mentions = [None] * bank.n_utterances
        if state.lexical is not None:
            state.lexical = BM25Index.from_arrays(documents["bm25_vocabulary"], arrays)
        if state.context is not None:  # stored; made again from the embeddings (0.17 s at 2,500 sessions) only for a
            # snapshot written before they were
            norms = arrays.get("context_norms")
            state.context = Rows(dtype=np.float32, data=norms if norms is not None else context_norms(
                bank.offset_array, state.emb.view, config.context_window))
        if state.sentences is not None and "sentence_counts" in arrays \
                and arrays.get("sentences_version", np.array([0])).tolist() == [SENTENCES_VERSION]:
            state._sentence_counts = Rows(dtype=np.int32, data=arrays["sentence_counts"])
            state.sentences = Rows((state.dim,), data=arrays["sentence_emb"])
        elif state.sentences is not None:  # a snapshot written before sentence vectors, or under other rules: made
            # again
            counts, vectors = state._embed_sentences(bank)
            state._sentence_counts = Rows(dtype=np.int32, data=counts)
            state.sentences = Rows((state.dim,), data=vectors)
        else:
            state._sentence_counts = Rows(dtype=np.int32, data=np.zeros(bank.n_utterances, np.int32))
        if bank.n_sessions:
            clues = ClueState(arrays["clue_labels"], ClueVectors.packed_from(arrays["clue_merged"]),
                              (arrays["clue_pairs_i"], arrays["clue_pairs_j"], arrays["clue_pairs_s"]))
            pairs = (arrays["utt_pairs_i"], arrays["utt_pairs_j"], arrays["utt_pairs_s"])
            search = None
            if "ivf_centroids" in arrays:
                search = UttSearch(Codebook(arrays["ivf_centroids"], int(arrays["ivf_rows"][0])), arrays["ivf_probe"])
            state._set_graph(assemble(bank, pairs, clues, state.graph_config, search))
        return state


def _time_marks(texts: Sequence[str], config: AssoMemConfig) -> np.ndarray:
    """(len(texts),) int8: each text's ``time_mark``; zeros without the temporal signal."""
    if "temporal" not in config.signals:
        return np.zeros(len(texts), np.int8)
    return np.fromiter(map(time_mark, texts), np.int8, len(texts))


def _bank(sessions: Sequence[tuple[str, float, Sequence[Turn], dict]]) -> MemoryBank:
    one = MemoryBank()
    for sid, date, turns, _ in sessions:
        one.add_session(sid, date, turns)
    return one


def _check_snapshot(sessions: dict, utts: dict, arrays: dict) -> None:
    """Raise ValueError where the parts of a snapshot do not fit together."""
    offsets = np.asarray(sessions["offsets"], np.int64)
    n_s, n_u = len(sessions["ids"]), int(offsets[-1]) if len(offsets) else -1
    checks = {
        "session offsets": len(offsets) == n_s + 1 and offsets[0] == 0 and bool(np.all(np.diff(offsets) >= 0)),
        "session dates and metadata": len(sessions["dates"]) == n_s and len(sessions["metadata"]) == n_s,
        "unique session ids": len(set(sessions["ids"])) == n_s,
        "utterance ids, speakers and texts": all(len(utts[k]) == n_u for k in ("ids", "speakers", "texts")),
        "utterance embeddings": arrays["utt_emb"].ndim == 2 and len(arrays["utt_emb"]) == n_u,
        "clue embeddings": arrays["clue_emb"].shape == (n_s, arrays["utt_emb"].shape[1]),
        "time marks": len(arrays.get("time_marks", arrays.get("has_time", ()))) == n_u,
        "context norms": "context_norms" not in arrays or np.shape(arrays["context_norms"]) == (n_u,),
        "sentence vectors": "sentence_counts" not in arrays or (
            np.shape(arrays["sentence_counts"]) == (n_u,) and np.all(arrays["sentence_counts"] >= 0)
            and np.shape(arrays.get("sentence_emb")) == (int(np.sum(arrays["sentence_counts"])),
                                                          arrays["utt_emb"].shape[1])),
    }
    if n_s:
        labels = np.asarray(arrays["clue_labels"])
        checks["clue labels"] = len(labels) == n_s and labels.min() >= 0 and labels.max() < len(arrays["clue_merged"])
        pairs = [np.asarray(arrays[f"utt_pairs_{k}"]) for k in "ij"]
        checks["utterance pairs"] = all(len(p) == 0 or (p.min() >= 0 and p.max() < n_u) for p in pairs)
        if "ivf_centroids" in arrays:
            probe, n_lists = np.asarray(arrays["ivf_probe"]), len(arrays["ivf_centroids"])
            checks["IVF probes"] = probe.ndim == 2 and len(probe) == n_u and (probe.size == 0 or (
                probe.min() >= 0 and probe.max() < n_lists)) and np.shape(arrays["ivf_rows"]) == (1,)
    bad = [name for name, ok in checks.items() if not ok]
    if bad:
        raise ValueError(f"these parts do not fit together: {', '.join(bad)}")


def without_clues(g: MemoryGraph) -> MemoryGraph:
    """The graph with its clue nodes and their edges removed (node order becomes [utterances | speakers])."""
    keep = np.concatenate([np.arange(g.n_utt), g.n_utt + g.n_clues + np.arange(g.n_speakers)])
    adj = g.edges.csr("data")[keep][:, keep].tocsr()  # not ``g.adjacency``, which would keep a copy on ``g``
    no_clues = ClueVectors.packed_from(np.zeros((0, g.clue_vectors.dim), np.float32))
    return graph_of(np.zeros(g.n_utt, np.int64), no_clues, adj, g.n_speakers, g.utt_pairs, g.clues, g.search)
