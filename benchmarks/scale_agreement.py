"""What the scaling shortcuts change, measured with the bundled MiniLM.

1. Edge recall of the inverted file (``GraphConfig.exact_limit``, ``n_probe``): the share of the exact search's
   directed top-``max_neighbors`` utterance pairs the IVF finds, and the time of each, on the first ``--utterances``
   distinct turns of a dataset (real dialogue: near-duplicate turns make the exact search's candidate lists long).
2. Top-10 agreement: on the load benchmark's 2,500-session memory (``serve_load.sessions``), the share of questions
   whose top 10 is identical to that of (exact edges, whole-graph PPR to convergence), for the IVF and for
   ``ppr_hops`` = 1 … 4.
3. Candidates through the IVF on real dialogue (``cached_memory``): R@10 and top-10 agreement of each
   ``query_probe`` against relevance over every utterance.
4. With ``--parts two-level``: a codebook trained in two levels (``ivf.TWO_LEVEL_LISTS``) against one level, each
   one's edge recall against the exact search (``two_level_recall``).

``python benchmarks/scale_agreement.py --dataset longmemeval:../shared/data/longmemeval/longmemeval_s_dev.json.gz
--utterances 10000 --output benchmarks/results/scale_agreement.json``
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from serve_load import sessions  # noqa: E402

from assomem_gpu import AssoMemConfig, GraphConfig, MemoryIndex, Session, Utterance, ivf  # noqa: E402
from assomem_gpu.data import load_dataset  # noqa: E402
from assomem_gpu.encode import EmbeddingCache, make_encoder  # noqa: E402
from assomem_gpu.graph import utterance_pairs  # noqa: E402

PROBES = (8, 16, 32, 64)  # query_probe values compared with 0 (relevance over every utterance)
CACHED_LIST_SIZE = 32  # lists of the real memory: a few thousand sessions then have as many lists as 25,000
# sessions have with the default 256, so 32 probes read the same ~5% share of the memory


def edge_recall(x: np.ndarray, probes: list[int]) -> dict:
    start = time.perf_counter()
    (rows, cols, _), _ = utterance_pairs(x, GraphConfig(exact_limit=len(x) + 1))
    out = {"utterances": len(x), "exact_pairs": len(rows), "exact_s": round(time.perf_counter() - start, 2)}
    exact = set(zip(rows.tolist(), cols.tolist()))
    for n_probe in probes:
        start = time.perf_counter()
        (r, c, _), search = utterance_pairs(x, GraphConfig(exact_limit=0, n_probe=n_probe))
        out[f"n_probe={n_probe}"] = {"recall": round(len(exact & set(zip(r.tolist(), c.tolist()))) / len(exact), 4),
                                     "ivf_s": round(time.perf_counter() - start, 2),
                                     "lists": search.codebook.n_lists}
    return out


def two_level_recall(x: np.ndarray, list_size: int) -> dict:
    """A codebook trained in two levels (from ``ivf.TWO_LEVEL_LISTS`` lists) against one trained in one: each one's
    edge recall against the exact search and the time of its inverted file, on ``x`` with lists of ``list_size``
    (small enough for the codebook to reach ``TWO_LEVEL_LISTS`` lists: a memory of ~100,000 sessions has ~2,500
    lists of 256)."""
    (rows, cols, _), _ = utterance_pairs(x, GraphConfig(exact_limit=len(x) + 1))
    exact = set(zip(rows.tolist(), cols.tolist()))
    out = {"utterances": len(x), "exact_pairs": len(rows), "list_size": list_size}
    trained = ivf.codebook_rows(len(x), 0)  # the rows ``utterance_pairs`` trains on with ``exact_limit`` 0
    for name, threshold in (("one level", 10**9), ("two levels", ivf.TWO_LEVEL_LISTS)):
        start = time.perf_counter()
        book = ivf.train(x[:trained], list_size, two_level_lists=threshold)
        (r, c, _), search = utterance_pairs(x, GraphConfig(exact_limit=0, list_size=list_size), book)
        out[name] = {"recall": round(len(exact & set(zip(r.tolist(), c.tolist()))) / len(exact), 4),
                     "ivf_s": round(time.perf_counter() - start, 2), "lists": search.codebook.n_lists}
    return out


def agreement(n_sessions: int, encoder) -> dict:
    data = sessions(n_sessions)
    questions = [" ".join(s["utterances"][t % 10]["text"].split()[:6])
                 for t, s in enumerate(data[:: max(1, n_sessions // 300)])]
    q = encoder.encode(questions)
    indexes = {}
    for name, graph in (("exact", GraphConfig(exact_limit=10**9)), ("ivf", GraphConfig())):
        indexes[name] = MemoryIndex(encoder, AssoMemConfig(graph=graph), device="cpu")
        indexes[name].add_sessions(data)

    def top10(name: str, hops: int) -> list[list[str]]:
        index = indexes[name]
        index.config = replace(index.config, ppr_hops=hops)  # a search-time setting: the graph is the same
        hits = index.search_embeddings(q, questions, k=10, question_date=1_700_000_000)
        return [[h.utterance_id for h in hs] for hs in hits]

    base = top10("exact", 0)
    out = {"sessions": n_sessions, "questions": len(questions)}
    for name in ("exact", "ivf"):
        for hops in (0, 1, 2, 3, 4):
            same = sum(a == b for a, b in zip(base, top10(name, hops)))
            out[f"{name} edges, ppr_hops={hops}"] = round(same / len(base), 4)
    return out


def cached_memory(dataset: str, encoder, limit: int) -> dict:
    """Candidates through the IVF on real dialogue: one memory of the dataset's sessions (bank order, at most
    ``limit``) whose turns the embedding cache already holds, searched by the questions whose evidence lies in it
    (abstentions left out); R@10 and the share of identical top-10s against ``query_probe`` = 0 for each
    ``query_probe``, with lists of ``CACHED_LIST_SIZE``. Which sessions are cached depends on the machine's cache:
    the figure names how many."""
    ds = load_dataset(dataset)
    bank, off = ds.bank, ds.bank.offset_array
    vecs, found = EmbeddingCache().get(encoder.name, bank.encoded_texts(), encoder.dim)
    keep = [s for s in range(bank.n_sessions) if off[s + 1] > off[s] and found[off[s] : off[s + 1]].all()
            and all(bank.utt_texts[i].strip() for i in range(off[s], off[s + 1]))][:limit]
    held = np.zeros(bank.n_utterances, bool)
    for s in keep:
        held[off[s] : off[s + 1]] = True
    qs = [x for x in ds.questions if len(x.evidence) and held[x.evidence].all() and not x.abstention]
    index = MemoryIndex(encoder, AssoMemConfig(graph=GraphConfig(list_size=CACHED_LIST_SIZE)), device="cpu")
    start = time.perf_counter()
    index.add_sessions([Session(bank.session_ids[s], float(bank.session_dates[s]),
                                [Utterance(bank.utt_texts[i], bank.utt_speakers[i], id=bank.utt_ids[i])
                                 for i in range(off[s], off[s + 1])]) for s in keep], vecs[held])
    out = {"sessions": len(keep), "utterances": int(held.sum()), "questions": len(qs),
           "build_s": round(time.perf_counter() - start, 1), "clues": index._state.graph.n_clues,
           "lists": index._state.graph.search.codebook.n_lists,
           "largest_clue_utterances": int(index._state.graph.clue_sizes.max())}
    q = encoder.encode([x.text for x in qs])
    evidence = [set(bank.utt_ids[i] for i in x.evidence) for x in qs]
    base = None
    for probe in (0, *PROBES):
        index.config = replace(index.config, query_probe=probe)
        start = time.perf_counter()
        hits = index.search_embeddings(q, [x.text for x in qs], k=10, question_date=[x.date for x in qs])
        seconds = time.perf_counter() - start
        top = [[h.utterance_id for h in hs] for hs in hits]
        base = base or top
        out[f"query_probe={probe}"] = {
            "recall@10": round(float(np.mean([len(e & set(t)) / len(e) for e, t in zip(evidence, top)])), 4),
            "top10_identical": round(sum(a == b for a, b in zip(base, top)) / len(top), 4),
            "top10_same_set": round(sum(set(a) == set(b) for a, b in zip(base, top)) / len(top), 4),
            "ms_per_question": round(1000 * seconds / len(top), 2)}
        print(json.dumps({probe: out[f"query_probe={probe}"]}), flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="<format>:<path> whose turns the edge recall is measured on")
    p.add_argument("--utterances", type=int, nargs="+", default=[25_000])
    p.add_argument("--n-probe", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--sessions", type=int, default=2500, help="size of the memory the top-10 agreement is taken on")
    p.add_argument("--cached-sessions", type=int, default=5000,
                   help="most sessions of the real memory the candidates' agreement is taken on")
    p.add_argument("--two-level-utterances", type=int, default=100_000,
                   help="with --parts two-level: the distinct turns the two-level codebook is measured on")
    p.add_argument("--two-level-list-size", type=int, default=64, help="with --parts two-level: utterances per list")
    p.add_argument("--parts", nargs="+", choices=["edges", "agreement", "cached", "two-level"],
                   default=["edges", "agreement", "cached"], help="what to measure")
    p.add_argument("--output", help="JSON results")
    args = p.parse_args()
    encoder = make_encoder()
    texts = list(dict.fromkeys(load_dataset(args.dataset).bank.encoded_texts()))
    result = {"dataset": args.dataset, "encoder": encoder.name, "config": GraphConfig().__dict__}
    if "edges" in args.parts:
        result["edge_recall"] = []
        for n in args.utterances:
            x = np.ascontiguousarray(encoder.encode(texts[:n]))
            result["edge_recall"].append(edge_recall(x, args.n_probe))
            print(json.dumps(result["edge_recall"][-1]), flush=True)
    if "agreement" in args.parts:
        result["top10_agreement"] = agreement(args.sessions, encoder)
        print(json.dumps(result["top10_agreement"]))
    if "cached" in args.parts:
        result["cached_memory"] = cached_memory(args.dataset, encoder, args.cached_sessions)
        print(json.dumps(result["cached_memory"]))
    if "two-level" in args.parts:
        x = np.ascontiguousarray(encoder.encode(texts[: args.two_level_utterances]))
        result["two_level"] = two_level_recall(x, args.two_level_list_size)
        print(json.dumps(result["two_level"]))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
