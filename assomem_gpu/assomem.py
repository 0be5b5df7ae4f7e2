"""The AssoMem retriever: associative graph, two-step candidates, RIT(+lexical) signals, CMI-weighted fusion.

``features`` computes every question's candidates and normalised signals in batches (this does not depend on the
fusion weights, so calibration and cross-validation reuse it); ``fuse`` turns features and weights into rankings.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Sequence

import numpy as np

from .backend import Backend, get_backend
from .clues import clue_embeddings, keyword_clues
from .encode import Encoder
from .memory import Memory, MemoryBank
from .fusion import FusionModel, fit_fusion, fixed_weights
from .graph import GraphConfig, MemoryGraph, add_session_to_graph, build_graph
from .kernels.fused_topk import MAX_K
from .retrieve import EmbeddedDataset, by_memory, top_k
from .signals.importance import stack_block_diagonal, teleport
from .signals.lexical import BM25Index
from .signals.temporal import TimeConstraint, mentions_time, parse_constraint, temporal_scores, windows

SIGNALS = ("relevance", "importance", "temporal", "lexical")


@dataclass(frozen=True)
class AssoMemConfig:
    graph: GraphConfig = field(default_factory=GraphConfig)
    signals: tuple[str, ...] = SIGNALS
    clue_mode: str = "keywords"
    llm: str = "smollm2"  # the LLM of clue_mode "llm" (see llm.make_llm)
    clues: bool = True  # False (--no-clues): no clue nodes, every utterance of the memory is a candidate
    top_clues: int = 10  # K of the two-step retrieval
    min_candidates: int = 50  # more clues are taken, best first, until the candidates reach this many
    clue_mix: float = 0.5  # clue score = mix·cos(q, clue) + (1 − mix)·max cos(q, utterance of the clue)
    damping: float = 0.5  # d of eq. 2
    tol: float = 1e-6
    max_iter: int = 100
    temperature: float = 4.0  # T of the per-signal softmax over a question's candidates
    weight_temperature: float = 0.05  # T of softmax(U / T), U = CMI / H(λ) in [0, 1]
    bin_edges: tuple[float, ...] = (0.5, 0.9)  # quantile edges of the low / medium / high score bins

    def to_json(self) -> dict:
        out = asdict(self)
        out["signals"], out["bin_edges"] = list(self.signals), list(self.bin_edges)
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "AssoMemConfig":
        obj = dict(obj)
        graph = GraphConfig(**obj.pop("graph", {}))
        return cls(graph=graph, signals=tuple(obj.pop("signals", SIGNALS)),
                   bin_edges=tuple(obj.pop("bin_edges", cls.bin_edges)), **obj)


@dataclass
class Features:
    """One question's candidates (bank rows) with their z-scored signals, and the rest of its memory."""

    candidates: np.ndarray
    scores: np.ndarray  # (n_candidates, n_signals)
    active: np.ndarray  # (n_signals,) bool: signals this question has
    rest: np.ndarray  # the memory's other utterances (bank rows), in memory order
    rest_relevance: np.ndarray  # their cosine to the question: they follow the candidates in this order


def zscore(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-12 else np.zeros_like(x)


class AssoMem:
    """``assomem`` and, with other configs, the paper's hybrid baselines (see ``HYBRID_BASELINES``)."""

    def __init__(self, config: AssoMemConfig = AssoMemConfig(), fusion: FusionModel | None = None,
                 encoder: Encoder | None = None, name: str = "assomem", backend: Backend | None = None):
        unknown = set(config.signals) - set(SIGNALS)
        if unknown or not config.signals:
            raise ValueError(f"signals must be a non-empty subset of {SIGNALS}, got {config.signals}")
        self.config, self.fusion, self.encoder, self.name = config, fusion, encoder, name
        self.backend = backend or get_backend("auto")
        self.stage_seconds: dict[str, float] = defaultdict(float)  # wall time per stage, summed over calls
        self._data: EmbeddedDataset | None = None  # the graphs, BM25 indexes and mention times below belong to it
        self._graphs: dict[int, MemoryGraph] = {}
        self._lexical: dict[int, BM25Index] = {}
        self._mentions: dict[tuple[int, float], np.ndarray] = {}  # (bank row, session date) -> mentioned times
        self._has_time = np.zeros(0, np.int8)  # per bank row: 1 holds a time expression, 0 not, -1 not yet read

    @contextmanager
    def _stage(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[name] += time.perf_counter() - start

    @property
    def needs_calibration(self) -> bool:
        return self.fusion is None

    # ---- per-dataset state -------------------------------------------------------------------------------------
    def _clue_emb(self, data: EmbeddedDataset) -> np.ndarray:
        """Clue embedding of every bank session, derived once per dataset and clue mode."""
        if self._data is not data:
            self._data = data
            self._graphs.clear(), self._lexical.clear(), self._mentions.clear()
            self._has_time = np.zeros(0, np.int8)
        mode = self.config.clue_mode
        key = self._clue_key()
        if key not in data.derived:
            bank = data.dataset.bank
            texts = None
            if mode == "keywords":
                texts = keyword_clues(bank)
            elif mode == "llm":
                texts = self._llm_texts(bank)
            data.derived[key] = clue_embeddings(bank, data.utterances, mode, self.encoder, texts)
        return data.derived[key]

    def _clue_key(self) -> tuple:
        mode = self.config.clue_mode
        return ("clues", mode, self.config.llm if mode == "llm" else None)

    def _graph_config(self) -> GraphConfig:
        if "importance" not in self.config.signals:  # no PageRank: only clues and ownership are needed
            return replace(self.config.graph, max_neighbors=0, adjacency_weight=0.0, speakers=False)
        return self.config.graph

    def graph(self, data: EmbeddedDataset, memory: int) -> MemoryGraph:
        clue_emb = self._clue_emb(data)
        if memory not in self._graphs:
            g = build_graph(data.dataset, memory, data.utterances, clue_emb, self._graph_config())
            self._graphs[memory] = g if self.config.clues else _without_clues(g)
        return self._graphs[memory]

    def prepare(self, data: EmbeddedDataset, memory: int) -> None:
        """Build everything a memory's questions read, so that the first question pays for none of it: the graph,
        the BM25 index and which utterances mention a time (otherwise each is made on first use)."""
        g = self.graph(data, memory)
        if "lexical" in self.config.signals:
            self._lexical_index(data, memory, g)
        if "temporal" in self.config.signals:
            self._mentions_time(data.dataset.bank, g.utterances)

    def add_session(self, data: EmbeddedDataset, memory: int, session_id: str, date: float,
                    turns: Sequence[tuple[str, str, str]], embeddings: np.ndarray) -> int:
        """Append a session of ``(utterance id, speaker, text)`` turns, with their embeddings, to a built memory.

        The bank, the embeddings, the memory and its graph grow in place (no rebuild; the memory's BM25 index is
        re-made on its next query, its IDF having changed). Retrieval afterwards equals a rebuild. Needs a clue mode
        whose clue depends on the session alone (``centroid``, ``llm``): keyword clues depend on every session's IDF.
        Bad input raises ValueError and changes nothing. Returns the new session's bank row.
        """
        ds = data.dataset
        emb = np.asarray(embeddings, dtype=np.float32)
        if self.config.clue_mode == "keywords":
            raise ValueError("add_session needs a per-session clue mode (centroid or llm); keyword clues depend on the "
                             "IDF of every session, so a keyword-clue memory must be rebuilt")
        if not 0 <= memory < len(ds.memories):
            raise ValueError(f"no memory {memory}")
        if ds.bank.session_index(session_id) is not None:
            raise ValueError(f"session {session_id!r} already exists")
        turns = [tuple(t) for t in turns]
        if not turns or any(len(t) != 3 or not all(isinstance(x, str) for x in t) for t in turns):
            raise ValueError("turns must be a non-empty list of (utterance id, speaker, text) strings")
        if emb.shape != (len(turns), data.utterances.shape[1]) or not np.isfinite(emb).all():
            raise ValueError(f"embeddings must be finite, shaped ({len(turns)}, {data.utterances.shape[1]}), "
                             f"got {emb.shape}")
        self._clue_emb(data)  # the clue embeddings exist before the bank grows
        one = MemoryBank()
        one.add_session(session_id, float(date), turns)
        new_clue = clue_embeddings(one, emb, self.config.clue_mode, self.encoder, self._llm_texts(one))
        # nothing below can fail on the input: the dataset and graph grow together
        row = ds.bank.add_session(session_id, float(date), turns)
        data.append_utterances(emb)
        mem = ds.memories[memory]
        ds.memories[memory] = Memory(np.append(mem.sessions, row), np.append(mem.dates, float(date)))
        for key in [k for k in data.derived if k[0] == "clues" and k != self._clue_key()]:
            del data.derived[key]  # other clue modes' arrays no longer cover the bank: re-derived when needed
        data.derived[self._clue_key()] = np.concatenate([data.derived[self._clue_key()], new_clue])
        if memory in self._graphs:
            g = add_session_to_graph(self._graphs[memory], ds, memory, data.utterances, data.derived[self._clue_key()],
                                     self._graph_config())
            self._graphs[memory] = g if self.config.clues else _without_clues(g)
        self._lexical.pop(memory, None)
        return row

    def _llm_texts(self, bank) -> list[str] | None:
        if self.config.clue_mode != "llm":
            return None
        from .llm import llm_clues, make_llm

        return llm_clues(bank, make_llm(self.config.llm), progress=False)

    # ---- features ----------------------------------------------------------------------------------------------
    def features(self, data: EmbeddedDataset, questions: Sequence[int]) -> list[Features]:
        """Candidates and normalised signals of each question, in passes of at most ``backend.max_batch``."""
        questions, step = list(questions), self.backend.max_batch
        return [f for lo in range(0, len(questions), step) for f in self._features(data, questions[lo : lo + step])]

    def _features(self, data: EmbeddedDataset, questions: Sequence[int]) -> list[Features]:
        ds, cfg = data.dataset, self.config
        out: dict[int, Features] = {}
        groups = by_memory(ds, questions)
        with self._stage("graph"):
            graphs = {m: self.graph(data, m) for m in groups}
        with self._stage("candidates"):
            rel_all = {m: data.questions[g] @ graphs[m].rows_of(data.utterances).T for m, g in groups.items()}
            local_all = {m: self._candidates(graphs[m], rel_all[m], data.questions[g]) for m, g in groups.items()}
        with self._stage("ppr"):
            ppr = self._importance(groups, graphs, rel_all, local_all) if "importance" in cfg.signals else {}
        for m, group in groups.items():
            g, rel = graphs[m], rel_all[m]
            with self._stage("lexical"):
                lex = self._lexical_index(data, m, g).scores([ds.questions[q].text for q in group]) \
                    if "lexical" in cfg.signals else None
            times = ds.utterance_times(m)
            for j, q in enumerate(group):
                local = local_all[m][j]
                cols, active = [], []
                for name in cfg.signals:
                    if name == "relevance":
                        col = rel[j, local]
                    elif name == "importance":
                        col = np.log(np.maximum(ppr[q], 1e-30))
                    elif name == "lexical":
                        col = lex[j, local]
                    else:
                        with self._stage("temporal"):
                            col = self._temporal(ds, q, g, local, times)
                    cols.append(zscore(col.astype(np.float64)))
                    active.append(bool(np.any(cols[-1] != 0)) if name == "temporal" else True)
                rest_mask = np.ones(g.n_utt, bool)
                rest_mask[local] = False
                rest = np.flatnonzero(rest_mask)
                out[q] = Features(g.utterances[local], np.stack(cols, axis=1), np.asarray(active), g.utterances[rest],
                                  rel[j, rest])
        return [out[q] for q in questions]

    def _candidates(self, g: MemoryGraph, rel: np.ndarray, q_emb: np.ndarray) -> list[np.ndarray]:
        """Per question (rows of ``rel``, its cosines to the memory's utterances), the local utterance indices of
        the two-step candidates: the utterances of the top clues, more clues (best first) until there are
        ``min_candidates``."""
        cfg = self.config
        if not cfg.clues or g.n_clues == 0:
            return [np.arange(g.n_utt)] * len(rel)
        clue_cos = q_emb @ g.clue_emb.T  # (B, n_clues)
        out = []
        for j in range(len(rel)):
            score = cfg.clue_mix * clue_cos[j] + (1 - cfg.clue_mix) * g.clue_max(rel[j])
            order = top_k(score[None], min(cfg.top_clues, g.n_clues))[0]
            if g.clue_sizes[order].sum() < cfg.min_candidates:  # rarely: the full order decides how many more
                order = top_k(score[None], g.n_clues)[0]
            enough = int(np.searchsorted(np.cumsum(g.clue_sizes[order]), cfg.min_candidates)) + 1
            out.append(g.members(order[: max(cfg.top_clues, enough)]))
        return out

    def _importance(self, groups: dict[int, list[int]], graphs: dict[int, MemoryGraph], rel_all: dict[int, np.ndarray],
                    local_all: dict[int, list[np.ndarray]]) -> dict[int, np.ndarray]:
        """The candidates' PPR scores, every question in one batched power iteration (the block-diagonal stack of
        their graphs when they ask different memories)."""
        mems = list(groups)
        teleports = [teleport(rel_all[m], graphs[m].n_nodes) for m in mems]
        if len(mems) == 1:
            matrix, tele, starts = graphs[mems[0]].transition(), teleports[0], np.zeros(1, np.int64)
        else:
            matrix, tele, starts = stack_block_diagonal([graphs[m].transition() for m in mems], teleports)
        be = self.backend
        r, _ = be.ppr(be.csr(matrix), be.asarray(tele), self.config.damping, self.config.tol, self.config.max_iter)
        qs = [(q, starts[i] + local_all[m][j], j) for i, m in enumerate(mems) for j, q in enumerate(groups[m])]
        rows = np.concatenate([row for _, row, _ in qs])
        cols = np.concatenate([np.full(len(row), j) for _, row, j in qs])
        flat = be.to_host(r[be.asarray(rows), be.asarray(cols)])  # one gather and one copy for the whole batch
        ends = np.cumsum([len(row) for _, row, _ in qs])
        return {q: part for (q, _, _), part in zip(qs, np.split(flat, ends[:-1]))}

    def _lexical_index(self, data: EmbeddedDataset, memory: int, g: MemoryGraph) -> BM25Index:
        if memory not in self._lexical:
            self._lexical[memory] = BM25Index(data.dataset.bank.encoded_texts(g.utterances))
        return self._lexical[memory]

    def _temporal(self, ds, q: int, g: MemoryGraph, local: np.ndarray, times: np.ndarray) -> np.ndarray:
        """The temporal signal of the candidates ``local`` (``times``: session date per utterance node)."""
        question = ds.questions[q]
        constraint: TimeConstraint = parse_constraint(question.text, question.date)
        if not constraint.has_intent:
            return np.zeros(len(local))
        when = times[local]
        owners, mentioned = [], []
        if constraint.has_window:
            rows = g.utterances[local]
            for i in np.flatnonzero(self._mentions_time(ds.bank, rows) & ~np.isnan(when)):
                key = (int(rows[i]), float(when[i]))
                if key not in self._mentions:
                    spans = windows(ds.bank.utt_texts[key[0]], key[1])
                    self._mentions[key] = np.asarray([(s + e) / 2 for s, e in spans], dtype=np.float64)
                owners += [i] * len(self._mentions[key])
                mentioned.append(self._mentions[key])
        mentioned = np.concatenate(mentioned) if mentioned else np.zeros(0)
        return temporal_scores(constraint, when, np.asarray(owners, np.int64), mentioned).astype(np.float64)

    def _mentions_time(self, bank: MemoryBank, rows: np.ndarray) -> np.ndarray:
        """Does each of these bank utterances hold a time expression? (The regex runs once per utterance.)"""
        if len(self._has_time) < bank.n_utterances:
            self._has_time = np.concatenate([self._has_time, np.full(bank.n_utterances - len(self._has_time), -1,
                                                                     np.int8)])
        unknown = rows[self._has_time[rows] < 0]
        self._has_time[unknown] = [mentions_time(bank.utt_texts[int(r)]) for r in unknown]
        return self._has_time[rows] == 1

    # ---- fusion ------------------------------------------------------------------------------------------------
    def fuse(self, feats: Sequence[Features], q_emb: np.ndarray, fusion: FusionModel, depth: int) -> list[np.ndarray]:
        """Rankings from features and weights: the fused score + top-K kernel ranks the best ``min(depth, MAX_K)``
        candidates; the other candidates follow by relevance, then the rest of the memory."""
        if not feats:
            return []
        n_sig = len(self.config.signals)
        weights = fusion.weights(q_emb, np.stack([f.active for f in feats]))
        width = max(len(f.candidates) for f in feats)
        scores = np.zeros((len(feats), max(width, 1), n_sig), np.float32)
        counts = np.array([len(f.candidates) for f in feats])
        for b, f in enumerate(feats):
            scores[b, : len(f.candidates)] = f.scores
        k = min(depth, MAX_K)
        with self._stage("fusion+topk"):
            top, _ = self.backend.fused_topk(scores, counts, weights, self.config.temperature, k)
        rel = self.config.signals.index("relevance") if "relevance" in self.config.signals else 0
        out = []
        for b, f in enumerate(feats):
            best = top[b, : min(k, counts[b])]
            others = np.setdiff1d(np.arange(counts[b]), best)
            others = others[top_k(f.scores[others, rel][None], len(others))[0]] if len(others) else others
            head = np.concatenate([f.candidates[best], f.candidates[others]])[:depth]
            tail = f.rest[top_k(f.rest_relevance[None], min(depth - len(head), len(f.rest)))[0]] \
                if len(head) < depth else f.rest[:0]
            out.append(np.concatenate([head, tail]))
        return out

    def fit(self, data: EmbeddedDataset, questions: Sequence[int], feats: Sequence[Features]) -> FusionModel:
        """Calibrate the fusion on these questions (those without evidence are skipped)."""
        ds = data.dataset
        keep = [i for i, q in enumerate(questions) if len(ds.questions[q].evidence)]
        return fit_fusion(list(self.config.signals), [ds.questions[questions[i]].type for i in keep],
                          [feats[i].scores for i in keep],
                          [np.isin(feats[i].candidates, ds.questions[questions[i]].evidence) for i in keep],
                          [feats[i].active for i in keep], data.questions[[questions[i] for i in keep]],
                          self.config.bin_edges, self.config.weight_temperature)

    def rank(self, data: EmbeddedDataset, questions: Sequence[int], depth: int) -> list[np.ndarray]:
        if self.fusion is None:
            raise RuntimeError(f"{self.name} needs fusion weights: calibrate first, or pass --weights/--fixed-weights")
        return self.fuse(self.features(data, questions), data.questions[list(questions)], self.fusion, depth)


def _without_clues(g: MemoryGraph) -> MemoryGraph:
    """The graph with its clue nodes and their edges removed (node order becomes [utterances | speakers])."""
    keep = np.concatenate([np.arange(g.n_utt), g.n_utt + g.n_clues + np.arange(g.n_speakers)])
    adj = g.adjacency[keep][:, keep].tocsr()
    return MemoryGraph(g.utterances, np.zeros(g.n_utt, np.int64), np.zeros((0, g.clue_emb.shape[1]), np.float32),
                       adj, g.n_speakers, g.utt_pairs, g.clues)


def relevance_only(config: AssoMemConfig, **changes) -> AssoMemConfig:
    return replace(config, signals=("relevance",), **changes)


# The paper's hybrid baselines: two-step retrieval ranked by relevance alone, with different first-step units.
HYBRID_BASELINES = {
    "session-utterance": dict(clue_mode="centroid", graph=GraphConfig(delta=1.01), clue_mix=1.0),
    "session-summary": dict(clue_mode="keywords", graph=GraphConfig(delta=1.01), clue_mix=1.0),
    "topic-grouping": dict(clue_mode="keywords", clue_mix=1.0),
}


def make_assomem(name: str, config: AssoMemConfig, encoder: Encoder, fusion: FusionModel | None = None) -> AssoMem:
    """``assomem`` with ``config``, or one of the hybrid baselines (relevance only, fixed weights)."""
    if name == "assomem":
        return AssoMem(config, fusion, encoder)
    if name not in HYBRID_BASELINES:
        raise ValueError(f"unknown method {name!r}")
    cfg = relevance_only(config, **HYBRID_BASELINES[name])
    return AssoMem(cfg, fixed_weights(cfg.signals), encoder, name)
