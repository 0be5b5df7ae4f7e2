import itertools

import numpy as np
import pytest

from assomem_gpu.data import load_dataset
from assomem_gpu.encode import HashingEncoder
from assomem_gpu.clues import centroid_embeddings, keyword_clue
from assomem_gpu.graph import (GraphConfig, build_graph, clue_state, grow_clue_state, merge_clues, shrink_clue_state,
                               similarity_pairs)
from assomem_gpu.retrieve import EmbeddedDataset


def unit(rows):
    a = np.asarray(rows, dtype=np.float32)
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def test_similarity_pairs_threshold_and_self_loops():
    emb = unit([[1, 0], [0.99, 0.1], [0, 1], [0.1, 0.99]])
    i, j, v = similarity_pairs(emb, 0.9, k=3)
    assert set(zip(i.tolist(), j.tolist())) == {(0, 1), (1, 0), (2, 3), (3, 2)}
    assert np.all(v > 0.9)


def test_merge_is_transitive():
    # a~b and b~c above δ, a~c below: one clue for all three (connected components), d alone
    a, b, c = [1, 0, 0], [0.9, 0.436, 0], [0.62, 0.785, 0]
    emb = unit([a, b, c, [0, 0, 1]])
    sims = emb @ emb.T
    assert sims[0, 1] > 0.85 and sims[1, 2] > 0.85 and sims[0, 2] < 0.85
    labels = merge_clues(emb, 0.85)
    assert labels[0] == labels[1] == labels[2] != labels[3]


def test_leader_merge_does_not_chain():
    # the chain of test_merge_is_transitive: c is near b, but b follows a, and c is not near a: c leads its own clue
    a, b, c = [1, 0, 0], [0.9, 0.436, 0], [0.62, 0.785, 0]
    emb = unit([a, b, c, [0, 0, 1], [0.95, 0.31, 0]])
    assert merge_clues(emb, 0.85, "leaders").tolist() == [0, 0, 1, 2, 0]
    with pytest.raises(ValueError, match="clue_merge"):
        GraphConfig(clue_merge="chains")
    emb = arc(300, 3)  # the definition, session by session, against the kernel
    labels, leaders = [], []
    for s in range(len(emb)):
        near = [t for t in leaders if np.round(float(emb[t].astype(np.float64) @ emb[s].astype(np.float64)), 6) > 0.98]
        labels.append(labels[near[0]] if near else len(leaders))
        leaders += [] if near else [s]
    assert merge_clues(emb, 0.98, "leaders").tolist() == labels and len(leaders) > 5


@pytest.mark.parametrize("products", [1, 1 << 24])
def test_leader_merge_in_blocks_equals_the_rule_on_all_pairs(products, monkeypatch):
    """Sessions compared with the leaders before them, a block at a time (blocks of 64 sessions: the leaders of the
    blocks before and the block's own; or one block), label as the rule read off every δ-pair that
    ``similarity_pairs`` finds: clustered vectors, every fifth a duplicate of one session."""
    from assomem_gpu import graph

    monkeypatch.setattr(graph, "LEADER_PRODUCTS", products)
    rng = np.random.default_rng(4)
    emb = unit(rng.normal(size=(35, 32))[rng.integers(35, size=700)] + 0.5 * rng.normal(size=(700, 32)))
    emb[::5] = emb[3]
    i, j, _ = similarity_pairs(emb, 0.7, k=len(emb))
    labels, leaders = [], []
    for s in range(len(emb)):
        near = sorted(set(j[(i == s) & (j < s)].tolist()) & set(leaders))
        labels.append(labels[near[0]] if near else len(leaders))
        leaders += [] if near else [s]
    assert merge_clues(emb, 0.7, "leaders").tolist() == labels and 30 < len(leaders) < 600


def arc(n: int, seed: int) -> np.ndarray:
    """``n`` unit vectors along an arc (each δ-near a few others: leaders' removals cascade), in shuffled order."""
    rng = np.random.default_rng(seed)
    angle = rng.permutation(np.linspace(0, 3.0, n))
    emb = np.zeros((n, 8))
    emb[:, 0], emb[:, 1] = np.cos(angle), np.sin(angle)
    emb[:, 2:] = 0.02 * rng.normal(size=(n, 6))
    return unit(emb).astype(np.float32)


def test_leader_clues_grow_and_shrink_as_built():
    config = GraphConfig(delta=0.97, gamma=0.9, max_neighbors=3, clue_merge="leaders")
    key = lambda c: sorted(zip(c[0].tolist(), c[1].tolist(), c[2].tolist()))  # noqa: E731
    emb = arc(40, 0)
    state = clue_state(emb[:1], config)
    for n in range(2, len(emb) + 1):
        state = grow_clue_state(state, emb[:n], config)
    built = clue_state(emb, config)
    assert np.array_equal(state.labels, built.labels) and np.array_equal(state.emb, built.emb)
    assert key(state.candidates) == key(built.candidates)
    assert np.bincount(built.labels).max() > 1
    rng = np.random.default_rng(1)
    cascades = 0
    for _ in range(30):
        keep = rng.random(len(emb)) > rng.choice([0.05, 0.2, 0.5])
        state = shrink_clue_state(built, keep, emb[keep], config)
        fresh = clue_state(emb[keep], config)
        assert np.array_equal(state.labels, fresh.labels)
        assert np.array_equal(state.emb, fresh.emb)
        assert key(state.candidates) == key(fresh.candidates)
        # the removal leaves the leaders' rows made, and an add after it grows them as a build of the same sessions
        assert np.array_equal(state.leader_rows.view, emb[keep][np.unique(fresh.labels, return_index=True)[1]])
        more = np.concatenate([emb[keep], emb[~keep][:3]])
        grown, again = grow_clue_state(state, more, config), clue_state(more, config)
        assert np.array_equal(grown.labels, again.labels) and key(grown.candidates) == key(again.candidates)
        # a cascade: a session whose leader stayed now leads, or follows another
        first = np.unique(built.labels, return_index=True)[1]
        old_lead, new_lead = first[built.labels][keep], np.flatnonzero(keep)[np.unique(fresh.labels,
                                                                                      return_index=True)[1]]
        cascades += int(np.any(keep[old_lead] & (old_lead != new_lead[fresh.labels])))
    assert cascades > 0


@pytest.fixture
def data(lme_file):
    return EmbeddedDataset.build(load_dataset(f"longmemeval:{lme_file}"), HashingEncoder())


def memory_graph(data, memory, config=GraphConfig()):
    """The graph of one memory of a dataset, its sessions' clues their centroids."""
    ds = data.dataset
    bank = ds.bank.select(ds.memories[memory].sessions)
    emb = data.utterances[ds.memory_utterances(memory)]
    return build_graph(bank, emb, centroid_embeddings(bank.offset_array, emb), config)


def test_graph_edges_and_csr(data):
    g = memory_graph(data, 0, GraphConfig(delta=0.99, gamma=0.99, adjacency_weight=0.5))
    assert g.n_utt == 6 and g.n_clues == 3 and g.n_nodes == 9
    adj = g.adjacency.toarray()
    assert np.allclose(adj, adj.T)
    for i in range(g.n_utt):  # ownership: each utterance to its session's clue, weight 1
        assert adj[i, g.n_utt + g.utt_clue[i]] == 1.0
    assert adj[0, 1] == 0.5 and adj[1, 2] == 0  # consecutive turns of one session only
    m = g.transition.toarray()
    assert np.allclose(m.sum(axis=0), 1)


def test_speaker_nodes(locomo_file):
    data = EmbeddedDataset.build(load_dataset(f"locomo:{locomo_file}"), HashingEncoder())
    g = memory_graph(data, 0, GraphConfig(speakers=True))
    assert g.n_speakers == 2  # Caroline and Melanie
    adj = g.adjacency.toarray()
    first_speaker = g.n_utt + g.n_clues
    assert adj[0, first_speaker] == 1 and adj[1, first_speaker + 1] == 1  # utterance 0 by Caroline, 1 by Melanie


def test_keyword_clues_name_the_session():
    clue = keyword_clue(["My daily commute to work takes 45 minutes each way.", "That is a long commute; podcasts "
                         "can help."])
    assert clue.split(", ")[0] == "commute" and "podcasts" in clue and "the" not in clue.split(", ")
    assert "banana" in keyword_clue(["Give me a recipe for banana bread.", "Mix flour, bananas, sugar and eggs."])
    assert keyword_clue(["the and of", "it is"]) == ""  # stop words only: no clue text (the centroid stands in)


def test_stop_words_are_scikit_learns_read_without_importing_it():
    import subprocess
    import sys

    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    from assomem_gpu.clues import _stop_words

    assert _stop_words() == ENGLISH_STOP_WORDS and len(ENGLISH_STOP_WORDS) > 300
    code = "import sys; from assomem_gpu.clues import _stop_words; _stop_words(); print('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_keyword_clues_of_many_sessions_are_each_sessions_own_by_the_definition():
    """The array version against the definition written out with a Counter: same terms, scores and tie order."""
    import math
    import re
    from collections import Counter

    from assomem_gpu.clues import _english, _idf, keyword_clues

    def by_definition(texts, n_terms=8):
        counts = Counter()
        for text in texts:
            words = [w for w in re.findall(r"(?u)\b[a-zA-Z][a-zA-Z0-9'-]+\b", text.lower()) if w not in _english()[1]]
            counts.update(words)
            counts.update(" ".join(p) for p in zip(words, words[1:]))
        score = {t: (1 + math.log(n)) * _idf(t.split(" ")).max() for t, n in counts.items()}
        return ", ".join(sorted(score, key=lambda t: (-score[t], t))[:n_terms])

    rng = np.random.default_rng(5)
    vocab = ("commute podcast zyxqv quokkas qwertz banana the and of it Lisbon lisbon flights x1 o'neil well-known "
             "café walk walks walking").split()
    sessions = [[" ".join(rng.choice(vocab, size=rng.integers(0, 12))) for _ in range(rng.integers(0, 4))]
                for _ in range(300)] + [[], [""], ["the and of"]]
    assert keyword_clues(sessions) == [by_definition(s) for s in sessions]
    assert keyword_clues(sessions, n_terms=2) == [by_definition(s, 2) for s in sessions]
    assert keyword_clues([]) == []


@pytest.mark.parametrize("block", [(64, 48), (64, 10_000), (1000, 1000)])
def test_upper_triangle_range_search_finds_every_pair_once_each_way(block):
    from assomem_gpu.graph import _range_search

    x = unit(np.random.default_rng(5).normal(size=(203, 8)))
    rows, cols, sims = _range_search(x, 0.5, block=block)  # blocks of rows and of columns, the last ones short
    prod = x @ x.T
    want = {(i, j) for i, j in zip(*np.nonzero(prod > 0.5)) if i != j}
    got = list(zip(rows.tolist(), cols.tolist()))
    assert len(got) == len(set(got)) and set(got) == want
    assert np.allclose(sims, prod[rows, cols], atol=1e-5)


def test_memory_ending_with_an_empty_session(tmp_path):
    import json

    lines = [{"type": "session", "id": "a", "utterances": [{"text": "one"}, {"text": "two"}, {"text": "three"}]},
             {"type": "session", "id": "b", "utterances": []}]
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    data = EmbeddedDataset.build(load_dataset(f"jsonl:{path}"), HashingEncoder())
    g = memory_graph(data, 0)
    assert g.n_utt == 3 and g.adjacency[0, 1] == 1.0 and g.adjacency[1, 2] == 1.0


def test_growing_clues_session_by_session_equals_building_them():
    rng = np.random.default_rng(11)
    centres = unit(rng.normal(size=(4, 12)))
    # sessions near four topics, plus bridges halfway between two topics that join their clues when they arrive
    sessions = [centres[i % 4] + 0.25 * rng.normal(size=12) for i in range(24)]
    sessions[9] = centres[0] + centres[1]
    sessions[17] = centres[2] + centres[3]
    emb = unit(np.stack(sessions)).astype(np.float32)
    config = GraphConfig(delta=0.8, gamma=0.5, max_neighbors=3, clue_merge="components")
    state = clue_state(emb[:3], config)
    merged_any = False
    for n in range(4, len(emb) + 1):
        before = len(state.emb)
        state = grow_clue_state(state, emb[:n], config)
        built = clue_state(emb[:n], config)
        merged_any |= len(state.emb) < before
        assert np.array_equal(state.labels, built.labels)
        assert np.array_equal(state.emb, built.emb)
        key = lambda c: sorted(zip(c[0].tolist(), c[1].tolist(), c[2].tolist()))  # noqa: E731
        assert key(state.candidates) == key(built.candidates)  # the same cosines to the bit
    assert merged_any  # a bridge session did join two clues into one


def test_leader_clues_grown_twice_from_one_state_each_equal_the_build():
    """A clue state is not changed by growing it: a second growth of the same state (another session after it) sees
    neither the first one's new clue nor the clue the first one joined."""
    rng = np.random.default_rng(13)
    emb = unit(rng.normal(size=(12, 16))).astype(np.float32)  # near-orthogonal: every session leads its own clue
    config = GraphConfig(delta=0.8, gamma=0.5, max_neighbors=3)
    state = grow_clue_state(clue_state(emb[:8], config), emb[:9], config)
    joins = np.concatenate([emb[:9], unit(emb[3:4] + 0.05 * emb[10:11])])  # near session 3: joins its clue
    for later in (emb[:10], joins, emb[np.r_[:9, 11]]):
        grown = grow_clue_state(state, later, config)
        built = clue_state(later, config)
        assert np.array_equal(grown.labels, built.labels) and np.array_equal(grown.emb, built.emb)
    assert grown.labels[-1] == 9 and clue_state(joins, config).labels[-1] == 3


def test_clue_vectors_append_in_place_keep_what_each_state_held_and_pack():
    """An add appends the one vector it makes and copies only the clue numbering: the state grown from reads what it
    held, a second growth from it copies, and superseded rows are packed away once they outnumber live ones, clue
    merges (a clue's row dropped from the numbering) included."""
    from assomem_gpu.clue_vectors import ClueVectors

    rng = np.random.default_rng(5)
    dense = unit(rng.normal(size=(130, 8))).astype(np.float32)
    first = vectors = ClueVectors.packed_from(dense)
    held = dense.copy()
    in_place = packed = merged = False
    for step in range(900):  # a clue changes (a session joins it), a new one comes, or two merge into the first
        v = unit(rng.normal(size=(1, 8)))[0].astype(np.float32)
        row = vectors.row
        if step % 3 == 0:
            c, row = len(dense), np.append(row, -1)
            dense = np.concatenate([dense, v[None]])
        elif step % 7 == 1:
            c, gone = step % 50, 60 + step % 50
            row, dense = np.delete(row, gone), np.delete(dense, gone, axis=0)
        else:
            c, dense = step % len(dense), dense.copy()
        dense[c] = v
        grown = vectors.with_vector(row, c, v)
        assert np.array_equal(grown.packed, dense) and np.array_equal(grown.of(np.arange(len(dense))), dense)
        assert np.allclose(grown.cosines(v), dense @ v, atol=1e-6)
        in_place |= np.shares_memory(grown.view, vectors.view)
        packed |= len(grown.view) == len(dense) < len(vectors.view)
        merged |= packed and step % 7 == 1
        vectors = grown
    assert in_place and packed and merged
    assert np.array_equal(first.of(np.arange(130)), held)  # appended to in place, yet reading what it held
    again = first.with_vector(first.row, 0, dense[0])  # a second growth from the first state: a copy
    assert not np.shares_memory(again.view, vectors.view) and np.array_equal(first.packed, held)
    assert np.array_equal(again.packed, np.concatenate([dense[:1], held[1:]]))


def test_shrinking_clues_equals_building_them():
    rng = np.random.default_rng(12)
    centres = unit(rng.normal(size=(4, 12)))
    sessions = [centres[i % 4] + 0.1 * rng.normal(size=12) for i in range(24)]
    sessions[9] = centres[0] + centres[1]  # bridges: removing one splits a clue in two
    sessions[17] = centres[2] + centres[3]
    emb = unit(np.stack(sessions)).astype(np.float32)
    config = GraphConfig(delta=0.6, gamma=0.5, max_neighbors=3)
    key = lambda c: sorted(zip(c[0].tolist(), c[1].tolist(), c[2].tolist()))  # noqa: E731
    split_any = False
    for drop in ([9], [17, 3], [0], [9, 17], list(range(1, 24, 2)), [23]):
        keep = np.ones(len(emb), bool)
        keep[drop] = False
        full = clue_state(emb, config)
        state = shrink_clue_state(full, keep, emb[keep], config)
        built = clue_state(emb[keep], config)
        split_any |= len(state.emb) > len(np.unique(full.labels[keep]))
        assert np.array_equal(state.labels, built.labels)
        assert np.array_equal(state.emb, built.emb)
        assert key(state.candidates) == key(built.candidates)
    assert split_any  # removing a bridge did split its clue


def clustered(n_sessions: int, per: int = 5, dim: int = 32, seed: int = 0):
    """Utterance vectors around 20 topics, their sessions' centroids and a bank of ``n`` sessions."""
    from assomem_gpu.memory import MemoryBank

    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim))
    emb = unit(centres[rng.integers(20, size=n_sessions * per)] + 0.4 * rng.normal(size=(n_sessions * per, dim)))

    def bank(n):
        b = MemoryBank()
        for s in range(n):
            b.add_session(f"s{s}", 0.0, [(f"s{s}:{t}", "user", "x") for t in range(per)])
        return b

    return emb, bank


def assert_same_graph(a, b):
    """Equal to the bit: the matrices' arrays (the order of a row's entries is the order PPR sums them in), the
    degrees, the clue grouping and the clue embeddings."""
    assert np.array_equal(a.clue_emb, b.clue_emb)
    for m1, m2 in ((a.adjacency, b.adjacency), (a.transition, b.transition)):
        assert m1.shape == m2.shape
        for part in ("indptr", "indices", "data"):
            x, y = getattr(m1, part), getattr(m2, part)
            assert x.dtype == y.dtype and np.array_equal(x, y), part
    assert np.array_equal(a.degree, b.degree) and np.array_equal(a.by_clue, b.by_clue)
    assert np.array_equal(a.utt_clue, b.utt_clue)
    for x, y in zip(a.utt_pairs, b.utt_pairs):
        assert np.array_equal(x, y)
    assert (a.search is None) == (b.search is None)
    if a.search is not None:
        assert np.array_equal(a.search.codebook.centroids, b.search.codebook.centroids)
        assert np.array_equal(a.search.probe, b.search.probe)
        assert all(np.array_equal(x, y) for x, y in zip(a.search.lists, b.search.lists))  # grown by insertion,
        # rows ascending in each list as a build's (a probed question's members are sorted by merging the lists)
        assert np.array_equal(a.search.held[0], b.search.held[0])  # kept by an add only where no empty list filled
        assert np.array_equal(a.search.held[1].centroids, b.search.held[1].centroids)


@pytest.mark.parametrize("two_level", [False, True])
def test_ivf_graph_grown_equals_built_across_codebook_doublings(monkeypatch, two_level):
    """``two_level``: codebooks of 25 lists and more are trained in two levels (the 800-row one: 50 lists in 7
    groups)."""
    from assomem_gpu import ivf
    from assomem_gpu.graph import grow_graph

    if two_level:
        monkeypatch.setattr(ivf, "TWO_LEVEL_LISTS", 25)

    per = 5
    emb, bank = clustered(320, per)
    clue = centroid_embeddings(np.arange(0, 320 * per + 1, per), emb)
    config = GraphConfig(gamma=0.6, exact_limit=200, list_size=16, n_probe=3)
    g = build_graph(bank(10), emb[: 10 * per], clue[:10], config)
    assert g.search is None  # 50 utterances: below exact_limit, all pairs compared
    trained, grown = [], {}
    for hi in (30, 41, 90, 200, 260, 300):  # crosses 200, 400 and 800 utterances
        g = grown[hi] = grow_graph(g, bank(hi), emb[: hi * per], clue[:hi], config)
        assert_same_graph(g, build_graph(bank(hi), emb[: hi * per], clue[:hi], config))
        trained.append(0 if g.search is None else g.search.codebook.rows)
    assert trained == [0, 200, 400, 800, 800, 800]
    # the 260-session graph grown again, by other sessions: the buffer its probes are a view of holds the next
    # growth's rows already
    rows = np.r_[: 260 * per, 300 * per : 320 * per]
    branch = grow_graph(grown[260], bank(280), emb[rows], clue[np.r_[:260, 300:320]], config)
    assert_same_graph(branch, build_graph(bank(280), emb[rows], clue[np.r_[:260, 300:320]], config))
    assert_same_graph(grown[300], build_graph(bank(300), emb[: 300 * per], clue[:300], config))


@pytest.mark.parametrize("config", [GraphConfig(gamma=0.6, delta=0.8),
                                    GraphConfig(gamma=0.2, delta=0.8, max_neighbors=2),  # leaders; each clue's
                                    # top 2 of many clue pairs: a joined clue's new pairs push others' lists around
                                    GraphConfig(gamma=0.3, delta=0.5, max_neighbors=3, clue_merge="components"),
                                    GraphConfig(gamma=0.6, delta=0.5, adjacency_weight=0.0, exact_limit=100,
                                                list_size=16, n_probe=3, clue_merge="components")])
def test_a_graph_grown_and_shrunk_equals_the_build_to_the_bit(config):
    """Each add and each remove splices the old matrices' untouched rows with fresh ones (``graph._spliced``), clue
    merges and splits included: an add that merges no clue appends its rows to the old graph's pools, which keeps
    its own rows, until the pools hold more garbage than rows and the matrix is spliced into packed pools."""
    from assomem_gpu.graph import grow_graph, shrink_graph

    per = 5
    emb, bank = clustered(60, per, seed=3)
    clue = centroid_embeddings(np.arange(0, 60 * per + 1, per), emb)
    g = build_graph(bank(1), emb[:per], clue[:1], config)
    merged = appended = packed = pooled = False
    for hi in range(2, 61):
        before, old = g.n_clues, g
        held, held_clues = old.edges.csr("scaled"), old.clue_emb.copy()
        g = grow_graph(g, bank(hi), emb[: hi * per], clue[:hi], config)
        merged |= g.n_clues < before
        appended |= np.shares_memory(g.edges.indices, old.edges.indices)
        packed |= g.edges.garbage == 0 < old.edges.garbage
        pooled |= np.shares_memory(g.clue_view, old.clue_view)  # the clue vectors appended to, not copied
        assert_same_graph(g, build_graph(bank(hi), emb[: hi * per], clue[:hi], config))
        assert (old.edges.csr("scaled") != held).nnz == 0  # the graph grown from reads what it held
        assert np.array_equal(old.clue_vectors.of(np.arange(before)), held_clues)
    assert merged or config.delta > 0.5  # a session joined clues: the clue nodes were renamed
    assert appended and packed and pooled
    rng = np.random.default_rng(4)
    sessions, split = np.arange(60), False
    for drop in (1, 5, 1, 20):
        keep_s = np.ones(len(sessions), bool)
        keep_s[rng.choice(len(sessions), drop, replace=False)] = False
        keep_u = np.repeat(keep_s, per)
        sessions = sessions[keep_s]
        rows = (sessions[:, None] * per + np.arange(per)).ravel()
        kept, labels = bank(60).select(sessions), g.clues.labels
        g = shrink_graph(g, kept, keep_u, keep_s, emb[rows], clue[sessions], config)
        split |= any(len(np.unique(g.clues.labels[labels[keep_s] == c])) > 1 for c in labels[~keep_s])
        codebook = None if g.search is None else g.search.codebook
        assert_same_graph(g, build_graph(kept, emb[rows], clue[sessions], config, codebook=codebook))
    assert split or config.delta > 0.5  # a clue that lost a session fell apart: its utterances' rows were made again
    gone = np.setdiff1d(np.arange(60), sessions)
    for back in (gone[:3], gone[3:]):  # adds after the removals emptied lists (IVF: each new row joins its own)
        sessions = np.concatenate([sessions, back])
        rows = (sessions[:, None] * per + np.arange(per)).ravel()
        kept = bank(60).select(sessions)
        g = grow_graph(g, kept, emb[rows], clue[sessions], config)
        codebook = None if g.search is None else g.search.codebook
        assert_same_graph(g, build_graph(kept, emb[rows], clue[sessions], config, codebook=codebook))


def test_ivf_rows_added_join_their_own_lists_where_lists_between_them_are_empty():
    """``UttSearch.grown`` inserts each new row at the end of its list: two new rows whose lists have only empty
    lists between them share an insertion point, and go in list order, not in the order they came."""
    from assomem_gpu import ivf
    from assomem_gpu.graph import UttSearch

    book = ivf.Codebook(np.eye(4, 8, dtype=np.float32), rows=3)
    search = UttSearch(book, np.array([[1], [1], [1]], np.int32))  # lists 0, 2 and 3 empty
    for probe in ([[3], [0], [0], [2], [1], [0]], [[2], [1]], [[0]]):
        search = search.grown(np.array(probe, np.int32))
        want = ivf.members(search.probe, book.n_lists)
        assert all(np.array_equal(x, y) for x, y in zip(search.lists, want))


def test_an_add_makes_again_the_clue_rows_whose_clue_edges_a_joined_clue_moved(monkeypatch):
    """A clue a session joins gets new pairs and top-k lists change around it: the clue rows made again are the
    touched clues' and their clue–clue neighbours' before and after (``graph._changed_clues``). Made again for the
    touched clues alone, some grown graph would differ from the build."""
    from assomem_gpu import graph

    per = 5
    emb, bank = clustered(60, per, seed=3)
    clue = centroid_embeddings(np.arange(0, 60 * per + 1, per), emb)
    config = GraphConfig(gamma=0.2, delta=0.8, max_neighbors=2)
    monkeypatch.setattr(graph, "_changed_clues", lambda g, candidates, config, n_c, touched:
                        (touched, graph._clue_edges(candidates, config, n_c)))
    g, differs = build_graph(bank(1), emb[:per], clue[:1], config), 0
    for hi in range(2, 61):
        g = graph.grow_graph(g, bank(hi), emb[: hi * per], clue[:hi], config)
        built = build_graph(bank(hi), emb[: hi * per], clue[:hi], config)
        differs += (g.adjacency != built.adjacency).nnz > 0
        g = built  # each add from the right graph
    assert differs > 0


def test_clue_edges_of_some_rows_are_those_rows_of_every_clues_edges():
    """``graph._clue_edges`` with rows: each of those rows as the whole matrix has it (an edge of a row may come from
    its own top-k list or from a neighbour's), from the lists of the rows and their candidates alone."""
    from assomem_gpu import graph

    rng = np.random.default_rng(4)
    emb = unit(rng.normal(size=(80, 4)))
    i, j = np.nonzero(np.triu(emb @ emb.T > 0.3, 1))
    i, j = np.concatenate([i, j]), np.concatenate([j, i])
    candidates = (i, j, graph.exact_cosines(emb, i, j))
    config = GraphConfig(gamma=0.3, max_neighbors=3)
    full = graph._clue_edges(candidates, config, len(emb))
    lists = graph.select_top(*candidates, config.gamma, config.max_neighbors)
    for rows in (np.arange(0), np.array([5]), np.sort(rng.choice(80, 20, replace=False)), np.arange(80)):
        part = graph._clue_edges(candidates, config, len(emb), rows)
        assert (part[rows] != full[rows]).nnz == 0 and part[rows].nnz == full[rows].nnz
        if len(rows) == 20:  # some row's edge is only in the list of a clue outside the rows
            theirs = ~np.isin(lists[0], rows) & np.isin(lists[1], rows)
            mine = set(zip(lists[0].tolist(), lists[1].tolist()))
            assert any((c, r) not in mine for r, c in zip(lists[0][theirs].tolist(), lists[1][theirs].tolist()))


def test_a_leader_graph_grown_by_several_sessions_at_once_equals_the_build_to_the_bit():
    """An add of several sessions, some joining old clues and some the clues that earlier sessions of the same add
    lead: each new utterance joins its clue's group in ``by_clue`` (no clue merges: nothing is renumbered)."""
    from assomem_gpu.graph import grow_graph

    per, n = 3, 40
    emb, bank = clustered(n, per, seed=6)
    clue = arc(n, 1)
    config = GraphConfig(delta=0.97, gamma=0.6, max_neighbors=3, clue_merge="leaders")
    g = build_graph(bank(4), emb[: 4 * per], clue[:4], config)
    interleaved = False
    for lo, hi in ((4, 11), (11, 25), (25, 40)):
        before = g.n_clues
        g = grow_graph(g, bank(hi), emb[: hi * per], clue[:hi], config)
        assert_same_graph(g, build_graph(bank(hi), emb[: hi * per], clue[:hi], config))
        added = g.clues.labels[lo:hi]
        new_clue = added >= before
        interleaved |= bool((np.diff(added[new_clue]) < 0).any() or (~new_clue).any() and new_clue.any())
    assert interleaved


def test_a_leader_graph_shrunk_equals_the_build_to_the_bit():
    """A removed leader's followers find other leaders, and pull sessions of clues that lost nothing with them: those
    sessions' utterance rows are made again too."""
    from assomem_gpu.graph import shrink_graph

    per, n = 3, 40
    emb, bank = clustered(n, per, seed=5)
    clue = arc(n, 0)
    config = GraphConfig(delta=0.97, gamma=0.6, max_neighbors=3, clue_merge="leaders")
    full = build_graph(bank(n), emb[: n * per], clue, config)
    rng = np.random.default_rng(2)
    pulled = 0
    for _ in range(30):
        keep_s = rng.random(n) > 0.15
        sessions = np.flatnonzero(keep_s)
        rows = (sessions[:, None] * per + np.arange(per)).ravel()
        kept = bank(n).select(sessions)
        g = shrink_graph(full, kept, np.repeat(keep_s, per), keep_s, emb[rows], clue[sessions], config)
        assert_same_graph(g, build_graph(kept, emb[rows], clue[sessions], config))
        before, after = full.clues.labels[keep_s], g.clues.labels
        whole = ~np.isin(before, full.clues.labels[~keep_s])  # sessions of clues that lost no session
        pulled += any(len(np.unique(before[after == a])) > 1 for a in np.unique(after[whole]))
    assert pulled > 0


@pytest.mark.parametrize("config", [GraphConfig(gamma=-0.2, delta=0.5, max_neighbors=2),
                                    GraphConfig(max_neighbors=0, adjacency_weight=0.0, delta=0.5)])
def test_writes_with_empty_sessions_and_edge_settings_equal_the_build_to_the_bit(config):
    """Sessions without turns (a clue node with no member: lonely unless a clue edge reaches it), negative
    similarity thresholds (edges of negative weight) and no similarity edges at all."""
    from assomem_gpu.graph import grow_graph, shrink_graph
    from assomem_gpu.memory import MemoryBank

    rng = np.random.default_rng(5)
    sizes = rng.integers(0, 4, size=30)
    sizes[[0, 7, 8]] = 0
    emb = unit(rng.normal(size=(int(sizes.sum()), 16)))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    clue = unit(rng.normal(size=(30, 16)))

    def bank(sessions):
        b = MemoryBank()
        for s in sessions:
            b.add_session(f"s{s}", 0.0, [(f"s{s}:{t}", "user", "x") for t in range(sizes[s])])
        return b

    def rows(sessions):
        return np.concatenate([np.arange(offsets[s], offsets[s + 1]) for s in sessions]).astype(np.int64)

    held = [0, 1]
    g = build_graph(bank(held), emb[rows(held)], clue[held], config)
    for s in range(2, 30):
        held.append(s)
        g = grow_graph(g, bank(held), emb[rows(held)], clue[held], config)
        assert_same_graph(g, build_graph(bank(held), emb[rows(held)], clue[held], config))
    for drop in ([7], [3, 8, 20], [0]):
        keep_s = np.asarray([s not in drop for s in held])
        keep_u = np.repeat(keep_s, sizes[held])
        held = [s for s in held if s not in drop]
        g = shrink_graph(g, bank(held), keep_u, keep_s, emb[rows(held)], clue[held], config)
        assert_same_graph(g, build_graph(bank(held), emb[rows(held)], clue[held], config))


def test_ivf_graph_shrunk_equals_built_with_its_codebook_and_finds_most_edges():
    from assomem_gpu.graph import grow_graph, shrink_graph

    per = 5
    emb, bank = clustered(300, per, seed=1)
    clue = centroid_embeddings(np.arange(0, 300 * per + 1, per), emb)
    config = GraphConfig(gamma=0.6, exact_limit=200, list_size=16, n_probe=3)
    g = build_graph(bank(300), emb, clue, config)
    exact = build_graph(bank(300), emb, clue, GraphConfig(gamma=0.6))
    found = set(zip(*g.utt_pairs[:2])) & set(zip(*exact.utt_pairs[:2]))
    assert len(found) / len(exact.utt_pairs[0]) > 0.9  # edge recall of the inverted file
    keep_s = np.ones(300, bool)
    keep_s[np.random.default_rng(2).choice(300, 40, replace=False)] = False
    keep_u = np.repeat(keep_s, per)
    kept = bank(300).select(np.flatnonzero(keep_s))
    shrunk = shrink_graph(g, kept, keep_u, keep_s, emb[keep_u], clue[keep_s], config)
    assert_same_graph(shrunk, build_graph(kept, emb[keep_u], clue[keep_s], config, codebook=g.search.codebook))
    # the removed sessions added back at the end, two ways from the same shrunk graph: its kept probes' buffer takes
    # the first add's rows in place, and the second add must not see them
    back = np.flatnonzero(~keep_s)
    for added in (back[:25], back[25:]):
        order = np.concatenate([np.flatnonzero(keep_s), added])
        rows = (order[:, None] * per + np.arange(per)).ravel()
        grown = grow_graph(shrunk, bank(300).select(order), emb[rows], clue[order], config)
        assert_same_graph(grown, build_graph(bank(300).select(order), emb[rows], clue[order], config,
                                             codebook=g.search.codebook))


def test_rows_selected_are_the_masks_rows_with_room_for_as_many_again():
    from assomem_gpu.rows import Rows

    data = np.arange(600 * 3, dtype=np.int32).reshape(600, 3)
    mask = np.arange(600) % 3 != 1
    rows = Rows.selected(data, mask)
    assert rows.view.dtype == np.int32 and np.array_equal(rows.view, data[mask])
    view = rows.view
    rows.append(data[:400])  # within the room: the rows held stay where they were
    assert np.may_share_memory(rows.view, view) and np.array_equal(rows.view, np.concatenate([data[mask], data[:400]]))
    assert np.array_equal(Rows.selected(data, np.zeros(600, bool)).view, data[:0])


def test_a_grown_search_holds_the_lists_its_rows_fill():
    """Questions probe only the lists that have members (``UttSearch.held``): an add keeps them where its rows join
    held lists, and holds a list that its row is the first member of."""
    from assomem_gpu.graph import UttSearch
    from assomem_gpu.ivf import Codebook

    codebook = Codebook(unit(np.eye(3, 4)), 6)
    search = UttSearch(codebook, np.array([[0, 1], [1, 0], [0, 2]], np.int32))
    assert search.held[0].tolist() == [0, 1]
    same = search.grown(np.array([[1, 2]], np.int32))
    assert same.held is search.held
    filled = same.grown(np.array([[2, 0]], np.int32))
    assert filled.held[0].tolist() == [0, 1, 2]
    assert np.array_equal(filled.held[1].centroids, UttSearch(codebook, filled.probe).held[1].centroids)


def test_a_codebook_trained_in_two_levels_finds_the_edges_one_level_finds(monkeypatch):
    """From ``TWO_LEVEL_LISTS`` lists on, k-means runs in groups (its cost grows with the lists squared otherwise):
    as many lists, unit vectors, and the inverted file's edges as good as one level's."""
    from assomem_gpu import ivf
    from assomem_gpu.graph import utterance_pairs

    emb, _ = clustered(400, 5, seed=3)
    config = GraphConfig(gamma=0.6, exact_limit=1000, list_size=16, n_probe=6)
    (r, c, _), _ = utterance_pairs(emb, GraphConfig(gamma=0.6))
    exact = set(zip(r.tolist(), c.tolist()))
    found = {}
    for two_level in (False, True):
        monkeypatch.setattr(ivf, "TWO_LEVEL_LISTS", 50 if two_level else 10**9)
        book = ivf.train(emb, list_size=16)
        assert book.n_lists == 125 and np.allclose(np.linalg.norm(book.centroids, axis=1), 1, atol=1e-5)
        (r, c, _), search = utterance_pairs(emb, config)
        assert np.array_equal(search.codebook.centroids, book.centroids)  # (trained on all 2,000 rows)
        found[two_level] = len(exact & set(zip(r.tolist(), c.tolist()))) / len(exact)
    assert found[False] > 0.9 and found[True] > found[False] - 0.03, found


def test_a_two_level_codebook_gives_no_group_more_lists_than_rows():
    """Lists of 2 over turns said once or nine times (one-hot): groups of one sample row, whose share of the lists
    is under one and raised to one, get no more (a second list would need a second row to start from)."""
    from assomem_gpu import ivf

    counts = np.array([1] * 150 + [9] * 211)
    x = np.repeat(np.eye(len(counts), dtype=np.float32), counts, axis=0)
    x = np.ascontiguousarray(x[np.random.default_rng(1).permutation(len(x))])
    for seed in range(5):
        book = ivf.train(x, list_size=2, seed=seed)  # 1,024 lists: two levels
        assert abs(book.n_lists - 1024) <= 32 and np.all(np.isfinite(book.centroids))


def test_ivf_probes_do_not_depend_on_the_batch():
    from assomem_gpu import ivf

    emb, _ = clustered(400, 5, seed=3)
    codebook = ivf.train(emb[:1600], list_size=16)
    batch = ivf.probes(codebook, emb, 4)
    one_by_one = np.concatenate([ivf.probes(codebook, emb[i : i + 1], 4) for i in range(300)])
    assert np.array_equal(batch[:300], one_by_one)
    nearest = np.argmax(emb @ codebook.centroids.T, axis=1)
    assert np.array_equal(batch[:, 0], nearest)  # a row's own list first
    assert np.all(np.diff(batch[:, 1:], axis=1) > 0)  # the other probes ascending, no repeats
    assert ivf.codebook_rows(199, 200) == 0 and ivf.codebook_rows(200, 200) == 200
    assert ivf.codebook_rows(799, 200) == 400 and ivf.codebook_rows(800, 200) == 800
    near = emb @ codebook.centroids.T
    assert np.array_equal(batch[:, 1:], np.sort(np.argsort(-near, axis=1, kind="stable")[:, 1:4], axis=1))
    rounded = np.round(near, 1)  # ties: each row's nearest lists are a stable sort's first, ties to the lower list
    assert np.array_equal(ivf._best(rounded, 5), np.argsort(-rounded, axis=1, kind="stable")[:, :5])


def scattered(m, n_utt):
    """The scipy CSR ``m`` as a ``SlottedCSR`` of a graph of ``n_utt`` utterances whose rows lie in its pools in
    reverse order, each after a gap (as rows appended by adds lie)."""
    from assomem_gpu.slotted_csr import SlottedCSR, encode

    n = m.shape[0]
    lengths = np.diff(m.indptr).astype(np.int64)
    start = np.zeros(n, np.int64)
    start[::-1] = np.cumsum(lengths[::-1] + 1) - lengths[::-1]  # row n-1 first, a garbage entry before each
    at = np.concatenate([np.arange(s, s + k) for s, k in zip(start, lengths)] + [np.zeros(0, np.int64)])
    size = int((start + lengths).max(initial=0))
    pools = np.full(size, -10**9, np.int64), np.full(size, np.nan, np.float32), np.full(size, np.nan, np.float32)
    pools[0][at], pools[1][at], pools[2][at] = encode(m.indices, n_utt), m.data, m.data
    return SlottedCSR(start, start + lengths, n_utt, *pools, int(m.nnz))


def test_slotted_rows_read_back_as_the_matrix_they_hold():
    """A matrix's rows, laid anywhere in the pools with clue columns encoded, read back (``csr``, ``nodes``) as it;
    rows rewritten by ``appended`` hold the new entries, every other row its old ones, and the matrix appended from
    keeps its own."""
    import scipy.sparse as sp

    from assomem_gpu.slotted_csr import SlottedCSR, encode

    rng = np.random.default_rng(8)
    m = sp.random(40, 40, density=0.2, format="csr", random_state=rng, dtype=np.float32)
    for rows in (scattered(m, 25), SlottedCSR.packed(m.indptr, m.indices, m.data, m.data, 25)):
        got = rows.csr("data")
        assert np.array_equal(got.indptr, m.indptr) and np.array_equal(got.indices, m.indices)
        assert np.array_equal(got.data, m.data) and got.indices.dtype == np.int64
        assert np.array_equal(rows.nodes(np.array([3, 30, 3])), np.concatenate([m[3].indices, m[30].indices,
                                                                              m[3].indices]))
    new = sp.random(3, 41, density=0.3, format="csr", random_state=rng, dtype=np.float32)
    before = rows.csr("scaled")
    pool = rows.indices
    dropped = int(rows.lengths()[[7, 30]].sum())
    grown = rows.appended(np.append(rows.start, 0), np.append(rows.end, 0), 25, np.array([40, 7, 30]), new.indptr,
                          encode(new.indices, 25), new.data, 2 * new.data, rows.nnz - dropped + new.nnz)
    want = np.zeros((41, 41), np.float32)
    want[:40, :40] = m.toarray()
    want[[40, 7, 30]] = new.toarray()
    assert np.array_equal(grown.csr("data").toarray(), want)
    assert grown.nnz == grown.csr("data").nnz and grown.garbage == rows.garbage + dropped
    assert np.shares_memory(grown.indices, pool)  # appended in place: the old rows were not copied
    assert np.array_equal(grown.csr("scaled")[[40, 7, 30]].toarray(), 2 * new.toarray())
    again = rows.csr("scaled")
    assert all(np.array_equal(getattr(again, k), getattr(before, k)) for k in ("indptr", "indices", "data"))


def test_balls_hold_the_nodes_within_so_many_hops_of_each_questions_seeds():
    import scipy.sparse as sp

    from assomem_gpu.kernels.local_ppr import ball_nodes, ball_sizes

    def balls(adj, seeds_of, hops):
        seed_ptr = np.cumsum([0] + [len(s) for s in seeds_of]).astype(np.int64)
        seeds = np.concatenate(seeds_of).astype(np.int64)
        rows = scattered(adj, adj.shape[0] // 2)
        sizes = ball_sizes(rows, seed_ptr, seeds, hops)
        ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        nodes = ball_nodes(rows, seed_ptr, seeds, hops, ptr)
        return [sorted(nodes[ptr[b]:ptr[b + 1]].tolist()) for b in range(len(seeds_of))]

    path = sp.diags([np.ones(5, np.float32), np.ones(5, np.float32)], [1, -1], shape=(6, 6)).tocsr()  # 0-1-2-3-4-5
    assert balls(path, [[0], [0], [0, 5], [2], [1, 1]], 0) == [[0], [0], [0, 5], [2], [1]]
    assert balls(path, [[0], [0, 5], [2]], 1) == [[0, 1], [0, 1, 4, 5], [1, 2, 3]]
    assert balls(path, [[2]], 10) == [list(range(6))]
    rng = np.random.default_rng(3)
    adj = sp.random(300, 300, density=0.01, random_state=4, format="csr", dtype=np.float32)
    adj = (adj + adj.T).tocsr()
    for hops in range(4):  # against boolean products: a node is reached within h hops iff (I + A)^h says so
        seeds_of = [rng.choice(300, size=5, replace=False) for _ in range(600)]  # enough seeds for the thread pool
        got = balls(adj, seeds_of, hops)
        for seeds, nodes in zip(seeds_of[:20], got):
            x = np.zeros(300, bool)
            x[seeds] = True
            for _ in range(hops):
                x |= (adj @ x.astype(np.float32)) != 0
            assert nodes == np.flatnonzero(x).tolist()


@pytest.mark.parametrize("pool", [True, False])
@pytest.mark.parametrize("hops", [1, 2, 3])
def test_local_importance_equals_that_many_iterations_over_the_whole_graph(hops, pool, monkeypatch):
    """PPR on each question's ball (its candidates' ``hops``-hop neighbourhood) gives the candidates the values of
    ``hops`` power iterations over the whole graph, to the bit of the batched kernel's (whose passes hold a few
    questions each here): on the thread pool and in this thread, for a question similar to nothing (a uniform
    teleport) and one without candidates."""
    import dataclasses

    from assomem_gpu import scoring
    from assomem_gpu.backend import get_backend
    from assomem_gpu.config import AssoMemConfig
    from assomem_gpu.kernels import local_ppr
    from assomem_gpu.scoring import Relevance, importance, teleport
    from assomem_gpu.signals.importance import personalized_pagerank

    per = 5
    emb, bank = clustered(200, per, seed=4)
    clue = centroid_embeddings(np.arange(0, 200 * per + 1, per), emb)
    g = build_graph(bank(200), emb, clue, GraphConfig(gamma=0.6, delta=0.9))
    rng = np.random.default_rng(5)
    n_q = 24
    rel = rng.uniform(-0.2, 1.0, size=(n_q, g.n_utt)).astype(np.float32)
    rel[1] = -rel[1] ** 2  # similar to nothing: its mass is 0
    at = np.stack([np.sort(rng.choice(g.n_utt, size=30, replace=False)) for _ in range(n_q)])
    valid = np.ones(at.shape, bool)
    valid[2, 20:] = False  # a question with fewer candidates: its padding counts for nothing
    valid[3] = False  # and one without any
    config = AssoMemConfig(ppr_hops=hops)
    cpu = get_backend("cpu")
    relevance = Relevance(cpu, None, None, rel, None, np.maximum(rel, 0).sum(axis=1))
    monkeypatch.setattr(scoring, "BALL_SHARE", 0)  # every batch on its balls, however large
    monkeypatch.setattr(local_ppr, "PARALLEL_SEEDS", 1 if pool else 10**9)
    monkeypatch.setattr(scoring, "WHOLE_GRAPH_ENTRIES", 5 * g.n_nodes)  # the whole graph 5 questions a pass
    local = importance(g, relevance, np.where(valid, at, 0), valid, config, cpu)
    on_graph = importance(g, relevance, np.where(valid, at, 0), valid, config, dataclasses.replace(cpu, ppr_balls=False))
    assert np.array_equal(local[valid], on_graph[valid])  # the same bits as the batched kernel on the whole graph
    whole, _ = personalized_pagerank(g.transition, teleport(rel, g.n_nodes), config.damping, 0.0, hops)
    for b in range(n_q):
        assert np.allclose(local[b, valid[b]], whole[at[b, valid[b]], b], rtol=1e-5, atol=0)  # question 1's
        # teleport uniform in both


@pytest.mark.parametrize("filtered", [False, True])
def test_clue_order_takes_what_ranking_every_clue_takes(filtered):
    """The clues a question takes are the same whether its best few clues are ranked first or every clue is: with
    clues large enough, and where a filter (clues of no allowed utterance score -inf, size 0) leaves too few."""
    from assomem_gpu.backend import get_backend
    from assomem_gpu.config import AssoMemConfig
    from assomem_gpu.scoring import _clue_order

    rng = np.random.default_rng(7)
    config = AssoMemConfig(top_clues=3, min_candidates=100)
    score = rng.normal(size=(6, 500))
    score[:, 10:20] = score[:, :1]  # ties: the lower clue first
    sizes = np.broadcast_to(rng.integers(10, 30, size=500), score.shape).copy()
    if filtered:
        off = rng.random(score.shape) < 0.99
        score[off], sizes[off] = -np.inf, 0
    order, take = _clue_order(score, sizes, config, get_backend("cpu"))
    full = np.argsort(-score, axis=1, kind="stable")
    held = np.cumsum(np.take_along_axis(sizes, full, axis=1), axis=1)
    want = np.minimum(np.maximum((held < config.min_candidates).sum(axis=1) + 1, config.top_clues), 500)
    assert take.tolist() == want.tolist()
    assert all(order[b, : take[b]].tolist() == full[b, : take[b]].tolist() for b in range(6))
    assert (order.shape[1] == 500) == filtered  # ranking every clue only where the best few hold too few


def test_probed_cosines_are_those_of_the_members_of_the_probed_lists():
    import dataclasses

    from assomem_gpu import ivf
    from assomem_gpu.backend import get_backend
    from assomem_gpu.kernels import pair_cosines

    rng = np.random.default_rng(7)
    x = rng.normal(size=(300, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:5] + 0.3 * rng.normal(size=(5, 16)).astype(np.float32)
    book = ivf.train(x, 20)
    probe = ivf.probes(book, x, 2)
    order, bounds = ivf.members(probe, book.n_lists)
    lists = ivf.probes(book, q, 4)
    rows, cos = ivf.probed_cosines(x, q, lists, order, bounds, get_backend("cpu"))
    device_like = ivf.probed_cosines(x, q, lists, order, bounds, dataclasses.replace(get_backend("cpu"), name="dev"))
    assert np.array_equal(device_like[0], rows) and np.allclose(device_like[1], cos, atol=1e-6)
    with pytest.MonkeyPatch.context() as patch:  # the CPU kernel's lists on the thread pool, not in this thread
        patch.setattr(pair_cosines, "PARALLEL_PAIRS", 1)
        pooled = ivf.probed_cosines(x, q, lists, order, bounds, get_backend("cpu"))
    assert np.array_equal(pooled[0], rows) and np.array_equal(pooled[1], cos)
    one = ivf.probed_cosines(x, q[2:3], lists[2:3], order, bounds, get_backend("cpu"))  # a lone question's sort
    assert np.array_equal(one[0], rows[2:3, : one[0].shape[1]]) and np.array_equal(one[1], cos[2:3, : one[1].shape[1]])
    for b in range(5):
        want = np.flatnonzero(np.isin(probe[:, 0], lists[b]))
        got = rows[b][rows[b] >= 0]
        assert sorted(got) == sorted(want) and len(got) == len(set(got))
        assert np.allclose(cos[b][rows[b] >= 0], x[got] @ q[b], atol=1e-6)
        assert np.all(cos[b][rows[b] < 0] == -np.inf)
    # a probed batch's cosines to any rows: read where probed, computed elsewhere, equal either way
    from assomem_gpu.scoring import Relevance

    for backend in (get_backend("cpu"), dataclasses.replace(get_backend("cpu"), name="dev")):
        rel = Relevance(backend, q, x, cos, rows, None)
        questions = rng.integers(0, 5, size=4000)  # in any order, pairs repeated
        pairs = rng.integers(0, 300, size=4000)  # past PARALLEL_PAIRS: the CPU kernel on the thread pool
        read = np.array([np.isin(r, rows[b]) for b, r in zip(questions, pairs)])
        assert 0 < read.sum() < len(read)
        want = np.einsum("ij,ij->i", x[pairs], q[questions])
        assert np.allclose(rel.of_pairs(questions, pairs), want, atol=1e-5)
        assert np.allclose(rel.of_pairs(questions[:9], pairs[:9]), want[:9], atol=1e-5)  # in this thread
        at = np.sort(rng.integers(0, 300, size=(5, 30)), axis=1)
        valid = np.arange(30) < np.array([30, 0, 12, 5, 30])[:, None]
        got = rel.of_rows(at, valid)
        assert np.allclose(got[valid], np.einsum("bcd,bd->bc", x[at], q)[valid], atol=1e-5)
    with pytest.raises(IndexError, match="rows"):
        get_backend("cpu").pair_cosines(x, q, np.array([0]), np.array([300]))


@pytest.mark.parametrize("pool", [True, False])
def test_pair_selection_kernel_equals_partition_and_nonzero(pool, monkeypatch):
    """The per-row floor (keep-th largest less a margin, at least the radius) and the pick, against numpy's own, with
    the rows on the thread pool and in this thread."""
    from assomem_gpu.kernels import pair_select
    from assomem_gpu.kernels.pair_select import MAX_KEEP, select_pairs

    monkeypatch.setattr(pair_select, "PARALLEL_VALUES", 1 if pool else 10**12)

    def by_numpy(sims, radius, keep, doubt):
        floor = np.full(len(sims), radius, np.float32)
        if keep < sims.shape[1]:
            kth = np.partition(sims, sims.shape[1] - keep, axis=1)[:, sims.shape[1] - keep]
            floor = np.maximum(floor, kth - np.float32(doubt))
        return np.nonzero(sims > floor[:, None])

    rng = np.random.default_rng(0)
    for trial in range(300):  # rounded values: many ties, at the floor too
        sims = (np.round(rng.normal(size=(rng.integers(0, 30), rng.integers(1, 90))), rng.integers(1, 4)) / 3)
        sims = sims.astype(np.float32)
        keep, radius, doubt = int(rng.integers(1, 12)), float(rng.normal() / 2), [1e-4, 0.05, 0.0][trial % 3]
        keep = keep if trial % 10 else MAX_KEEP + keep  # past MAX_KEEP: numpy's own path
        got, want = select_pairs(sims, radius, keep, doubt), by_numpy(sims, radius, keep, doubt)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), trial


@pytest.mark.parametrize("probed", [False, True])
def test_dense_top_is_each_questions_best_rows_padded_where_a_filter_leaves_fewer(probed):
    """The dense pool: each question's most similar rows (ties to the lower row), -1 past the rows a filter (-inf)
    or its probes leave it: here 5 rows, none, and (probed) 800 members of 900 columns."""
    from assomem_gpu.backend import get_backend
    from assomem_gpu.scoring import Relevance, dense_top

    rng = np.random.default_rng(11)
    values = rng.uniform(-1, 1, size=(4, 900)).astype(np.float32)
    values[:, 100:110] = values[:, :1]  # ties
    values[1, 5:] = -np.inf  # a filter leaves question 1 five rows, fewer than the pool
    values[2] = -np.inf  # and question 2 none
    rows = None
    if probed:  # each question's probed members (rows of a larger memory) ascending, -1 past them
        rows = np.stack([np.sort(rng.permutation(5000)[:900]) for _ in range(4)])
        rows[3, 800:], values[3, 800:] = -1, -np.inf
    got = dense_top(Relevance(get_backend("cpu"), None, None, values, rows, None), 50, get_backend("cpu"))
    for b in range(4):
        order = np.argsort(-values[b], kind="stable")[:50]
        ids = order if rows is None else rows[b, order]
        assert got[b].tolist() == np.where(values[b, order] > -np.inf, ids, -1).tolist()
    assert (got[1] >= 0).sum() == 5 and (got[2] < 0).all()


@pytest.mark.parametrize("pool", [False, True])
def test_candidate_pairs_of_few_queries_in_one_kernel_equal_a_blas_product_per_list(pool, monkeypatch):
    """An add's and a removal's candidate pairs (products in the kernel) are those of the build's path (a BLAS
    product per list, then ``select_pairs``), in the same order: rows of any subset against any members, clustered
    vectors with exact duplicates (the floor's ties)."""
    from assomem_gpu import ivf
    from assomem_gpu.kernels import pair_select

    monkeypatch.setattr(pair_select, "PARALLEL_PRODUCTS", 1 if pool else 10**12)
    emb, _ = clustered(120, 5, dim=48, seed=8)
    emb[::7] = emb[1]  # near-duplicates: a list full of products tied at the floor
    book = ivf.train(emb, 16)
    probe = ivf.probes(book, emb, 3)
    rng = np.random.default_rng(9)
    for trial in range(40):
        queries = np.sort(rng.choice(len(emb), size=int(rng.integers(1, 60)), replace=False))
        members = np.sort(rng.choice(len(emb), size=int(rng.integers(1, len(emb))), replace=False))
        radius, k = float(rng.uniform(-0.2, 0.8)), int(rng.integers(1, 6))
        got = ivf.candidate_pairs(emb, probe, queries, members, radius, k)
        monkeypatch.setattr(ivf, "LIST_KERNEL_PRODUCTS", -1)
        want = ivf.candidate_pairs(emb, probe, queries, members, radius, k)
        monkeypatch.undo()
        monkeypatch.setattr(pair_select, "PARALLEL_PRODUCTS", 1 if pool else 10**12)
        assert len(got[0]) > 0 and all(np.array_equal(a, b) for a, b in zip(got, want)), trial
        lists = np.unique(probe[members, 0])  # the queries' probes of the members' lists, as an add's Probers give
        q_rows = [queries[(probe[queries] == k).any(axis=1)] for k in lists]
        given = ivf.probing_pairs(emb, probe, np.concatenate(q_rows), np.repeat(lists, [len(r) for r in q_rows]),
                                  members, radius, k)
        assert all(np.array_equal(a, b) for a, b in zip(given, got)), trial


def test_probers_hold_the_rows_that_probe_each_list_as_they_grow():
    """An add finds the old rows that probe its new rows' lists through ``ivf.Probers``; what it finds is what a scan
    of every row's probes finds, after appends, in place and on a branch from an older search."""
    from assomem_gpu.graph import UttSearch
    from assomem_gpu.ivf import Codebook

    rng = np.random.default_rng(4)
    n_lists = 30
    probe = np.stack([rng.permutation(n_lists)[:4] for _ in range(900)]).astype(np.int32)
    codebook = Codebook(rng.normal(size=(n_lists, 8)).astype(np.float32), 500)
    first = UttSearch(codebook, probe[:500])
    grown = first.grown(probe[500:700])
    assert grown.probers is first.probers  # the newest search's lists grow in place
    other = np.stack([rng.permutation(n_lists)[:4] for _ in range(50)]).astype(np.int32)  # (a row's probes differ)
    branch = first.grown(other)  # an older search grown (a failed add's retry): lists of its own
    newer = grown.grown(probe[700:])
    assert branch.probers is not newer.probers
    for search, n in ((grown, 700), (newer, 900), (branch, 550)):
        for lists in ([0], [17, 3], list(range(n_lists)), []):
            for below in (0, 1, 499, n):
                rows, of = search.probers.of(np.array(lists, np.int64), below)
                assert rows.dtype == of.dtype == np.int64
                want = [(r, k) for k in lists for r in np.flatnonzero((search.probe[:below] == k).any(axis=1))]
                assert list(zip(rows.tolist(), of.tolist())) == want


def test_spliced_csr_rows_are_the_old_renamed_or_the_fresh_ones():
    """``csr_splice.splice`` against the matrix put together row by row with scipy: runs of old rows (read from
    pools where they lie apart, or packed; utterance columns renamed from ``same`` on, clue columns by
    ``clue_map``), fresh rows between and at the ends, an empty row, and runs longer than a piece."""
    import scipy.sparse as sp

    from assomem_gpu.kernels import csr_splice
    from assomem_gpu.slotted_csr import SlottedCSR, decode, encode

    rng = np.random.default_rng(5)
    for (n_old, n_new, chunk), packed in itertools.product(((40, 45, 7), (300, 320, 1 << 15), (6, 8, 1)),
                                                           (False, True)):  # new nodes for each old one
        u_old, u_new = 2 * n_old // 3, 2 * n_new // 3  # utterances; the other nodes are clues
        old = sp.random(n_old, n_old, density=0.3, format="csr", random_state=rng, dtype=np.float32)
        old.data[:] = rng.random(old.nnz).astype(np.float32)
        old.data[old.indptr[0] : old.indptr[1]] = 0  # an empty row
        old.eliminate_zeros()
        slotted = (SlottedCSR.packed(old.indptr, old.indices, old.data, old.data, u_old) if packed
                   else scattered(old, u_old))
        fresh = sp.random(n_new, n_new, density=0.1, format="csr", random_state=rng, dtype=np.float32)
        keep = np.sort(rng.choice(n_old, size=min(n_old, n_new) // 2, replace=False))
        source = np.full(n_new, -1, np.int64)
        at = np.sort(rng.choice(n_new, size=len(keep), replace=False))
        source[at] = keep
        gaps = np.flatnonzero(source < 0)
        source[gaps] = -1 - np.arange(len(gaps))
        same = u_old // 2
        col_map = np.concatenate([np.arange(same), rng.permutation(np.arange(same, u_new))[: u_old - same]])
        clue_map = rng.permutation(n_new - u_new)[: n_old - u_old]
        node_map = np.concatenate([col_map, u_new + clue_map])  # old node -> new node
        inv = rng.random(n_new).astype(np.float32)
        part = fresh[gaps]
        chunk_was, csr_splice.CHUNK = csr_splice.CHUNK, chunk
        try:
            indptr, indices, data, scaled = csr_splice.splice(
                slotted.start, slotted.end, slotted.indices, slotted.data, source, part.indptr,
                encode(part.indices, u_new), part.data, col_map, clue_map, u_new, inv, same)
        finally:
            csr_splice.CHUNK = chunk_was
        assert len(indices) >= 2 * indptr[-1]  # room for as many entries again
        for r in range(n_new):
            s = source[r]
            row = old[s] if s >= 0 else part[-1 - s]
            cols = row.indices.astype(np.int64) if s < 0 else node_map[row.indices]
            got = indices[indptr[r] : indptr[r + 1]]
            assert np.array_equal(decode(got, u_new), cols) and np.array_equal(got, encode(cols, u_new))
            assert np.array_equal(data[indptr[r] : indptr[r + 1]], row.data)
            assert np.array_equal(scaled[indptr[r] : indptr[r + 1]], row.data * inv[cols])
    widest = int(np.argmax(np.diff(old.indptr)))  # one old row for many: the pieces' room no longer bounds them
    chunk_was, csr_splice.CHUNK = csr_splice.CHUNK, 1
    try:
        with pytest.raises(ValueError, match="source"):
            csr_splice.splice(slotted.start, slotted.end, slotted.indices, slotted.data, np.full(old.nnz + 20, widest),
                              fresh.indptr[:1], fresh.indices[:0], fresh.data[:0], col_map, clue_map, u_new, inv, same)
    finally:
        csr_splice.CHUNK = chunk_was


def test_row_lists_hold_the_rows_appended_through_moves_and_compactions():
    from assomem_gpu.kernels.row_lists import RowLists

    rng = np.random.default_rng(6)
    lists, want, first = RowLists(12), [[] for _ in range(12)], 0
    for step in range(300):
        n = rng.integers(0, 12 if step % 50 else 150)
        keys = np.argsort(rng.random((n, 12)), axis=1)[:, :3].astype(np.int32)  # a row's keys distinct
        lists.append(keys, first)
        for i, row in enumerate(keys.tolist()):
            for k in row:
                want[k].append(first + i)
        first += len(keys)
    for which in ([0], [11, 3, 5], list(range(12)), []):
        rows, counts = lists.gather(np.array(which, np.int64))
        assert rows.tolist() == [v for k in which for v in want[k]]
        assert counts.tolist() == [len(want[k]) for k in which]
    with pytest.raises(ValueError, match="keys"):
        lists.append(np.array([[3, 12]]), first)


@pytest.mark.parametrize("dim", [1, 7, 8, 100, 128, 129, 384, 768, 1000])
def test_exact_cosines_are_numpys_float64_sums_to_the_bit(dim):
    """Saved graphs hold cosines numpy summed (``(x[rows].astype(float64) * x[cols]).sum(axis=1)``, pairwise); the
    kernel that replaced it must give the same bits, or a loaded memory's adds would no longer equal its rebuild."""
    from assomem_gpu.graph import exact_cosines

    rng = np.random.default_rng(dim)
    x = rng.normal(size=(300, dim)).astype(np.float32)
    x[0], x[1] = 0, -np.abs(x[1])  # products of -0.0 only: numpy's sum is 0.0
    for n in (0, 5, 3000):  # in this thread and on the thread pool
        rows, cols = rng.integers(0, 300, n), rng.integers(0, 300, n)
        rows[:2], cols[:2] = 0, 1
        want = (x[rows].astype(np.float64) * x[cols]).sum(axis=1).view(np.int64)  # bits, the sign of zero too
        assert np.array_equal(exact_cosines(x, rows, cols).view(np.int64), want)
        assert np.array_equal(exact_cosines(x, cols, rows).view(np.int64), want)
    with pytest.raises(IndexError, match="cols"):
        exact_cosines(x, np.array([0]), np.array([300]))
    with pytest.raises(ValueError, match="cols"):
        exact_cosines(x, np.array([0, 1]), np.array([2]))
