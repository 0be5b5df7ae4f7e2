import dataclasses
import gc
import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from assomem_gpu.kernels.ppr_cpu import BLOCK, personalized_pagerank_cpu
from assomem_gpu.scoring import teleport
from assomem_gpu.signals.importance import personalized_pagerank

PPRS = [personalized_pagerank, personalized_pagerank_cpu]  # the library path (CUDA backend's) and the CPU twin
from assomem_gpu.signals.temporal import (ANCHORED, DAY, NO_TIME, RESOLVED, TimeConstraint, parse_constraint,
                                          temporal_scores, time_mark)
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


@pytest.mark.parametrize("ppr", PPRS)
def test_ppr_matches_networkx(ppr):
    a, m = random_graph(12, 0)
    t = np.zeros(12, np.float32)
    t[[0, 3, 5]] = [0.5, 0.3, 0.2]
    r, iters = ppr(sp.csr_matrix(m), t[:, None], damping=0.85, tol=1e-7, max_iter=500)
    g = nx.from_numpy_array(a)
    ref = nx.pagerank(g, alpha=0.85, personalization={i: float(t[i]) for i in range(12)}, tol=1e-12, max_iter=1000)
    assert iters < 500
    assert np.allclose(r[:, 0], [ref[i] for i in range(12)], atol=1e-5)


@pytest.mark.parametrize("width", [2 * BLOCK + 5, 24, 33])  # full blocks and a short one; a batch split in halves
def test_cpu_twin_equals_the_library_path_across_blocks(width):
    _, m = random_graph(80, 6)
    rng = np.random.default_rng(7)
    t = rng.random((width, 80)).astype(np.float32)
    t = (t / t.sum(axis=1, keepdims=True)).T  # F-ordered, as teleport() makes them
    lib, it_lib = personalized_pagerank(sp.csr_matrix(m), t, 0.5, 1e-7, 200)
    twin, it_twin = personalized_pagerank_cpu(sp.csr_matrix(m), t, 0.5, 1e-7, 200)
    assert twin.shape == lib.shape and np.allclose(twin, lib, atol=1e-6) and abs(it_twin - it_lib) <= 1
    one, _ = personalized_pagerank_cpu(sp.csr_matrix(m), t[:, [3]], 0.5, 1e-7, 200)  # a single column: scalar loop
    assert np.allclose(one[:, 0], lib[:, 3], atol=1e-6)
    empty, its = personalized_pagerank_cpu(sp.csr_matrix(m), np.zeros((80, 0), np.float32), 0.5, 1e-7, 200)
    assert empty.shape == (80, 0) and its == 0


def test_ppr_checked_every_few_iterations_runs_a_few_more_and_moves_little():
    """The device reads the residual back every 4 iterations: at most 3 iterations more, each contracting by d."""
    _, m = random_graph(60, 9)
    t = np.random.default_rng(3).random((60, 5)).astype(np.float32)
    t /= t.sum(axis=0)
    each, it_each = personalized_pagerank(sp.csr_matrix(m), t, 0.5, 1e-6, 200)
    sparse_checks, it_sparse = personalized_pagerank(sp.csr_matrix(m), t, 0.5, 1e-6, 200, check_every=4)
    assert it_sparse % 4 == 0 and it_each <= it_sparse < it_each + 4
    assert np.abs(sparse_checks - each).sum(axis=0).max() < 1e-6


def test_ppr_stops_at_the_iteration_cap():
    _, m = random_graph(30, 8)
    t = np.full((30, 3), 1 / 30, np.float32)
    t[0] = 1.0
    for ppr in PPRS:
        assert ppr(sp.csr_matrix(m), t / t.sum(axis=0), 0.85, 0.0, 7)[1] == 7


def test_teleport_clips_negatives_and_skips_clues():
    utt = np.eye(3, dtype=np.float32)
    q = np.array([[0.6, -0.8, 0.0]], np.float32)
    t = teleport(q @ utt.T, n_nodes=5)
    assert t[:, 0].tolist() == pytest.approx([1.0, 0, 0, 0, 0])
    far = teleport(np.array([[-1.0, 0, 0]], np.float32) @ utt.T, n_nodes=5)  # similar to nothing: uniform
    assert far[:3, 0] == pytest.approx([1 / 3] * 3) and far[3:].sum() == 0


@pytest.mark.parametrize("mass_dtype", [np.float32, np.float64])
def test_teleport_over_a_given_mass_divides_as_numpy_would(mass_dtype):
    """The values are the clipped cosines over the given mass (a probed relevance's; float32 or float64, rounded once
    to float32), a question of zero mass uniform over the utterances; the other nodes 0."""
    rng = np.random.default_rng(3)
    cos = rng.normal(size=(4, 7)).astype(np.float32)
    mass = (np.maximum(cos, 0).sum(axis=1) * 1.7).astype(mass_dtype)
    mass[2] = 0
    t = teleport(cos, 9, mass=mass)
    want = (np.maximum(cos, 0) / np.maximum(mass, 1e-30)[:, None]).astype(np.float32)
    want[2] = np.float32(1 / 7)
    assert t.dtype == np.float32 and t.shape == (9, 4)
    assert np.array_equal(t[:7].T, want) and not t[7:].any()


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


@pytest.mark.parametrize("text, asks", [
    ("How many days ago did I buy the shoes?", True),
    ("When did I submit my paper?", True),
    ("Which show did I start watching first, 'The Crown' or 'Game of Thrones'?", True),
    ("What is the order of the three trips I took?", True),
    ("How long is my commute?", True),
    ("What was the date on which I attended the BBQ?", True),
    ("Which streaming service did I start using most recently?", True),
    ("How many times did I bake a cake?", False),
    ("What was the first issue I had with my car?", False),
    ("What did I buy at the market?", False),
])
def test_questions_that_ask_about_time(text, asks):
    c = parse_constraint(text, math.nan)  # no date needed: the question asks, whatever it resolves
    assert c.asks == asks and c.has_intent == (asks or c.order is not None)


@pytest.mark.parametrize("text, mark", [
    ("I went to the museum two weeks ago", RESOLVED),
    ("We met on March 3, 2023", RESOLVED),
    ("I had to take the car in on 3/22", ANCHORED),
    ("in mid-February the gears acted up", ANCHORED),
    ("I've been bird watching for about three months now", ANCHORED),
    ("I just finished a 5K run", ANCHORED),
    ("I saw them live on Saturday", ANCHORED),
    ("Can you recommend some running shoes?", NO_TIME),
    ("You may want to march on", NO_TIME),
    ("I just want some advice", NO_TIME),
    ("we shopped for linen in mid-May", ANCHORED),
    ("the class is on mondays", ANCHORED),
    ("I was in Lyon for a week", ANCHORED),
    ("the report is dated 26/02/2023", ANCHORED),
    ("add 1/2 cup of kimchi", NO_TIME),  # a fraction of a unit, not January 2
    ("support is open 24/7", NO_TIME),
    ("wash your face twice a day", NO_TIME),  # a frequency, not a span
    ("I just need someone to talk to", NO_TIME),  # "-eed" is no past tense
])
def test_time_marks(text, mark):
    assert time_mark(text) == mark


def test_the_time_mark_counts_for_every_question_with_an_intent():
    when = np.array([Q - 5 * DAY, Q - 5 * DAY, np.nan])
    none = np.zeros(0, np.int64), np.zeros(0)
    marks = np.array([RESOLVED, NO_TIME, ANCHORED], np.int8)
    asks = temporal_scores(TimeConstraint(asks=True), when, *none, marks)
    assert asks.tolist() == [1.0, 0.0, 0.5]
    window = temporal_scores(TimeConstraint(Q - 10 * DAY, Q), when, *none, marks)
    assert window.tolist() == [2.0, 1.0, 0.5]  # in the window (1) plus the mark; an unknown date only the mark
    assert not temporal_scores(TimeConstraint(), when, *none, marks).any()  # no intent: nothing


def test_no_question_date_means_no_window():
    assert not parse_constraint("What did I do two weeks ago?", math.nan).has_window


def test_temporal_scores_window_and_order():
    c = TimeConstraint(Q - 10 * DAY, Q)
    when = np.array([Q - 5 * DAY, Q - 20 * DAY, np.nan, Q - 60 * DAY])
    # the last candidate's utterance mentions a time inside the window, the second one a time far outside it
    s = temporal_scores(c, when, np.array([3, 1]), np.array([Q - 3 * DAY, Q - 400 * DAY]))
    assert s[0] == 1 and 0 < s[1] < 1 and s[2] == 0 and s[3] == 1
    # a session reporting the window's events up to REPORT_LAG later still matches fully
    early = TimeConstraint(Q - 40 * DAY, Q - 30 * DAY)
    none = np.zeros(0, np.int64), np.zeros(0)
    lagged = temporal_scores(early, np.array([Q - 20 * DAY, Q - 2 * DAY, Q - 45 * DAY]), *none)
    assert lagged[0] == 1 and lagged[1] < 1 and lagged[2] < 1
    latest = temporal_scores(TimeConstraint(order="latest"), np.array([Q - 9 * DAY, Q - DAY]), *none)
    assert latest[1] > latest[0]


@pytest.mark.parametrize("ppr", PPRS)
def test_ppr_leaves_its_inputs_alone(ppr):
    _, m = random_graph(6, 5)
    t = np.full((6, 1), 1 / 6, np.float32)
    ppr(sp.csr_matrix(m), t, 0.85, 1e-7, 50)
    assert np.all(t == np.float32(1 / 6))


def test_bm25_counts_selected_from_a_larger_count_equal_the_texts_added():
    """A benchmark counts a bank's texts once and gives each memory its rows: the index is the one ``add`` makes."""
    from assomem_gpu.signals.lexical import BM25Index

    bank = ["Zebras ran past the old mill.", "", "The mill burned in May.", "apples and zebras", "tea",
            "Mills, mills and more mills!", "the a of"]
    rows = np.array([5, 2, 6, 0, 1])
    chosen = [bank[i] for i in rows]
    direct, selected = BM25Index(), BM25Index()
    direct.add(chosen[:2]), direct.add(chosen[2:])
    counts = direct.count(bank)
    selected.add_counts(counts.rows(rows[:2])), selected.add_counts(counts.rows(rows[2:]))
    assert list(direct.vocab) == list(selected.vocab) and len(direct.vocab) > 3
    for name in BM25Index.ARRAYS:
        assert np.array_equal(direct.array(name), selected.array(name)), name
    assert direct.total_length == selected.total_length
    assert np.array_equal(direct.scores(["zebra mills", "tea in may"]), selected.scores(["zebra mills", "tea in may"]))
    # the vocabulary's order is the texts': by the first text holding a term, then alphabetically
    first = list(direct.vocab)
    assert first[:2] == sorted(first[:2]) and first.index("mill") < first.index("burn")


def test_bm25_after_removals_equals_an_index_of_the_texts_left_and_keeps_no_trace():
    from assomem_gpu.signals.lexical import BM25Index

    texts = ["Zebras ran past the old mill.", "", "The mill burned in May.", "apples and zebras", "tea",
             "Mills, mills and more mills!", "the a of", "quixotic walrus", "zebra tea"]
    def stemmed(bm25):  # the words PyStemmer's cache holds (recently stemmed ones)
        return {w for o in gc.get_referents(bm25._stemmer) if isinstance(o, dict) for w in o}

    index, held = BM25Index(texts), list(range(len(texts)))
    assert b"walrus" in stemmed(index)
    for drop in ([7], [0, 3], [1], [4, 5]):  # "quixotic walrus": terms only it holds leave
        keep = np.asarray([i not in drop for i in held])
        index.remove(keep)
        assert not stemmed(index)
        held = [i for i in held if i not in drop]
        fresh = BM25Index([texts[i] for i in held])

        def by_term(bm25):  # the vocabulary keeps its order through a removal; a fresh one orders by first text
            terms, counts = list(bm25.vocab), bm25.counts
            return ([{terms[t]: c for t, c in zip(counts[r].indices, counts[r].data)} for r in range(counts.shape[0])],
                    dict(zip(terms, bm25.array("df"))), bm25.array("lengths").tolist(), bm25.total_length)

        assert by_term(index) == by_term(fresh)
        assert np.array_equal(index.scores(["zebra mills", "tea in may"]), fresh.scores(["zebra mills", "tea in may"]))
    assert "walrus" not in index.vocab and "quixot" not in index.vocab
    assert not index._indices._buf[index._indices.n :].any() and not index._data._buf[index._data.n :].any()


@pytest.mark.parametrize("pool", [True, False])
def test_bm25_top_is_the_best_of_the_scores_within_the_allowed_texts_and_follows_writes(pool, monkeypatch):
    """The kernel's scores are the bits of the dense product's (ties included), on the thread pool and in this
    thread."""
    from assomem_gpu.kernels import bm25_top
    from assomem_gpu.retrieve import top_k
    from assomem_gpu.signals.lexical import BM25Index

    monkeypatch.setattr(bm25_top, "PARALLEL_POSTINGS", 0 if pool else 10**9)

    rng = np.random.default_rng(0)
    words = ["zebra", "mill", "tea", "apple", "walrus", "may", "river", "stone", "quixotic", "lamp"]
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 7))) for _ in range(60)]
    queries = ["zebra mill mill", "tea in may", "walrus", "nothing matches", "the"]
    index = BM25Index(texts[:40])
    for step in range(3):
        s = index.scores(queries)
        allowed = rng.random(s.shape) < 0.7
        for n in (1, 4, 100):
            for mask in (None, allowed):
                got = index.top(queries, n, mask)
                masked = s if mask is None else np.where(mask, s, 0)
                want = top_k(masked, min(n, s.shape[1]))
                want = np.where(np.take_along_axis(masked, want, axis=1) > 0, want, -1)
                assert np.array_equal(got[:, : want.shape[1]], want) and (got[:, want.shape[1]:] == -1).all()
        assert (index.top(queries, 3)[3:] == -1).all()  # no term any text holds / only a stop word
        if step == 0:
            index.add(texts[40:])  # the postings follow an add ...
        else:
            index.remove(rng.random(len(index.array("lengths"))) < 0.6)  # ... and a removal


def test_mentions_time_searches_only_texts_with_an_expressions_cue_words():
    from assomem_gpu.signals.temporal import _ABSOLUTE, _AGO, _DAYWORD, _PAST, _THIS, _WEEKDAY, mentions_time

    texts = ["We met last week.", "I moved in 2019.", "Call me on March 3rd", "It was two days ago",
             "this weekend works", "nothing here", "you may want to check", "12345 steps", "Latest news today!",
             "lastly, the past is past", "agog", "in may", "on 2023-03-05", "1. marching band 2. in 1999",
             "mid-march", "in Marchville 2020", "during 12 weeks"]
    for text in texts:  # the same answer as every expression searched everywhere
        want = any(p.search(text) is not None for p in (_PAST, _THIS, _DAYWORD, _WEEKDAY, _ABSOLUTE, _AGO))
        assert mentions_time(text) == want, text
    assert [mentions_time(t) for t in texts[:5]] == [True] * 5 and not mentions_time("nothing here")


def test_a_time_mark_is_its_forms_searched_in_the_text_itself():
    """The time mark's shortcuts (more cue words and characters, patterns without IGNORECASE on lower-cased text,
    both for ASCII texts only) find what each form's own pattern finds in the text as given, wherever the text holds
    one of its cue words: in every case, with and without a form there, each word of the shortcuts' cue sets in a
    form it completes, and with characters whose case folding reaches ASCII letters (the Kelvin sign, the long s, the
    dotted capital I)."""
    from assomem_gpu.signals.temporal import _ANCHORS, _DAY_NAMES, _EXPRESSIONS, _WORD

    def rule(text):
        words = set(_WORD.findall(text.lower()))
        hit = [any(not cues.isdisjoint(words) and pattern.search(text) for pattern, cues, *_ in forms)
               for forms in (_EXPRESSIONS, _ANCHORS)]
        return RESOLVED if hit[0] else ANCHORED if hit[1] else NO_TIME

    units = [u + s for u in ("day", "week", "weekend", "month", "year") for s in ("", "s")]
    texts = [f"{w} {u}" for u in units for w in ("last 2", "past", "previous", "this", "current", "2", "a", "two")]
    texts += [f"{n} {u} ago" for u in units for n in ("3", "a", "a few", "how many")]
    texts += [f"last {d}" for d in _DAY_NAMES.split("|")] + [f"Last {d.title()}s" for d in _DAY_NAMES.split("|")]
    texts += [f"this {p}" for p in ("morning", "afternoon", "evening", "is")] + ["yesterday", "Today!", "tonight"]
    texts += ["We met last week.", "The other day", "the other thing, by day", "last night", "last time on monday",
              "in 2019", "on 2023-03-05", "on 3/22", "1/2 cup", "3/4 of it", "March was cold", "mid-March", "in may",
              "IN MAY", "you may want to", "for two weeks", "For A Week", "I just finished", "JUST FINISHED",
              "recently", "Lately", "the 5th of June", "June 5", "1. marching band 2. in 1999", "in Marchville 2020",
              "during 12 weeks", "nothing here", "12345 steps", "24/7"]
    texts += [t.upper() for t in texts] + [t.title() for t in texts]
    texts += [t.replace("s", "\u017f").replace("i", "\u0130") for t in texts]
    texts += [t.replace("k", "\u212a") for t in texts] + [t + " \u2019" for t in texts]  # non-ASCII beside
    for text in texts:
        assert time_mark(text) == rule(text), text
    assert {time_mark(t) for t in texts} == {NO_TIME, ANCHORED, RESOLVED}


@pytest.mark.parametrize("window", [1, 2, 5])
def test_context_is_the_cosine_to_the_sum_of_the_neighbouring_turns_of_the_same_session(window):
    from assomem_gpu.signals.context import context_norms, context_scores

    rng = np.random.default_rng(window)
    offsets = np.array([0, 3, 4, 4, 9])  # sessions of 3, 1, 0 and 5 turns
    emb = rng.normal(size=(9, 6)).astype(np.float32)
    q = rng.normal(size=(2, 6)).astype(np.float32)
    session = np.repeat(np.arange(4), np.diff(offsets))
    norms = context_norms(offsets, emb, window)
    at = np.array([[0, 3, 4, 8], [2, 5, 6, 1]])
    cosines = q @ emb.T
    got = context_scores(lambda qb, rows: cosines[qb, rows], at, session, norms, window)
    for b in range(2):
        for c, i in enumerate(at[b]):
            near = [j for j in range(9) if 0 < abs(i - j) <= window and session[j] == session[i]]
            total = emb[near].sum(axis=0) if near else np.zeros(6)
            assert norms[i] == pytest.approx(np.linalg.norm(total), rel=1e-5)
            want = q[b] @ total / np.linalg.norm(total) if near else 0.0
            assert got[b, c] == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert got[0, 1] == 0 and norms[3] == 0  # alone in its session: no context
    assert context_norms(np.array([0]), np.zeros((0, 6), np.float32), window).shape == (0,)
    # with the candidates' own cosines known (each question's rows ascending), a neighbour that is the candidate as
    # many places along is read there; only the others are computed
    asked = []

    def counted(qb, rows):
        asked.append(rows.copy())
        return cosines[qb, rows]

    at = np.array([[0, 1, 2, 4, 5, 6], [0, 2, 4, 5, 7, 8]])  # session 0 whole in the first, not in the second
    plain = context_scores(counted, at, session, norms, window)
    asked.clear()
    read = context_scores(counted, at, session, norms, window, known=np.take_along_axis(cosines, at, axis=1))
    assert np.allclose(read, plain, atol=1e-6)
    assert len(asked) == 1 and 0 < len(asked[0]) < 2 * window * at.size  # fewer pairs asked for


@pytest.mark.parametrize("pool", [False, True])
def test_the_cpus_neighbour_kernel_gives_the_array_expressions_values(pool, monkeypatch):
    """``neighbour_values`` with the rows' own values known: on the CPU a Numba pass (``kernels/neighbours.py``), on
    the device array operations; the same values to the bit and the same turns looked up, whatever the sessions,
    the rows (whole sessions, scattered rows, padding that reads row 0, none), filtered rows' -inf, the offsets and
    the memory's ends."""
    import types

    from assomem_gpu.kernels import neighbours
    from assomem_gpu.signals.context import neighbour_values

    monkeypatch.setattr(neighbours, "PARALLEL_ENTRIES", 1 if pool else 1 << 62)
    array_module = types.SimpleNamespace(**vars(np))  # numpy, but not ``np``: the device's path
    rng = np.random.default_rng(7)
    for trial in range(100):
        n, b, c = int(rng.integers(1, 50)), int(rng.integers(1, 5)), int(rng.integers(0, 25))
        session = np.sort(rng.integers(0, max(1, n // 4), n))
        at = np.sort(np.stack([rng.choice(n, min(c, n), replace=False) for _ in range(b)]), axis=1)
        at[0, at.shape[1] // 2 :] = 0  # a question with fewer rows: its padding reads row 0
        values = rng.normal(size=(b, n)).astype(np.float32 if trial % 2 else np.float64)
        values[rng.random((b, n)) < 0.1] = -np.inf  # rows a filter excludes
        steps = (np.array([-1]), np.array([-2, -1, 1, 2]), np.arange(-3, 4)[np.arange(-3, 4) != 0])[trial % 3]
        asked = {}

        def of_pairs(qb, rows, key):
            asked[key] = sorted(zip(qb.tolist(), rows.tolist()))
            return values[qb, rows]

        known = np.take_along_axis(values, at, axis=1)
        got, same = neighbour_values(lambda q, r: of_pairs(q, r, "cpu"), at, session, steps, np, known)
        want, want_same = neighbour_values(lambda q, r: of_pairs(q, r, "array"), at, session, steps, array_module,
                                           known)
        assert got.dtype == want.dtype and np.array_equal(same, want_same), trial
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)) and asked.get("cpu") == asked.get("array"), trial


def test_session_is_the_best_relevance_among_the_candidates_of_the_same_session():
    """Each candidate gets the best relevance among its question's candidates from its session (runs of one session
    along a row; a row that ends in a session the next row starts in keeps its own); padding gets 0; the device form
    of the segment maximum gives the same."""
    from assomem_gpu.backend import get_backend
    from assomem_gpu.signals.session import session_scores

    session = np.repeat(np.arange(4), [3, 1, 2, 4])  # 10 utterances in sessions of 3, 1, 2 and 4 turns
    rel = np.random.default_rng(0).normal(size=(4, 10)).astype(np.float32)
    # ascending, then padding; the first row is full and ends in the session the second starts in
    at = np.array([[0, 2, 3, 6, 8, 9], [7, 8, 0, 0, 0, 0], [1, 4, 5, 7, 8, 0], [3, 0, 0, 0, 0, 0]])
    valid = np.arange(6) < np.array([6, 2, 5, 1])[:, None]
    rel_at = np.take_along_axis(rel, at, axis=1)
    got = session_scores(rel_at, at, valid, session, get_backend("cpu"))
    for b in range(4):
        for c in range(6):
            if not valid[b, c]:
                assert got[b, c] == 0
                continue
            mates = [at[b, j] for j in range(6) if valid[b, j] and session[at[b, j]] == session[at[b, c]]]
            assert got[b, c] == max(rel[b, m] for m in mates)  # another question's rows never count
    assert got[0, 3] == rel[0, [6, 8, 9]].max() and got[1, 0] == rel[1, [7, 8]].max() and got[3, 0] == rel[3, 3]
    assert session_scores(rel_at[:, :0], at[:, :0], valid[:, :0], session, get_backend("cpu")).shape == (4, 0)
    device_like = dataclasses.replace(get_backend("cpu"), name="cuda-like")  # segment_max's device form
    assert np.array_equal(session_scores(rel_at, at, valid, session, device_like), got)


def test_user_relevance_is_the_relevance_of_the_users_turns_and_the_lowest_elsewhere():
    from assomem_gpu.signals.user_relevance import own_turns, user_relevance_scores

    assert own_turns(["user", " User ", "assistant", "Alice", "USER"], ["user"]).tolist() == [1, 1, 0, 0, 1]
    assert own_turns(["Alice", "Bob", "Carol"], ["alice", "BOB"]).tolist() == [1, 1, 0]
    assert own_turns(["user"], []).tolist() == [0]
    own = np.array([True, False, True, False, False, True])
    best = np.array([[0.9, 0.2, 0.5, 0.7], [0.1, 0.3, 0.0, 0.0]])
    at = np.array([[0, 1, 3, 5], [2, 4, 0, 0]])
    valid = np.array([[True] * 4, [True, True, False, False]])
    got = user_relevance_scores(best, own[at], valid, np)
    assert got.tolist() == [[0.9, 0.2, 0.2, 0.7], [0.1, 0.1, 0.0, 0.0]]  # padding 0, not its row's lowest
    assert user_relevance_scores(best[:, :0], own[at][:, :0], valid[:, :0], np).shape == (2, 0)


@pytest.mark.parametrize("question, asks", [
    ("I remember you told me about the refineries. Which processes are used there?", True),
    ("What was the name of that hiking trail you recommended?", True),
    ("How many eggs did you say we need for the omelette?", True),
    ("You mentioned that companies use two-factor authentication. Which others?", True),
    ("I'm going back to our previous conversation about dinosaurs. What colour was the Plesiosaur?", True),
    ("Remind me what you’ve recommended for my back, and didn’t you say to stretch?", True),  # curly apostrophes
    ("Didn't you mention a bakery near the station?", True),
    ("In our previous conversation about the trip I made to Rome, which restaurant was it?", True),
    ("In our previous chat I mentioned my dog. What was its name?", False),  # the user said it
    ("Can you recommend a hotel for my trip to Miami?", False),  # a request, not a recall
    ("What did I buy for my sister?", False),
    ("Did you know that I moved?", False),
])
def test_a_question_that_recalls_what_the_assistant_said_asks_about_the_assistants_turns(question, asks):
    from assomem_gpu.signals.user_relevance import asked_speaker, asks_assistant

    assert asks_assistant(question) is asks
    own = np.array([[True, False, True], [True, False, False]])
    flipped = asked_speaker(own, [question, "Where did I go last week?"], np)
    assert flipped.tolist() == [[not asks, asks, not asks], [True, False, False]]


def test_a_reply_gets_the_bm25_score_of_the_turn_before_only_where_that_turn_asks():
    """The reply signal is the lexical context where the turn before holds a question mark (ASCII or full-width),
    else 0: the answer to "who will own the test plan?" gets its words, the turn after a statement that holds them
    does not."""
    from assomem_gpu.signals.lexical import BM25Index
    from assomem_gpu.signals.lexical_context import lexical_context_scores
    from assomem_gpu.signals.reply import asks, reply_scores

    texts = ["who will own the test plan?", "you should take the lead on that", "the test plan is late",  # session 0
             "the test plan is due", "I know",  # session 1
             "テスト計画は誰が担当しますか？", "the test plan, Isabella"]  # session 2
    assert asks(texts).tolist() == [True, False, False, False, False, True, False]
    assert asks([]).shape == (0,)
    session = np.repeat(np.arange(3), [3, 2, 2])
    scores = BM25Index(texts).scores(["who owns the test plan"])
    at = np.array([[0, 1, 2, 3, 4, 6]])
    context = lexical_context_scores(lambda qb, rows: scores[qb, rows], at, session, np)
    got = reply_scores(context, at, asks(texts), np)
    assert got[0, 1] == context[0, 1] == scores[0, 0] > 0  # the answer to the turn that asks
    assert context[0, 4] > 0 == got[0, 4]  # "I know", after a statement that holds the words
    assert got[0, 0] == 0 == got[0, 3]  # first turns of their sessions
    assert got[0, 5] == context[0, 5]  # after the full-width question mark (the BM25 of Japanese text: 0 here)


def test_lexical_context_is_the_bm25_score_of_the_turn_before_in_the_same_session():
    """A turn that answers the one holding the question's words gets that turn's BM25 score; a session's first turn
    gets 0 (the turn before it is another session's), whatever its own score; with the rows' own scores known the
    same comes out."""
    from assomem_gpu.signals.lexical import BM25Index
    from assomem_gpu.signals.lexical_context import lexical_context_scores

    texts = ["who will own the test plan", "you should take the lead on that", "fine, the plan is this week",  # session 0
             "the test plan is late",  # session 1, alone
             "lunch?", "sure", "the plan for lunch", "noodles", "own it"]  # session 2
    session = np.repeat(np.arange(3), [3, 1, 5])
    scores = BM25Index(texts).scores(["who owns the test plan", "what is the plan for lunch"])
    at = np.array([[1, 3, 4, 8], [0, 2, 5, 7]])
    got = lexical_context_scores(lambda qb, rows: scores[qb, rows], at, session, np)
    for b in range(2):
        for c, i in enumerate(at[b]):
            assert got[b, c] == (scores[b, i - 1] if i > 0 and session[i - 1] == session[i] else 0.0)
    assert got[0, 0] == scores[0, 0] > 0 and scores[0, 1] == 0  # the reply gets its question's words
    assert got[0, 1] == 0 == got[0, 2] < min(scores[0, 2], scores[0, 3])  # first turns of their sessions
    assert got[1, 3] == scores[1, 6] > 0
    assert lexical_context_scores(lambda qb, rows: rows.astype(float), at[:, :0], session, np).shape == (2, 0)
    # with the rows' own scores known (each question's ascending), a turn before that is the row one place before
    # is read there; only the others are asked for
    asked = []

    def counted(qb, rows):
        asked.append(rows.copy())
        return scores[qb, rows]

    at = np.array([[0, 1, 2, 6, 7], [3, 4, 5, 6, 8]])  # session 0 whole in the first; 4 to 6 in the second
    plain = lexical_context_scores(counted, at, session, np)
    asked.clear()
    read = lexical_context_scores(counted, at, session, np, np.take_along_axis(scores, at, axis=1))
    assert np.array_equal(read, plain) and (plain > 0).sum() >= 3
    assert len(asked) == 1 and sorted(asked[0].tolist()) == [5, 7]  # 6's and 8's turns before: not among the rows


def test_bm25_top_keeps_ties_to_the_lower_text_positive_scores_and_refuses_a_mask_of_another_shape():
    from assomem_gpu.kernels.bm25_top import bm25_top

    # one query, two terms; postings (CSC by term): term 0 in texts 1, 2; term 1 in texts 0, 2, 3 (text 1 is scored
    # before text 0)
    p_indptr, p_indices = np.array([0, 2, 5]), np.array([1, 2, 0, 2, 3])
    p_data = np.array([1, 1, 1, 1, 2], np.float32)
    lengths = np.array([1.0, 1.0, 2.0, 2.0])
    args = (np.array([0, 2]), np.array([0, 1]), np.array([1.0, 1.0]), np.array([0.5, 0.5]), p_indptr, p_indices,
            p_data, lengths, 1.5, 0.75, 1.5)
    # text 2 holds both terms; text 3 term 1 twice; texts 0 and 1 one term once at the same length: a tie
    assert bm25_top(*args, 5).tolist() == [[2, 3, 0, 1, -1]]  # the lower text first; the fifth place empty
    idf_zero = args[:3] + (np.array([0.5, 0.0]),) + args[4:]
    assert bm25_top(*idf_zero, 5).tolist() == [[1, 2, -1, -1, -1]]  # a zero score is not a hit
    assert bm25_top(*args, 5, np.array([[True, False, False, True]])).tolist() == [[3, 0, -1, -1, -1]]
    with pytest.raises(ValueError, match="allowed"):
        bm25_top(*args, 2, np.ones((1, 3), bool))
