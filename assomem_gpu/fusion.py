"""Fusion weights from conditional mutual information (paper eq. 3) and the question-type classifier.

For each question type q and signal d, candidates' normalised scores are cut into bins (low / medium / high at
quantile edges, default the median and the 90th percentile: evidence is sparse, so "high" is a top sliver) and paired
with their usefulness label λ (evidence or not); CMI_d(q) = I(bin; λ | type = q). Weights are
softmax(U / T_w) with U = CMI / H(λ | q), the CMI as a share of the label's entropy, so that one temperature suits
types whose evidence rates differ; given several T_w, calibration chooses one by an inner cross-validation on its
questions (``calibrate_fusion``), from sharp weights (one signal per type) to near-equal ones. CMI weighs a signal
by what it tells of the label alone, not by what it adds to the others (nor by which way it points): the same inner
cross-validation leaves out a signal without which its questions rank better (``select_signals``). A type of few
questions measures its CMI on few evidence turns: calibration shrinks it towards the CMI of all the questions
(``AssoMemConfig.type_prior``, in questions; ``fit_fusion``). At inference a
logistic-regression classifier over question embeddings predicts the type, and the weights are the classifier's
probability-weighted mix of the per-type weights, each first renormalised over the question's active signals (so a
signal a question lacks weighs as if the model had been fitted without it).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from .folds import fold_ids
from .metrics import utterance_metrics

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
    left_out: tuple[str, ...] = ()  # signals calibration found to rank worse with than without (``select_signals``):
    # weight 0, as if the question lacked them

    def __post_init__(self):
        self.cmi = np.asarray(self.cmi, np.float64)
        if self.cmi.shape != (len(self.types), len(self.signals)):
            raise ValueError(f"FusionModel.cmi must be (types, signals) = ({len(self.types)}, {len(self.signals)}), "
                             f"got {self.cmi.shape}")
        if not np.isfinite(self.cmi).all():
            raise ValueError("FusionModel.cmi must be finite")
        self.left_out = tuple(self.left_out)
        if set(self.left_out) - set(self.signals) or len(set(self.left_out)) != len(self.left_out) \
                or len(self.left_out) >= len(self.signals):
            raise ValueError(f"FusionModel.left_out must name distinct signals of {self.signals}, not all of them, "
                             f"got {self.left_out}")
        t = self.weight_temperature
        if not (isinstance(t, (int, float, np.floating)) and not isinstance(t, bool) and math.isfinite(t) and t > 0):
            raise ValueError(f"FusionModel.weight_temperature must be finite and > 0, got {t!r}")

    @property
    def type_weights(self) -> np.ndarray:
        """(n_types, n_signals) each type's weights with every signal present (0 for those ``left_out``)."""
        return self._type_softmax(np.ones((1, len(self.signals)), bool))[0]

    @property
    def kept(self) -> np.ndarray:
        """(n_signals,) whether each signal is weighed (not ``left_out``)."""
        return np.array([s not in self.left_out for s in self.signals], bool)

    def _type_softmax(self, active: np.ndarray) -> np.ndarray:
        """(B, n_types, n_signals) each type's softmax of its CMI / T_w over each question's ``active`` (B,
        n_signals) signals alone, less those ``left_out`` (taken over those signals, so no type's weights underflow
        to nothing at a small T_w); all 0 for a question with no active signal."""
        z = np.where((active & self.kept)[:, None, :], (self.cmi / self.weight_temperature)[None], -np.inf)
        top = z.max(axis=2, keepdims=True)
        e = np.exp(z - np.where(np.isfinite(top), top, 0.0))
        return e / np.maximum(e.sum(axis=2, keepdims=True), 1e-300)

    def type_probabilities(self, q_emb: np.ndarray) -> np.ndarray:
        if self.coef is None:
            return np.full((len(q_emb), len(self.types)), 1.0 / len(self.types))
        logits = _row_products(q_emb, self.coef) + self.intercept
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True)

    def weights(self, q_emb: np.ndarray, active: np.ndarray) -> np.ndarray:
        """(B, n_signals) weights: each type's softmax over the question's active signals alone, less those
        ``left_out`` (as if fitted without the others; ``_type_softmax``), then mixed by the type probabilities."""
        w = (self.type_probabilities(q_emb)[:, :, None] * self._type_softmax(active)).sum(axis=1)
        return w / np.maximum(w.sum(axis=1, keepdims=True), 1e-12)  # (the float32 probabilities sum to 1 ± 1e-7)

    def to_json(self) -> dict:
        out = {"signals": self.signals, "types": self.types, "cmi": self.cmi.tolist(),
               "weights": self.type_weights.tolist(), "weight_temperature": self.weight_temperature,
               "left_out": list(self.left_out)}
        if self.coef is not None:
            out["classifier"] = {"coef": self.coef.tolist(), "intercept": self.intercept.tolist()}
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "FusionModel":
        clf = obj.get("classifier")
        return cls(list(obj["signals"]), list(obj["types"]), np.asarray(obj["cmi"], dtype=np.float64),
                   float(obj["weight_temperature"]),
                   None if clf is None else np.asarray(clf["coef"], dtype=np.float32),
                   None if clf is None else np.asarray(clf["intercept"], dtype=np.float32),
                   tuple(obj.get("left_out", ())))  # (weights saved before signal selection weigh every signal)


def _row_products(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T`` with each row of the result the same bits in any batch (a BLAS product's are not: it picks its
    kernels by the shape), so that a question's weights do not depend on the questions beside it."""
    return (a[:, None, :] * b[None, :, :]).sum(axis=2)


def fixed_weights(signals: Sequence[str]) -> FusionModel:
    """Equal weights for every signal: the ablation without weight assignment."""
    return FusionModel(list(signals), [UNTYPED], np.zeros((1, len(signals))), 1.0)


def fit_fusion(signals: Sequence[str], types: Sequence[str | None], scores: Sequence[np.ndarray],
               labels: Sequence[np.ndarray], active: Sequence[np.ndarray], q_emb: np.ndarray,
               bin_edges: Sequence[float], weight_temperature: float, type_prior: float = 0.0) -> FusionModel:
    """CMI weights per type from calibration questions, and the type classifier over their embeddings.

    ``type_prior`` (questions, ≥ 0): each type's CMI is shrunk towards the CMI of all the questions as if that many
    questions had measured the latter, (n·CMI_type + prior·CMI_all) / (n + prior) for a type of n questions: a type
    with a handful of questions (bins of a few evidence turns) takes most of its weights from the whole set, one with
    hundreds keeps its own. 0 (the default here; ``calibrate_fusion`` passes ``AssoMemConfig.type_prior``): each
    type's own CMI."""
    if len(types) == 0:
        raise ValueError("no calibration question has evidence: the fusion weights cannot be fitted")
    names = [t if t is not None else UNTYPED for t in types]
    kinds = sorted(set(names))
    cmi = np.stack([conditional_mi([scores[i] for i in range(len(names)) if names[i] == t],
                                   [labels[i] for i in range(len(names)) if names[i] == t],
                                   [active[i] for i in range(len(names)) if names[i] == t], bin_edges) for t in kinds])
    coef = intercept = None
    if len(kinds) > 1:
        if type_prior > 0:
            n = np.array([names.count(t) for t in kinds], np.float64)[:, None]
            cmi = (n * cmi + type_prior * conditional_mi(scores, labels, active, bin_edges)) / (n + type_prior)
        from sklearn.linear_model import LogisticRegression

        clf = LogisticRegression(max_iter=2000, C=4.0).fit(q_emb, names)
        c, b = clf.coef_, clf.intercept_
        if len(clf.classes_) == 2:  # binary: p(class 1) = sigmoid(w·x + b) = softmax([0, w·x + b])[1]
            c, b = np.vstack([np.zeros_like(c), c]), np.concatenate([[0.0], b])
        order = [list(clf.classes_).index(t) for t in kinds]
        coef, intercept = c[order].astype(np.float32), b[order].astype(np.float32)
    return FusionModel(list(signals), kinds, cmi, weight_temperature, coef, intercept)


INNER_FOLDS = 5  # of the cross-validation that chooses T_w and the signals
SELECTION_P = 0.05  # a signal is left out where leaving it out ranks the inner folds' questions better, by a sign test
# over the questions it moves at this level (two-sided)


def calibrate_fusion(signals: Sequence[str], types: Sequence[str | None], feats: Sequence,
                     evidence: Sequence[np.ndarray], q_emb: np.ndarray, config, backend,
                     memories: Sequence | None = None, seed: int = 0) -> FusionModel:
    """The fusion fitted on labelled questions (``fit_fusion``), at the weight temperature among
    ``config.weight_temperatures`` whose weights, fitted on the other inner folds, rank each inner fold's questions
    best (mean nDCG@10; ties go to the sharper T_w), and with ``config.select_signals`` less the signals that rank
    them worse than none (``select_signals``). The inner folds are ``INNER_FOLDS`` (fewer with fewer questions)
    seeded folds (``folds.fold_ids``: whole memories where there are as many, else the questions themselves); with
    fewer than two questions T_w is the first (the sharpest) and every signal weighs.

    ``feats`` (``scoring.Features``) and ``evidence`` (utterance rows) are per question, in ``feats``' rows;
    ``q_emb`` the questions' embeddings; ``memories`` each question's memory (None: all one memory's); ``config`` an
    ``AssoMemConfig`` (its bin edges, temperatures, type prior, signal selection); ``signals`` name ``feats``' score
    columns.
    """
    def fitted(qs, weight_temperature):
        return fit_fusion(list(signals), [types[i] for i in qs], [feats[i].scores for i in qs],
                          [np.isin(feats[i].candidates, evidence[i]) for i in qs], [feats[i].active for i in qs],
                          q_emb[qs], config.bin_edges, weight_temperature, config.type_prior)

    temperatures = config.weight_temperatures
    model = fitted(list(range(len(types))), temperatures[0])
    k = min(INNER_FOLDS, len(types))
    if k < 2 or (len(temperatures) == 1 and not config.select_signals):
        return model
    fold = fold_ids(np.zeros(len(types)) if memories is None else memories, k, seed)
    inner = [(np.flatnonzero(fold == f), fitted(np.flatnonzero(fold != f).tolist(), temperatures[0]))
             for f in range(k)]

    def ndcg(weight_temperature: float, left_out: tuple[str, ...]) -> np.ndarray:
        """(n,) each question's nDCG@10 ranked with the weights of the inner folds it is not in."""
        out = np.zeros(len(types))
        for held, m in inner:
            ranked = fuse([feats[i] for i in held], q_emb[held],
                          replace(m, weight_temperature=weight_temperature, left_out=left_out), config.temperature,
                          10, backend)
            out[held] = [utterance_metrics(r.rows, evidence[i], (10,))["nDCG@10"] for r, i in zip(ranked, held)]
        return out

    def sharpest_best(left_out: tuple[str, ...]) -> tuple[float, np.ndarray]:
        """The T_w whose weights rank best without ``left_out``, and each question's nDCG@10 at it."""
        scores = [ndcg(t, left_out) for t in temperatures]
        best = max(range(len(temperatures)), key=lambda t: (scores[t].sum(), -temperatures[t]))
        return temperatures[best], scores[best]

    weight_temperature, base = sharpest_best(())
    left_out = select_signals(signals, lambda out: ndcg(weight_temperature, out), base) \
        if config.select_signals else ()
    if left_out:  # the weights of fewer signals may rank best at another T_w
        weight_temperature, _ = sharpest_best(left_out)
    return replace(model, weight_temperature=weight_temperature, left_out=left_out)


def select_signals(signals: Sequence[str], ndcg, base: np.ndarray) -> tuple[str, ...]:
    """The signals to leave out, by backward elimination: while leaving out one more ranks the inner folds'
    questions better (more gain nDCG@10 than lose it, sign test p < ``SELECTION_P``), the one of smallest p goes.
    Relevance always stays (the rest of a ranking follows it). ``ndcg(left_out)`` gives each question's nDCG@10
    without ``left_out``; ``base`` it without none."""
    from scipy.stats import binomtest

    left_out: tuple[str, ...] = ()
    while True:
        best = None
        for s in signals:
            if s == "relevance" or s in left_out or len(left_out) + 2 > len(signals):
                continue
            trial = ndcg(left_out + (s,))
            better, worse = int((trial > base).sum()), int((trial < base).sum())
            p = binomtest(better, better + worse, 0.5).pvalue if better > worse else 1.0
            if p < SELECTION_P and (best is None or p < best[0]):
                best = (p, s, trial)
        if best is None:
            return left_out
        left_out, base = left_out + (best[1],), best[2]


def restrict(model: FusionModel, signals: Sequence[str]) -> FusionModel:
    """``model`` limited to ``signals`` (a subset of its own, e.g. for an ablation)."""
    missing = [s for s in signals if s not in model.signals]
    if missing:
        raise ValueError(f"the fusion weights have no weight for {missing}")
    keep = [model.signals.index(s) for s in signals]
    return replace(model, signals=list(signals), cmi=model.cmi[:, keep],
                   left_out=tuple(s for s in model.left_out if s in signals))


DEFAULT_WEIGHTS = "weights/default.json"  # package data; how it was made: assomem_gpu/weights/README.md


def default_fusion(signals: Sequence[str], encoder_name: str | None) -> FusionModel:
    """The shipped weights (calibrated on the LongMemEval_S dev half), limited to ``signals``. Their question-type
    classifier reads the embeddings of the encoder they were calibrated with; with another encoder every type
    counts equally."""
    from importlib.resources import files

    obj = json.loads(files("assomem_gpu").joinpath(DEFAULT_WEIGHTS).read_text(encoding="utf-8"))
    return restrict(_read_by(FusionModel.from_json(obj["fusion"]), obj.get("encoder"), encoder_name), signals)


def _read_by(model: FusionModel, calibrated_with: str | None, encoder_name: str | None) -> FusionModel:
    """``model`` for questions embedded by ``encoder_name``: without its type classifier (every type counts equally)
    where it was calibrated with another encoder, whose embeddings the classifier read."""
    return model if calibrated_with == encoder_name else replace(model, coef=None, intercept=None)


def save_weights(path: str | Path, model: FusionModel, config: dict, encoder: str | None = None) -> None:
    """Weights with the config and the encoder (its ``name``) they were calibrated with."""
    Path(path).write_text(json.dumps({"fusion": model.to_json(), "config": config, "encoder": encoder}, indent=1) + "\n")


def load_weights(path: str | Path, encoder_name: str | None = None) -> tuple[FusionModel, dict]:
    """The fusion model and the config saved in a weights file; with ``encoder_name`` (the encoder the questions will
    be embedded by), without its type classifier where the file was calibrated with another (as ``default_fusion``)."""
    try:
        obj = json.loads(Path(path).read_text())
        model, config = FusionModel.from_json(obj["fusion"]), obj.get("config", {})
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a weights file written by python -m assomem_gpu.calibrate ({exc})") from exc
    return (model if encoder_name is None else _read_by(model, obj.get("encoder"), encoder_name)), config


@dataclass
class Ranking:
    """One question's ranking: utterance rows best first; the first ``len(scores)`` were ranked by their fused score
    (eq. 4, the fused top-K kernel), the others follow by relevance."""

    rows: np.ndarray
    scores: np.ndarray  # float64 fused scores of rows[: len(scores)]
    weights: np.ndarray  # (n_signals,) the weights the question's signals were fused with
    shares: np.ndarray | None = None  # (len(scores), n_signals) each signal's part of each fused score, if asked


def rank(scored, q_emb: np.ndarray, model: FusionModel, temperature: float, depth: int, backend,
         shares: bool = False) -> list[Ranking]:
    """Rankings of a scored batch (``scoring.Scored``) with ``model``'s weights, on the backend's arrays: the fused
    score + top-K kernel ranks the best ``min(depth, MAX_K)`` candidates, the other candidates follow by relevance,
    then the rest of the memory by relevance (with a probed relevance, the rest of the question's probed lists; the
    whole memory for a question whose lists hold fewer than ``depth``). ``depth`` rows at most; ``shares``: each
    signal's part of each fused score (``contributions``). The rankings come to the host in one copy at the end."""
    from .kernels.fused_topk import MAX_K

    xp = backend.xp
    weights = model.weights(q_emb, backend.to_host(scored.active))
    cand, counts, z = scored.candidates, scored.counts, scored.signals
    if cand.shape[1] == 0:  # no question has a candidate: one padding column keeps the gathers simple
        cand, z = xp.full((len(cand), 1), -1, np.int64), xp.zeros((len(cand), 1, z.shape[2]))
    n_b, width = cand.shape
    k = min(depth, MAX_K)
    z32 = z.astype(np.float32)
    top, fused, maxes, sums = backend.fused_topk(z32, counts, backend.asarray(weights, np.float32), temperature, k)
    n = xp.minimum(counts, k)
    head_ok = xp.arange(k) < n[:, None]
    head = xp.where(head_ok, xp.take_along_axis(cand, xp.maximum(top, 0), axis=1), -1)
    rows = head[:, :depth]
    if depth > k or bool((counts < depth).any()):  # what follows the fused candidates
        valid = xp.arange(width) < counts[:, None]
        fused_mask = ((xp.arange(width) == top[:, :, None]) & head_ok[:, :, None]).any(axis=1)
        rel = model.signals.index("relevance") if "relevance" in model.signals else 0
        key = xp.where(valid & ~fused_mask, z[:, :, rel], -np.inf)  # z-scored relevance: the same order
        others = backend.top_k(key, min(depth, width))
        tail_key, tail_rows = scored.relevance, scored.relevance_rows
        if tail_rows is not None and scored.everything is not None:
            short = (tail_rows >= 0).sum(axis=1) < depth  # a ranking past what the question's probes reached
            if bool(short.any()):  # those questions rank every utterance; the others their probed ones, by row
                whole = scored.everything()
                probed = xp.full(whole.shape, -np.inf, np.float32)
                seen = tail_rows >= 0
                probed[xp.nonzero(seen)[0], tail_rows[seen]] = tail_key[seen]
                tail_key, tail_rows = xp.where(short[:, None], whole, probed), None
        if tail_rows is None:  # its columns are the utterance rows: leave the candidates out
            taken = xp.zeros(tail_key.shape, bool)
            taken[xp.nonzero(valid)[0], cand[valid]] = True
        else:  # leave out the rows that are candidates: a sorted search of question · n + row among theirs
            span = max(int(cand.max()) if cand.size else 0, int(tail_rows.max()) if tail_rows.size else 0) + 2
            keys = (xp.arange(n_b)[:, None] * span + cand)[valid]  # ascending: candidates are, per question
            want = xp.arange(n_b)[:, None] * span + tail_rows
            pos = xp.minimum(xp.searchsorted(keys, want), max(len(keys) - 1, 0))
            taken = keys[pos] == want if len(keys) else xp.zeros(want.shape, bool)
        tail_key = xp.where(taken, -np.inf, tail_key)
        tail = backend.top_k(tail_key, min(depth, tail_key.shape[1]))
        tail_rows = tail if tail_rows is None else xp.take_along_axis(tail_rows, tail, axis=1)
        every = xp.concatenate([head, xp.take_along_axis(cand, others, axis=1), tail_rows], axis=1)
        ok = xp.concatenate([head_ok, xp.take_along_axis(key, others, axis=1) > -np.inf,
                             xp.take_along_axis(tail_key, tail, axis=1) > -np.inf], axis=1)
        first = xp.argsort(~ok, axis=1, kind="stable")[:, :depth]  # the valid ones, in order
        rows = xp.where(xp.take_along_axis(ok, first, axis=1), xp.take_along_axis(every, first, axis=1), -1)
    parts = None
    if shares:
        at = xp.take_along_axis(z32, xp.maximum(top, 0)[:, :, None], axis=1)
        parts = backend.to_host(contributions(at, head_ok, backend.asarray(weights), maxes, sums, temperature, xp))
    rows, fused, n = backend.to_host(rows), backend.to_host(fused), backend.to_host(n)
    return [Ranking(rows[b][rows[b] >= 0], fused[b, : n[b]], weights[b], None if parts is None else parts[b, : n[b]])
            for b in range(n_b)]


def fuse(feats: Sequence, q_emb: np.ndarray, model: FusionModel, temperature: float, depth: int,
         backend) -> list[Ranking]:
    """``rank`` for questions held as per-question features (``scoring.Features``, e.g. from several memories, in
    cross-validation): padded into one batch on the host."""
    from .scoring import Scored

    if not feats:
        return []
    counts = np.array([len(f.candidates) for f in feats])
    width, rest = max(int(counts.max()), 1), max(max(len(f.rest) for f in feats), 1)
    cand = np.full((len(feats), width), -1, np.int64)
    z = np.zeros((len(feats), width, len(model.signals)))
    rel = np.full((len(feats), rest), -np.inf, np.float32)
    rel_rows = np.full((len(feats), rest), -1, np.int64)
    for b, f in enumerate(feats):
        cand[b, : counts[b]], z[b, : counts[b]] = f.candidates, f.scores
        rel[b, : len(f.rest)], rel_rows[b, : len(f.rest)] = f.rest_relevance, f.rest
    parts = (cand, counts, z, np.stack([f.active for f in feats]), rel, rel_rows)
    return rank(Scored(*(backend.asarray(x) for x in parts)), q_emb, model, temperature, depth, backend)


def contributions(z, valid, weights, maxes, sums, temperature: float, xp=np):
    """Each signal's share of eq. 4 for the candidates ``z`` (B, K, n_signals): w_d · exp((z_cd − max_d) / T) /
    sum_d, with each signal's max and sum of exponentials over the question's candidates (``fused_topk``'s); (B, K,
    n_signals), summing over signals to the fused scores (0 where ``valid`` (B, K) is False)."""
    e = xp.exp((z - xp.where(maxes > -np.inf, maxes, 0.0)[:, None, :]) / temperature)
    part = weights[:, None, :] * e / xp.maximum(sums, 1e-300)[:, None, :]
    return xp.where(valid[:, :, None], part, 0.0)
