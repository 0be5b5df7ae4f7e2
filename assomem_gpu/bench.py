"""``python -m assomem_gpu.bench``: latency and throughput of a ``MemoryIndex`` (the default config, or without
sentence passages: ``--no-sentences``), beside the networkx reference.

Synthetic memories (clustered embeddings, dated sessions, planted evidence) at 50, 500 and 2,500 sessions, or real
data (``--dataset ... --haystack-sessions N``, the first memory). Per scale: the build (clue and sentence texts
embedded by the bundled encoder; that encoding reported apart), single-question p50/p95 with the question's vector
given and with its text (encoding included), batch throughput for B = 1, 16, 256, 1024, time per stage, adding a
10-utterance session (encoding apart) and removing one (medians of up to ``WRITES`` of each, alternating), save and
load and the file's size, the reference's time per question and the share of questions whose top-10 is identical,
whether the index after the writes equals a rebuild (above ``exact_limit`` utterances, a rebuild with the index's IVF
codebook, which removals keep), and the process's peak resident memory, read before the whole-graph PPR floor and the
rebuild check (a process-wide peak: scales run smallest first, so a smaller scale's floor could only raise it where it
outgrew the larger scale). Between consecutive sizes, the growth exponent of each figure (its log-log slope against
the sessions: 1 is linear). ``--output`` writes JSON (default ``out/bench_<device>.json``; the committed figures are
in ``benchmarks/results/``).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .assomem import AssoMem
from .backend import Backend, get_backend
from .clues import keyword_clue
from .config import AssoMemConfig
from .encode import DEFAULT_MODEL, prompted, text_encoder
from .fusion import FusionModel
from .graph import build_graph
from .index import MemoryIndex, Session, Utterance
from .memory import Dataset, Memory, MemoryBank, Question
from .reference import reference_top
from .retrieve import EmbeddedDataset
from .rss import peak_rss_mb
from .sentences import sentence_texts

DAY = 86_400.0


class TimedEncoder:
    """An encoder that adds up the seconds it spends, so that builds and adds can report encoding apart."""

    def __init__(self, encoder):
        self.encoder, self.name, self.dim, self.seconds = encoder, encoder.name, encoder.dim, 0.0
        self.prompts = getattr(encoder, "prompts", {})

    def encode(self, texts):
        start = time.perf_counter()
        try:
            return self.encoder.encode(texts)
        finally:
            self.seconds += time.perf_counter() - start


class SyntheticEncoder:
    """The encoder of a synthetic memory's world: a word's vector is the mean of the (synthetic) embeddings of the
    utterances that use it, a text's the normalised mean of its words' (unknown words count for nothing), so clue
    texts land among their sessions' utterances as a real encoder's would."""

    def __init__(self, data: EmbeddedDataset):
        texts = data.dataset.bank.utt_texts
        words = [t.split() for t in texts]
        self.vocab = {w: i for i, w in enumerate(sorted({w for ws in words for w in ws}))}
        rows = np.repeat(np.arange(len(texts)), [len(ws) for ws in words])
        cols = np.fromiter((self.vocab[w] for ws in words for w in ws), np.int64)
        uses = sp.csr_matrix((np.ones(len(rows), np.float32), (cols, rows)), shape=(len(self.vocab), len(texts)))
        self.vectors = np.asarray(uses @ data.utterances, dtype=np.float32)  # words × utterances, no copy per use
        self.dim, self.name = data.utterances.shape[1], f"synthetic:{data.dataset.name}"

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            ids = [self.vocab[w] for w in text.replace(",", " ").split() if w in self.vocab]
            out[i] = self.vectors[ids].sum(axis=0) if ids else 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def synthetic_memory(n_sessions: int, n_questions: int, seed: int = 0, dim: int = 384, per_session: int = 10,
                     topics: int | None = None) -> EmbeddedDataset:
    """One memory of ``n_sessions`` dated sessions on clustered topics; each question plants one evidence utterance."""
    from wordfreq import top_n_list

    rng = np.random.default_rng(seed)
    topics = topics or max(4, n_sessions // 10)
    centres = rng.normal(size=(topics, dim)).astype(np.float32)
    words = np.asarray([w for w in top_n_list("en", 60_000) if w.isalpha() and len(w) > 3])
    vocab = rng.choice(words, size=(topics, 40))  # each topic its own words (few shared)
    bank = MemoryBank()
    start = 1_672_531_200.0  # 2023-01-01
    dates = np.sort(rng.uniform(start, start + 365 * DAY, n_sessions))
    topic_of = rng.integers(topics, size=n_sessions)
    emb = []
    for s in range(n_sessions):
        n = int(rng.integers(per_session // 2, per_session * 3 // 2 + 1))
        said = rng.choice(vocab[topic_of[s]], size=(n, 8))
        turns = [(f"s{s}:{t}", "user" if t % 2 == 0 else "assistant", " ".join(said[t])) for t in range(n)]
        bank.add_session(f"s{s}", float(dates[s]), turns)
        e = centres[topic_of[s]] + 0.9 * rng.normal(size=(n, dim)).astype(np.float32)
        emb.append(e / np.linalg.norm(e, axis=1, keepdims=True))
    utt = np.concatenate(emb)
    memory = Memory(np.arange(n_sessions), dates.copy())
    evidence = rng.integers(bank.n_utterances, size=n_questions)
    q = utt[evidence] + 0.6 * rng.normal(size=(n_questions, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    suffix = ["", " last month", " most recently", ""]
    questions = [Question(f"q{i}", " ".join(bank.utt_texts[e].split()[:4]) + suffix[i % 4], float(dates[-1] + DAY),
                          ["a", "b"][i % 2], np.array([e]), 0) for i, e in enumerate(evidence)]
    return EmbeddedDataset(Dataset(f"synthetic-{n_sessions}", bank, [memory], questions), utt, q)


WRITES = 20  # adds and removals a scale's figures are the medians of (of five, runs differed by up to 20%)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


FLOOR_BUFFER = 2**30  # bytes of one (nodes × questions) float32 buffer of the PPR floor at most


def ppr_against_floor(backend: Backend, graph, config: AssoMemConfig, b: int = 1024) -> dict:
    """One batched PPR of ``b`` questions (fewer where a float32 buffer of nodes × b would pass ``FLOOR_BUFFER``)
    over ``graph``, timed, beside its memory-bandwidth floor on a GPU: each iteration reads the CSR (values and
    column indices, 8 B a nonzero, and the row pointers) and, per question, r, the teleport and the output once
    (12 B a node), at the device's peak bandwidth."""
    from .scoring import teleport

    xp = backend.xp
    b = max(1, min(b, FLOOR_BUFFER // (4 * graph.n_nodes)))
    rng = np.random.default_rng(0)
    tele = teleport(backend.asarray(rng.random((b, graph.n_utt), dtype=np.float32)), graph.n_nodes, xp)
    m = backend.csr(graph.transition)
    backend.ppr(m, tele, config.damping, config.tol, config.max_iter)  # warm: compiled, uploaded
    start = time.perf_counter()
    r, iterations = backend.ppr(m, tele, config.damping, config.tol, config.max_iter)
    backend.to_host(r[:1, :1])  # waits for the device
    seconds = time.perf_counter() - start
    out = {"ppr_batch": b, "ppr_ms": round(1000 * seconds, 3), "ppr_iterations": int(iterations), "ppr_floor_ms": None}
    if backend.name == "cuda":
        props = xp.cuda.runtime.getDeviceProperties(xp.cuda.runtime.getDevice())
        bandwidth = 2 * props["memoryClockRate"] * 1e3 * props["memoryBusWidth"] / 8  # bytes/s, double data rate
        per_iteration = 8 * m.nnz + 4 * (graph.n_nodes + 1) + 12 * graph.n_nodes * b
        out["ppr_floor_ms"] = round(1000 * iterations * per_iteration / bandwidth, 3)
    return out


def bench_scale(data: EmbeddedDataset, backend: Backend, batches: list[int], n_single: int, n_reference: int,
                encoder: TimedEncoder, question_encoder, config: AssoMemConfig) -> dict:
    """``encoder`` embeds the memory's clue texts and added sessions (timed apart); ``question_encoder`` (the bundled
    MiniLM) embeds free-text questions and, for the figure of an add's encoding, the added sessions (their
    utterances, sentences and clue)."""
    keyword_clue(["warm up"])  # the word frequencies load once
    if question_encoder is not None:
        question_encoder.encode(["warm up"])  # and the encoder's weights
    rng = np.random.default_rng(1)
    signals = config.signals
    fusion = FusionModel(list(signals), ["a", "b"], rng.random((2, len(signals))), 0.2,
                         rng.normal(size=(2, data.questions.shape[1])).astype(np.float32), np.zeros(2, np.float32))
    method = AssoMem(config, fusion, encoder, device=backend, cache=1)
    ds = data.dataset
    size = {"sessions": len(ds.memories[0].sessions), "utterances": len(ds.memory_utterances(0))}
    encoder.seconds = 0.0
    build_s = _timed(lambda: method.index(data, 0))  # graph, clues, BM25 index and time mentions: the one-off build
    build_encode_s = encoder.seconds
    index = method.index(data, 0)
    qs = data.questions
    texts = [q.text for q in ds.questions]
    when = np.asarray([q.date for q in ds.questions])
    n_q = len(texts)

    def search(rows, k=10):
        return index.search_embeddings(qs[rows], [texts[i] for i in rows], k=k, question_date=when[rows])

    for warm in ([0], list(range(min(n_q, 64)))):  # compile the serial and the parallel kernels
        search(warm)
    single = [1000 * _timed(lambda: search([i])) for i in range(min(n_single, n_q))]
    qps, stages = {}, {}
    for b in batches:  # the median of three timed calls per batch size
        rows = [i % n_q for i in range(b)]
        runs = []
        for _ in range(3):
            index.stage_seconds.clear()
            runs.append((_timed(lambda: search(rows)), dict(index.stage_seconds)))
        seconds, stage_s = sorted(runs, key=lambda r: r[0])[1]
        qps[str(b)] = b / seconds
        stages[str(b)] = {k: round(1000 * v / b, 4) for k, v in stage_s.items()}
    p50 = float(np.percentile(single, 50))

    def free(i):  # what index.search does with an index whose encoder is question_encoder
        return index.search_embeddings(question_encoder.encode(prompted(question_encoder, "query", [texts[i]])),
                                       [texts[i]], question_date=when[[i]])

    # last of the searches: torch's threads left spinning after an encode slow down the next kernels
    free_text = [1000 * _timed(lambda: free(i)) for i in range(min(n_single, n_q))] if question_encoder else []

    reference = {"reference_build_s": None, "reference_single_ms": None, "speedup_vs_reference": None,
                 "throughput_speedup_vs_reference": None, "build_speedup_vs_reference": None,
                 "top10_agreement": None, "reference_questions": 0}
    if n_reference > 0:
        fast = [[h.utterance_id for h in hits] for hits in search(list(range(min(n_reference, n_q))))]
        ids = ds.bank.utt_ids
        graphs: dict = {}
        reference_build_s = _timed(lambda: reference_top(data, 0, method, fusion, graphs=graphs))  # graph, BM25 once
        ref_ms, agree = [], 0
        for q, ranked in enumerate(fast):
            start = time.perf_counter()
            top = reference_top(data, q, method, fusion, graphs=graphs)
            ref_ms.append(1000 * (time.perf_counter() - start))
            agree += ranked == [ids[i] for i in top]
        ref = float(np.median(ref_ms))
        reference = {"reference_build_s": round(reference_build_s, 3), "reference_single_ms": round(ref, 3),
                     "speedup_vs_reference": round(ref / p50, 2),
                     "throughput_speedup_vs_reference": round(ref * max(qps.values()) / 1000, 1),
                     "build_speedup_vs_reference": round(reference_build_s / build_s, 1),
                     "top10_agreement": agree / len(fast), "reference_questions": len(fast)}

    add_ms, add_encode_ms, remove_ms, added = [], [], [], []
    for i in range(max(1, min(WRITES, ds.bank.n_sessions // 7))):  # add 10-utterance sessions (the texts of session
        # 7·i, embedded by the index's encoder), each followed by the removal of another session
        said = ds.bank.utt_texts[ds.bank.offsets[7 * i] : ds.bank.offsets[7 * i] + 10]
        added.append(Session(f"added{i}", float(data.dataset.memories[0].dates.max()),
                             [Utterance(f"{said[t % len(said)]} again {t}", "user") for t in range(10)]))
        encoder.seconds = 0.0
        add_ms.append(1000 * (_timed(lambda: index.add_sessions([added[-1]])) - encoder.seconds))
        remove_ms.append(1000 * _timed(lambda: index.remove_sessions([ds.bank.session_ids[3 * i + 1]])))
    for session in added if question_encoder else ():  # what the bundled MiniLM takes to embed a session, its
        # sentences and its clue
        turns_of = [f"user: {u.text}" for u in session.utterances]
        texts_of = turns_of + (sentence_texts(["user"] * len(turns_of), [u.text for u in session.utterances])[0]
                               if config.sentences else [])
        add_encode_ms.append(1000 * _timed(lambda: question_encoder.encode(prompted(question_encoder, "passage",
                                                                                    texts_of))))
        add_encode_ms[-1] += 1000 * _timed(lambda: question_encoder.encode(
            prompted(question_encoder, "passage", [f"topic: {keyword_clue(turns_of)}"])))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index.npz"
        save_s = _timed(lambda: index.save(path))
        file_mb = path.stat().st_size / 2**20
        loaded = []
        load_s = _timed(lambda: loaded.append(MemoryIndex.load(path, encoder=encoder, device=backend)))
    # the peak so far (scales run smallest first: the largest yet's), read before the floor's whole-graph batch and
    # the rebuild below, which are the bench's work, not the index's
    peak_mb = peak_rss_mb()
    ppr = ppr_against_floor(backend, index._state.graph, config) if "importance" in config.signals else {}
    probe = list(range(min(50, n_q)))
    after = [[h.utterance_id for h in hits] for hits in search(probe)]
    rebuilt = MemoryIndex(encoder, config, fusion, backend, dated=False, dim=index.dim)
    held = [index.get_session(s) for s in index.session_ids]
    rebuilt.add_sessions(held, index._state.emb.view)  # the same vectors, from scratch
    search = index._state._full.search
    if search is not None:  # removals keep the inverted file's codebook: the rebuild to compare with uses it too
        st = rebuilt._state
        st._set_graph(build_graph(st.bank, st.emb.view, st.clue_emb.view, st.graph_config, codebook=search.codebook))
    same = [[h.utterance_id for h in hits]
            for hits in rebuilt.search_embeddings(qs[probe], [texts[i] for i in probe], question_date=when[probe])]
    reloaded = [[h.utterance_id for h in hits]
                for hits in loaded[0].search_embeddings(qs[probe], [texts[i] for i in probe], question_date=when[probe])]
    return {
        **size,
        "device": f"{backend.name}: {backend.device}", "build_s": round(build_s - build_encode_s, 4),
        "build_encoding_s": round(build_encode_s, 3),
        "single_p50_ms": round(p50, 3), "single_p95_ms": round(float(np.percentile(single, 95)), 3),
        "free_text_p50_ms": round(float(np.percentile(free_text, 50)), 3) if free_text else None,
        "batch_qps": {k: round(v, 1) for k, v in qps.items()}, "stage_ms_per_question": stages,
        "add_session_ms": round(float(np.median(add_ms)), 3),
        "add_session_encoding_ms": round(float(np.median(add_encode_ms)), 3) if add_encode_ms else None,
        "remove_session_ms": round(float(np.median(remove_ms)), 3),
        "save_s": round(save_s, 4), "load_s": round(load_s, 4), "index_file_mb": round(file_mb, 2),
        "after_writes_equals_rebuild": after == same, "load_equals_saved": after == reloaded,
        "peak_rss_mb": round(peak_mb, 1), **ppr,
        **reference,
    }


GROWTH = ("build_s", "single_p50_ms", "free_text_p50_ms", "add_session_ms", "remove_session_ms", "save_s", "load_s",
          "index_file_mb", "peak_rss_mb")


def growth(scales: list[dict]) -> list[dict]:
    """Between each two consecutive scales: the log-log slope of every figure against the sessions (1: linear; a
    throughput's slope is negative when it falls)."""
    out = []
    for a, b in zip(scales, scales[1:]):
        x = math.log(b["sessions"] / a["sessions"])
        pairs = {k: (a.get(k), b.get(k)) for k in GROWTH}
        pairs.update({f"qps_B{n}": (a["batch_qps"].get(n), b["batch_qps"].get(n)) for n in a["batch_qps"]})
        out.append({"from": a["sessions"], "to": b["sessions"],
                    "slopes": {k: round(math.log(v / u) / x, 2) for k, (u, v) in pairs.items()
                               if x > 0 and u and v and u > 0 and v > 0}})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m assomem_gpu.bench", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sessions", type=int, nargs="+", default=[50, 500, 2500], help="synthetic memory sizes")
    p.add_argument("--dataset", help="real data instead: <format>:<path> (embedded with the default encoder)")
    p.add_argument("--haystack-sessions", type=int, help="with --dataset: grow LongMemEval haystacks")
    p.add_argument("--limit", type=int, default=64, help="with --dataset: questions sampled")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256, 1024])
    p.add_argument("--single", type=int, default=100, help="questions timed one at a time")
    p.add_argument("--reference", type=int, default=20, help="questions also ranked by the networkx reference")
    p.add_argument("--no-sentences", action="store_true",
                   help="the default config without sentence passages (what they cost; a synthetic utterance is one "
                        "sentence, so only real data shows it)")
    p.add_argument("--output", help="JSON results (default out/bench_<device>.json)")
    args = p.parse_args(argv)
    try:
        backend = get_backend(args.device)
    except (RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"backend: {backend.name} ({backend.device})")
    for name, choice in backend.components.items():
        print(f"  {name}: {choice.impl} ({choice.reason})")
    try:
        question_encoder = text_encoder(DEFAULT_MODEL)
    except RuntimeError as exc:  # the bundled encoder's package is not installed (a GPU host without it)
        question_encoder = None
        print(f"free-text search and encoding not timed: {exc}")
    if args.dataset:
        from .data import load_dataset
        from .encode import make_encoder

        ds = load_dataset(args.dataset, haystack_sessions=args.haystack_sessions, limit=args.limit)
        real = make_encoder()
        datasets = [(EmbeddedDataset.build(ds.subset([q for q in range(len(ds.questions))
                                                      if ds.questions[q].memory == ds.questions[0].memory]), real),
                     real)]
    else:  # made one at a time, smallest first, so that each scale's peak memory is its own
        datasets = ((data, SyntheticEncoder(data)) for data in
                    (synthetic_memory(n, max(args.batches + [args.single])) for n in sorted(args.sessions)))
    config, scales = AssoMemConfig(sentences=not args.no_sentences), []
    for data, encoder in datasets:
        result = bench_scale(data, backend, args.batches, args.single, args.reference, TimedEncoder(encoder),
                             question_encoder, config)
        scales.append({"dataset": data.dataset.name, **result})
        print(json.dumps(scales[-1]))
    slopes = growth(scales)
    for step in slopes:
        print(f"growth {step['from']} -> {step['to']} sessions (log-log slope): "
              + ", ".join(f"{k} {v}" for k, v in step["slopes"].items()))
    out = Path(args.output or f"out/bench_{backend.name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**backend.describe(), "config": config.to_json(), "scales": scales,
                               "growth": slopes}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
