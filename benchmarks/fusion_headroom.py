"""The fusion's weights beside the best fixed weighting a search finds: the eval CLI's cross-validated fusion, and the
best single set of weights for all questions that a local search finds on the very questions it is scored on (an
optimistic figure for what one weighting of these candidates and signals can do; not a setting to ship).

    python benchmarks/fusion_headroom.py --dataset SPEC [--haystack-sessions N --limit N] [--output FILE.json]

The search is coordinate ascent from equal weights: each signal's weight in turn set to the value of ``GRID`` that
ranks best (mean R@10, then R@6, R@3, R@1), for rounds until none changes (``ROUNDS`` at most): a local search, so a
better weighting may exist off its grid or its path. Each weighting ranks with the engine's eq. 4 (``fusion.fuse``,
its softmax temperature) on each question's features, computed once as the CLI computes them
(``signal_variants.features``). docs/results-history.md, "What one weighting of these signals reaches".
"""
from __future__ import annotations

import argparse

import numpy as np

from signal_variants import KS, cross_validated, features, recall, report

from assomem_gpu.backend import get_backend
from assomem_gpu.fusion import UNTYPED, FusionModel, fuse

GRID = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)  # candidate weights of a signal (the weights are normalised to sum 1)
ROUNDS = 4


def fixed(weights: np.ndarray, signals: list[str]) -> FusionModel:
    """One weighting for every question: ``weights`` (>= 0, not all 0) as type weights at temperature 1."""
    return FusionModel(signals, [UNTYPED], np.log(np.maximum(weights, 1e-12))[None], 1.0)


def best_fixed(data, method, questions, feats, signals) -> tuple[dict[str, float], list[float]]:
    """(R@k, weights) of the best single weighting coordinate ascent finds on ``questions`` themselves."""
    backend, temperature = get_backend("cpu"), method.config.temperature
    scored = [q for q in questions if len(data.dataset.questions[q].evidence)]
    q_emb = data.questions[scored]

    def ranked(w: np.ndarray) -> dict[str, float]:
        out = fuse([feats[q] for q in scored], q_emb, fixed(w, signals), temperature, max(KS), backend)
        return recall(dict(zip(scored, [x.rows for x in out])), data.dataset, scored)

    def key(r: dict[str, float]) -> tuple:
        return r["R@10"], r["R@6"], r["R@3"], r["R@1"]

    w = np.ones(len(signals))
    best = ranked(w)
    for _ in range(ROUNDS):
        moved = False
        for s in range(len(signals)):
            for v in GRID:
                trial = w.copy()
                trial[s] = v
                if v == w[s] or not trial.any():
                    continue
                got = ranked(trial)
                if key(got) > key(best):
                    best, w, moved = got, trial, True
        if not moved:
            break
    return best, (w / w.sum()).round(4).tolist()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output", help="JSON file for the figures")
    own, rest = p.parse_known_args()
    args, data, method, feats, folds = features(rest)
    signals, questions = list(method.config.signals), list(range(len(feats)))
    figures = {"fusion (cross-validated)": cross_validated(data, method, questions, feats, signals, folds,
                                                           get_backend("cpu"))}
    top, weights = best_fixed(data, method, questions, feats, signals)
    figures["best fixed weights (fitted on these questions)"] = top
    figures["their weights"] = dict(zip(signals, weights))
    report(figures, args, own.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
