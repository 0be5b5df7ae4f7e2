"""A reference implementation of the AssoMem ranking in plain networkx + numpy, written to be obvious, not fast.

One question at a time: build the memory's graph node by node and edge by edge with networkx (once per memory),
run eq. 2 as a plain power iteration, pick the two-step candidates, normalise and fuse the signals. The fast path (``assomem.py``) must give
the same top-10; tests and the bench compare them. BM25 scores and the temporal signal come from the same modules
as the fast path (they are per-question already); everything graph-shaped is rebuilt here.
"""
from __future__ import annotations

import networkx as nx
import numpy as np
import scipy.sparse as sp

from .assomem import AssoMem
from .config import BM25_SIGNALS
from .fusion import FusionModel
from .encode import prompted
from .retrieve import EmbeddedDataset
from .scoring import question_temporal
from .sentences import sentence_texts
from .signals.temporal import parse_constraint
from .signals.lexical import BM25Index
from .signals.reply import asks
from .signals.user_relevance import asks_assistant


def reference_graph(data: EmbeddedDataset, memory: int, session_clue_emb: np.ndarray, method: AssoMem) -> tuple:
    """(networkx graph, utterance rows, clue of each utterance, clue embeddings) for one memory;
    ``session_clue_emb`` holds its sessions' clue embeddings, in the memory's order."""
    ds, cfg = data.dataset, method.config.graph
    sessions = list(ds.memories[memory].sessions)
    session_clue_emb = dict(zip(sessions, session_clue_emb))
    # merge clues: sessions linked when cosine > δ; components are clues, or each session joins the first earlier
    # leader it is linked to (a session linked to no leader leads a clue)
    clue_vectors = np.stack([session_clue_emb[s] for s in sessions])
    linked = [[j for j, v in enumerate(_cosines(clue_vectors, i)) if i != j and v > cfg.delta]
              for i in range(len(sessions))]
    if cfg.clue_merge == "leaders":
        groups: dict[int, list[int]] = {}
        for i in range(len(sessions)):
            leader = next((j for j in linked[i] if j < i and j in groups), i)
            groups.setdefault(leader, []).append(i)
        components = [groups[leader] for leader in sorted(groups)]
    else:
        merge = nx.Graph()
        merge.add_nodes_from(range(len(sessions)))
        merge.add_edges_from((i, j) for i in range(len(sessions)) for j in linked[i])
        components = sorted((sorted(c) for c in nx.connected_components(merge)), key=lambda c: c[0])
    clue_of_session = {sessions[s]: c for c, members in enumerate(components) for s in members}
    clue_emb = np.stack([_normalise(np.sum([session_clue_emb[sessions[s]] for s in members], axis=0))
                         for members in components])
    utterances, utt_clue, turn_pairs = [], [], []
    for s in sessions:
        rows = list(range(ds.bank.offsets[s], ds.bank.offsets[s + 1]))
        turn_pairs += [(len(utterances) + k, len(utterances) + k + 1) for k in range(len(rows) - 1)]
        utterances += rows
        utt_clue += [clue_of_session[s]] * len(rows)
    n_u, n_c = len(utterances), len(components)
    g = nx.Graph()
    g.add_nodes_from(range(n_u + n_c))
    weights: dict[tuple[int, int], float] = {}

    def add(a: int, b: int, w: float, directed_sum: dict) -> None:
        directed_sum[(a, b)] = directed_sum.get((a, b), 0.0) + w

    directed: dict[tuple[int, int], float] = {}
    for u in range(n_u):
        add(u, n_u + utt_clue[u], 1.0, directed)
    for i in range(n_c):
        row = _cosines(clue_emb, i)
        for j in _neighbours(row, i, cfg.max_neighbors):
            if row[j] > cfg.gamma:
                add(n_u + i, n_u + j, float(row[j]), directed)
    emb = data.utterances[utterances]
    for i in range(n_u):
        row = _cosines(emb, i)
        for j in _neighbours(row, i, cfg.max_neighbors):
            if row[j] > cfg.gamma:
                add(i, j, float(row[j]), directed)
    if cfg.adjacency_weight > 0:
        for a, b in turn_pairs:
            add(a, b, cfg.adjacency_weight, directed)
    for (a, b), w in directed.items():  # symmetric: the larger of the two directions
        weights[(min(a, b), max(a, b))] = max(weights.get((min(a, b), max(a, b)), 0.0), w)
    for (a, b), w in weights.items():
        g.add_edge(a, b, weight=w)
    if not method.config.clues:
        g.remove_nodes_from(range(n_u, n_u + n_c))
        g = nx.convert_node_labels_to_integers(g, ordering="sorted")
        n_c = 0
    return g, np.asarray(utterances), np.asarray(utt_clue), clue_emb, n_c


def _cosines(emb: np.ndarray, i: int) -> np.ndarray:
    """Cosines of row ``i`` with every row, rounded to 1e-6 as the fast path rounds them (equal vectors tie exactly)."""
    return np.round(emb.astype(np.float64) @ emb[i].astype(np.float64), 6)


def _neighbours(row: np.ndarray, self_index: int, k: int) -> list[int]:
    """The ``k`` most similar other nodes (ties: lower index first)."""
    order = [j for j in np.argsort(-row, kind="stable") if j != self_index]
    return order[:k]


def _normalise(v: np.ndarray) -> np.ndarray:
    return v / max(np.linalg.norm(v), 1e-12)


def reference_ppr(g: nx.Graph, t: np.ndarray, damping: float, tol: float, max_iter: int) -> np.ndarray:
    """Eq. 2 as written: r ← d·M·r + (1−d)·t from r = t, M column-normalised (an isolated node keeps its mass)."""
    a = nx.to_scipy_sparse_array(g, nodelist=sorted(g.nodes), weight="weight", format="csc").astype(np.float64)
    deg = np.asarray(a.sum(axis=0)).ravel()
    lonely = np.flatnonzero(deg == 0)
    a = a + sp.csc_array((np.ones(len(lonely)), (lonely, lonely)), shape=a.shape)
    deg[lonely] = 1.0
    m = a @ sp.diags_array(1.0 / deg)
    r = t.copy()
    for _ in range(max_iter):
        nxt = damping * m @ r + (1 - damping) * t
        done = np.abs(nxt - r).sum() < tol
        r = nxt
        if done:
            break
    return r


def reference_top(data: EmbeddedDataset, question: int, method: AssoMem, fusion: FusionModel, k: int = 10,
                  graphs: dict | None = None) -> list[int]:
    """Top-``k`` bank utterance rows for one question, the slow and obvious way (``graphs`` caches memory graphs)."""
    ds, cfg = data.dataset, method.config
    q = ds.questions[question]
    graphs = {} if graphs is None else graphs
    index = method.index(data, q.memory)
    if q.memory not in graphs:
        graphs[q.memory] = reference_graph(data, q.memory, index._state.clue_emb.view, method)
    g, utterances, utt_clue, clue_emb, n_c = graphs[q.memory]
    q_emb = data.questions[question]
    rel = data.utterances[utterances] @ q_emb
    bm25 = (_bm25(graphs, ds, q.memory, utterances).scores([q.text])[0]
            if BM25_SIGNALS & set(cfg.signals) else None)  # every utterance's BM25 score
    session = ds.bank.utt_session()[utterances]  # each utterance's session
    if cfg.clues and n_c:
        best = np.array([rel[utt_clue == c].max() for c in range(n_c)])
        clue_score = cfg.clue_mix * (clue_emb @ q_emb) + (1 - cfg.clue_mix) * best
        order = list(np.argsort(-clue_score, kind="stable"))
        chosen, count = [], 0
        for c in order:
            if len(chosen) >= cfg.top_clues and count >= cfg.min_candidates:
                break
            chosen.append(c)
            count += int((utt_clue == c).sum())
        local = [i for i in range(len(utterances)) if utt_clue[i] in chosen]
        if "lexical" in cfg.signals and cfg.lexical_pool:  # the BM25 top of the memory joins them
            local = sorted(set(local) | {i for i in np.argsort(-bm25, kind="stable")[: cfg.lexical_pool]
                                         if bm25[i] > 0})
        local = sorted(set(local) | set(np.argsort(-rel, kind="stable")[: cfg.dense_pool].tolist()))  # and its dense
        # top
        local = np.asarray(local, np.int64)
    else:
        local = np.arange(len(utterances))
    best = rel.copy()  # a candidate's relevance: its best passage's, itself or one of its sentences
    if cfg.sentences and method.encoder is not None:  # (without an encoder the engine holds no sentence vectors)
        for i in local:
            texts, _ = sentence_texts([ds.bank.utt_speakers[utterances[i]]], [ds.bank.utt_texts[utterances[i]]])
            if texts:
                best[i] = max(best[i], float(np.max(method.encoder.encode(prompted(method.encoder, "passage", texts))
                                                    @ q_emb)))
    columns, active = [], []
    users = {s.strip().casefold() for s in cfg.user_speakers}
    for name in cfg.signals:
        if name == "relevance":
            col = best[local]
        elif name == "importance":
            t = np.zeros(g.number_of_nodes())
            t[: len(utterances)] = np.clip(rel, 0, None)
            t = t / t.sum() if t.sum() > 0 else np.r_[np.full(len(utterances), 1 / len(utterances)),
                                                        np.zeros(g.number_of_nodes() - len(utterances))]
            # ppr_hops H > 0: H iterations over the whole graph (the fast path runs them on the candidates' H hops)
            r = reference_ppr(g, t, cfg.damping, *((0.0, cfg.ppr_hops) if cfg.ppr_hops else (cfg.tol, cfg.max_iter)))
            col = np.log(np.maximum(r[local], 1e-30))
        elif name == "lexical":
            col = bm25[local]
        elif name == "context":  # each candidate's neighbouring turns of its session, summed and normalised
            col = []
            for i in local:
                near = [j for j in range(len(utterances)) if 0 < abs(i - j) <= cfg.context_window
                        and session[j] == session[i]]
                ctx = data.utterances[utterances[near]].sum(axis=0) if near else np.zeros(len(q_emb), np.float32)
                col.append(_normalise(ctx) @ q_emb)
        elif name == "lexical_context":  # the BM25 score of the turn before each candidate in its session
            col = [bm25[i - 1] if i > 0 and session[i - 1] == session[i] else 0.0 for i in local]
        elif name == "reply":  # the same where the turn before asks a question
            asking = asks([ds.bank.utt_texts[u] for u in utterances])
            col = [bm25[i - 1] if i > 0 and session[i - 1] == session[i] and asking[i - 1] else 0.0 for i in local]
        elif name == "session":  # the best relevance among the candidates of the candidate's session
            top: dict = {}
            for i in local:
                top[session[i]] = max(top.get(session[i], -np.inf), best[i])
            col = [top[session[i]] for i in local]
        elif name == "user_relevance":  # relevance on the turns of the speaker asked about (the user's, or the
            # others' where the question recalls what the assistant said), the candidates' lowest elsewhere
            other = asks_assistant(q.text)
            mine = [(ds.bank.utt_speakers[utterances[i]].strip().casefold() in users) != other for i in local]
            low = min(best[local])  # (once: not per candidate)
            col = [best[i] if m else low for i, m in zip(local, mine)]
        else:
            col = question_temporal(index._state, parse_constraint(q.text, q.date), local)  # the index's rows
        col = np.asarray(col, dtype=np.float64)
        z = (col - col.mean()) / col.std() if col.std() > 1e-12 else np.zeros_like(col)
        columns.append(z)
        if name == "temporal":  # a question without a time intent has none
            active.append(bool(np.any(z != 0)))
        elif name == "user_relevance":  # nor one whose candidates that speaker said all, or none
            active.append(any(mine) and not all(mine))
        else:
            active.append(True)
    w = fusion.weights(q_emb[None], np.asarray([active]))[0]
    fused = np.zeros(len(local))
    for d, z in enumerate(columns):
        e = np.exp((z - z.max()) / cfg.temperature)
        fused += w[d] * e / e.sum()
    order = sorted(range(len(local)), key=lambda i: (-fused[i], i))
    ranked = [int(utterances[local[i]]) for i in order]
    if len(ranked) < k:
        rest = [i for i in range(len(utterances)) if i not in set(local.tolist())]
        ranked += [int(utterances[i]) for i in sorted(rest, key=lambda i: (-rel[i], i))]
    return ranked[:k]


def _bm25(graphs: dict, ds, memory: int, utterances: np.ndarray) -> BM25Index:
    """The memory's BM25 index over its utterances (cached in ``graphs``)."""
    if ("bm25", memory) not in graphs:
        graphs[("bm25", memory)] = BM25Index(ds.bank.encoded_texts(utterances))
    return graphs[("bm25", memory)]
