"""Hyper-parameter sweep of AssoMem on labelled dev data, scored by cross-validated R@10 (and R@6).

    python benchmarks/sweep.py --dataset longmemeval:../shared/data/longmemeval/longmemeval_s_dev.json.gz \
        --dataset meetingqa:../shared/data/meetingqa/meeting_qa_raw.json --output benchmarks/results/sweep.json

Graph/candidate parameters (δ, γ, K, d) change the features and are computed once per setting; fusion parameters
(T, T_w fixed or chosen by calibration among ``WEIGHT_TEMPERATURES``, bin edges) reuse them. The default chosen is
the setting with the best mean R@10 over all datasets given, so no dataset gets its own defaults.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from assomem_gpu.assomem import AssoMem
from assomem_gpu.config import WEIGHT_TEMPERATURES, AssoMemConfig
from assomem_gpu.calibrate import compute_features, folds_of
from assomem_gpu.data import load_dataset
from assomem_gpu.encode import make_encoder
from assomem_gpu.metrics import utterance_metrics
from assomem_gpu.graph import GraphConfig
from assomem_gpu.retrieve import EmbeddedDataset

GRAPH_GRID = {"top_clues": [5, 10], "delta": [0.7, 0.8], "gamma": [0.6, 0.7], "damping": [0.5, 0.85]}
FUSION_GRID = {"temperature": [1.0, 2.0, 4.0], "weight_temperatures": [(0.05,), (0.1,), (0.2,), WEIGHT_TEMPERATURES],
               "bin_edges": [(0.9, 0.99), (0.5, 0.9)]}


def cv_scores(method: AssoMem, data: EmbeddedDataset, qs: list[int], feats, folds: int) -> dict[str, float]:
    by_q = dict(zip(qs, feats))
    ranked = {}
    for fold in folds_of(data, qs, folds):
        held = set(fold.tolist())
        train = [q for q in qs if q not in held]
        model = method.fit(data, train, [by_q[q] for q in train])
        ranked.update(zip(fold.tolist(), method.fuse([by_q[q] for q in fold], data.questions[fold], model, 10)))
    ms = [utterance_metrics(ranked[q], data.dataset.questions[q].evidence, (6, 10)) for q in qs]
    return {k: float(np.mean([m[k] for m in ms])) for k in ("R@6", "R@10")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", action="append", required=True)
    p.add_argument("--limit", type=int)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--output", default="benchmarks/results/sweep.json")
    args = p.parse_args()
    encoder = make_encoder()
    encoder.progress = False
    rows = []
    for spec in args.dataset:
        data = EmbeddedDataset.build(load_dataset(spec, limit=args.limit), encoder)
        qs = [i for i, q in enumerate(data.dataset.questions) if len(q.evidence)]
        for values in itertools.product(*GRAPH_GRID.values()):
            g = dict(zip(GRAPH_GRID, values))
            base = AssoMemConfig(graph=GraphConfig(delta=g["delta"], gamma=g["gamma"]), top_clues=g["top_clues"],
                                 damping=g["damping"])
            method = AssoMem(base, encoder=encoder)
            t0 = time.perf_counter()
            feats = compute_features(method, data, qs, progress=False)
            feat_s = time.perf_counter() - t0
            for fvalues in itertools.product(*FUSION_GRID.values()):
                f = dict(zip(FUSION_GRID, fvalues))
                method.config = replace(base, **f)
                score = cv_scores(method, data, qs, feats, args.folds)
                rows.append({"dataset": spec.split(":", 1)[0], **g, **{k: list(v) if isinstance(v, tuple) else v
                                                                        for k, v in f.items()}, **score})
                print(json.dumps({**rows[-1], "features_s": round(feat_s, 1)}), flush=True)
    keys = [*GRAPH_GRID, *FUSION_GRID]
    settings: dict[str, list[dict]] = {}
    for r in rows:
        settings.setdefault(json.dumps([r[k] for k in keys]), []).append(r)
    complete = {k: v for k, v in settings.items() if len(v) == len(args.dataset)}
    best_key = max(complete, key=lambda k: np.mean([r["R@10"] for r in complete[k]]))
    best = {"setting": dict(zip(keys, json.loads(best_key))),
            "per_dataset": {r["dataset"]: {"R@6": r["R@6"], "R@10": r["R@10"]} for r in complete[best_key]}}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"grid": {"graph": GRAPH_GRID, "fusion": FUSION_GRID}, "folds": args.folds,
                                             "limit": args.limit, "best": best, "rows": rows}, indent=1) + "\n")
    print("best:", json.dumps(best))


if __name__ == "__main__":
    main()
