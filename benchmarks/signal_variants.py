"""Candidate forms of a signal, scored as the eval CLI scores the engine: each question's features once (the config
the options give, without the session signal), a variant's column added to them, and the fusion cross-validated with
the CLI's folds. With no column it gives the CLI's ``--no-session`` figures (with the same options) to the digit.

    python benchmarks/signal_variants.py --dataset SPEC [--haystack-sessions N --limit N] [--output FILE.json]

How the session signal (``signals/session.py``) was chosen: R@k of each variant on the three dev sets
(docs/results-history.md, "Session relevance"). A variant is a function of one question's features: its candidates (bank
rows) and their z-scored signals, and the rest of what its relevance scored.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from assomem_gpu.backend import get_backend
from assomem_gpu.calibrate import compute_features, folds_of
from assomem_gpu.cli_options import build_methods, dataset_from_options, dataset_record
from assomem_gpu.encode import make_encoder
from assomem_gpu.eval.__main__ import parse_args
from assomem_gpu.metrics import mean_by_type, utterance_metrics
from assomem_gpu.fusion import calibrate_fusion, fuse
from assomem_gpu.retrieve import EmbeddedDataset

KS = (1, 3, 5, 6, 10)


def _z(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-12 else np.zeros_like(x)


def _per_session(session: np.ndarray, values: np.ndarray, reduce) -> np.ndarray:
    """Each entry's session's ``reduce`` of ``values`` (over the entries of that session)."""
    out = np.empty(len(values))
    for s in np.unique(session):
        at = session == s
        out[at] = reduce(values[at])
    return out


def variants(data: EmbeddedDataset, signals: list[str]) -> dict:
    """name -> f(question, features) -> the column (z-scored over the candidates)."""
    offsets = data.dataset.bank.offset_array
    emb = data.utterances
    rel, lex = signals.index("relevance"), signals.index("lexical")

    def session_of(rows):
        return np.searchsorted(offsets, rows, side="right") - 1

    def over(reduce, column=None):
        def f(q, feat):
            values = emb[feat.candidates] @ data.questions[q] if column is None else column(feat)
            return _z(_per_session(session_of(feat.candidates), values, reduce))
        return f

    def scored_max(q, feat):  # over every utterance the question's relevance scored, candidates or not
        rows = np.concatenate([feat.candidates, feat.rest])
        values = np.concatenate([emb[feat.candidates] @ data.questions[q], feat.rest_relevance])
        best = {}
        for s, v in zip(session_of(rows), values):
            best[s] = max(best.get(s, -np.inf), v)
        return _z(np.array([best[s] for s in session_of(feat.candidates)]))

    def feedback(m):  # Rocchio: the question moved towards the mean of its m best candidates by relevance + BM25
        def f(q, feat):
            top = np.argsort(-(feat.scores[:, rel] + feat.scores[:, lex]), kind="stable")[:m]
            centre = emb[feat.candidates[top]].mean(axis=0)
            moved = data.questions[q] + centre / max(np.linalg.norm(centre), 1e-9)
            return _z(emb[feat.candidates] @ (moved / np.linalg.norm(moved)))
        return f

    return {
        "session max (the session signal)": over(np.max),
        "session max over every scored utterance": scored_max,
        "session mean of the two best": over(lambda v: np.sort(v)[-2:].mean()),
        "session mean": over(np.mean),
        "session max BM25": over(np.max, lambda feat: feat.scores[:, lex]),
        "session max relevance + BM25 z": over(np.max, lambda feat: feat.scores[:, rel] + feat.scores[:, lex]),
        **{f"pseudo-relevance feedback, top {m}": feedback(m) for m in (3, 5, 10)},
    }


def cross_validated(data, method, questions, feats, signals, folds, backend) -> dict[str, float]:
    """Mean R@k (percent) of the questions with evidence, each fold fused with weights fitted on the others."""
    ds, cfg = data.dataset, method.config
    by_q = dict(zip(questions, feats))
    ranked = {}
    for fold in folds:
        held = set(fold.tolist())
        train = [q for q in questions if q not in held and len(ds.questions[q].evidence)]
        model = calibrate_fusion(signals, [ds.questions[q].type for q in train], [by_q[q] for q in train],
                                 [np.asarray(ds.questions[q].evidence) for q in train], data.questions[train], cfg,
                                 backend, [ds.questions[q].memory for q in train])
        out = fuse([by_q[q] for q in fold], data.questions[fold], model, cfg.temperature, 100, backend)
        ranked.update(zip(fold.tolist(), [r.rows for r in out]))
    return recall(ranked, ds, questions)


def recall(ranked: dict, ds, questions) -> dict[str, float]:
    """Mean R@k (percent) of ``ranked`` (question -> bank rows) over the questions with evidence, as the eval CLI
    averages."""
    mean = mean_by_type((None, utterance_metrics(ranked[q], np.asarray(ds.questions[q].evidence), KS))
                        for q in questions if len(ds.questions[q].evidence))["all"]
    return {f"R@{k}": round(100 * mean[f"R@{k}"], 2) for k in KS}


def features(options: list[str]):
    """(eval options, embedded dataset, the assomem method, every question's features, the CLI's folds) for the
    eval CLI's ``options`` (``--dataset`` ...)."""
    args = parse_args(["--method", "assomem", "--quiet", *options])
    ds = dataset_from_options(args)
    encoder = make_encoder(args.encoder)
    encoder.progress = False
    data = EmbeddedDataset.build(ds, encoder)
    method = build_methods(args, encoder, get_backend("cpu"))[0]
    questions = list(range(len(ds.questions)))
    feats = compute_features(method, data, questions, progress=False)
    return args, data, method, feats, folds_of(data, questions, args.folds, args.seed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output", help="JSON file for the figures")
    own, rest = p.parse_known_args()
    args, data, method, feats, folds = features(["--no-session", *rest])
    signals, questions, backend = list(method.config.signals), list(range(len(feats))), get_backend("cpu")
    figures = {"none (--no-session)": cross_validated(data, method, questions, feats, signals, folds, backend)}
    for name, column in variants(data, signals).items():
        extra = [replace(f, scores=np.column_stack([f.scores, column(q, f)]), active=np.append(f.active, True))
                 for q, f in zip(questions, feats)]
        figures[name] = cross_validated(data, method, questions, extra, signals + ["variant"], folds, backend)
    report(figures, args, own.output)
    return 0


def report(figures: dict[str, dict[str, float]], args, output: str | None) -> None:
    """Print each variant's R@k and, with ``output``, write them with the dataset options as JSON."""
    for name, row in figures.items():
        print(f"{name:45s} " + "  ".join(f"{k} {v:6.2f}" for k, v in row.items()))
    if output:
        Path(output).write_text(json.dumps({**dataset_record(args), "figures": figures}, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
