import json

import numpy as np
import pytest

from assomem_gpu.data import load_dataset
from assomem_gpu.encode import HashingEncoder, TransformersEncoder
from assomem_gpu.retrieve import BM25, FlatDense, SessionFlat, EmbeddedDataset, make_method, top_k


@pytest.fixture(scope="module")
def minilm():
    return TransformersEncoder()


def first_ids(data, ranking, n=1):
    return [data.dataset.bank.utt_ids[i] for i in ranking[:n]]


@pytest.mark.parametrize("method", [FlatDense(), SessionFlat(), BM25()], ids=lambda m: m.name)
def test_each_baseline_finds_the_evidence(lme_file, minilm, method):
    data = EmbeddedDataset.build(load_dataset(f"longmemeval:{lme_file}"), minilm)
    rankings = method.rank(data, [0, 1, 2], depth=50)
    for q, ranked in zip(data.dataset.questions, rankings):
        cand = data.dataset.memory_utterances(q.memory)
        assert sorted(ranked) == sorted(cand)  # fewer candidates than the depth: every candidate, once
    assert "answer_s1:0" in first_ids(data, rankings[0], 2)
    assert "answer_s2:0" in first_ids(data, rankings[1], 3)


def test_flat_dense_scores_and_depth(jsonl_file):
    data = EmbeddedDataset.build(load_dataset(f"jsonl:{jsonl_file}"), HashingEncoder())
    (ranked,) = FlatDense().rank(data, [0], depth=2)
    cand = data.dataset.memory_utterances(0)
    sims = data.utterances[cand] @ data.questions[0]
    assert list(ranked) == list(cand[np.argsort(-sims, kind="stable")[:2]])


def test_questions_of_other_memories_never_see_foreign_utterances(jsonl_file, minilm):
    data = EmbeddedDataset.build(load_dataset(f"jsonl:{jsonl_file}"), minilm)
    for method in (FlatDense(), SessionFlat(), BM25()):
        rankings = method.rank(data, [2, 0, 3, 1], depth=50)  # mixed memories in one batch, any order
        for q, ranked in zip([2, 0, 3, 1], rankings):
            assert set(ranked) <= set(data.dataset.memory_utterances(data.dataset.questions[q].memory))
        assert first_ids(data, rankings[0]) == ["s3:0"]


@pytest.mark.parametrize("method", ["flat-dense", "bm25", "session-flat"])
def test_ties_keep_the_memorys_order(tmp_path, method):
    """Two sessions of one content, listed b then a in the second question's memory (the bank holds a first): tied,
    they rank in that memory's order, whatever other questions list."""
    turns = [{"role": "user", "content": "I booked flights to Lisbon."}]

    def item(q, ids):
        return {"question_id": q, "question": "Where am I flying?", "question_date": "2024/01/05 (Fri) 10:00",
                "haystack_session_ids": ids, "haystack_dates": ["2024/01/01 (Mon) 10:00"] * 2,
                "haystack_sessions": [turns] * 2, "answer": "Lisbon"}

    path = tmp_path / "tie.json"
    path.write_text(json.dumps([item("q1", ["a", "b"]), item("q2", ["b", "a"])]))
    ds = load_dataset(f"longmemeval:{path}")
    data = EmbeddedDataset.build(ds, HashingEncoder())
    ranked = make_method(method).rank(data, [1], 10)[0]
    assert [ds.bank.utt_ids[i] for i in ranked] == ["b:0", "a:0"]


def test_bm25_prefers_term_overlap(meetingqa_file):
    data = EmbeddedDataset.build(load_dataset(f"meetingqa:{meetingqa_file}"), HashingEncoder())
    rankings = BM25().rank(data, [1, 3], depth=10)
    assert first_ids(data, rankings[0]) == ["m1_001"]  # "Aurora budget"
    assert first_ids(data, rankings[1]) == ["m2_001"]  # "Flux reduce"


@pytest.mark.parametrize("rows", [3, 16])  # 16: the row kernel's rows on the thread pool
def test_top_k_of_long_rows_equals_full_sort(rows):
    """Both long-row paths (the row kernel up to ROW_TOP_MAX_K, the partition above) against a full stable sort: many
    exact ties around the cut, NaN (last), -inf and +inf."""
    from assomem_gpu.retrieve import ROW_TOP_MAX_K

    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        scores = rng.integers(0, 5, size=(rows, 1200)).astype(dtype)
        scores[rng.random(scores.shape) < 0.05] = np.nan
        scores[rng.random(scores.shape) < 0.05] = -np.inf
        scores[rng.random(scores.shape) < 0.01] = np.inf
        full = np.argsort(-np.where(np.isnan(scores), -np.inf, scores), axis=1, kind="stable")
        for k in (1, 7, 20, ROW_TOP_MAX_K, ROW_TOP_MAX_K + 1, 140):
            assert np.array_equal(top_k(scores, k), full[:, :k]), (dtype, k)
    all_low = np.full((rows, 900), -np.inf)  # fewer finite scores than k: the -inf ones fill in, lowest column first
    all_low[:, 5] = 1.0
    assert top_k(all_low, 4).tolist() == [[5, 0, 1, 2]] * rows


def test_top_k_tie_break_and_nan():
    scores = np.array([[0.5, 0.9, 0.5, np.nan, 0.9]])
    assert top_k(scores, 5).tolist() == [[1, 4, 0, 2, 3]]
    assert top_k(scores, 2).tolist() == [[1, 4]]
    assert top_k(np.zeros((2, 40)), 0).shape == (2, 0)


def test_make_method_rejects_unknown():
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        make_method("nope")
