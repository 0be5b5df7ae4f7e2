"""How many sentences an utterance keeps (``sentences.MAX_SENTENCES``), scored as the eval CLI scores the engine:
each question's features once without sentence passages (``--no-sentences``), then its candidates' relevance
replaced by their best passage's (the larger of the utterance's own cosine and its first N sentences'), and the
fusion cross-validated with the CLI's folds. With no replacement it gives the CLI's ``--no-sentences`` figures.

    python benchmarks/sentence_caps.py --dataset SPEC [--caps 4 8 12 32] [--output FILE.json]

The session signal keeps the utterances' own cosines here (the engine gives it the passages' relevance too).
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from signal_variants import _z, cross_validated, features, report

from assomem_gpu.backend import get_backend
from assomem_gpu.encode import prompted
from assomem_gpu.sentences import sentence_texts, starts_of


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--caps", type=int, nargs="+", default=[4, 8, 12, 32])
    p.add_argument("--output", help="JSON file for the figures")
    own, rest = p.parse_known_args()
    args, data, method, feats, folds = features(["--no-sentences", *rest])
    signals, questions, backend = list(method.config.signals), list(range(len(feats))), get_backend("cpu")
    rel, ds, encoder = signals.index("relevance"), data.dataset, method.encoder
    rows = np.unique(np.concatenate([f.candidates for f in feats]))  # only the candidates' sentences are read
    figures = {"none (--no-sentences)": cross_validated(data, method, questions, feats, signals, folds, backend)}
    for cap in own.caps:
        texts, counts = sentence_texts([ds.bank.utt_speakers[r] for r in rows], [ds.bank.utt_texts[r] for r in rows],
                                       cap)
        vectors = encoder.encode(prompted(encoder, "passage", texts))
        starts, at = starts_of(counts), {int(r): i for i, r in enumerate(rows)}

        def best(q, f):
            col = data.utterances[f.candidates] @ data.questions[q]
            for i, r in enumerate(f.candidates):
                j = at[int(r)]
                if counts[j]:
                    col[i] = max(col[i], float((vectors[starts[j] : starts[j] + counts[j]] @ data.questions[q]).max()))
            return _z(col)

        scored = []
        for q, f in zip(questions, feats):
            s = f.scores.copy()
            s[:, rel] = best(q, f)
            scored.append(replace(f, scores=s))
        figures[f"first {cap} sentences"] = cross_validated(data, method, questions, scored, signals, folds, backend)
    report(figures, args, own.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
