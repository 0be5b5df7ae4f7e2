"""``python -m assomem_gpu.bench``: latency and throughput of the AssoMem engine, beside the networkx reference.

Synthetic memories (clustered embeddings, dated sessions, planted evidence) at 50, 500 and 2,500 sessions, or real
data (``--dataset ... --haystack-sessions N``). Per scale: graph build, single-question p50/p95 (question embedding
given: encoding excluded), batch throughput for B = 1, 16, 256, 1024, time per stage, the reference's time per
question and the share of questions whose top-10 is identical. ``--output`` writes JSON (default
``benchmarks/results/bench_<device>.json``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from .assomem import AssoMem, AssoMemConfig
from .backend import cuda_unavailable_reason, get_backend
from .fusion import FusionModel
from .memory import Dataset, Memory, MemoryBank, Question
from .reference import reference_top
from .retrieve import EmbeddedDataset

DAY = 86_400.0


def synthetic_memory(n_sessions: int, n_questions: int, seed: int = 0, dim: int = 384, per_session: int = 10,
                     topics: int | None = None) -> EmbeddedDataset:
    """One memory of ``n_sessions`` dated sessions on clustered topics; each question plants one evidence utterance."""
    rng = np.random.default_rng(seed)
    topics = topics or max(4, n_sessions // 10)
    centres = rng.normal(size=(topics, dim)).astype(np.float32)
    vocab = [f"w{i}" for i in range(2000)]
    bank = MemoryBank()
    start = 1_672_531_200.0  # 2023-01-01
    dates = np.sort(rng.uniform(start, start + 365 * DAY, n_sessions))
    topic_of = rng.integers(topics, size=n_sessions)
    emb = []
    for s in range(n_sessions):
        n = int(rng.integers(per_session // 2, per_session * 3 // 2 + 1))
        words = rng.choice(vocab, size=(n, 8))
        turns = [(f"s{s}:{t}", "user" if t % 2 == 0 else "assistant", f"topic{topic_of[s]} " + " ".join(words[t]))
                 for t in range(n)]
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


def bench_scale(data: EmbeddedDataset, device: str, batches: list[int], n_single: int, n_reference: int) -> dict:
    backend = get_backend(device)
    rng = np.random.default_rng(1)
    signals = AssoMemConfig().signals
    fusion = FusionModel(list(signals), ["a", "b"], rng.random((2, len(signals))), 0.2,
                         rng.normal(size=(2, data.questions.shape[1])).astype(np.float32), np.zeros(2, np.float32))
    config = AssoMemConfig(clue_mode="centroid")
    method = AssoMem(config, fusion, backend=backend)
    ds = data.dataset
    size = {"sessions": int(np.mean([len(m.sessions) for m in ds.memories])),
            "utterances": int(np.mean([len(ds.memory_utterances(m)) for m in range(len(ds.memories))]))}
    t0 = time.perf_counter()
    for m in range(len(ds.memories)):  # graph, BM25 index and time mentions of every memory: the one-off build
        method.prepare(data, m)
    build_s = time.perf_counter() - t0
    n_q = len(ds.questions)
    for warm in ([0], list(range(min(n_q, 64)))):  # compile the serial and the parallel kernels
        method.rank(data, warm, 10)
    single = []
    for q in range(min(n_single, n_q)):
        t = time.perf_counter()
        method.rank(data, [q], 10)
        single.append(1000 * (time.perf_counter() - t))
    qps, stages = {}, {}
    for b in batches:  # the median of three timed calls per batch size
        qs = [i % n_q for i in range(b)]
        runs = []
        for _ in range(3):
            method.stage_seconds.clear()
            t = time.perf_counter()
            method.rank(data, qs, 10)
            runs.append((time.perf_counter() - t, dict(method.stage_seconds)))
        seconds, stage_s = sorted(runs, key=lambda r: r[0])[1]
        qps[str(b)] = b / seconds
        stages[str(b)] = {k: round(1000 * v / b, 4) for k, v in stage_s.items()}
    p50 = float(np.percentile(single, 50))
    add_ms = []
    for i in range(5):  # append 10-utterance sessions to the first memory (graph built): the incremental update;
        # the reference below then checks the grown memory
        vecs = data.utterances[rng.integers(len(data.utterances), size=10)]
        turns = [(f"added{i}:{t}", "user", f"added session {i} turn {t}") for t in range(10)]
        t = time.perf_counter()
        method.add_session(data, 0, f"added{i}", float(ds.memories[0].dates.max()), turns, vecs)
        add_ms.append(1000 * (time.perf_counter() - t))
    reference = {"reference_build_s": None, "reference_single_ms": None, "speedup_vs_reference": None,
                 "throughput_speedup_vs_reference": None, "build_speedup_vs_reference": None, "top10_agreement": None, "reference_questions": 0}
    if n_reference > 0:
        fast = method.rank(data, list(range(min(n_reference, n_q))), 10)
        graphs: dict = {}
        t = time.perf_counter()
        reference_top(data, 0, method, fusion, graphs=graphs)  # builds the reference graph (and BM25) once
        reference_build_s = time.perf_counter() - t
        ref_ms, agree = [], 0
        for q, ranked in enumerate(fast):
            t = time.perf_counter()
            top = reference_top(data, q, method, fusion, graphs=graphs)
            ref_ms.append(1000 * (time.perf_counter() - t))
            agree += list(ranked[:10]) == top
        ref = float(np.median(ref_ms))
        reference = {"reference_build_s": round(reference_build_s, 3), "reference_single_ms": round(ref, 3),
                     "speedup_vs_reference": round(ref / p50, 2),
                     "throughput_speedup_vs_reference": round(ref * max(qps.values()) / 1000, 1),
                     "build_speedup_vs_reference":
                     round(reference_build_s / build_s, 1), "top10_agreement": agree / len(fast),
                     "reference_questions": len(fast)}
    return {
        **size,
        "device": f"{backend.name}: {backend.device}", "build_s": round(build_s, 4),
        "single_p50_ms": round(p50, 3), "single_p95_ms": round(float(np.percentile(single, 95)), 3),
        "batch_qps": {k: round(v, 1) for k, v in qps.items()}, "stage_ms_per_question": stages,
        "add_session_ms": round(float(np.median(add_ms)), 3),
        **reference,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m assomem_gpu.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, nargs="+", default=[50, 500, 2500], help="synthetic memory sizes")
    p.add_argument("--dataset", help="real data instead: <format>:<path> (embedded with the default encoder)")
    p.add_argument("--haystack-sessions", type=int, help="with --dataset: grow LongMemEval haystacks")
    p.add_argument("--limit", type=int, default=64, help="with --dataset: questions sampled")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256, 1024])
    p.add_argument("--single", type=int, default=100, help="questions timed one at a time")
    p.add_argument("--reference", type=int, default=20, help="questions also ranked by the networkx reference")
    p.add_argument("--output", help="JSON results (default benchmarks/results/bench_<device>.json)")
    args = p.parse_args(argv)
    try:
        backend = get_backend(args.device)
    except (RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reason = cuda_unavailable_reason()
    print(f"backend: {backend.name} ({backend.device})" + (f"; cuda not used: {reason}" if reason else ""))
    scales = []
    if args.dataset:
        from .data import load_dataset
        from .encode import make_encoder

        ds = load_dataset(args.dataset, haystack_sessions=args.haystack_sessions, limit=args.limit)
        datasets = [EmbeddedDataset.build(ds, make_encoder())]
    else:
        datasets = [synthetic_memory(n, max(args.batches + [args.single])) for n in args.sessions]
    for data in datasets:
        result = bench_scale(data, args.device, args.batches, args.single, args.reference)
        scales.append({"dataset": data.dataset.name, **result})
        print(json.dumps(scales[-1]))
    out = Path(args.output or f"benchmarks/results/bench_{backend.name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"backend": backend.name, "device": backend.device, "cuda_unavailable_reason": reason,
                               "scales": scales}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
