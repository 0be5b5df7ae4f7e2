import json

import numpy as np
import pytest

from assomem_gpu.backend import get_backend
from assomem_gpu.config import AssoMemConfig
from assomem_gpu.fusion import (FusionModel, calibrate_fusion, conditional_mi, fit_fusion, fixed_weights, fuse,
                                load_weights, mutual_information, quantile_bins, restrict, save_weights, select_signals)
from assomem_gpu.metrics import utterance_metrics
from assomem_gpu.scoring import Features


def test_mutual_information_hand_computed():
    # perfectly informative: bin 1 <=> label 1, p = 1/2 -> I = log 2
    assert mutual_information(np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1]), 2) == pytest.approx(np.log(2))
    assert mutual_information(np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), 2) == pytest.approx(0.0)
    # bins {0: [0, 0, 1], 1: [1]}: I = sum p(b,y) log p(b,y)/(p(b)p(y))
    b, y = np.array([0, 0, 0, 1]), np.array([0, 0, 1, 1])
    expected = 0.5 * np.log(0.5 / (0.75 * 0.5)) + 0.25 * np.log(0.25 / (0.75 * 0.5)) + 0.25 * np.log(0.25 / (0.25 * 0.5))
    assert mutual_information(b, y, 2) == pytest.approx(expected)


def test_quantile_bins():
    assert quantile_bins(np.arange(10.0), (0.5, 0.9)).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1, 2]


def test_informative_signal_gets_the_weight():
    rng = np.random.default_rng(0)
    scores, labels, active = [], [], []
    for _ in range(40):
        lab = np.zeros(50, bool)
        lab[rng.integers(50)] = True
        good = rng.normal(size=50) + 4 * lab
        scores.append(np.stack([good, rng.normal(size=50)], axis=1))
        labels.append(lab)
        active.append(np.array([True, True]))
    cmi = conditional_mi(scores, labels, active, (0.9, 0.99))
    assert cmi[0] > 5 * cmi[1]
    emb = rng.normal(size=(40, 8)).astype(np.float32)
    model = fit_fusion(["good", "noise"], [None] * 40, scores, labels, active, emb, (0.9, 0.99), 0.05)
    w = model.weights(emb[:3], np.ones((3, 2), bool))
    assert np.allclose(w.sum(axis=1), 1) and np.all(w[:, 0] > 0.9)
    assert model.types == ["all"] and model.coef is None


def test_classifier_mixes_type_weights_and_roundtrips(tmp_path):
    rng = np.random.default_rng(1)
    centres = {"a": np.eye(4)[0], "b": np.eye(4)[1]}
    types = ["a"] * 20 + ["b"] * 20
    emb = np.stack([centres[t] + 0.05 * rng.normal(size=4) for t in types]).astype(np.float32)
    scores, labels = [], []
    for t in types:  # signal 0 is informative for type a, signal 1 for type b
        lab = np.zeros(30, bool)
        lab[0] = True
        s = rng.normal(size=(30, 2))
        s[0, 0 if t == "a" else 1] += 5
        scores.append(s)
        labels.append(lab)
    model = fit_fusion(["x", "y"], types, scores, labels, [np.ones(2, bool)] * 40, emb, (0.9, 0.99), 0.05)
    w = model.weights(np.stack([centres["a"], centres["b"]]).astype(np.float32), np.ones((2, 2), bool))
    assert w[0, 0] > 0.8 and w[1, 1] > 0.8
    # an inactive signal gets no weight
    assert np.allclose(model.weights(emb[:1], np.array([[True, False]]))[0], [1.0, 0.0], rtol=0, atol=1e-12)
    path = tmp_path / "w.json"
    save_weights(path, model, {"top_clues": 3}, encoder="enc-a")
    again, config = load_weights(path)
    assert config == {"top_clues": 3}
    assert np.allclose(again.weights(emb, np.ones((40, 2), bool)), model.weights(emb, np.ones((40, 2), bool)), atol=1e-6)
    assert load_weights(path, "enc-a")[0].coef is not None  # the classifier read embeddings of enc-a: kept for it,
    assert load_weights(path, "enc-b")[0].coef is None  # not for questions another encoder embeds


def synthetic_questions(kind: str, n: int = 80, width: int = 40, seed: int = 0, shift=(3.0, -3.0)):
    """Features of ``n`` questions of ``width`` candidates, one of them evidence, whose two signals are standard
    normal noise, and the evidence rows. ``anti``: the evidence scores ``shift`` above the noise on signals a and b
    (by default 3 above on a and 3 below on b: b is informative, so it has CMI, but it points away from the
    evidence); ``split``: the evidence scores 4 above on a for three questions in five, on b for the others (a has
    the higher CMI, and b is needed by 40%)."""
    rng = np.random.default_rng(seed)
    feats, evidence = [], []
    for q in range(n):
        ev = rng.integers(width)
        scores = rng.normal(size=(width, 2))
        if kind == "anti":
            scores[ev] += shift
        else:
            scores[ev, 0 if q % 5 < 3 else 1] += 4.0
        feats.append(Features(np.arange(width), scores, np.ones(2, bool), np.zeros(0, np.int64), np.zeros(0)))
        evidence.append(np.array([ev]))
    return feats, evidence


@pytest.mark.parametrize("kind, expected", [("anti", 0.05), ("split", 1.0)])
def test_calibration_chooses_the_weight_temperature_by_inner_cross_validation(kind, expected):
    """A signal with CMI that points away from the evidence wants the sharpest weights (none for it); two signals
    each needed by some questions want the flattest (the sharpest would drop the one with less CMI)."""
    feats, evidence = synthetic_questions(kind)
    emb = np.random.default_rng(1).normal(size=(len(feats), 8)).astype(np.float32)
    config, backend = AssoMemConfig(), get_backend("cpu")  # its candidates: config.WEIGHT_TEMPERATURES
    model = calibrate_fusion(["a", "b"], [None] * len(feats), feats, evidence, emb, config, backend)
    assert config.weight_temperatures == (0.05, 0.1, 0.2, 0.5, 1.0) and model.weight_temperature == expected
    fixed = AssoMemConfig(weight_temperatures=(0.5,))  # one candidate fixes it; the CMI is the same
    again = calibrate_fusion(["a", "b"], [None] * len(feats), feats, evidence, emb, fixed, backend)
    assert again.weight_temperature == 0.5 and np.array_equal(again.cmi, model.cmi)


def test_calibration_leaves_out_a_signal_that_points_away_from_the_evidence(tmp_path):
    """CMI weighs a signal by what it tells of the evidence, not by which way: b, 6 below the noise on the evidence
    (a 1 above), has the larger CMI, so the most weight at every T_w, and sinks the evidence. The inner
    cross-validation leaves it out (with ``select_signals``), and the model ranks new questions better for it; a
    signal each question needs stays."""
    feats, evidence = synthetic_questions("anti", seed=4, shift=(1.0, -6.0))
    emb = np.random.default_rng(1).normal(size=(len(feats), 8)).astype(np.float32)
    backend = get_backend("cpu")
    chosen = calibrate_fusion(["a", "b"], [None] * len(feats), feats, evidence, emb, AssoMemConfig(), backend)
    every = calibrate_fusion(["a", "b"], [None] * len(feats), feats, evidence, emb,
                             AssoMemConfig(select_signals=False), backend)
    assert chosen.left_out == ("b",) and every.left_out == () and every.cmi[0, 1] > every.cmi[0, 0]
    assert chosen.type_weights.tolist() == [[1.0, 0.0]]
    test, test_evidence = synthetic_questions("anti", seed=5, shift=(1.0, -6.0))  # new questions alike

    def ndcg(model):
        ranked = fuse(test, emb, model, 4.0, 10, backend)
        return np.mean([utterance_metrics(r.rows, e, (10,))["nDCG@10"] for r, e in zip(ranked, test_evidence)])
    assert ndcg(every) < 0.05 < 0.3 < ndcg(chosen)
    split, split_evidence = synthetic_questions("split")
    assert calibrate_fusion(["a", "b"], [None] * len(split), split, split_evidence, emb, AssoMemConfig(),
                            backend).left_out == ()
    path = tmp_path / "w.json"  # kept in a weights file; a file written before selection weighs every signal
    save_weights(path, chosen, {})
    assert load_weights(path)[0].left_out == ("b",) and restrict(chosen, ["b", "a"]).left_out == ("b",)
    assert restrict(chosen, ["a"]).left_out == ()
    obj = json.loads(path.read_text())
    del obj["fusion"]["left_out"]
    path.write_text(json.dumps(obj))
    assert load_weights(path)[0].left_out == ()
    for bad in (("c",), ("b", "b"), ("a", "b")):  # another's, twice, every signal (no weight left to fuse with)
        with pytest.raises(ValueError, match="left_out must name distinct signals"):
            FusionModel(["a", "b"], ["all"], np.zeros((1, 2)), 0.1, left_out=bad)
    with pytest.raises(ValueError, match="left_out"):  # nor can a restriction keep only what was left out
        restrict(chosen, ["b"])


def test_backward_elimination_takes_the_surest_gain_first_and_keeps_relevance():
    """Each round leaves out the signal whose absence the sign test finds surest (smallest p below
    ``SELECTION_P``); gains of a few questions (3 better, none worse: p 0.25) or of relevance leave nothing out."""
    base = np.zeros(60)
    gains = {"relevance": np.r_[np.ones(40), np.zeros(20)], "x": np.r_[np.ones(30), np.zeros(30)],
             "y": np.r_[np.zeros(50), np.ones(8), np.zeros(2)], "z": np.r_[np.zeros(57), np.ones(3)]}
    calls = []

    def ndcg(left_out):
        calls.append(left_out)
        return base + sum(gains[s] for s in left_out)
    assert select_signals(["relevance", "x", "y", "z"], ndcg, base) == ("x", "y")
    assert ("relevance",) not in calls and calls[:3] == [("x",), ("y",), ("z",)]
    worse = {"x": -np.r_[np.ones(30), np.zeros(30)]}  # fewer better than worse: stays, however sure the test
    assert select_signals(["relevance", "x"], lambda out: base + sum(worse[s] for s in out), base) == ()


def test_fit_without_evidence_is_a_clear_error():
    with pytest.raises(ValueError, match="no calibration question has evidence"):
        fit_fusion(["a"], [], [], [], [], np.zeros((0, 4)), (0.5, 0.9), 0.05)


def test_fixed_weights_are_uniform_and_bad_files_are_rejected(tmp_path):
    assert fixed_weights(["a", "b", "c"]).weights(np.zeros((1, 4)), np.ones((1, 3), bool)).tolist() == [[1 / 3] * 3]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nope": 1}))
    with pytest.raises(ValueError, match="not a weights file"):
        load_weights(bad)


def test_an_inactive_signal_weighs_as_if_fitted_without_it():
    """Where types mix, a question without signal z gets the weights of the model whose CMI never had z: each type's
    weights renormalised over the active signals before the mix (renormalising the mix would shift weight towards
    the types that gave z most)."""
    rng = np.random.default_rng(3)
    cmi = rng.uniform(0, 0.3, size=(3, 4))
    coef, intercept = rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    model = FusionModel(["a", "b", "c", "z"], ["t1", "t2", "t3"], cmi, 0.1, coef, intercept)
    without = FusionModel(["a", "b", "c"], ["t1", "t2", "t3"], cmi[:, :3], 0.1, coef, intercept)
    q = rng.normal(size=(6, 5)).astype(np.float32)
    active = np.ones((6, 4), bool)
    active[:, 3] = False
    w = model.weights(q, active)
    assert np.all(w[:, 3] == 0) and np.allclose(w[:, :3], without.weights(q, np.ones((6, 3), bool)), atol=1e-12)
    mixed_then_renormalised = model.type_probabilities(q) @ model.type_weights[:, :3]
    mixed_then_renormalised /= mixed_then_renormalised.sum(axis=1, keepdims=True)
    assert not np.allclose(w[:, :3], mixed_then_renormalised, atol=1e-3)


def test_a_sharp_temperature_leaves_each_type_its_best_active_signal():
    """At T_w = 1e-4 every type's softmax of CMI / T_w is one-hot; where a type's best signal is inactive its best
    active one takes its weight, not nothing (a softmax over all signals underflows there: exp(-1,000) is 0)."""
    cmi = np.array([[0.5, 0.3, 0.0], [0.0, 0.1, 0.4]])
    model = FusionModel(["a", "b", "c"], ["t1", "t2"], cmi, 1e-4, np.zeros((2, 2), np.float32),
                        np.zeros(2, np.float32))  # the types mixed half and half
    w = model.weights(np.zeros((2, 2), np.float32), np.array([[True, True, True], [True, True, False]]))
    assert np.allclose(w, [[0.5, 0.0, 0.5], [0.5, 0.5, 0.0]], atol=1e-12)


def test_the_type_prior_shrinks_a_small_types_cmi_towards_all_questions():
    """A type of few questions takes its CMI mostly from all the questions', a type of many keeps most of its own:
    (n·CMI_type + prior·CMI_all) / (n + prior); prior 0 leaves each type's own."""
    rng = np.random.default_rng(4)
    types = ["big"] * 60 + ["small"] * 2
    scores, labels = [], []
    for t in types:  # signal 0 finds the evidence of "big" questions, signal 1 that of "small" ones
        lab = np.zeros(40, bool)
        lab[:2] = True
        s = rng.normal(size=(40, 2))
        s[:2, 0 if t == "big" else 1] += 4
        scores.append(s)
        labels.append(lab)
    active, emb = [np.ones(2, bool)] * len(types), rng.normal(size=(len(types), 6)).astype(np.float32)
    own = fit_fusion(["a", "b"], types, scores, labels, active, emb, (0.5, 0.9), 0.1)
    shrunk = fit_fusion(["a", "b"], types, scores, labels, active, emb, (0.5, 0.9), 0.1, type_prior=10.0)
    pooled = conditional_mi(scores, labels, active, (0.5, 0.9))
    for t, n in (("big", 60), ("small", 2)):
        k = own.types.index(t)
        assert np.allclose(shrunk.cmi[k], (n * own.cmi[k] + 10 * pooled) / (n + 10))
    big, small = own.types.index("big"), own.types.index("small")
    assert own.cmi[small, 1] > own.cmi[small, 0] and shrunk.cmi[small, 0] > shrunk.cmi[small, 1]  # the small type
    # leans on its two questions alone, then on all
    assert np.abs(shrunk.cmi[big] - own.cmi[big]).max() < np.abs(shrunk.cmi[small] - own.cmi[small]).max()
    with pytest.raises(ValueError, match="type_prior"):
        AssoMemConfig(type_prior=-1.0)


def test_calibration_reads_the_configs_type_prior():
    """``calibrate_fusion`` fits with ``AssoMemConfig.type_prior``: prior 0 gives each type's own CMI, the default
    shrinks a two-question type's towards all the questions'."""
    rng = np.random.default_rng(6)
    types = ["big"] * 12 + ["small"] * 2
    feats, evidence = [], []
    for i, t in enumerate(types):
        s = rng.normal(size=(30, 2))
        s[:2, 0 if t == "big" else 1] += 4
        feats.append(Features(np.arange(30) + 100 * i, s, np.ones(2, bool), np.zeros(0, np.int64), np.zeros(0)))
        evidence.append(np.arange(2) + 100 * i)
    emb = rng.normal(size=(len(types), 6)).astype(np.float32)
    fit = [calibrate_fusion(["a", "b"], types, feats, evidence, emb,
                            AssoMemConfig(weight_temperatures=(0.1,), type_prior=m), get_backend("cpu"))
           for m in (0.0, 10.0)]
    small = fit[0].types.index("small")
    assert fit[0].cmi[small, 1] > fit[0].cmi[small, 0] and fit[1].cmi[small, 0] > fit[1].cmi[small, 1]


@pytest.mark.parametrize("temperature, cmi, field", [(0.0, [[0.1, 0.2]], "weight_temperature"),
                                                     (-1.0, [[0.1, 0.2]], "weight_temperature"),
                                                     (0.2, [[0.1, float("nan")]], "cmi")])
def test_a_fusion_model_with_weights_that_cannot_be_made_is_refused(temperature, cmi, field):
    """T_w 0 gives NaN weights and a negative one turns them round; a NaN CMI poisons every weight."""
    with pytest.raises(ValueError, match=f"FusionModel.{field}"):
        FusionModel(["a", "b"], ["t"], cmi, temperature)

