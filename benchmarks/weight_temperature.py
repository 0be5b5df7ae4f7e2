"""The fusion's weight temperature T_w (weights = softmax(CMI / H / T_w)), scored as the eval CLI scores the engine:
each question's features once (the config the options give), fused with weights fitted on the other folds (the CLI's
folds) at each fixed T_w, and at the T_w calibration chose for the fold among ``--weight-temperatures`` (by default
``config.WEIGHT_TEMPERATURES``; ``fusion.calibrate_fusion``: an inner cross-validation on the fold's training
questions, so no evaluated question's labels choose it). The last row gives the eval CLI's figures with the same
options, to the digit, with the signals each fold's calibration left out (``fusion.select_signals``); the fixed rows
weigh every signal (the row "T_w 0.05" gives its figures with ``--weight-temperatures 0.05 --no-signal-selection``).

    python benchmarks/weight_temperature.py --dataset SPEC [--haystack-sessions N --limit N] [--output FILE.json]

docs/results-history.md, "Lexical context" (what is left).
"""
from __future__ import annotations

import argparse
from dataclasses import replace

from signal_variants import features, recall, report
from assomem_gpu.backend import get_backend
from assomem_gpu.config import WEIGHT_TEMPERATURES
from assomem_gpu.fusion import fuse


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output", help="JSON file for the figures")
    own, rest = p.parse_known_args()
    args, data, method, feats, folds = features(rest)
    ds, backend, cfg = data.dataset, get_backend("cpu"), method.config
    by_q = dict(zip(range(len(feats)), feats))

    def fitted(train):
        return method.fit(data, train, [by_q[q] for q in train])  # T_w only scales the CMI: one fit serves all

    def ranked(model, questions, tw, left_out=()):
        out = fuse([by_q[q] for q in questions], data.questions[questions],
                   replace(model, weight_temperature=tw, left_out=left_out), cfg.temperature, 100, backend)
        return dict(zip(questions.tolist(), [r.rows for r in out]))

    temperatures = sorted(set(WEIGHT_TEMPERATURES) | set(cfg.weight_temperatures))
    per_tw = {tw: {} for tw in temperatures}
    chosen, picks = {}, []
    for fold in folds:
        held = set(fold.tolist())
        model = fitted([q for q in range(len(feats)) if q not in held])  # T_w chosen by calibration's inner CV
        picks.append(model.weight_temperature)
        for tw in temperatures:
            per_tw[tw].update(ranked(model, fold, tw))
        chosen.update(ranked(model, fold, model.weight_temperature, model.left_out))
    questions = list(range(len(feats)))
    figures = {f"T_w {tw}": recall(per_tw[tw], ds, questions) for tw in temperatures}
    figures[f"T_w by calibration's inner cross-validation (picked {', '.join(map(str, picks))})"] = recall(
        chosen, ds, questions)
    report(figures, args, own.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
