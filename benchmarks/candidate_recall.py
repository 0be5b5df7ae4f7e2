"""Where a question's evidence is lost: the share of evidence turns among the engine's candidates (over all turns,
and per question averaged as R@k is: the recall a perfect ranking of the candidates would reach), the dense rank in
its memory of each one that is not, and the R@k of each signal alone within the candidates against the
cross-validated fusion (the eval CLI's folds), for the eval CLI's options.

    python benchmarks/candidate_recall.py --dataset SPEC [--haystack-sessions N --limit N] [--output FILE.json]

docs/results-history.md, "Where the recall at 2,500 sessions goes".
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from signal_variants import cross_validated, features, recall

from assomem_gpu.backend import get_backend
from assomem_gpu.cli_options import dataset_record


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output", help="JSON file for the figures")
    own, rest = p.parse_known_args()
    args, data, method, feats, folds = features(rest)
    ds, signals = data.dataset, list(method.config.signals)
    questions = list(range(len(feats)))
    held, missing, counts, shares = 0, [], [], []
    for q, f in enumerate(feats):
        evidence = np.asarray(ds.questions[q].evidence)
        if not len(evidence):
            continue
        counts.append(len(f.candidates))
        rows = np.concatenate([f.candidates, f.rest])  # the memory's rows the question's relevance reached
        order = rows[np.argsort(-(data.utterances[rows] @ data.questions[q]), kind="stable")]
        rank = {r: i + 1 for i, r in enumerate(order.tolist())}
        inside = np.isin(evidence, f.candidates)
        held += int(inside.sum())
        shares.append(inside.mean())
        missing += [rank.get(e) for e in evidence[~inside].tolist()]  # None: a row its relevance did not reach
    if not counts:
        raise SystemExit("no question of these options has evidence")
    n_evidence = held + len(missing)
    figures = {
        "evidence": n_evidence, "among_candidates": held, "share": round(100 * held / n_evidence, 2),
        "share_per_question": round(100 * float(np.mean(shares)), 2),
        "candidates_mean": round(float(np.mean(counts)), 1), "candidates_max": int(np.max(counts)),
        "missing_dense_ranks": sorted(missing, key=lambda r: (r is None, r or 0)),
        "fusion": cross_validated(data, method, questions, feats, signals, folds, get_backend("cpu")),
        **{f"{name} alone": recall({q: f.candidates[np.argsort(-f.scores[:, s], kind="stable")]
                                    for q, f in enumerate(feats)}, ds, questions)
           for s, name in enumerate(signals)},
    }
    for name, value in figures.items():
        print(f"{name:28s} {value}")
    if own.output:
        Path(own.output).write_text(json.dumps({**dataset_record(args), "figures": figures}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
