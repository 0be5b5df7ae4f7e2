import math

import numpy as np
import pytest

from assomem_gpu.metrics import mean_by_type, session_metrics, utterance_metrics


def test_utterance_metrics_hand_computed():
    ranked = np.array([7, 3, 9, 1, 4])
    m = utterance_metrics(ranked, np.array([3, 4, 8]), ks=(1, 3, 5))
    assert m["R@1"] == 0 and m["Rany@1"] == 0
    assert m["R@3"] == pytest.approx(1 / 3) and m["Rany@3"] == 1
    assert m["R@5"] == pytest.approx(2 / 3)
    # hits at ranks 2 and 5: DCG = 1/log2(3) + 1/log2(6); ideal (3 relevant) = 1 + 1/log2(3) + 1/2
    assert m["nDCG@5"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(6)) / (1 + 1 / math.log2(3) + 0.5))
    assert m["nDCG@3"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3) + 0.5))
    assert m["nDCG@1"] == 0


def test_utterance_metrics_perfect_and_short_ranking():
    m = utterance_metrics(np.array([5, 6]), np.array([5, 6]), ks=(1, 10))
    assert m["R@1"] == 0.5 and m["R@10"] == 1 and m["nDCG@10"] == pytest.approx(1.0) and m["nDCG@1"] == 1


def test_an_id_ranked_again_counts_once():
    m = utterance_metrics(np.array([5, 5, 7]), np.array([5, 6]), ks=(2,))
    assert m["R@2"] == 0.5 and m["nDCG@2"] == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_session_metrics_follow_longmemeval_official():
    # utterance ranking mapped to sessions: 4, 4, 2, 9, 2, 5 -> session order 4, 2, 9, 5
    ranked_sessions = np.array([4, 4, 2, 9, 2, 5])
    m = session_metrics(ranked_sessions, np.array([2, 5]), ks=(1, 2, 3, 10))
    assert m["session_recall_any@1"] == 0 and m["session_recall_any@2"] == 1
    assert m["session_recall_all@3"] == 0 and m["session_recall_all@10"] == 1
    # official DCG: rel[0] + sum(rel[i] / log2(i + 1)) for i >= 1 -> hits at positions 2 and 4: 1/log2(2) + 1/log2(4)
    # ideal with two relevant: 1 + 1/log2(2) = 2
    assert m["session_ndcg_any@10"] == pytest.approx((1 + 0.5) / 2)
    assert m["session_ndcg_any@2"] == pytest.approx(1 / 2)


def test_mean_by_type():
    rows = [("a", {"R@1": 1.0}), ("a", {"R@1": 0.0}), ("b", {"R@1": 1.0}), (None, {"R@1": 0.0})]
    out = mean_by_type(rows)
    assert out["all"] == {"n": 4, "R@1": 0.5}
    assert out["a"] == {"n": 2, "R@1": 0.5} and out["b"] == {"n": 1, "R@1": 1.0}


def test_a_key_fewer_rows_hold_is_averaged_over_those_and_counted():
    rows = [("u", {"EM": 1.0, "Acc": 1.0}), ("u", {"EM": 0.0, "Acc": 0.0}), ("p", {"Acc": 1.0}), ("p", {"Acc": 1.0})]
    out = mean_by_type(rows)
    assert out["all"] == {"n": 4, "EM": 0.5, "n_EM": 2, "Acc": 0.75}
    assert out["p"] == {"n": 2, "Acc": 1.0}
