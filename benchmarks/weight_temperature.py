"""The fusion's weight temperature T_w (``AssoMemConfig.weight_temperature``: weights = softmax(CMI / H / T_w)),
scored as the eval CLI scores the engine: each question's features once (the config the options give), fused with
weights fitted on the other folds (the CLI's folds) at each T_w; and, as a candidate rule, T_w chosen per fold by an
inner cross-validation on that fold's training questions (the best mean nDCG@10; a nested selection, so no
evaluated question's labels choose it). The row at the config's T_w gives the CLI's figures to the digit.

    python benchmarks/weight_temperature.py --dataset SPEC [--haystack-sessions N --limit N] [--output FILE.json]

README, Results, "Lexical context" (what is left).
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from signal_variants import KS, features, report
from assomem_gpu.backend import get_backend
from assomem_gpu.calibrate import folds_of
from assomem_gpu.eval.metrics import mean_by_type, utterance_metrics
from assomem_gpu.fusion import fuse

TEMPERATURES = (0.05, 0.1, 0.2, 0.5, 1.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output", help="JSON file for the figures")
    own, rest = p.parse_known_args()
    args, data, method, feats, folds = features(rest)
    ds, backend, cfg = data.dataset, get_backend("cpu"), method.config
    by_q = dict(zip(range(len(feats)), feats))

    def fitted(train):
        return method.fit(data, train, [by_q[q] for q in train])  # CMI and the classifier: T_w only scales them

    def ranked(model, questions, tw):
        out = fuse([by_q[q] for q in questions], data.questions[questions], replace(model, weight_temperature=tw),
                   cfg.temperature, 100, backend)
        return dict(zip(questions.tolist(), [r.rows for r in out]))

    def mean(rankings, questions, key=None):
        rows = [(None, utterance_metrics(rankings[q], np.asarray(ds.questions[q].evidence), KS))
                for q in questions if len(ds.questions[q].evidence)]
        m = mean_by_type(rows)["all"]
        return m[key] if key else {f"R@{k}": round(100 * m[f"R@{k}"], 2) for k in KS}

    per_tw = {tw: {} for tw in TEMPERATURES}
    chosen, picks = {}, []
    for fold in folds:
        held = set(fold.tolist())
        train = np.asarray([q for q in range(len(feats)) if q not in held])
        model = fitted(train.tolist())
        for tw in TEMPERATURES:
            per_tw[tw].update(ranked(model, fold, tw))
        inner = {tw: {} for tw in TEMPERATURES}  # the training questions ranked by their own inner folds
        for part in folds_of(data, train.tolist(), args.folds, args.seed):
            inside = set(part.tolist())
            m = fitted([q for q in train.tolist() if q not in inside])
            for tw in TEMPERATURES:
                inner[tw].update(ranked(m, part, tw))
        best = max(TEMPERATURES, key=lambda tw: (mean(inner[tw], train.tolist(), "nDCG@10"), -tw))
        picks.append(best)
        chosen.update(ranked(model, fold, best))
    questions = list(range(len(feats)))
    figures = {f"T_w {tw}": mean(per_tw[tw], questions) for tw in TEMPERATURES}
    figures[f"T_w by inner cross-validation (picked {', '.join(map(str, picks))})"] = mean(chosen, questions)
    report(figures, args, own.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
