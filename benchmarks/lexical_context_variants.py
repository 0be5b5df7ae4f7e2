"""Forms of the lexical context signal, scored as the eval CLI scores the engine: each question's features once
(the config the options give, without the lexical context signal), a variant's column added to them, and the fusion
cross-validated with the CLI's folds (``signal_variants.py``'s harness). With no column it gives the CLI's
``--no-lexical-context`` figures (with the same options) to the digit.

    python benchmarks/lexical_context_variants.py --dataset SPEC [--haystack-sessions N --limit N] [--output FILE.json]

How the lexical context signal (``signals/lexical_context.py``) was chosen: R@k of each variant on the three dev sets
(docs/results-history.md, "Lexical context"). A variant reads the BM25 scores of every turn of the question's memory
(one ``BM25Index`` per memory, as the engine's) and gives each candidate a value from its session's turns around it.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from signal_variants import _z, cross_validated, features, report
from assomem_gpu.backend import get_backend
from assomem_gpu.signals.lexical import BM25Index


def variants() -> dict:
    """name -> f(bm25 (n_utt,), session (n_utt,), candidates (local rows)) -> the column (z-scored)."""
    def around(steps, reduce):
        def f(bm25, session, cand):
            out = np.zeros(len(cand))
            for c, i in enumerate(cand):
                near = [i + d for d in steps if 0 <= i + d < len(session) and session[i + d] == session[i]]
                out[c] = reduce([bm25[j] for j in near]) if near else 0.0
            return _z(out)
        return f

    return {
        "best BM25 of the turns within 1": around((-1, 1), max),
        "best BM25 of the turns within 2": around((-2, -1, 1, 2), max),
        "best BM25 of the turns within 3": around((-3, -2, -1, 1, 2, 3), max),
        "mean BM25 of the turns within 2": around((-2, -1, 1, 2), np.mean),
        "BM25 of the turn before (the signal)": around((-1,), max),
        "BM25 of the turn after": around((1,), max),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output", help="JSON file for the figures")
    own, rest = p.parse_known_args()
    args, data, method, feats, folds = features(["--no-lexical-context", *rest])
    ds, backend = data.dataset, get_backend("cpu")
    signals, questions = list(method.config.signals), list(range(len(feats)))
    scored = {}  # question -> (the memory's BM25 scores, its session of each turn, the candidates' local rows)
    utt_session = ds.bank.utt_session()
    for memory in sorted({q.memory for q in ds.questions}):
        rows = ds.memory_utterances(memory)
        group = [q for q in questions if ds.questions[q].memory == memory]
        bm25 = BM25Index(ds.bank.encoded_texts(rows)).scores([ds.questions[q].text for q in group])
        local, session = {r: i for i, r in enumerate(rows)}, utt_session[rows]
        for q, s in zip(group, bm25):
            scored[q] = s, session, np.asarray([local[r] for r in feats[q].candidates], np.int64)
    figures = {"none (--no-lexical-context)": cross_validated(data, method, questions, feats, signals, folds, backend)}
    for name, column in variants().items():
        extra = [replace(f, scores=np.column_stack([f.scores, column(*scored[q])]), active=np.append(f.active, True))
                 for q, f in zip(questions, feats)]
        figures[name] = cross_validated(data, method, questions, extra, signals + ["variant"], folds, backend)
    report(figures, args, own.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
