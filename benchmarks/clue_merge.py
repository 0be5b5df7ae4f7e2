"""The two clue merges on the load benchmark's memory: clue sizes and the engine's search, in one process.

    python benchmarks/clue_merge.py [--sessions 2500] [--output benchmarks/results/clue_merge_serve_data.json]

The memory of ``serve_load.py`` (synthetic sessions on 60 topics of English words, embedded by the bundled MiniLM
through the on-disk cache) is built into one ``MemoryIndex`` per ``--clue-merge``; for each: the build, the clues'
sizes in sessions, one question's search with its vector given (p50 of 100) and with its text (the encoding
included), and batches of 16 and 64 questions (vectors given, and texts; the median of three calls). Every figure
comes from this one run; the build reads the embeddings from the cache, so run it twice on a new machine.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from assomem_gpu import AssoMemConfig, GraphConfig
from assomem_gpu.encode import make_encoder
from assomem_gpu.graph import CLUE_MERGES
from assomem_gpu.index import MemoryIndex

sys.path.insert(0, str(Path(__file__).parent))
from serve_load import sessions, write_json  # noqa: E402  (the load benchmark's memory and its output)


def timed_ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return 1000 * (time.perf_counter() - start)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=2500)
    p.add_argument("--output", default="benchmarks/results/clue_merge_serve_data.json")
    args = p.parse_args()
    data = sessions(args.sessions)
    questions = [" ".join(s["utterances"][0]["text"].split()[:6]) for s in data[:200]]
    encoder = make_encoder()
    vectors = encoder.encode(questions)
    model = encoder.encoder  # the model itself: free-text searches encode as a server does, uncached

    def free_text(index: MemoryIndex, texts: list[str]):
        return index.search_embeddings(model.encode(texts), texts)

    result: dict = {"sessions": args.sessions, "merges": {}}
    for merge in CLUE_MERGES:
        index = MemoryIndex(encoder, AssoMemConfig(graph=GraphConfig(clue_merge=merge)), device="cpu")
        build_s = timed_ms(lambda: index.add_sessions(data)) / 1000
        state = index._state
        clue_of_session = np.unique(np.stack([state.graph.utt_clue, state.session_of]), axis=1)[0]
        sessions_per_clue = np.bincount(clue_of_session)
        index.search_embeddings(vectors[:64], questions[:64])  # warm: the kernels compile or load
        one = [timed_ms(lambda: index.search_embeddings(vectors[[i]], [questions[i]])) for i in range(100)]
        text = [timed_ms(lambda: free_text(index, [questions[i]])) for i in range(100)]
        batch = {}
        for b in (16, 64):
            calls = {"vectors": lambda: index.search_embeddings(vectors[:b], questions[:b]),
                     "texts": lambda: free_text(index, questions[:b])}
            for name, call in calls.items():
                batch[f"{name}_B{b}_qps"] = round(1000 * b / float(np.median([timed_ms(call) for _ in range(3)])), 1)
        result["merges"][merge] = {
            "build_s": round(build_s, 2), "clues": int(len(sessions_per_clue)),
            "largest_clue_sessions": int(sessions_per_clue.max()),
            "median_clue_sessions": float(np.median(sessions_per_clue)),
            "single_p50_ms": round(float(np.median(one)), 2), "free_text_p50_ms": round(float(np.median(text)), 2),
            **batch}
        print(json.dumps({merge: result["merges"][merge]}), flush=True)
    write_json(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
