"""Fusion weights from conditional mutual information (paper eq. 3) and the question-type classifier.

For each question type q and signal d, candidates' normalised scores are cut into bins (low / medium / high at
quantile edges, default the median and the 90th percentile: evidence is sparse, so "high" is a top sliver) and paired
with their usefulness label λ (evidence or not); CMI_d(q) = I(bin; λ | type = q). Weights are
softmax(U / T_w) with U = CMI / H(λ | q), the CMI as a share of the label's entropy, so that one temperature suits
types whose evidence rates differ. At inference a logistic-regression classifier over question embeddings predicts the
type, and the weights are the classifier's probability-weighted mix of the per-type weights.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

UNTYPED = "all"  # the one type of questions whose data carries none


def mutual_information(bins: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    """I(bin; label) in nats from paired samples."""
    if len(bins) == 0:
        return 0.0
    joint = np.zeros((n_bins, 2))
    np.add.at(joint, (bins, labels.astype(int)), 1.0)
    joint /= joint.sum()
    pb, pl = joint.sum(axis=1, keepdims=True), joint.sum(axis=0, keepdims=True)
    nz = joint > 0
    return float((joint[nz] * np.log(joint[nz] / (pb @ pl)[nz])).sum())


def quantile_bins(values: np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """Bin of each value, cut at the given quantiles of the values themselves (a value equal to an edge goes up)."""
    if len(values) == 0:
        return np.zeros(0, np.int64)
    return np.searchsorted(np.quantile(values, edges), values, side="right").astype(np.int64)


def entropy(labels: np.ndarray) -> float:
    p = float(np.mean(labels)) if len(labels) else 0.0
    return 0.0 if p in (0.0, 1.0) else -(p * np.log(p) + (1 - p) * np.log(1 - p))


def conditional_mi(scores: Sequence[np.ndarray], labels: Sequence[np.ndarray], active: Sequence[np.ndarray],
                   edges: Sequence[float]) -> np.ndarray:
    """CMI of each signal for one question type, normalised by the label entropy (see the module docstring).

    ``scores[i]`` (n_cand_i, n_signals) and ``labels[i]`` (n_cand_i,) of the type's question i; ``active[i]``
    (n_signals,) says which signals the question has (a question without temporal intent has no temporal score).
    """
    n_sig = scores[0].shape[1] if scores else 0
    out = np.zeros(n_sig)
    for d in range(n_sig):
        used = [i for i in range(len(scores)) if active[i][d]]
        if not used:
            continue
        values = np.concatenate([scores[i][:, d] for i in used])
        lab = np.concatenate([labels[i] for i in used])
        h = entropy(lab)
        out[d] = mutual_information(quantile_bins(values, edges), lab, len(edges) + 1) / h if h > 0 else 0.0
    return out


@dataclass
class FusionModel:
    """Per-type signal weights and the classifier that predicts a question's type."""

    signals: list[str]
    types: list[str]
    cmi: np.ndarray  # (n_types, n_signals), normalised by H(λ | type)
    weight_temperature: float
    coef: np.ndarray | None = None  # logistic regression over question embeddings, classes = types
    intercept: np.ndarray | None = None

    @property
    def type_weights(self) -> np.ndarray:
        z = self.cmi / self.weight_temperature
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    def type_probabilities(self, q_emb: np.ndarray) -> np.ndarray:
        if self.coef is None:
            return np.full((len(q_emb), len(self.types)), 1.0 / len(self.types))
        logits = q_emb @ self.coef.T + self.intercept
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True)

    def weights(self, q_emb: np.ndarray, active: np.ndarray) -> np.ndarray:
        """(B, n_signals) weights: the type-probability mix, renormalised over each question's active signals."""
        w = (self.type_probabilities(q_emb) @ self.type_weights) * active
        return w / np.maximum(w.sum(axis=1, keepdims=True), 1e-12)

    def to_json(self) -> dict:
        out = {"signals": self.signals, "types": self.types, "cmi": self.cmi.tolist(),
               "weights": self.type_weights.tolist(), "weight_temperature": self.weight_temperature}
        if self.coef is not None:
            out["classifier"] = {"coef": self.coef.tolist(), "intercept": self.intercept.tolist()}
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "FusionModel":
        clf = obj.get("classifier")
        return cls(list(obj["signals"]), list(obj["types"]), np.asarray(obj["cmi"], dtype=np.float64),
                   float(obj["weight_temperature"]),
                   None if clf is None else np.asarray(clf["coef"], dtype=np.float32),
                   None if clf is None else np.asarray(clf["intercept"], dtype=np.float32))


def fixed_weights(signals: Sequence[str]) -> FusionModel:
    """Equal weights for every signal: the ablation without weight assignment."""
    return FusionModel(list(signals), [UNTYPED], np.zeros((1, len(signals))), 1.0)


def fit_fusion(signals: Sequence[str], types: Sequence[str | None], scores: Sequence[np.ndarray],
               labels: Sequence[np.ndarray], active: Sequence[np.ndarray], q_emb: np.ndarray,
               bin_edges: Sequence[float], weight_temperature: float) -> FusionModel:
    """CMI weights per type from calibration questions, and the type classifier over their embeddings."""
    if len(types) == 0:
        raise ValueError("no calibration question has evidence: the fusion weights cannot be fitted")
    names = [t if t is not None else UNTYPED for t in types]
    kinds = sorted(set(names))
    cmi = np.stack([conditional_mi([scores[i] for i in range(len(names)) if names[i] == t],
                                   [labels[i] for i in range(len(names)) if names[i] == t],
                                   [active[i] for i in range(len(names)) if names[i] == t], bin_edges) for t in kinds])
    coef = intercept = None
    if len(kinds) > 1:
        from sklearn.linear_model import LogisticRegression

        clf = LogisticRegression(max_iter=2000, C=4.0).fit(q_emb, names)
        c, b = clf.coef_, clf.intercept_
        if len(clf.classes_) == 2:  # binary: p(class 1) = sigmoid(w·x + b) = softmax([0, w·x + b])[1]
            c, b = np.vstack([np.zeros_like(c), c]), np.concatenate([[0.0], b])
        order = [list(clf.classes_).index(t) for t in kinds]
        coef, intercept = c[order].astype(np.float32), b[order].astype(np.float32)
    return FusionModel(list(signals), kinds, cmi, weight_temperature, coef, intercept)


def restrict(model: FusionModel, signals: Sequence[str]) -> FusionModel:
    """``model`` limited to ``signals`` (a subset of its own, e.g. for an ablation)."""
    missing = [s for s in signals if s not in model.signals]
    if missing:
        raise ValueError(f"the fusion weights have no weight for {missing}")
    keep = [model.signals.index(s) for s in signals]
    return replace(model, signals=list(signals), cmi=model.cmi[:, keep])


DEFAULT_WEIGHTS = "weights/default.json"  # package data; how it was made: assomem_gpu/weights/README.md


def default_fusion(signals: Sequence[str], encoder_name: str | None) -> FusionModel:
    """The shipped weights (calibrated on the LongMemEval_S dev half), limited to ``signals``. Their question-type
    classifier reads the embeddings of the encoder they were calibrated with; with another encoder every type
    counts equally."""
    from importlib.resources import files

    obj = json.loads(files("assomem_gpu").joinpath(DEFAULT_WEIGHTS).read_text(encoding="utf-8"))
    model = FusionModel.from_json(obj["fusion"])
    if obj.get("encoder") != encoder_name:
        model = replace(model, coef=None, intercept=None)
    return restrict(model, signals)


def save_weights(path: str | Path, model: FusionModel, config: dict, encoder: str | None = None) -> None:
    """Weights with the config and the encoder (its ``name``) they were calibrated with."""
    Path(path).write_text(json.dumps({"fusion": model.to_json(), "config": config, "encoder": encoder}, indent=1) + "\n")


def load_weights(path: str | Path) -> tuple[FusionModel, dict]:
    try:
        obj = json.loads(Path(path).read_text())
        return FusionModel.from_json(obj["fusion"]), obj.get("config", {})
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a weights file written by python -m assomem_gpu.calibrate ({exc})") from exc


@dataclass
class Ranking:
    """One question's ranking: utterance rows best first; the first ``len(scores)`` were ranked by their fused score
    (eq. 4, the fused top-K kernel), the others follow by relevance."""

    rows: np.ndarray
    scores: np.ndarray  # float64 fused scores of rows[: len(scores)]
    weights: np.ndarray  # (n_signals,) the weights the question's signals were fused with


def fuse(feats: Sequence, q_emb: np.ndarray, model: FusionModel, temperature: float, depth: int,
         fused_topk) -> list[Ranking]:
    """Rankings from features (``scoring.Features``) and weights: the fused score + top-K kernel ranks the best
    ``min(depth, MAX_K)`` candidates; the other candidates follow by relevance, then the rest of the memory."""
    from .kernels.fused_topk import MAX_K
    from .retrieve import top_k

    if not feats:
        return []
    signals = model.signals
    weights = model.weights(q_emb, np.stack([f.active for f in feats]))
    counts = np.array([len(f.candidates) for f in feats])
    scores = np.zeros((len(feats), max(int(counts.max()), 1), len(signals)), np.float32)
    for b, f in enumerate(feats):
        scores[b, : len(f.candidates)] = f.scores
    k = min(depth, MAX_K)
    top, fused = fused_topk(scores, counts, weights, temperature, k)
    rel = signals.index("relevance") if "relevance" in signals else 0
    out = []
    for b, f in enumerate(feats):
        n = min(k, counts[b])
        best = top[b, :n]
        others = np.ones(counts[b], bool)
        others[best] = False
        others = np.flatnonzero(others)  # the candidates the kernel did not rank follow by relevance, as needed
        others = others[top_k(f.scores[others, rel][None], min(depth - n, len(others)))[0]]
        head = np.concatenate([f.candidates[best], f.candidates[others]])
        tail = f.rest[top_k(f.rest_relevance[None], min(depth - len(head), len(f.rest)))[0]] \
            if len(head) < depth else f.rest[:0]
        out.append(Ranking(np.concatenate([head, tail]), fused[b, : min(n, depth)], weights[b]))
    return out


def contributions(scores: np.ndarray, weights: np.ndarray, temperature: float) -> np.ndarray:
    """Each signal's share of eq. 4 for every candidate: w_d · softmax_T(z_·d)_c, (n_candidates, n_signals); the
    rows sum to the fused scores."""
    z = np.asarray(scores, np.float64)
    e = np.exp((z - z.max(axis=0, keepdims=True)) / temperature)
    return np.asarray(weights, np.float64) * e / e.sum(axis=0, keepdims=True)
