"""``assomem`` over a benchmark dataset: a client of ``MemoryIndex`` (one index per memory, its questions searched in
batches), and the paper's hybrid baselines as other configs of the same engine.

``features`` scores every question once (independent of the fusion weights, so cross-validation reuses it) and
``fuse`` turns features and weights into rankings; both speak in bank rows of the dataset.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import Sequence

import numpy as np

from .backend import Backend, get_backend
from .config import AssoMemConfig
from .encode import Encoder
from .fusion import FusionModel, calibrate_fusion, default_fusion, fixed_weights, fuse
from .index import MemoryIndex
from .memory import MemoryBank
from .retrieve import EmbeddedDataset, by_memory
from .scoring import Features, Queries
from .state import Derived


class AssoMem:
    """``assomem`` and, with other configs, the paper's hybrid baselines (see ``HYBRID_BASELINES``).

    ``fusion`` None means the method must be calibrated (``fit``) or cross-validated before it ranks.
    ``cache`` memories' indexes are kept (the last ones used), so repeated questions to a memory reuse its index.
    """

    def __init__(self, config: AssoMemConfig = AssoMemConfig(), fusion: FusionModel | None = None,
                 encoder: Encoder | None = None, name: str = "assomem", device: str | Backend = "auto",
                 cache: int = 8):
        self.config, self.fusion, self.encoder, self.name = config, fusion, encoder, name
        self.cache = cache
        self.backend = device if isinstance(device, Backend) else get_backend(device)
        # what a worker resolves when it unpickles this method: this process's choice, not "auto" again
        self._backend_args = (self.backend.name, "batched" if self.backend.ppr_steps else "cugraph")
        self._indexes: OrderedDict[int, tuple[MemoryIndex, np.ndarray]] = OrderedDict()
        self._data: EmbeddedDataset | None = None
        self._derived: Derived | None = None  # of the dataset's whole bank (see ``state.Derived``)

    def __getstate__(self) -> dict:
        """Pickled (for a Dask worker) without its dataset, indexes and backend: the backend is chosen again where
        it is unpickled, for the device and PPR mode chosen here, and ``prepare`` binds it to a dataset there."""
        return {**self.__dict__, "backend": None, "_indexes": OrderedDict(), "_data": None, "_derived": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.backend = get_backend(*self._backend_args)

    @property
    def needs_calibration(self) -> bool:
        return self.fusion is None

    def index(self, data: EmbeddedDataset, memory: int) -> MemoryIndex:
        """The index of ``data``'s memory ``memory`` (built from its sessions, with their dates in that memory)."""
        return self._built(data, memory)[0]

    def prepare(self, data: EmbeddedDataset, derived: Derived | None = None) -> Derived:
        """Bind to ``data`` and return what its whole bank derives (``state.Derived``: clue vectors, time marks, term
        counts), made here once per dataset (memories share sessions: haystacks drawn from one pool), or ``derived``
        made elsewhere (a Dask worker is handed the client's, so it encodes nothing)."""
        if self._data is not data:
            self._data, self._indexes, self._derived = data, OrderedDict(), derived
        if self._derived is None:
            ds = data.dataset
            self._derived = self._new_index(data)._state.derive(_records(ds.bank, range(ds.bank.n_sessions)),
                                                                data.utterances)
        return self._derived

    def _new_index(self, data: EmbeddedDataset) -> MemoryIndex:
        return MemoryIndex(self.encoder, self.config, self.fusion or fixed_weights(self.config.signals), self.backend,
                           dated=False, dim=data.utterances.shape[1], llm_cache=True)

    def _built(self, data: EmbeddedDataset, memory: int) -> tuple[MemoryIndex, np.ndarray]:
        """The memory's index and the bank row of each of its utterances."""
        derived = self.prepare(data)
        if memory in self._indexes:
            self._indexes.move_to_end(memory)
            return self._indexes[memory]
        ds = data.dataset
        mem = ds.memories[memory]
        rows = ds.memory_utterances(memory)
        index = self._new_index(data)
        index._add(_records(ds.bank, mem.sessions.tolist(), mem.dates.tolist()), data.utterances[rows],
                   derived=derived.select(mem.sessions, rows))
        self._indexes[memory] = index, rows
        while len(self._indexes) > self.cache:
            self._indexes.popitem(last=False)
        return index, rows

    def features(self, data: EmbeddedDataset, questions: Sequence[int]) -> list[Features]:
        """Candidates and normalised signals of each question, rows mapped to the dataset's bank rows."""
        ds = data.dataset
        out: dict[int, Features] = {}
        for memory, group in by_memory(ds, questions).items():
            index, rows = self._built(data, memory)
            queries = Queries(data.questions[group], [ds.questions[q].text for q in group],
                              np.asarray([ds.questions[q].date for q in group], np.float64))
            feats = [f for part in index.score(queries) for f in part.features(self.backend)]
            for q, f in zip(group, feats):
                out[q] = replace(f, candidates=rows[f.candidates], rest=rows[f.rest])
        return [out[q] for q in questions]

    def fuse(self, feats: Sequence[Features], q_emb: np.ndarray, fusion: FusionModel, depth: int) -> list[np.ndarray]:
        """Rankings (bank rows) from features and weights (see ``fusion.fuse``)."""
        ranked = fuse(feats, q_emb, fusion, self.config.temperature, depth, self.backend)
        return [r.rows for r in ranked]  # features carry bank rows, so the rankings do too

    def fit(self, data: EmbeddedDataset, questions: Sequence[int], feats: Sequence[Features]) -> FusionModel:
        """Calibrate the fusion on these questions (those without evidence are skipped; see
        ``fusion.calibrate_fusion``)."""
        ds = data.dataset
        keep = [i for i, q in enumerate(questions) if len(ds.questions[q].evidence)]
        rows = [questions[i] for i in keep]
        labelled = [ds.questions[q] for q in rows]
        return calibrate_fusion(self.config.signals, [q.type for q in labelled], [feats[i] for i in keep],
                                [np.asarray(q.evidence) for q in labelled], data.questions[rows], self.config,
                                self.backend, [q.memory for q in labelled])

    def default_fusion(self) -> FusionModel:
        """The shipped weights (see ``fusion.default_fusion``) for this config's signals and encoder."""
        return default_fusion(self.config.signals, None if self.encoder is None else self.encoder.name)

    def rank(self, data: EmbeddedDataset, questions: Sequence[int], depth: int) -> list[np.ndarray]:
        if self.fusion is None:
            raise RuntimeError(f"{self.name} needs fusion weights: calibrate first, or pass --weights/--fixed-weights")
        return self.fuse(self.features(data, questions), data.questions[list(questions)], self.fusion, depth)


def _records(bank: MemoryBank, sessions: Sequence[int], dates: Sequence[float] | None = None) -> list:
    """The bank's sessions as ``MemoryState`` records ``(id, date, turns, metadata)``; ``dates`` (a memory's) or
    the bank's own."""
    dates = [bank.session_dates[s] for s in sessions] if dates is None else dates
    return [(bank.session_ids[s], float(d), list(zip(bank.utt_ids[bank.offsets[s] : bank.offsets[s + 1]],
                                                     bank.utt_speakers[bank.offsets[s] : bank.offsets[s + 1]],
                                                     bank.utt_texts[bank.offsets[s] : bank.offsets[s + 1]])), {})
            for s, d in zip(sessions, dates)]


def relevance_only(config: AssoMemConfig, graph: dict | None = None, **changes) -> AssoMemConfig:
    """``config`` ranking by relevance alone, its candidates the two-step cut's (no dense pool: with one, ranking by
    relevance would give flat-dense's top), each utterance's relevance its own cosine (no sentence passages, as in
    the paper), with ``changes`` and the ``graph`` changes to its graph config."""
    return replace(config, **{"signals": ("relevance",), "dense_pool": 0, "sentences": False, **changes},
                   graph=replace(config.graph, **(graph or {})))


# The paper's hybrid baselines: two-step retrieval ranked by relevance alone, with different first-step units (the
# graph changes apply to the config's graph: a session is its own clue, or clues merge as the paper merges them). A
# session's summary or topic is its keyword clue, or its LLM clue where the config makes clues by LLM (as the paper's).
HYBRID_BASELINES = {
    "session-utterance": dict(clue_mode="centroid", graph=dict(delta=1.01), clue_mix=1.0),
    "session-summary": dict(clue_mode="keywords", graph=dict(delta=1.01), clue_mix=1.0),
    "topic-grouping": dict(clue_mode="keywords", graph=dict(clue_merge="components"), clue_mix=1.0),
}


def make_assomem(name: str, config: AssoMemConfig, encoder: Encoder, fusion: FusionModel | None = None,
                 device: str | Backend = "auto") -> AssoMem:
    """``assomem`` with ``config``, or one of the hybrid baselines (relevance only, fixed weights)."""
    if name == "assomem":
        return AssoMem(config, fusion, encoder, device=device)
    if name not in HYBRID_BASELINES:
        raise ValueError(f"unknown method {name!r}")
    changes = dict(HYBRID_BASELINES[name])
    if changes["clue_mode"] == "keywords" and config.clue_mode == "llm":
        changes["clue_mode"] = "llm"
    cfg = relevance_only(config, **changes)
    return AssoMem(cfg, fixed_weights(cfg.signals), encoder, name, device=device)
