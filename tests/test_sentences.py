"""Sentence passages (``sentences.py``): the split, the rows, and a candidate's relevance as its best passage's."""
import dataclasses

import numpy as np
import pytest

from assomem_gpu.backend import get_backend
from assomem_gpu.config import AssoMemConfig
from assomem_gpu.encode import HashingEncoder
from assomem_gpu.index import MemoryIndex, Session, Utterance
from assomem_gpu.sentences import MAX_SENTENCES, best_cosines, rows_of, sentence_texts, split, starts_of


def test_sentences_end_at_stops_and_line_breaks_and_short_pieces_join_the_one_before():
    assert split("Can you suggest recipes? By the way, I replaced my faucet last Sunday.") == [
        "Can you suggest recipes?", "By the way, I replaced my faucet last Sunday."]
    assert split("I moved to Berlin in May. Thanks! See you.\nNext week I start my new job") == [
        "I moved to Berlin in May. Thanks! See you.", "Next week I start my new job"]
    assert split("Dr. Smith said he would call me back tomorrow.") == [  # a short first piece joins the one after
        "Dr. Smith said he would call me back tomorrow."]
    assert split("Sure! Yes! I can help with that request. It will not take long.") == [
        "Sure! Yes! I can help with that request.", "It will not take long."]
    assert split("Thanks! Bye.") == ["Thanks! Bye."]
    assert split("version 3.2 is out") == ["version 3.2 is out"]  # no space after the stop: no end
    assert split("") == [] and split("  \n ") == []
    assert len(split(" ".join(f"this is sentence {i}." for i in range(100)))) == MAX_SENTENCES


@pytest.mark.parametrize("limit", [0, 1, 2, MAX_SENTENCES])
def test_a_split_that_stops_at_its_limit_keeps_what_the_whole_split_keeps(limit):
    """``split`` stops reading a turn once a sentence past ``limit`` begins; what it keeps is the first ``limit`` of
    the whole turn's sentences, short pieces after the last one kept joined to it."""
    from assomem_gpu.sentences import MIN_WORDS, _END

    def whole(text):  # the rule over every piece, then the first ``limit``
        out, opening = [], ""
        for piece in filter(None, (p.strip() for p in _END.split(text))):
            if len(piece.split()) >= MIN_WORDS:
                out.append(piece if out or not opening else f"{opening} {piece}")
            elif out:
                out[-1] += " " + piece
            else:
                opening = f"{opening} {piece}" if opening else piece
        return out[:limit] if out else [opening] if opening else []

    rng = np.random.default_rng(0)
    pieces = ["Hi!", "Sure.", "ok", "This is a long sentence.", "Another one here too!", "\n", "a b c d e?", "Yes."]
    texts = [" ".join(rng.choice(pieces, rng.integers(0, 16))) for _ in range(500)]
    if limit:  # the last sentence kept has a short piece after it joined in some of the turns
        assert any(len(whole(t)) == limit and whole(t)[-1].endswith(("Hi!", "Sure.", "ok", "Yes.")) for t in texts)
    for text in texts:
        assert split(text, limit) == whole(text), text


def test_only_utterances_of_many_sentences_get_vectors_read_as_their_speaker_said_them():
    texts, counts = sentence_texts(["user", "", "bot"], ["One short one", "The first one is here. The second one "
                                                         "is here.", "Alpha beta gamma delta. Epsilon zeta eta theta."])
    assert counts.tolist() == [0, 2, 2] and counts.dtype == np.int32
    assert texts == ["The first one is here.", "The second one is here.", "bot: Alpha beta gamma delta.",
                     "bot: Epsilon zeta eta theta."]
    counts = np.array([2, 0, 3, 1])
    assert starts_of(counts).tolist() == [0, 2, 2, 5]
    assert rows_of(counts, np.array([2, 0, 1, 3])).tolist() == [2, 3, 4, 0, 1, 5]


@pytest.mark.parametrize("device_form", [False, True])
def test_a_candidates_relevance_is_its_best_passage_and_does_not_depend_on_the_batch(device_form):
    rng = np.random.default_rng(0)
    unit = lambda x: (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)  # noqa: E731
    emb, q = unit(rng.normal(size=(6, 16))), unit(rng.normal(size=(3, 16)))
    counts = np.array([2, 0, 3, 1, 0, 2], np.int32)
    vectors, starts = unit(rng.normal(size=(int(counts.sum()), 16))), starts_of(counts)
    at = np.array([[0, 1, 2, 0], [3, 5, 4, 0], [2, 0, 0, 0]])
    valid = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [1, 0, 0, 0]], bool)
    rel_at = np.take_along_axis(q @ emb.T, at, axis=1).astype(np.float32)
    backend = get_backend("cpu")
    if device_form:  # the device forms of the backend's steps, on numpy arrays
        backend = dataclasses.replace(backend, name="cuda-like", _uploads={})
    got = best_cosines(rel_at, q, at, valid, vectors, starts, counts, backend)
    for b, c in zip(*np.nonzero(valid)):
        u = at[b, c]
        own = vectors[starts[u] : starts[u] + counts[u]] @ q[b]
        assert np.isclose(got[b, c], max([rel_at[b, c], *own]), atol=1e-6)
    assert np.array_equal(got[~valid], rel_at[~valid])  # padding untouched
    assert got[0, 1] == rel_at[0, 1] and got[1, 2] == rel_at[1, 2]  # no sentences: its own cosine
    if not device_form:  # each question's row is the same bits alone as in the batch
        for b in range(3):
            alone = best_cosines(rel_at[b : b + 1], q[b : b + 1], at[b : b + 1], valid[b : b + 1], vectors, starts,
                                 counts, backend)
            assert np.array_equal(alone[0], got[b])


def test_an_index_ranks_a_fact_said_in_passing_by_its_sentence():
    """The question's words are one clause of a long turn: alone the turn's own vector puts it below a turn on its
    topic; its sentence's vector finds it. Without an encoder (vectors given) there are no sentence vectors."""
    turns = [Utterance("kiwi banjo violet harbor quartz lantern tulip mango lemon. my faucet broke today", "user"),
             Utterance("my faucet kiwi banjo", "user")]  # cosines to the question 0.50 (its sentence 0.75), 0.54
    sessions = [Session("a", 1_700_000_000.0, [turns[0]]), Session("b", 1_700_000_000.0, [turns[1]])]
    ranked = {}
    for sentences in (True, False):
        index = MemoryIndex(HashingEncoder(), AssoMemConfig(sentences=sentences, signals=("relevance",)),
                            device="cpu")
        index.add_sessions(sessions)
        assert index._state.sentence_counts.tolist() == ([2, 0] if sentences else [0, 0])
        hits = index.search(["my faucet broke"], k=2)[0]
        ranked[sentences] = [h.utterance_id for h in hits]
    assert ranked == {True: ["a:0", "b:0"], False: ["b:0", "a:0"]}
    bare = MemoryIndex(None, AssoMemConfig(clue_mode="centroid", sentences=True), dim=8, device="cpu")
    bare.add_sessions(sessions, embeddings=np.eye(8, dtype=np.float32)[:2])
    assert bare._state.sentence_counts.tolist() == [0, 0] and len(bare._state.sentences.view) == 0


def test_sentence_vectors_that_do_not_fit_the_sessions_change_nothing():
    from assomem_gpu.index import _session

    index = MemoryIndex(HashingEncoder(), AssoMemConfig(sentences=True), device="cpu")
    index.add_sessions([Session("a", 1.0, [Utterance("one sentence here. And another sentence here", "user")])])
    records = [_session(Session("b", 2.0, [Utterance("first sentence is here. The second sentence is here", "u")]),
                        "s", True)]
    emb = HashingEncoder().encode(["u: first sentence is here. The second sentence is here"])
    without = MemoryIndex(HashingEncoder(), AssoMemConfig(sentences=False), device="cpu")._state.derive(records, emb)
    before = index._state.to_snapshot()
    with pytest.raises(ValueError, match="sentence vectors"):
        index._add(records, emb, derived=without)
    after = index._state.to_snapshot()
    assert before[0] == after[0] and all(np.array_equal(before[1][k], after[1][k]) for k in before[1])
