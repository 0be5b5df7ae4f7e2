import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from assomem_gpu.signals.importance import personalized_pagerank, stack_block_diagonal, teleport
from assomem_gpu.signals.temporal import DAY, TimeConstraint, parse_constraint, temporal_scores
from assomem_gpu.timeparse import format_timestamp, parse_timestamp

Q = parse_timestamp("2023/05/30 (Tue) 20:36")


def random_graph(n, seed):
    rng = np.random.default_rng(seed)
    a = (rng.random((n, n)) < 0.3).astype(np.float32) * rng.random((n, n)).astype(np.float32)
    a = np.maximum(a, a.T)
    np.fill_diagonal(a, 0)
    a[0, 1] = a[1, 0] = 1.0  # no isolated start
    deg = a.sum(axis=0)
    deg[deg == 0] = 1
    return a, a / deg


def test_ppr_matches_networkx():
    a, m = random_graph(12, 0)
    t = np.zeros(12, np.float32)
    t[[0, 3, 5]] = [0.5, 0.3, 0.2]
    r, iters = personalized_pagerank(sp.csr_matrix(m), t[:, None], damping=0.85, tol=1e-7, max_iter=500)
    g = nx.from_numpy_array(a)
    ref = nx.pagerank(g, alpha=0.85, personalization={i: float(t[i]) for i in range(12)}, tol=1e-12, max_iter=1000)
    assert iters < 500
    assert np.allclose(r[:, 0], [ref[i] for i in range(12)], atol=1e-5)


def test_batched_block_diagonal_equals_one_at_a_time():
    graphs = [random_graph(n, s)[1] for n, s in ((7, 1), (10, 2), (5, 3))]
    rng = np.random.default_rng(4)
    teles = []
    for m, b in zip(graphs, (2, 1, 3)):
        t = rng.random((len(m), b)).astype(np.float32)
        teles.append(t / t.sum(axis=0))
    stacked, tele, starts = stack_block_diagonal([sp.csr_matrix(m) for m in graphs], teles)
    r, _ = personalized_pagerank(stacked, tele, 0.85, 1e-7, 300)
    for g, m in enumerate(graphs):
        alone, _ = personalized_pagerank(sp.csr_matrix(m), teles[g], 0.85, 1e-7, 300)
        assert np.allclose(r[starts[g] : starts[g] + len(m), : teles[g].shape[1]], alone, atol=1e-6)


def test_teleport_clips_negatives_and_skips_clues():
    utt = np.eye(3, dtype=np.float32)
    q = np.array([[0.6, -0.8, 0.0]], np.float32)
    t = teleport(utt, q, n_nodes=5)
    assert t[:, 0].tolist() == pytest.approx([1.0, 0, 0, 0, 0])
    far = teleport(utt, np.array([[-1.0, 0, 0]], np.float32), n_nodes=5)  # similar to nothing: uniform
    assert far[:3, 0] == pytest.approx([1 / 3] * 3) and far[3:].sum() == 0


@pytest.mark.parametrize("text, start, end, order", [
    ("What did I do two weeks ago?", "2023-05-09", "2023-05-23", None),
    ("Where did I have dinner yesterday?", "2023-05-28", "2023-05-31", None),
    ("What did I do on May 5th?", "2023-05-05", "2023-05-06", None),
    ("What happened in March 2023?", "2023-03-01", "2023-04-01", None),
    ("What did I do last Saturday?", "2023-05-26", "2023-05-29", None),
    ("What is my current job?", None, None, "latest"),
    ("How many poems have I written since I started three weeks ago?", "2023-05-02", "2023-05-30", None),
    ("How many days ago did I buy the shoes?", None, None, None),
    ("How long is my commute?", None, None, None),
    ("What may I bring to the march?", None, None, None),
    ("How many museums did I visit in the month of February?", "2023-02-01", "2023-03-01", None),
])
def test_question_constraints(text, start, end, order):
    c = parse_constraint(text, Q)
    assert c.order == order
    if start is None:
        assert not c.has_window
    else:
        assert format_timestamp(c.start)[:10] == start and format_timestamp(c.end)[:10] == end


def test_no_question_date_means_no_window():
    assert not parse_constraint("What did I do two weeks ago?", math.nan).has_window


def test_temporal_scores_window_and_order():
    c = TimeConstraint(Q - 10 * DAY, Q)
    times = [np.array([Q - 5 * DAY]), np.array([Q - 20 * DAY]), np.array([np.nan]),
             np.array([Q - 60 * DAY, Q - 3 * DAY])]  # the last mentions a time inside the window
    s = temporal_scores(c, times)
    assert s[0] == 1 and 0 < s[1] < 1 and s[2] == 0 and s[3] == 1
    # a session reporting the window's events up to REPORT_LAG later still matches fully
    early = TimeConstraint(Q - 40 * DAY, Q - 30 * DAY)
    lagged = temporal_scores(early, [np.array([Q - 20 * DAY]), np.array([Q - 2 * DAY]), np.array([Q - 45 * DAY])])
    assert lagged[0] == 1 and lagged[1] < 1 and lagged[2] < 1
    latest = temporal_scores(TimeConstraint(order="latest"), [np.array([Q - 9 * DAY]), np.array([Q - DAY])])
    assert latest[1] > latest[0]


def test_ppr_leaves_its_inputs_alone():
    _, m = random_graph(6, 5)
    t = np.full((6, 1), 1 / 6, np.float32)
    personalized_pagerank(sp.csr_matrix(m), t, 0.85, 1e-7, 50)
    assert np.all(t == np.float32(1 / 6))
