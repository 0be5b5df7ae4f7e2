import json

import numpy as np
import pytest

from assomem_gpu.assomem import AssoMem, make_assomem
from assomem_gpu.config import AssoMemConfig
from assomem_gpu.calibrate import cross_validated_rankings, folds_of, main as calibrate_main
from assomem_gpu.data import load_dataset
from assomem_gpu.encode import HashingEncoder, TransformersEncoder
from assomem_gpu.eval.__main__ import main as eval_main
from assomem_gpu.fusion import fixed_weights
from assomem_gpu.graph import GraphConfig
from assomem_gpu.retrieve import EmbeddedDataset

from conftest import lme_item


@pytest.fixture(scope="module")
def minilm():
    return TransformersEncoder()


def synthetic_lme(tmp_path, n=12):
    """Questions whose evidence is a user turn stating a fact, among distractor sessions on other topics."""
    topics = ["cooking pasta", "fixing a bicycle", "learning piano", "growing tomatoes", "training a puppy",
              "painting watercolours", "running a marathon", "knitting a scarf", "brewing coffee", "bird watching",
              "writing poems", "chess openings"]
    items = []
    for q in range(n):
        t = topics[q % len(topics)]
        sessions = {f"answer_{q}": [("user", f"I have been {t} every weekend since March.", True),
                                    ("assistant", f"That is great, {t} is a rewarding hobby.", False)]}
        for j in range(4):
            o = topics[(q + j + 1) % len(topics)]
            sessions[f"s{q}_{j}"] = [("user", f"Can you give me tips about {o}?", False),
                                     ("assistant", f"Sure, here are tips about {o}.", False)]
        dates = [f"2023/04/{10 + j:02d} (Mon) 10:00" for j in range(5)]
        items.append(lme_item(f"q{q}", f"How often have I been {t}?", sessions, dates,
                              qtype=["single-session-user", "multi-session"][q % 2]))
    path = tmp_path / "syn.json"
    path.write_text(json.dumps(items))
    return path


def test_assomem_ranks_evidence_first_and_covers_memory(tmp_path, minilm):
    """With the shipped weights (with equal weights the assistant's reply, which follows the evidence and names the
    hobby too, rises by its lexical context: ``--fixed-weights`` is an ablation)."""
    data = EmbeddedDataset.build(load_dataset(f"longmemeval:{synthetic_lme(tmp_path)}"), minilm)
    config = AssoMemConfig(top_clues=2, min_candidates=2)
    method = AssoMem(config, encoder=minilm)
    method.fusion = method.default_fusion()
    qs = list(range(len(data.dataset.questions)))
    rankings = method.rank(data, qs, depth=50)
    hits = 0
    for q, ranked in zip(data.dataset.questions, rankings):
        memory = data.dataset.memory_utterances(q.memory)
        assert sorted(ranked) == sorted(memory)  # candidates first, then the rest: every utterance once
        hits += ranked[0] in q.evidence
    assert hits >= 10


def test_features_are_batch_invariant(tmp_path, minilm):
    data = EmbeddedDataset.build(load_dataset(f"longmemeval:{synthetic_lme(tmp_path)}"), minilm)
    method = AssoMem(AssoMemConfig(), encoder=minilm)
    together = method.features(data, [0, 1, 2, 3])
    alone = [method.features(data, [q])[0] for q in (0, 1, 2, 3)]
    for a, b in zip(together, alone):
        assert np.array_equal(a.candidates, b.candidates) and np.allclose(a.scores, b.scores, atol=1e-5)


def test_two_step_candidates_are_utterances_of_top_clues(tmp_path):
    data = EmbeddedDataset.build(load_dataset(f"longmemeval:{synthetic_lme(tmp_path)}"), HashingEncoder())
    method = AssoMem(AssoMemConfig(top_clues=1, min_candidates=0, clue_mode="centroid", lexical_pool=0,
                                   dense_pool=0),
                     encoder=None)
    (f,) = method.features(data, [0])
    g = method.index(data, 0)._state.graph
    local = np.flatnonzero(np.isin(data.dataset.memory_utterances(0), f.candidates))
    assert len(set(g.utt_clue[local])) == 1 and len(f.candidates) < g.n_utt
    (all_of_it,) = AssoMem(AssoMemConfig(clues=False, clue_mode="centroid")).features(data, [0])
    assert len(all_of_it.candidates) == g.n_utt and len(all_of_it.rest) == 0


def test_folds_are_disjoint_and_grouped_by_memory(lme_file, meetingqa_file):
    data = EmbeddedDataset.build(load_dataset(f"longmemeval:{lme_file}"), HashingEncoder())
    folds = folds_of(data, [0, 1, 2], 3)
    assert sorted(np.concatenate(folds).tolist()) == [0, 1, 2]
    single = EmbeddedDataset.build(load_dataset(f"meetingqa:{meetingqa_file}"), HashingEncoder())
    folds = folds_of(single, [0, 1, 2, 3], 2)  # one memory: folds split the questions
    assert sorted(np.concatenate(folds).tolist()) == [0, 1, 2, 3] and all(len(f) == 2 for f in folds)
    with pytest.raises(ValueError, match="at least 2 folds"):
        folds_of(data, [0, 1], 1)


class RecordingAssoMem(AssoMem):
    """The real method, noting which questions each calibration sees."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.fitted_on: list[set[int]] = []
        self.ranked: list[set[int]] = []

    def fit(self, data, questions, feats):
        self.fitted_on.append(set(questions))
        return super().fit(data, questions, feats)

    def fuse(self, feats, q_emb, fusion, depth):
        self.ranked.append(len(feats))
        return super().fuse(feats, q_emb, fusion, depth)


def test_calibration_never_sees_evaluated_questions(tmp_path):
    data = EmbeddedDataset.build(load_dataset(f"longmemeval:{synthetic_lme(tmp_path)}"), HashingEncoder())
    method = RecordingAssoMem(AssoMemConfig(), encoder=HashingEncoder())
    qs = list(range(12))
    rankings, chosen = cross_validated_rankings(method, data, qs, k=4, depth=50, progress=False)
    assert len(rankings) == 12 and len(method.fitted_on) == 4 and len(chosen) == 12
    assert {t for t, _ in chosen} <= set(method.config.weight_temperatures)  # each fold chose one of its candidates
    assert all(set(out) < set(method.config.signals) - {"relevance"} for _, out in chosen)
    folds = folds_of(data, qs, 4)
    for fitted, fold in zip(method.fitted_on, folds):
        assert not fitted & set(fold.tolist()) and fitted | set(fold.tolist()) == set(qs)


def test_hybrid_baselines_use_relevance_only():
    for name in ("session-utterance", "session-summary", "topic-grouping"):
        m = make_assomem(name, AssoMemConfig(), HashingEncoder())
        assert m.config.signals == ("relevance",) and not m.needs_calibration and m.name == name
        assert m.config.dense_pool == 0  # the two-step cut alone (with the dense top, they would be flat-dense)
        assert not m.config.sentences  # the paper's relevance: the utterance's own cosine
    topics = make_assomem("topic-grouping", AssoMemConfig(graph=GraphConfig(delta=0.8, gamma=0.6)), HashingEncoder())
    assert (topics.config.graph.clue_merge, topics.config.graph.delta, topics.config.graph.gamma) == ("components", 0.8,
                                                                                                   0.6)
    assert make_assomem("assomem", AssoMemConfig(), HashingEncoder()).needs_calibration
    llm = AssoMemConfig(clue_mode="llm")  # summaries and topics by the LLM where the config's clues are
    assert [make_assomem(n, c, HashingEncoder()).config.clue_mode for n in ("session-summary", "topic-grouping",
                                                                             "session-utterance")
            for c in (AssoMemConfig(), llm)] == ["keywords", "llm", "keywords", "llm", "centroid", "centroid"]


def test_calibrate_then_apply_weights_elsewhere(tmp_path, meetingqa_file, capsys):
    syn = synthetic_lme(tmp_path)
    weights = tmp_path / "w.json"
    assert calibrate_main(["--dataset", f"longmemeval:{syn}", "--output", str(weights), "--encoder", "hashing",
                           "--quiet", "--top-clues", "2", "--weight-temperatures", "0.05", "1"]) == 0
    saved = json.loads(weights.read_text())
    assert saved["config"]["top_clues"] == 2 and set(saved["fusion"]["types"]) == {"single-session-user", "multi-session"}
    assert saved["config"]["weight_temperatures"] == [0.05, 1.0] and saved["fusion"]["weight_temperature"] in (0.05, 1)
    printed = capsys.readouterr().out
    assert f"weight temperature {saved['fusion']['weight_temperature']} (of 0.05, 1.0); signals left out: " \
        f"{', '.join(saved['fusion']['left_out']) or 'none'}" in printed
    out = tmp_path / "cv.json"  # cross-validated, the report counts the questions each chosen T_w ranked
    assert eval_main(["--dataset", f"longmemeval:{syn}", "--method", "assomem", "--encoder", "hashing", "--quiet",
                      "--folds", "3", "--weight-temperatures", "0.05", "1", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    used = result["results"]["assomem"]["weight_temperatures"]
    assert set(used) <= {"0.05", "1.0"} and sum(used.values()) == result["n_questions"]
    assert set(result["results"]["assomem"]["left_out"]) < set(AssoMemConfig().signals) - {"relevance"}
    assert calibrate_main(["--dataset", f"longmemeval:{syn}", "--output", str(weights), "--encoder", "hashing",
                           "--quiet", "--weight-temperatures", "0.05", "0"]) == 2
    assert "--weight-temperatures must lie in (0, inf), got 0.0" in capsys.readouterr().err
    assert json.loads(weights.read_text()) == saved  # a bad option writes nothing
    for bad, message in ((tmp_path, "is a folder"), (weights / "w.json", "cannot create its folder")):
        assert calibrate_main(["--dataset", f"longmemeval:{syn}", "--output", str(bad), "--encoder", "hashing",
                               "--quiet"]) == 2  # said before any work, where it failed after it
        assert message in capsys.readouterr().err
    out = tmp_path / "o.json"
    assert eval_main(["--dataset", f"meetingqa:{meetingqa_file}", "--method", "assomem", "--weights", str(weights),
                      "--encoder", "hashing", "--quiet", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["results"]["assomem"]["metrics"]["all"]["n"] == 4
    saved["fusion"]["left_out"] = ["reply", "session"]  # weights that leave signals out: the report says so, and
    weights.write_text(json.dumps(saved))  # --no-signal-selection weighs them again
    for flags, left_out, selects in (([], {"session": 4, "reply": 4}, True), (["--no-signal-selection"], {}, False),
                                     (["--no-reply"], {"session": 4}, True)):
        assert eval_main(["--dataset", f"meetingqa:{meetingqa_file}", "--method", "assomem", "--weights",
                          str(weights), "--encoder", "hashing", "--quiet", "--output", str(out), *flags]) == 0
        result = json.loads(out.read_text())
        assert result["results"]["assomem"]["left_out"] == left_out
        assert result["configs"]["assomem"]["select_signals"] is selects
    assert eval_main(["--dataset", f"meetingqa:{meetingqa_file}", "--method", "assomem", "--weights",
                      str(tmp_path / "missing.json"), "--encoder", "hashing", "--quiet"]) == 2
    assert "not a weights file" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [[], ["--no-temporal"], ["--no-importance"], ["--no-clues"], ["--fixed-weights"],
                                   ["--no-lexical", "--speakers"], ["--no-sentences"], ["--no-lexical-context"]])
def test_ablation_flags_run(tmp_path, flags):
    out = tmp_path / "o.json"
    assert eval_main(["--dataset", f"longmemeval:{synthetic_lme(tmp_path)}", "--method", "assomem", "--encoder",
                      "hashing", "--quiet", "--folds", "3", "--output", str(out), *flags]) == 0
    r10 = json.loads(out.read_text())["results"]["assomem"]["metrics"]["all"]["R@10"]
    assert r10 > 0.9


def test_a_weights_files_config_holds_but_for_the_ablations():
    import argparse

    from assomem_gpu.cli_options import add_assomem_options, config_from_options

    p = argparse.ArgumentParser()
    add_assomem_options(p)
    saved = AssoMemConfig(top_clues=3)
    assert config_from_options(p.parse_args(["--top-clues", "7"]), saved) == saved  # the file's config, not the option
    off = config_from_options(p.parse_args(["--no-sentences", "--no-clues", "--no-context"]), saved)
    assert not off.sentences and not off.clues and "context" not in off.signals and off.top_clues == 3
    assert config_from_options(p.parse_args([]), None).sentences  # on by default
    assert not config_from_options(p.parse_args([]), AssoMemConfig(sentences=False)).sentences  # an older file's
    for flags, dropped in ((["--no-lexical-context"], {"lexical_context"}),
                           (["--no-lexical", "--no-lexical-context"], {"lexical", "lexical_context"})):
        for base in (None, saved):  # the options' config and a weights file's
            assert set(AssoMemConfig().signals) - set(config_from_options(p.parse_args(flags), base).signals) == dropped


def test_bad_assomem_options_are_clear_errors(tmp_path, capsys):
    assert eval_main(["--dataset", f"longmemeval:{synthetic_lme(tmp_path)}", "--method", "assomem", "--encoder",
                      "hashing", "--damping", "1.5"]) == 2
    assert "--damping" in capsys.readouterr().err


def test_a_benchmark_memory_equals_the_index_a_user_builds_of_its_sessions(tmp_path):
    """AssoMem derives clues, time marks and BM25 counts once for the whole bank; each memory's index is still the
    one ``MemoryIndex.add_sessions`` builds from that memory's sessions and dates."""
    from assomem_gpu.data import expand_haystacks
    from assomem_gpu.index import MemoryIndex, Session, Utterance

    ds = expand_haystacks(load_dataset(f"longmemeval:{synthetic_lme(tmp_path)}"), 9, seed=2)
    encoder = HashingEncoder()
    data = EmbeddedDataset.build(ds, encoder)
    config = AssoMemConfig(top_clues=2, min_candidates=2)
    method = AssoMem(config, fixed_weights(config.signals), encoder)
    bank = ds.bank
    for m in (3, 0):
        built = method.index(data, m)._state
        mem = ds.memories[m]
        user = MemoryIndex(encoder, config, fixed_weights(config.signals), dated=False)
        user.add_sessions([Session(bank.session_ids[s], float(d), [
            Utterance(bank.utt_texts[i], bank.utt_speakers[i], bank.utt_ids[i])
            for i in range(bank.offsets[s], bank.offsets[s + 1])]) for s, d in zip(mem.sessions, mem.dates)],
            data.utterances[ds.memory_utterances(m)])
        (docs_a, arrays_a), (docs_b, arrays_b) = built.to_snapshot(), user._state.to_snapshot()
        assert docs_a == docs_b and sorted(arrays_a) == sorted(arrays_b)
        assert np.array_equal(built.context.view, user._state.context.view)  # made again on load, not saved
        for name in arrays_a:
            assert np.array_equal(arrays_a[name], arrays_b[name]), name
