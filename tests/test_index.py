"""MemoryIndex: writes equal a fresh build, search with text and filters, save/load, bad input, concurrency."""
import dataclasses
import hashlib
import json
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from assomem_gpu import AssoMemConfig, GraphConfig, MemoryIndex, Session, SnapshotError, Utterance
from assomem_gpu.config import SIGNALS, WEIGHT_TEMPERATURES
from assomem_gpu.encode import HashingEncoder
from assomem_gpu.fusion import fixed_weights
from assomem_gpu.snapshot import read, write

WORDS = ("apple river guitar market winter doctor garden laptop ticket museum coffee soccer bridge violin lisbon "
         "pasta sister bakery chess painting marathon knitting").split()
DAY = 86_400.0


def random_sessions(seed: int, n: int, prefix: str = "s") -> list[Session]:
    rng = np.random.default_rng(seed)
    out = []
    for s in range(n):
        topic = rng.choice(WORDS, size=3)
        turns = [Utterance(". ".join(" ".join(rng.choice(list(topic) * 3 + list(WORDS), size=rng.integers(4, 10)))
                                     for _ in range(rng.choice([1, 1, 2, 3])))  # some turns of many sentences
                           + (" last week" if rng.random() < 0.2 else ""), ["user", "assistant"][t % 2])
                 for t in range(rng.integers(1, 6))]
        out.append(Session(f"{prefix}{seed}_{s}", 1_680_000_000.0 + float(rng.integers(0, 200)) * DAY, turns,
                           {"n": s}))
    return out


def make_index(config=None, **kw) -> MemoryIndex:
    config = config or AssoMemConfig(top_clues=2, min_candidates=3, dense_pool=3,
                                     graph=GraphConfig(delta=0.5, gamma=0.3))
    return MemoryIndex(HashingEncoder(), config, fixed_weights(config.signals), device="cpu", **kw)


def fingerprint(index: MemoryIndex) -> str:
    """A digest of everything the index holds (the state as saved, and the weights)."""
    documents, arrays = index._state.to_snapshot()
    h = hashlib.sha256(json.dumps(documents, sort_keys=True).encode())
    for name in sorted(arrays):
        h.update(name.encode()), h.update(np.ascontiguousarray(arrays[name]).tobytes())
    h.update(json.dumps(index.fusion.to_json(), sort_keys=True).encode())
    return h.hexdigest()


def results(index: MemoryIndex, questions=("apple river guitar", "coffee last week", "chess sister bakery"), k=12):
    return [[(h.utterance_id, h.score) for h in hits] for hits in index.search(list(questions), k=k,
                                                                                question_date=1_700_000_000.0)]


def assert_same(a: MemoryIndex, b: MemoryIndex):
    sa, sb = a._state, b._state
    assert sa.bank == sb.bank and sa.metadata == sb.metadata
    assert np.array_equal(sa.emb.view, sb.emb.view) and np.array_equal(sa.time_marks, sb.time_marks)
    assert np.array_equal(sa.own, sb.own)
    if sa.context is not None:
        assert np.array_equal(sa.context.view, sb.context.view)
    assert np.array_equal(sa.sentence_counts, sb.sentence_counts)
    if sa.sentences is not None:
        assert np.array_equal(sa.sentences.view, sb.sentences.view)
    if sa.graph is None:
        assert sb.graph is None
        return
    assert (sa.graph.adjacency != sb.graph.adjacency).nnz == 0
    assert np.array_equal(sa.graph.clue_emb, sb.graph.clue_emb) and np.array_equal(sa.graph.utt_clue, sb.graph.utt_clue)
    texts = ["apple river guitar", "coffee bakery", "zzz"]
    assert np.array_equal(sa.lexical.scores(texts), sb.lexical.scores(texts))
    assert sorted(sa.lexical.vocab) == sorted(sb.lexical.vocab)
    assert results(a) == results(b)


@pytest.mark.parametrize("clue_mode, clues, clue_merge", [("keywords", True, "components"),
                                                        ("keywords", True, "leaders"),
                                                        ("centroid", True, "components"),
                                                        ("centroid", True, "leaders"),
                                                        ("keywords", False, "components"),
                                                        ("centroid", False, "components")])
def test_adds_and_removes_equal_a_fresh_build(clue_mode, clues, clue_merge):
    config = AssoMemConfig(clue_mode=clue_mode, clues=clues, top_clues=2, min_candidates=3,
                           graph=GraphConfig(delta=0.5, gamma=0.3, max_neighbors=3, clue_merge=clue_merge))
    sessions = random_sessions(0, 30)
    grown = make_index(config)
    for lo, hi in ((0, 1), (1, 12), (12, 13), (13, 30)):
        grown.add_sessions(sessions[lo:hi])
        fresh = make_index(config)
        fresh.add_sessions(sessions[:hi])
        assert_same(grown, fresh)
    for drop in (["s0_3"], ["s0_0", "s0_29", "s0_14"], [s.id for s in sessions[5:20:2]]):
        grown.remove_sessions(drop)
        fresh = make_index(config)
        fresh.add_sessions([s for s in sessions if s.id in set(grown.session_ids)])
        assert_same(grown, fresh)
    grown.remove_sessions(grown.session_ids)
    assert len(grown) == 0 and grown.search("apple") == []
    grown.add_sessions(sessions[:3])
    fresh = make_index(config)
    fresh.add_sessions(sessions[:3])
    assert_same(grown, fresh)


@pytest.mark.parametrize("drop", [[3], [0, 5, 29], list(range(1, 30, 2))])  # slices, and one pass past 8
def test_a_bank_removal_in_place_equals_a_selection_of_the_rest(drop):
    from assomem_gpu.memory import MemoryBank

    bank = MemoryBank()
    for s in random_sessions(1, 30):
        bank.add_session(s.id, s.date, [(f"{s.id}:{t}", u.speaker, u.text) for t, u in enumerate(s.utterances)])
    rest = bank.select([s for s in range(30) if s not in drop])
    removed = {u for s in drop for u in bank.utt_ids[bank.offsets[s] : bank.offsets[s + 1]]}
    bank.remove(np.asarray(drop))
    assert bank == rest and np.array_equal(bank.offset_array, rest.offset_array)
    assert not any(bank.holds_utterance(u) for u in removed) and all(bank.holds_utterance(u) for u in bank.utt_ids)


def test_nothing_of_a_removed_session_stays_reachable():
    index = make_index()
    index.add_sessions(random_sessions(1, 6))
    secret = Session("secret", "2024-01-01", [Utterance("my zanzibarian password is quokkafish 7 March 2024")],
                     {"tag": "private"})
    index.add_sessions([secret])
    assert any(h.session_id == "secret" for h in index.search("quokkafish zanzibarian", k=3))
    vectors = index._state.emb.view[-1].copy(), index._state.clue_emb.view[-1].copy()
    index.remove_sessions(["secret"])
    state = index._state
    for rows, vector in zip((state.emb, state.clue_emb), vectors):  # not even in the buffers' spare room
        assert not (rows._buf == vector).all(axis=1).any()
    assert "secret" not in state.bank.session_ids and all("quokkafish" not in t for t in state.bank.utt_texts)
    assert not any(k.startswith("quokka") or k.startswith("zanzibar") for k in state.lexical.vocab)
    assert {"tag": "private"} not in state.metadata and len(state._mentions) == state.n_utterances
    hits = index.search("quokkafish zanzibarian password", k=100)
    assert hits and all(h.session_id != "secret" for h in hits)
    documents, _ = state.to_snapshot()
    assert "quokkafish" not in json.dumps(documents) and "private" not in json.dumps(documents)


def test_metadata_is_copied_in_and_out():
    index = make_index()
    meta = {"tags": ["a"], "nested": {"k": 1}}
    index.add_sessions([Session("m", "2024-01-01", [Utterance("hello world")], meta)])
    meta["tags"].append("changed")
    hit = index.search("hello", k=1)[0]
    hit.metadata["tags"].append("changed too")
    assert index.get_session("m").metadata == {"tags": ["a"], "nested": {"k": 1}}


def test_search_hits_carry_ids_text_dates_and_signal_shares():
    index = make_index()
    index.add_sessions(random_sessions(2, 8))
    hits = index.search("guitar market", k=5, question_date="2024-01-01")
    assert len(hits) == 5
    for h in hits:
        session = index.get_session(h.session_id)
        assert any(u.id == h.utterance_id and u.text == h.text and u.speaker == h.speaker for u in session.utterances)
        assert h.date.endswith("+00:00") and h.metadata == session.metadata
        assert set(h.signals) == set(index.config.signals) and abs(sum(h.signals.values()) - h.score) < 1e-6
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    batch = index.search(["guitar market", "coffee"], k=5, question_date="2024-01-01")
    assert [h.utterance_id for h in batch[0]] == [h.utterance_id for h in hits]
    everything = index.search("guitar", k=10_000)
    assert len(everything) == index.n_utterances  # past the candidates the rest follows, score None
    assert everything[-1].score is None and everything[-1].signals == {}


def test_filters_restrict_the_candidates_not_the_top_k():
    index = make_index()
    index.add_sessions(random_sessions(3, 12))
    index.add_sessions([Session("far", "2020-05-01", [Utterance("an old note about nothing in particular")])])
    wanted = ["s3_4", "s3_9"]
    hits = index.search("apple guitar", k=4, sessions=wanted)
    n_allowed = sum(len(index.get_session(s).utterances) for s in wanted)
    assert len(hits) == min(4, n_allowed) and {h.session_id for h in hits} <= set(wanted)
    old = index.search("apple guitar", k=50, until="2021-01-01")
    assert [h.session_id for h in old] == ["far"]
    assert [h.session_id for h in index.search("apple", k=50, until="2020-05-01")] == ["far"]  # the whole day
    recent = index.search("note", k=50, since="2022-01-01")
    assert recent and "far" not in {h.session_id for h in recent}
    assert index.search("apple", since="2030-01-01") == []
    index.add_sessions([Session("y3000", "3000-01-01", [Utterance("a note from the year 3000")]),
                        Session("y3000b", "3000-01-02", [Utterance("a note from the next day")])])
    assert {h.session_id for h in index.search("note", k=50, since="3000-01-01", until="3000-01-01")} == {"y3000"}


def test_save_and_load_give_identical_rankings(tmp_path):
    index = make_index()
    index.add_sessions(random_sessions(4, 15))
    index.add_sessions([Session("dated", 1_680_000_000.0, [Utterance("we finally moved on 3/22", "user"),
                                                          Utterance("apple river", "assistant")])])
    index.remove_sessions(["s4_2"])
    path = tmp_path / "mem.npz"
    index.save(path)
    loaded = MemoryIndex.load(path, encoder=HashingEncoder(), device="cpu")
    assert fingerprint(loaded) == fingerprint(index) and results(loaded) == results(index)
    renamed = HashingEncoder()  # an encoder whose name changed since the save (a model named by its files since),
    renamed.name, renamed.legacy_name = "m@0123456789ab|hashing", loaded.encoder.name  # known by its old name
    assert results(MemoryIndex.load(path, encoder=renamed, device="cpu")) == results(index)
    renamed.legacy_name = "another|hashing"
    with pytest.raises(ValueError, match="encoder"):
        MemoryIndex.load(path, encoder=renamed, device="cpu")
    documents, arrays = read(path)  # a snapshot written before context norms were stored: they are made again
    assert arrays.pop("context_norms").dtype == np.float32
    write(tmp_path / "without_norms.npz", documents, arrays)
    older = MemoryIndex.load(tmp_path / "without_norms.npz", encoder=HashingEncoder(), device="cpu")
    assert fingerprint(older) == fingerprint(index) and results(older) == results(index)
    counts = arrays.pop("sentence_counts")  # and before sentence vectors: embedded again
    assert counts.sum() == len(arrays.pop("sentence_emb")) > 0
    write(tmp_path / "without_sentences.npz", documents, arrays)
    older = MemoryIndex.load(tmp_path / "without_sentences.npz", encoder=HashingEncoder(), device="cpu")
    assert fingerprint(older) == fingerprint(index) and results(older) == results(index)
    write(tmp_path / "other_rules.npz", documents, {**arrays, "sentence_counts": counts, "sentences_version": np.array(
        [0]), "sentence_emb": np.zeros((counts.sum(), index.dim), np.float32)})  # made under other rules: again
    older = MemoryIndex.load(tmp_path / "other_rules.npz", encoder=HashingEncoder(), device="cpu")
    assert fingerprint(older) == fingerprint(index) and results(older) == results(index)
    stale = {**arrays, "time_marks": np.zeros_like(arrays["time_marks"])}  # marks of other rules: made again
    for name, version in (("version_1", None), ("version_0", np.array([0]))):
        if version is None:
            stale.pop("time_marks_version")
        else:
            stale["time_marks_version"] = version
        write(tmp_path / f"{name}.npz", documents, stale)
        again = MemoryIndex.load(tmp_path / f"{name}.npz", encoder=HashingEncoder(), device="cpu")
        assert fingerprint(again) == fingerprint(index) and results(again) == results(index)
    marks = arrays.pop("time_marks")  # one written before the time marks, with a flag per utterance: made again
    arrays.pop("time_marks_version")
    assert set(marks.tolist()) == {0, 1, 2}
    write(tmp_path / "flags.npz", documents, {**arrays, "has_time": marks == 2})
    flags = MemoryIndex.load(tmp_path / "flags.npz", encoder=HashingEncoder(), device="cpu")
    assert fingerprint(flags) == fingerprint(index) and results(flags) == results(index)
    more = random_sessions(5, 3)
    loaded.add_sessions(more)
    index.add_sessions(more)
    assert_same(loaded, index)
    with pytest.raises(ValueError, match="encoder"):
        MemoryIndex.load(path, encoder=HashingEncoder(dim=64))


def test_broken_snapshots_are_clear_errors(tmp_path):
    index = make_index()
    index.add_sessions(random_sessions(6, 5))
    path = tmp_path / "mem.npz"
    index.save(path)
    data = path.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(flipped))
    (tmp_path / "junk.npz").write_text("hello")
    np.save(tmp_path / "lone.npy", np.zeros(3))  # an array, not an archive
    np.savez(tmp_path / "listhead.npz", **{"format.json": np.frombuffer(b"[1, 2]", np.uint8)})
    head = np.frombuffer(b'{"format": "assomem-index", "version": 1}', np.uint8)
    np.savez(tmp_path / "badjson.npz", **{"format.json": head, "index.json": np.frombuffer(b"{", np.uint8)})
    for name in ("cut.npz", "flip.npz", "junk.npz", "missing.npz", "lone.npy", "listhead.npz", "badjson.npz"):
        with pytest.raises(SnapshotError, match=name):
            MemoryIndex.load(tmp_path / name, encoder=HashingEncoder())
    documents, arrays = read(path)
    import assomem_gpu.snapshot as snapshot

    old = snapshot.VERSION
    try:
        snapshot.VERSION = 99
        write(tmp_path / "v99.npz", documents, arrays)
    finally:
        snapshot.VERSION = old
    with pytest.raises(SnapshotError, match="version 99"):
        MemoryIndex.load(tmp_path / "v99.npz", encoder=HashingEncoder())
    short = dict(arrays, utt_emb=arrays["utt_emb"][:-1])
    write(tmp_path / "short.npz", documents, short)
    with pytest.raises(SnapshotError, match="utterance embeddings"):
        MemoryIndex.load(tmp_path / "short.npz", encoder=HashingEncoder())
    short = dict(arrays, context_norms=arrays["context_norms"][:-1])
    write(tmp_path / "short_context.npz", documents, short)
    with pytest.raises(SnapshotError, match="context norms"):
        MemoryIndex.load(tmp_path / "short_context.npz", encoder=HashingEncoder())
    short = dict(arrays, sentence_emb=arrays["sentence_emb"][:-1])
    write(tmp_path / "short_sentences.npz", documents, short)
    with pytest.raises(SnapshotError, match="sentence vectors"):
        MemoryIndex.load(tmp_path / "short_sentences.npz", encoder=HashingEncoder())
    headless = {k: v for k, v in documents.items() if k != "index"}
    write(tmp_path / "headless.npz", headless, arrays)
    with pytest.raises(SnapshotError, match="header"):
        MemoryIndex.load(tmp_path / "headless.npz", encoder=HashingEncoder())


def good_session(sid="ok", **changes):
    base = {"id": sid, "date": "2024-03-01T10:00:00+00:00", "utterances": [{"text": "hello there", "speaker": "A"}]}
    base.update(changes)
    return base


BAD_ADDS = [
    ([good_session("s6_0")], ValueError, "already in the index"),
    ([good_session("x"), good_session("x")], ValueError, r"sessions\[1\]\.id"),
    ([good_session(utterances=[{"text": "a", "id": "u"}, {"text": "b", "id": "u"}])], ValueError, r"utterances\[1\]\.id"),
    ([good_session(utterances=[{"text": "a", "id": "s6_0:0"}])], ValueError, "utterance id 's6_0:0'"),
    ([good_session(id=7)], TypeError, r"sessions\[0\]\.id"),
    ([good_session(utterances=[{"text": "a", "id": 3}])], TypeError, r"utterances\[0\]\.id"),
    ([good_session(utterances=[{"text": "   "}])], ValueError, r"utterances\[0\]\.text"),
    ([good_session(utterances=[{"text": ""}])], ValueError, r"utterances\[0\]\.text"),
    ([good_session(utterances=[])], ValueError, r"sessions\[0\]\.utterances"),
    ([good_session(date=None)], ValueError, r"sessions\[0\]\.date: missing"),
    ([good_session(date="2024-03-01T10:00")], ValueError, "naive"),
    ([good_session(date="next tuesday")], ValueError, "ISO 8601"),
    ([good_session(date=float("nan"))], ValueError, r"sessions\[0\]\.date"),
    ([good_session(colour="red")], ValueError, "unknown fields"),
    ([good_session(metadata={"f": object()})], ValueError, "metadata"),
    ([good_session(metadata={1: "x"})], ValueError, "keys must be strings"),
    ([good_session(metadata=[])], TypeError, "metadata"),
    ([good_session(date=1e20)], ValueError, "years 1 to 9999"),
    ([good_session(utterances=[{"text": "hi", "speaker": 0}])], TypeError, r"utterances\[0\]\.speaker"),
    ([good_session(utterances=[{"text": "lone \ud800 surrogate"}])], ValueError, r"utterances\[0\]\.text"),
    ("not a list", TypeError, "sessions"),
]


@pytest.mark.parametrize("sessions, error, message", BAD_ADDS)
def test_bad_adds_name_the_field_and_change_nothing(sessions, error, message):
    index = make_index()
    index.add_sessions(random_sessions(6, 4))
    before = fingerprint(index)
    with pytest.raises(error, match=message):
        index.add_sessions(sessions)
    assert fingerprint(index) == before


def test_bad_vectors_searches_and_removes_change_nothing():
    index = make_index()
    index.add_sessions(random_sessions(7, 4))
    before = fingerprint(index)
    dim = index.dim
    one = [good_session("v")]
    for emb, message in [(np.zeros((1, dim)), "zero norm"), (np.full((1, dim), np.nan), "not finite"),
                         (np.ones((1, dim + 1)), "shape"), (np.ones((2, dim)), "shape")]:
        with pytest.raises(ValueError, match=message):
            index.add_sessions(one, embeddings=emb)
    for call, error, message in [
        (lambda: index.remove_sessions(["nope"]), ValueError, "session_ids"),
        (lambda: index.remove_sessions(["s7_0", "nope"]), ValueError, "nope"),
        (lambda: index.remove_sessions([1]), TypeError, r"session_ids\[0\]"),
        (lambda: index.search("apple", k=0), ValueError, "k"),
        (lambda: index.search("apple", k=-3), ValueError, "k"),
        (lambda: index.search("apple", k=2.5), ValueError, "k"),
        (lambda: index.search("  "), ValueError, r"questions\[0\]"),
        (lambda: index.search(["a", 3]), TypeError, r"questions\[1\]"),
        (lambda: index.search("apple", sessions=["nope"]), ValueError, r"sessions\[0\]"),
        (lambda: index.search("apple", since="yesterday"), ValueError, "since"),
        (lambda: index.search("apple", question_date="2024-01-01T10:00"), ValueError, "question_date"),
        (lambda: index.search("apple", colour="red"), TypeError, "colour"),
        (lambda: index.search_embeddings(np.zeros((1, dim))), ValueError, "zero norm"),
        (lambda: index.search_embeddings(np.ones((2, dim)), texts=["a"]), ValueError, "texts"),
        (lambda: index.search_embeddings([[1.0] * dim, [1.0]]), TypeError, "embeddings: not a rectangular"),
        (lambda: index.search_embeddings(np.ones(dim, complex)), TypeError, "embeddings: expected real numbers"),
        (lambda: index.search_embeddings(np.ones(dim, bool)), TypeError, "embeddings: expected real numbers"),
        (lambda: index.search_embeddings([["1"] * dim]), TypeError, "embeddings: expected real numbers"),
        (lambda: index.add_sessions(one, embeddings=np.ones((1, dim), complex)), TypeError, "embeddings"),
    ]:
        with pytest.raises(error, match=message):
            call()
    assert fingerprint(index) == before
    with pytest.raises(ValueError):
        AssoMemConfig(damping=1.5)
    with pytest.raises(ValueError, match="query_probe"):
        AssoMemConfig(query_probe=-1)
    with pytest.raises(ValueError, match="clue_mode"):
        MemoryIndex(None, AssoMemConfig(), dim=8)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["add", "add_bad", "remove", "remove_bad", "search"]),
                          st.integers(0, 10_000)), min_size=1, max_size=12))
def test_interleaved_good_and_bad_operations_equal_the_good_ones_alone(ops):
    config = AssoMemConfig(top_clues=2, min_candidates=3, graph=GraphConfig(delta=0.5, gamma=0.3, max_neighbors=3))
    live = make_index(config)
    good: list[tuple[str, object]] = []
    pool = random_sessions(9, 40)
    for op, n in ops:
        held = live.session_ids
        if op == "add":
            fresh = [s for s in pool if s.id not in held and s.id not in {x.id for _, g in good if _ == "add" for x in g}]
            batch = fresh[: 1 + n % 3]
            live.add_sessions(batch)
            good.append(("add", batch))
        elif op == "add_bad":
            with pytest.raises((ValueError, TypeError)):
                live.add_sessions([*pool[n % 40 : n % 40 + 1], good_session(utterances=[{"text": ""}])])
        elif op == "remove" and held:
            gone = [held[n % len(held)]]
            live.remove_sessions(gone)
            good.append(("remove", gone))
        elif op == "remove_bad":
            with pytest.raises(ValueError):
                live.remove_sessions([*held[:1], "not-there"])
        elif op == "search":
            live.search("apple guitar", k=1 + n % 5)
    replay = make_index(config)
    for op, arg in good:
        replay.add_sessions(arg) if op == "add" else replay.remove_sessions(arg)
    assert fingerprint(live) == fingerprint(replay)
    final = make_index(config)
    final.add_sessions([s for s in pool if s.id in set(live.session_ids)])
    assert results(live) == results(final)


def test_parallel_searches_with_exclusive_writes():
    index = make_index()
    index.add_sessions(random_sessions(10, 20))
    expected = results(index)
    errors: list[BaseException] = []
    seen: list[list] = []

    def reader():
        try:
            for _ in range(15):
                seen.append(results(index))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    extra = random_sessions(11, 6)
    states = [expected]  # what a search may see: the index as it was, or with one of the extra sessions
    for session in extra:
        one_more = make_index()
        one_more.add_sessions(random_sessions(10, 20) + [session])
        states.append(results(one_more))
    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for s in extra:
        index.add_sessions([s])
        index.remove_sessions([s.id])
    for t in threads:
        t.join()
    assert not errors
    assert all(r in states for r in seen)  # each search saw one consistent state
    assert results(index) == expected


def test_calibrate_fits_weights_from_labelled_questions():
    index = make_index()
    sessions = random_sessions(12, 12)
    index.add_sessions(sessions)
    questions = [{"text": " ".join(s.utterances[0].text.split()[:3]), "evidence": [f"{s.id}:0"],
                  "type": ["a", "b"][i % 2]} for i, s in enumerate(sessions)]
    before = index.fusion.to_json()
    model = index.calibrate(questions)
    assert model.types == ["a", "b"] and index.fusion is model and model.to_json() != before
    with pytest.raises(ValueError, match=r"questions\[0\]\.evidence"):
        index.calibrate([{"text": "x", "evidence": ["nope"]}])
    with pytest.raises(ValueError, match=r"questions\[0\]\.evidence"):
        index.calibrate([{"text": "x", "evidence": (e for e in ["nope"])}])
    with pytest.raises(ValueError, match="unknown fields"):
        index.calibrate([{"text": "x", "evidence": [], "colour": "red"}])
    assert index.fusion is model
    assert model.weight_temperature in WEIGHT_TEMPERATURES  # the default config's candidates
    fixing = make_index(dataclasses.replace(index.config, weight_temperatures=(0.5,)))
    fixing.add_sessions(sessions)  # the same CMI; one candidate fixes T_w
    fixed = fixing.calibrate(questions)
    assert fixed.weight_temperature == 0.5 and np.array_equal(fixed.cmi, model.cmi)


def test_default_weights_ship_with_the_package():
    index = MemoryIndex(HashingEncoder(), device="cpu")
    assert index.fusion.signals == list(index.config.signals) and len(index.fusion.types) >= 2
    assert index.fusion.coef is None  # calibrated with MiniLM: another encoder mixes the types evenly


@pytest.mark.parametrize("probed", [False, True])
def test_the_device_path_ranks_like_the_cpu_path(probed):
    """The CUDA backend's code path on numpy arrays, the Numba CUDA kernel in the simulator: uploads kept per index
    version, PPR by the library step read back every 4 iterations, a full-sort top-k, repeats by sorted search. Its
    hits equal the CPU backend's, also after writes (the kept uploads follow the version); ``probed``: a memory
    past ``exact_limit`` whose relevance goes through the IVF."""
    import functools

    from assomem_gpu.backend import get_backend
    from assomem_gpu.kernels.fused_topk_cuda import fused_topk_cuda
    from assomem_gpu.signals.importance import personalized_pagerank

    cpu = get_backend("cpu")
    device_like = dataclasses.replace(
        cpu, name="cuda-like", ppr=functools.partial(personalized_pagerank, check_every=4), fused_topk=fused_topk_cuda,
        top_k=lambda s, k: np.argsort(-np.nan_to_num(s, nan=-np.inf), axis=-1, kind="stable")[..., :k], _uploads={})
    config = AssoMemConfig(top_clues=2, min_candidates=3, graph=GraphConfig(delta=0.5, gamma=0.3), tol=1e-9)
    if probed:
        config = dataclasses.replace(PROBED, query_probe=1, tol=1e-9)
    indexes = [MemoryIndex(HashingEncoder(), config, fixed_weights(config.signals), device=b)
               for b in (cpu, device_like)]
    # words of the memory: a question of none has cosines at rounding noise, which the CPU kernel and a BLAS product
    # round differently (the device's products are cuBLAS's), so its near ties at a pool's edge may fall either way
    questions = ["guitar lisbon last week", "violin harbor", "pasta", "chess river bakery"]

    def same_hits(**filters):
        a, b = (ix.search(questions, k=6, question_date="2023-06-01", **filters) for ix in indexes)
        assert [[h.utterance_id for h in q] for q in a] == [[h.utterance_id for h in q] for q in b]
        assert np.allclose([h.score for q in a for h in q if h.score is not None],
                           [h.score for q in b for h in q if h.score is not None])

    for ix in indexes:
        ix.add_sessions(random_sessions(3, 60 if probed else 12))
    from assomem_gpu.scoring import Queries, probing
    assert probing(indexes[0]._state.graph, Queries(np.ones((1, 1)), [""], np.zeros(1)), config) == probed
    same_hits()
    same_hits(sessions=["s3_1", "s3_4"])
    uploads = len(device_like._uploads)
    assert uploads > 0
    for ix in indexes:
        ix.remove_sessions(["s3_2"])
        ix.add_sessions(random_sessions(4, 3, prefix="t"))
    same_hits(since="2023-05-01")


def test_an_index_past_its_exact_limit_grows_saves_and_loads_exactly(tmp_path):
    """Above ``exact_limit`` utterances the similarity edges come from an inverted file: adds still equal a fresh
    build (the codebook is trained on the same first rows), and a saved index loads with its codebook and probes."""
    config = AssoMemConfig(top_clues=2, min_candidates=3,
                           graph=GraphConfig(delta=0.5, gamma=0.3, max_neighbors=3, exact_limit=20, list_size=8,
                                             n_probe=2))

    def same_search(a: MemoryIndex, b: MemoryIndex):
        assert_same(a, b)
        ga, gb = a._state.graph, b._state.graph
        assert all(np.array_equal(x, y) for x, y in zip(ga.utt_pairs, gb.utt_pairs))
        assert np.array_equal(ga.search.codebook.centroids, gb.search.codebook.centroids)
        assert np.array_equal(ga.search.probe, gb.search.probe)

    sessions = random_sessions(20, 40)
    grown = make_index(config)
    for lo, hi in ((0, 5), (5, 20), (20, 40)):
        grown.add_sessions(sessions[lo:hi])
    fresh = make_index(config)
    fresh.add_sessions(sessions)
    assert grown._state.graph.search.codebook.rows in (80, 160)  # 20 · 2^m <= the utterances held
    same_search(grown, fresh)
    grown.save(tmp_path / "ivf.npz")
    loaded = MemoryIndex.load(tmp_path / "ivf.npz", encoder=HashingEncoder(), device="cpu")
    same_search(loaded, grown)
    more = random_sessions(21, 10)
    loaded.add_sessions(more)
    fresh.add_sessions(more)
    same_search(loaded, fresh)


PROBED = AssoMemConfig(top_clues=2, min_candidates=3,
                       graph=GraphConfig(delta=0.5, gamma=0.3, max_neighbors=3, exact_limit=40, list_size=8))


def test_probing_every_list_ranks_as_the_exact_path(monkeypatch):
    """Past ``exact_limit`` a question's relevance is computed on the lists it probes (``query_probe``); probing
    every list gives the exact path's candidates and rankings (scores equal to float rounding). Probing needs
    ``PROBED_SHARE`` × as many lists as it probes."""
    from dataclasses import replace

    from assomem_gpu import scoring

    index = make_index(PROBED)
    index.add_sessions(random_sessions(3, 60))
    g = index._state.graph
    n_lists = g.search.codebook.n_lists
    assert n_lists > 4
    index.config = replace(PROBED, query_probe=n_lists)
    question = scoring.Queries(np.ones((1, index.dim), np.float32), ["x"], np.full(1, np.nan))
    assert not scoring.probing(g, question, index.config)  # too many lists probed for the index to pay
    monkeypatch.setattr(scoring, "PROBED_SHARE", 1)
    assert scoring.probing(g, question, index.config)
    probed = results(index, k=30)
    index.config = replace(PROBED, query_probe=0)
    exact = results(index, k=30)
    assert [[i for i, _ in hits] for hits in probed] == [[i for i, _ in hits] for hits in exact]
    fused = [[s for _, s in hits if s is not None] for hits in probed]
    assert fused[0] and all(np.allclose(a, [s for _, s in hits if s is not None], atol=1e-5)
                            for a, hits in zip(fused, exact))


def test_few_probes_rank_lazily_to_the_whole_memory_and_do_not_depend_on_the_batch():
    """With one probed list a ranking still reaches every utterance when asked for that many (the rest is ranked
    by relevance over the whole memory, computed only then), and a question's hits are the same alone or in a
    batch (its probes are settled per question)."""
    from dataclasses import replace

    from assomem_gpu.scoring import Queries, score

    index = make_index(replace(PROBED, query_probe=1))
    index.add_sessions(random_sessions(4, 60))
    state = index._state
    n = state.n_utterances
    questions = ["apple river guitar", "coffee last week", "chess sister bakery", "winter marathon",
                 "guitar ticket last", "last marathon guitar"]
    everything = index.search(questions[0], k=n)
    assert sorted(h.utterance_id for h in everything) == sorted(state.bank.utt_ids)
    emb = index.encoder.encode(questions)
    scored = score(state, Queries(emb, questions, np.full(len(questions), np.nan)), index.config, index.backend)[0]
    assert scored.relevance_rows is not None and scored.relevance.shape[1] < n  # only the probed lists
    probed = (scored.relevance_rows >= 0).sum(axis=1)
    assert probed.min() < probed.max()  # some ks reach past one question's lists and not past another's
    for k in range(int(probed.min()), int(probed.max()) + 1):
        batch = [[h.utterance_id for h in hits] for hits in index.search(questions, k=k)]
        assert batch == [[h.utterance_id for h in index.search(q, k=k)] for q in questions]
    for f, q in zip(scored.features(index.backend), emb):
        assert not np.isin(f.rest, f.candidates).any() and np.all(np.diff(f.rest) > 0)
        assert np.allclose(f.rest_relevance, state.emb.view[f.rest] @ q, atol=1e-6)


def test_questions_probe_only_lists_that_hold_utterances():
    """A removal keeps the codebook, so a list can empty out; a question near it probes the nearest lists that
    still hold utterances."""
    from dataclasses import replace

    index = make_index(replace(PROBED, query_probe=1))
    index.add_sessions(random_sessions(4, 60))
    state = index._state
    search = state.graph.search
    members = search.lists[0][search.lists[1][3] : search.lists[1][4]]
    sessions = np.unique(np.searchsorted(state.bank.offset_array, members, side="right") - 1)
    index.remove_sessions([state.bank.session_ids[s] for s in sessions])
    order, bounds = index._state.graph.search.lists
    assert bounds[4] == bounds[3]  # list 3 is empty
    hits = index.search_embeddings(search.codebook.centroids[3], k=5)[0]
    assert len(hits) == 5


def test_the_bm25_top_of_the_memory_joins_the_clues_candidates():
    """``lexical_pool`` N: a question's candidates are its top clue's utterances and the memory's N best by BM25
    (those scoring above 0), each once, ascending."""
    from assomem_gpu.scoring import Queries, score

    config = AssoMemConfig(top_clues=1, min_candidates=0, clue_mode="centroid", lexical_pool=0, dense_pool=0,
                           graph=GraphConfig(delta=0.9, gamma=0.3))
    index = make_index(config)
    index.add_sessions(random_sessions(0, 30))
    texts = ["apple river guitar", "coffee last week", "chess sister bakery", "lisbon violin", "zzz"]
    queries = Queries(index.encoder.encode(texts), texts, np.full(len(texts), np.nan))
    (alone,) = index.score(queries)
    bm25 = index._state.lexical.scores(texts)
    grew = 0
    for n in (1, 5, 1000):
        (joined,) = score(index._state, queries, dataclasses.replace(config, lexical_pool=n), index.backend)
        for b in range(len(texts)):
            top = np.argsort(-bm25[b], kind="stable")[:n]
            expected = np.union1d(alone.candidates[b, : alone.counts[b]], top[bm25[b, top] > 0])
            assert np.array_equal(joined.candidates[b, : joined.counts[b]], expected)
            grew += len(expected) > alone.counts[b]
    assert grew >= 6


@pytest.mark.parametrize("signals", [SIGNALS, ("relevance", "lexical_context")])
def test_the_lexical_context_signal_is_the_bm25_score_of_a_candidates_turn_before(signals):
    """The engine's lexical context (a candidate's turn before read from the candidates' own BM25 scores where it is
    one, computed otherwise) equals ``BM25Index.scores`` of the turn before each candidate in its session (0 for a
    first turn), z-scored over the question's candidates; without the lexical signal the index keeps BM25 for it."""
    from assomem_gpu.kernels.zscore import zscore_array
    from assomem_gpu.scoring import Queries, score

    config = AssoMemConfig(top_clues=1, min_candidates=0, dense_pool=4, signals=signals,
                           graph=GraphConfig(delta=0.5, gamma=0.3))
    index = make_index(config)
    index.add_sessions(random_sessions(0, 30))
    texts = ["apple river guitar", "coffee last week", "chess sister bakery", "lisbon violin"]
    queries = Queries(index.encoder.encode(texts), texts, np.full(len(texts), np.nan))
    (scored,) = score(index._state, queries, config, index.backend)
    bm25, session = index._state.lexical.scores(texts), index._state.session_of
    valid = np.arange(scored.candidates.shape[1]) < scored.counts[:, None]
    at = np.where(valid, scored.candidates, 0)
    want = np.where((at > 0) & (session[at - 1] == session[at]), np.take_along_axis(bm25, at - 1, axis=1), 0.0)
    got = scored.signals[:, :, signals.index("lexical_context")]
    assert np.allclose(got, zscore_array(want[:, :, None], valid, np)[:, :, 0], atol=1e-5)
    assert (np.abs(got) > 0).sum() > 10
    assert make_index(AssoMemConfig(signals=("relevance", "context")))._state.lexical is None  # no BM25 signal


@pytest.mark.parametrize("signals", [SIGNALS, ("relevance", "reply")])
def test_the_reply_signal_is_the_lexical_context_where_the_turn_before_asks(signals, tmp_path):
    """The engine's reply signal equals ``BM25Index.scores`` of each candidate's turn before where that turn asks a
    question (and is of the candidate's session), else 0, z-scored over the question's candidates; which turns ask
    is kept through a removal and a save and load."""
    from assomem_gpu.kernels.zscore import zscore_array
    from assomem_gpu.scoring import Queries, score
    from assomem_gpu.signals.reply import asks

    config = AssoMemConfig(top_clues=1, min_candidates=0, dense_pool=4, signals=signals,
                           graph=GraphConfig(delta=0.5, gamma=0.3))
    index = make_index(config)
    sessions = [dataclasses.replace(s, utterances=[Utterance(u.text + "?" * (t % 3 == 0), u.speaker)
                                                   for t, u in enumerate(s.utterances)])
                for s in random_sessions(0, 30)]
    index.add_sessions(sessions)
    index.remove_sessions([sessions[3].id])
    assert np.array_equal(index._state.asks, asks(index._state.bank.utt_texts))
    index.save(tmp_path / "m.npz")
    index = MemoryIndex.load(tmp_path / "m.npz", encoder=HashingEncoder(), device="cpu")
    state = index._state
    assert np.array_equal(state.asks, asks(state.bank.utt_texts)) and state.asks.sum() > 10
    texts = ["apple river guitar", "coffee last week", "chess sister bakery", "lisbon violin"]
    queries = Queries(index.encoder.encode(texts), texts, np.full(len(texts), np.nan))
    (scored,) = score(state, queries, index.config, index.backend)
    bm25, session = state.lexical.scores(texts), state.session_of
    valid = np.arange(scored.candidates.shape[1]) < scored.counts[:, None]
    at = np.where(valid, scored.candidates, 0)
    before = (at > 0) & (session[at - 1] == session[at]) & state.asks[at - 1]
    want = np.where(before, np.take_along_axis(bm25, at - 1, axis=1), 0.0)
    got = scored.signals[:, :, signals.index("reply")]
    assert np.allclose(got, zscore_array(want[:, :, None], valid, np)[:, :, 0], atol=1e-5)
    assert (np.abs(got) > 0).sum() > 10


@pytest.mark.parametrize("probed", [False, True])
def test_the_dense_top_of_the_memory_joins_the_clues_candidates(probed, monkeypatch):
    """``dense_pool`` N: a question's candidates are its top clue's utterances and its N most similar utterances
    (ties: the lower row; probed, among its probed lists' members), each once, ascending."""
    from assomem_gpu import scoring
    from assomem_gpu.scoring import Queries, relevance, score

    monkeypatch.setattr(scoring, "PROBED_SHARE", 1)  # a small memory's few lists, probed one at a time
    config = AssoMemConfig(top_clues=1, min_candidates=0, clue_mode="centroid", lexical_pool=0, dense_pool=0,
                           query_probe=1 if probed else 0,
                           graph=GraphConfig(delta=0.9, gamma=0.3, exact_limit=40 if probed else 10_000, list_size=8))
    index = make_index(config)
    index.add_sessions(random_sessions(0, 30))
    texts = ["apple river guitar", "coffee last week", "chess sister bakery", "lisbon violin"]
    queries = Queries(index.encoder.encode(texts), texts, np.full(len(texts), np.nan))
    (alone,) = index.score(queries)
    g, be = index._state.graph, index.backend
    rel = relevance(g, be.asarray(queries.emb), be.asarray(index._state.emb.view), queries, None, config, be)
    assert (rel.rows is not None) == probed
    grew = 0
    for n in (1, 7, 1000):
        (joined,) = score(index._state, queries, dataclasses.replace(config, dense_pool=n), index.backend)
        for b in range(len(texts)):
            rows = np.arange(g.n_utt) if rel.rows is None else rel.rows[b][rel.rows[b] >= 0]
            values = rel.values[b][: len(rows)]
            top = rows[np.argsort(-values, kind="stable")[:n]]
            expected = np.union1d(alone.candidates[b, : alone.counts[b]], top)
            assert np.array_equal(joined.candidates[b, : joined.counts[b]], expected)
            grew += len(expected) > alone.counts[b]
    assert grew >= 6


@pytest.mark.parametrize("name, default", [("lexical_pool", 10), ("dense_pool", 50)])
def test_a_candidate_pool_is_checked_and_a_config_saved_before_it_has_none(name, default):
    with pytest.raises(ValueError, match=name):
        AssoMemConfig(**{name: -1})
    saved = {k: v for k, v in AssoMemConfig().to_json().items() if k != name}
    assert getattr(AssoMemConfig.from_json(saved), name) == 0 and getattr(AssoMemConfig(), name) == default


def test_a_config_saved_before_leader_clues_merges_by_components_and_the_shipped_weights_hold_the_default():
    from importlib.resources import files

    from assomem_gpu.fusion import DEFAULT_WEIGHTS

    saved = AssoMemConfig().to_json()
    del saved["graph"]["clue_merge"]
    assert AssoMemConfig.from_json(saved).graph.clue_merge == "components"
    assert AssoMemConfig().graph.clue_merge == "leaders"
    assert AssoMemConfig().sentences and AssoMemConfig.from_json(saved).sentences
    del saved["sentences"]  # and before sentence passages, without them
    assert not AssoMemConfig.from_json(saved).sentences
    with pytest.raises(ValueError, match="sentences"):
        AssoMemConfig(sentences=1)
    assert AssoMemConfig().select_signals and AssoMemConfig.from_json(saved).select_signals
    del saved["select_signals"]  # and before signal selection, weighing every signal
    assert not AssoMemConfig.from_json(saved).select_signals
    with pytest.raises(ValueError, match="select_signals"):
        AssoMemConfig(select_signals="no")
    assert AssoMemConfig().ranks_like(AssoMemConfig(select_signals=False))  # calibration alone reads it
    shipped = json.loads(files("assomem_gpu").joinpath(DEFAULT_WEIGHTS).read_text(encoding="utf-8"))
    calibrated = AssoMemConfig.from_json(shipped["config"])  # recalibrate them when a default changes; their
    # weight temperature is given, not chosen, and they weigh every signal (assomem_gpu/weights/README.md)
    assert calibrated.weight_temperatures == (0.2,) and not calibrated.select_signals
    assert shipped["fusion"]["left_out"] == []
    assert dataclasses.replace(calibrated, weight_temperatures=WEIGHT_TEMPERATURES, select_signals=True) == \
        AssoMemConfig()


@pytest.mark.parametrize("make, field", [
    (lambda: AssoMemConfig(clues="false"), "clues"), (lambda: AssoMemConfig(clues=0), "clues"),
    (lambda: AssoMemConfig(llm=3), "llm"), (lambda: GraphConfig(speakers="no"), "speakers"),
    (lambda: GraphConfig(delta=True), "delta"), (lambda: GraphConfig(adjacency_weight=True), "adjacency_weight"),
    (lambda: AssoMemConfig.from_json({**AssoMemConfig().to_json(), "clues": "false"}), "clues"),
])
def test_flags_and_numbers_of_another_type_are_refused(make, field):
    """A truthy string is not True, nor a bool a threshold: each names its field."""
    with pytest.raises(ValueError, match=field):
        make()


def test_weight_temperatures_are_checked_and_a_config_saved_with_one_fixes_it():
    assert AssoMemConfig().weight_temperatures == WEIGHT_TEMPERATURES == (0.05, 0.1, 0.2, 0.5, 1.0)
    for bad in (0.1, np.float32(0.1), "0.1", (), (0.1, 0.1), (0.5, 0.1), (0.1, -1.0), (0.1, float("nan"))):
        with pytest.raises(ValueError, match="weight_temperatures"):
            AssoMemConfig(weight_temperatures=bad)
    saved = AssoMemConfig().to_json()
    del saved["weight_temperatures"]
    saved["weight_temperature"] = 0.1  # a config saved before T_w was chosen by calibration
    assert AssoMemConfig.from_json(saved).weight_temperatures == (0.1,)
    several = AssoMemConfig(weight_temperatures=[0.05, 0.5])
    assert AssoMemConfig.from_json(several.to_json()) == several and several.weight_temperatures == (0.05, 0.5)


def test_user_speakers_are_checked_and_saved_with_the_config():
    for bad in ("user", ["user", ""], ("  ",), (1,), None):
        with pytest.raises(ValueError, match="user_speakers"):
            AssoMemConfig(user_speakers=bad)
    config = AssoMemConfig(user_speakers=[" Me", "CALLER"])
    assert config.user_speakers == ("me", "caller") and AssoMemConfig.from_json(config.to_json()) == config
    assert config.ranks_like(AssoMemConfig(user_speakers=["me", "Caller "]))
    assert not config.ranks_like(AssoMemConfig())  # the signal reads them
    without = [s for s in config.signals if s != "user_relevance"]
    assert dataclasses.replace(config, signals=without).ranks_like(AssoMemConfig(signals=without))  # none reads them
    saved = AssoMemConfig().to_json()
    del saved["user_speakers"]  # a config saved before them: the user is "user"
    assert AssoMemConfig.from_json(saved).user_speakers == ("user",)
    import argparse

    from assomem_gpu.cli_options import store_config

    with pytest.raises(ValueError, match="--user-speakers must be non-empty names"):  # the server's option, named
        store_config(argparse.Namespace(clue_merge="leaders", no_sentences=False, user_speakers=["user", " "]))


@pytest.mark.parametrize("query_probe", [0, 2])
def test_a_question_gets_the_same_hits_and_scores_to_the_bit_alone_or_in_a_batch(query_probe):
    """Every product and sum a question's scores come from is its own, in the same order, in any batch: the ids and
    the fused scores (and their signal shares) of 40 questions searched together equal each searched alone, with the
    relevance over every utterance (query_probe 0) and through the probed lists, whose rows the batch pads to its
    widest."""
    from dataclasses import replace

    from assomem_gpu import scoring

    index = make_index(replace(PROBED, query_probe=query_probe))
    index.add_sessions(random_sessions(5, 60))
    rng = np.random.default_rng(0)
    recall = ["what did you say about " if i % 4 == 0 else "" for i in range(40)]  # (a quarter recall what the
    # assistant said: user relevance reads its turns)
    questions = [r + " ".join(rng.choice(WORDS, size=int(rng.integers(1, 5)))) for r in recall]
    probing = scoring.probing(index._state.graph, scoring.Queries(np.ones((1, index.dim), np.float32), ["x"],
                                                                  np.full(1, np.nan)), index.config)
    assert probing == (query_probe > 0)
    together = index.search(questions, k=15, question_date=1_700_000_000.0)
    for q, hits in zip(questions, together):
        alone = index.search(q, k=15, question_date=1_700_000_000.0)
        assert [(h.utterance_id, h.score, h.signals) for h in hits] == [(h.utterance_id, h.score, h.signals)
                                                                        for h in alone]


def test_a_question_that_recalls_what_the_assistant_said_is_answered_from_the_assistants_turns():
    """Fused on user relevance alone: a question about the user's past ranks the user's turn on the topic first, the
    same question recalling what the assistant recommended ranks the assistant's answer first."""
    from assomem_gpu.fusion import FusionModel

    config = AssoMemConfig(clues=False)
    cmi = np.where(np.asarray(config.signals) == "user_relevance", 1.0, 0.0)[None]
    index = MemoryIndex(HashingEncoder(), config, FusionModel(list(config.signals), ["all"], cmi, 0.01),
                        device="cpu")
    index.add_sessions([Session("trip", 1_700_000_000.0, [
        Utterance("which hiking trail near the lake should I walk", "user", id="asked"),
        Utterance("walk the ridge hiking trail near the lake", "assistant", id="answered"),
        Utterance("thanks, the lake sounds lovely", "user", id="thanks")]),
        Session("food", 1_700_100_000.0, [Utterance("any soup recipe for winter", "user", id="soup"),
                                          Utterance("try a leek soup", "assistant", id="leek")])])
    mine, yours = index.search(["which hiking trail near the lake did I walk",
                                "which hiking trail near the lake did you recommend"], k=2)
    assert mine[0].utterance_id == "asked" and yours[0].utterance_id == "answered"


@pytest.mark.parametrize("typed", [False, True])
def test_user_relevance_ranks_a_memory_of_named_speakers_as_without_it(typed):
    """The signal reads relevance on the user's turns: with "user" / "assistant" speakers it moves the ranking, with
    named ones (no turn is the user's) every question ranks as an index without the signal does, with one set of
    weights and with several question types' weights mixed by a classifier (``typed``)."""
    from assomem_gpu.fusion import FusionModel, restrict

    with_it = AssoMemConfig(top_clues=2, min_candidates=3, dense_pool=3, graph=GraphConfig(delta=0.5, gamma=0.3))
    without = dataclasses.replace(with_it, signals=tuple(s for s in with_it.signals if s != "user_relevance"))
    questions = ["apple river guitar", "coffee last week", "chess sister bakery", "doctor winter garden"]
    rng = np.random.default_rng(5)
    cmi = np.zeros((3, len(with_it.signals)))  # type a weighs relevance, b user relevance then BM25, c the context
    cmi[0, with_it.signals.index("relevance")] = cmi[2, with_it.signals.index("context")] = 0.3
    cmi[1, with_it.signals.index("user_relevance")], cmi[1, with_it.signals.index("lexical")] = 0.6, 0.3
    model = FusionModel(list(with_it.signals), ["a", "b", "c"], cmi, 0.1,
                        rng.normal(size=(3, 256)).astype(np.float32), np.zeros(3, np.float32)) if typed \
        else fixed_weights(with_it.signals)

    def ranked(config, speakers):
        sessions = [Session(s.id, s.date, [Utterance(u.text, speakers[t % 2]) for t, u in enumerate(s.utterances)])
                    for s in random_sessions(4, 30)]
        index = MemoryIndex(HashingEncoder(), config, restrict(model, config.signals), device="cpu")
        index.add_sessions(sessions)
        return [[h.utterance_id for h in hits] for hits in index.search(questions, k=12,
                                                                          question_date=1_700_000_000.0)]

    assert ranked(with_it, ["Ann", "Bob"]) == ranked(without, ["Ann", "Bob"])
    assert ranked(with_it, ["User", "assistant"]) != ranked(without, ["User", "assistant"])
