"""Knowledge-update questions: does a ranking put the current fact above the one it replaced?

LongMemEval marks both turns of an update as evidence: the superseded fact ("I have three bikes", May) and the
current one ("I just bought a fourth", October). R@k and nDCG count them alike, so no recall figure rewards ranking
the current fact first, and calibration, which weighs each signal by what it tells of those labels, has nothing to
learn it from. This reads what the recall figures cannot: of the knowledge-update questions whose evidence lies in
sessions of different dates, how many have the newest and the oldest evidence turn both in the top ``--k``, and of
those how many rank the newest first, apart for questions with a "latest" cue (``temporal.parse_constraint``:
"currently", "most recent", ...) and without. With ``--cosines``: the cosine of each question's two evidence turns
(bundled encoder, from the embedding cache) beside that of every pair of top-``k`` turns of one speaker from different
sessions in the first export, the two spreads a rule "a later turn close to an earlier one replaces it" would have to
tell apart.

    python benchmarks/update_order.py --dataset SPEC [--haystack-sessions N --limit N --seed S] A.jsonl [B.jsonl ...]
        [--k 10] [--cosines] [--output FILE.json]

docs/results-history.md, "Knowledge updates".
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from assomem_gpu.cli_options import add_dataset_options, dataset_from_options, dataset_record
from assomem_gpu.eval.runner import read_rankings
from assomem_gpu.memory import Dataset
from assomem_gpu.signals.temporal import parse_constraint

TYPE = "knowledge-update"
Update = tuple[int, int, int, bool]  # (question, newest evidence row, oldest evidence row, has a "latest" cue)


def updates(ds: Dataset) -> list[Update]:
    """The ``Update`` of each knowledge-update question whose evidence lies in sessions of different dates (the dates
    its memory gives them)."""
    session_of = ds.bank.utt_session()
    out = []
    for i, q in enumerate(ds.questions):
        if q.type != TYPE or len(q.evidence) < 2:
            continue
        mem = ds.memories[q.memory]
        date_of = dict(zip(mem.sessions.tolist(), mem.dates.tolist()))
        dates = np.asarray([date_of[s] for s in session_of[q.evidence].tolist()], np.float64)
        if np.isnan(dates).any() or dates.min() == dates.max():
            continue
        latest = parse_constraint(q.text, q.date).order == "latest"
        out.append((i, int(q.evidence[np.argmax(dates)]), int(q.evidence[np.argmin(dates)]), latest))
    return out


def outcomes(rankings: list[np.ndarray], pairs: list[Update], k: int) -> list[str]:
    """Each update's outcome in the top ``k``: "newest first", "oldest first" or "not both"."""
    out = []
    for q, new, old, _ in pairs:
        top = rankings[q][:k].tolist()
        out.append("not both" if new not in top or old not in top else
                   "newest first" if top.index(new) < top.index(old) else "oldest first")
    return out


def order(seen: list[str], pairs: list[Update]) -> dict:
    """Per cue ("latest", "none", "all"): the questions, those with both turns in the top, and of those the ones
    ranking the newest first, from ``outcomes``."""
    out = {c: {"questions": 0, "both_in_top": 0, "newest_first": 0} for c in ("latest", "none", "all")}
    for outcome, (_, _, _, latest) in zip(seen, pairs):
        for c in ("latest" if latest else "none", "all"):
            out[c]["questions"] += 1
            out[c]["both_in_top"] += outcome != "not both"
            out[c]["newest_first"] += outcome == "newest first"
    return out


def cosines(ds: Dataset, rankings: list[np.ndarray], pairs: list[Update], k: int) -> dict:
    """Percentiles (10, 25, 50, 75, 90) of the evidence pairs' cosines and of the same-speaker, cross-session pairs
    of the top ``k`` turns of every question with evidence, the share of each at or above 0.5, 0.6, 0.7, and the
    share of the latter at or above the former's median (what a threshold taking half the updates would take)."""
    from assomem_gpu.encode import make_encoder, prompted

    enc = make_encoder()
    rows = sorted({r for _, a, b, _ in pairs for r in (a, b)} | {int(r) for q, rk in enumerate(rankings)
                                                                 if len(ds.questions[q].evidence) for r in rk[:k]})
    texts = ds.bank.encoded_texts()
    vec = dict(zip(rows, enc.encode(prompted(enc, "passage", [texts[r] for r in rows]))))
    session_of, speakers = ds.bank.utt_session(), ds.bank.utt_speakers
    evidence = np.asarray([float(vec[a] @ vec[b]) for _, a, b, _ in pairs])
    others = []
    for q, rk in enumerate(rankings):
        if not len(ds.questions[q].evidence):
            continue
        top = [int(r) for r in rk[:k]]
        others += [float(vec[a] @ vec[b]) for i, a in enumerate(top) for b in top[i + 1:]
                   if session_of[a] != session_of[b] and speakers[a] == speakers[b]]
    others = np.asarray(others)

    def spread(x):
        if not len(x):
            return {"pairs": 0}
        return {"pairs": len(x), "percentiles": dict(zip(("10", "25", "50", "75", "90"),
                                                         np.round(np.percentile(x, [10, 25, 50, 75, 90]), 3).tolist())),
                "at_least": {str(t): round(float((x >= t).mean()), 3) for t in (0.5, 0.6, 0.7)}}

    out = {"evidence_pairs": spread(evidence), "other_top_pairs": spread(others)}
    if len(evidence) and len(others):
        out["other_at_evidence_median"] = round(float((others >= np.median(evidence)).mean()), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("exports", nargs="+", help="ranking exports (python -m assomem_gpu.eval --rankings)")
    add_dataset_options(p, "the seeded sample of this many questions the exports were made for",
                        "<format>:<path>, as the exports were made with (and the options below)")
    p.add_argument("--k", type=int, default=10, help="the top read (default 10)")
    p.add_argument("--cosines", action="store_true", help="also the cosine spreads (bundled encoder, its cache)")
    p.add_argument("--output", help="JSON file for the figures")
    args = p.parse_args(argv)
    ds = dataset_from_options(args)
    pairs = updates(ds)
    names = [Path(path).name for path in args.exports]  # the figures' keys
    if len(set(names)) < len(names):
        p.error(f"exports: the file names must differ (they key the figures), got {names}")
    rankings = [read_rankings(path, ds) for path in args.exports]
    seen = {name: outcomes(r, pairs, args.k) for name, r in zip(names, rankings)}
    first = seen[names[0]]
    out = {**dataset_record(args), "k": args.k,
           "order": {name: {**order(o, pairs), "questions_differing_from_first": sum(a != b for a, b in zip(o, first))}
                     for name, o in seen.items()}}
    if args.cosines:
        out["cosines"] = cosines(ds, rankings[0], pairs, args.k)
    print(json.dumps(out, indent=1))
    if args.output:
        Path(args.output).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
