import json
import math

import numpy as np
import pytest

from assomem_gpu.data import DataFormatError, DataFormatWarning, expand_haystacks, load_dataset
from assomem_gpu.timeparse import format_timestamp

from conftest import lme_item


def ids(ds, rows):
    return [ds.bank.utt_ids[i] for i in rows]


def test_longmemeval_ids_evidence_and_pooled_sessions(lme_file):
    ds = load_dataset(f"longmemeval:{lme_file}")
    assert [q.id for q in ds.questions] == ["q1", "q2", "q3_abs"]
    assert ds.bank.n_sessions == 7  # shared_dog is stored once although two haystacks hold it
    q1, q2, q3 = ds.questions
    assert ids(ds, q1.evidence) == ["answer_s1:0"]
    assert ids(ds, q2.evidence) == ["answer_s2:0"]
    assert len(q3.evidence) == 0 and q3.abstention and not q1.abstention
    assert q2.type == "multi-session" and q1.answer == "x"
    assert ds.bank.utt_speakers[:2] == ["user", "assistant"]
    assert ds.bank.encoded_texts()[0] == "user: My daily commute to work takes 45 minutes each way."
    # the shared session carries a different date in each haystack
    dog = ds.bank.session_index("shared_dog")
    d1 = ds.memories[0].dates[list(ds.memories[0].sessions).index(dog)]
    d2 = ds.memories[1].dates[list(ds.memories[1].sessions).index(dog)]
    assert format_timestamp(d1) == "2023-05-21T10:00:00" and format_timestamp(d2) == "2023-03-01T09:00:00"
    assert format_timestamp(q1.date) == "2023-05-30T20:36:00"
    assert ids(ds, ds.memory_utterances(1)) == ["shared_dog:0", "shared_dog:1", "answer_s2:0", "noise_b:0"]
    assert [format_timestamp(t) for t in ds.utterance_times(1)][:3] == ["2023-03-01T09:00:00"] * 2 + ["2023-03-02T09:00:00"]


def test_longmemeval_plain_json(tmp_path, lme_items):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(lme_items))
    assert len(load_dataset(f"longmemeval:{path}").questions) == 3


@pytest.mark.parametrize("breakage, message", [
    (lambda items: {"not": "a list"}, "expected a JSON list"),
    (lambda items: [{**items[0], "question": 5}], "record 0 (q1), field 'question': expected str"),
    (lambda items: [{k: v for k, v in items[0].items() if k != "haystack_sessions"}], "field 'haystack_sessions': missing"),
    (lambda items: [{**items[0], "haystack_dates": items[0]["haystack_dates"][:1]}], "differ in length"),
    (lambda items: [{**items[0], "question_date": [2023]}], "field 'question_date': expected str/int/float"),
    (lambda items: [items[0], items[0]], "duplicate question_id"),
    (lambda items: [{**items[0], "haystack_sessions": [[{"role": "user"}]] * 3}], "turn 0, field 'content': missing"),
])
def test_longmemeval_broken_inputs_name_the_problem(tmp_path, lme_items, breakage, message):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(breakage(lme_items)))
    with pytest.raises(DataFormatError, match="broken.json") as err:
        load_dataset(f"longmemeval:{path}")
    assert message in str(err.value)


def test_unreadable_files(tmp_path):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(DataFormatError, match="not valid JSON"):
        load_dataset(f"longmemeval:{bad}")
    with pytest.raises(DataFormatError, match="no such file"):
        load_dataset(f"meetingqa:{tmp_path / 'missing.json'}")
    with pytest.raises(ValueError, match="format one of"):
        load_dataset(f"parquet:{bad}")


def test_locomo(locomo_file):
    ds = load_dataset(f"locomo:{locomo_file}")
    assert [q.id for q in ds.questions] == ["conv-1:0", "conv-1:1", "conv-1:2", "conv-1:3", "conv-2:0"]
    q = ds.questions
    assert ids(ds, q[0].evidence) == ["D1:1", "D1:3"]  # "D1:1; D1:3" split
    assert ids(ds, q[1].evidence) == ["D2:1"]  # D9:9 does not exist: dropped
    assert ids(ds, q[2].evidence) == ["D1:2", "D10:1"]  # space-joined, sorted by row
    assert q[2].answer is None and q[2].abstention and q[2].type == "category-5"  # adversarial_answer: the trap
    assert not any(x.abstention for x in (q[0], q[1], q[3]))
    assert len(q[3].evidence) == 0
    # sessions in numeric order (session_10 after session_2), one memory per conversation
    assert [ds.bank.session_ids[s] for s in ds.memories[0].sessions] == ["conv-1:session_1", "conv-1:session_2",
                                                                        "conv-1:session_10"]
    assert format_timestamp(ds.memories[0].dates[0]) == "2023-05-08T13:56:00"
    assert format_timestamp(q[0].date) == "2023-08-01T20:00:00"  # asked after the last session
    # dia ids repeat across conversations; evidence resolves inside the question's own conversation
    assert ids(ds, q[4].evidence) == ["D1:1"] and ds.bank.utt_texts[q[4].evidence[0]] == "Ann here, I love jazz."
    assert ds.bank.encoded_texts()[0] == "Caroline: I went to a pottery class yesterday."


def test_a_byte_order_mark_is_read(tmp_path, locomo_samples, jsonl_file):
    """Files that some editors save with a UTF-8 byte-order mark load as without it."""
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(locomo_samples).encode())
    assert [q.id for q in load_dataset(f"locomo:{path}").questions][-1] == "conv-2:0"
    lines = tmp_path / "bom.jsonl"
    lines.write_bytes(b"\xef\xbb\xbf" + jsonl_file.read_bytes())
    assert len(load_dataset(f"jsonl:{lines}").questions) == len(load_dataset(f"jsonl:{jsonl_file}").questions)


def test_a_repeated_dia_id_is_kept_as_its_own_turn(tmp_path, locomo_samples):
    """A conversation whose turns repeat a dia_id: each repeat is '<dia_id>#<n>', evidence naming the id reads the
    first, a warning names the turn; the memory holds no id twice."""
    conv = locomo_samples[0]["conversation"]
    conv["session_2"][0]["dia_id"] = conv["session_2"][1]["dia_id"] = conv["session_1"][0]["dia_id"]
    first = conv["session_1"][0]["dia_id"]
    locomo_samples[0]["qa"][0]["evidence"] = [first]
    path = tmp_path / "lc.json"
    path.write_text(json.dumps(locomo_samples))
    with pytest.warns(DataFormatWarning, match=r"2 turn\(s\) repeat a dia_id .* record 0 \(conv-1\), "
                                               r"session_2\[0\]"):
        ds = load_dataset(f"locomo:{path}")
    held = ids(ds, ds.memory_utterances(0))
    assert len(held) == len(set(held))
    assert [u for u in held if u.startswith(f"{first}#")] == [f"{first}#2", f"{first}#3"]
    assert ids(ds, ds.questions[0].evidence) == [first]
    conv["session_10"][0]["dia_id"] = f"{first}#2"  # an id of that form the conversation holds itself: kept as it is
    locomo_samples[0]["qa"][0]["evidence"] = [f"{first}#2"]
    path.write_text(json.dumps(locomo_samples))
    with pytest.warns(DataFormatWarning, match=r"2 turn\(s\) repeat a dia_id"):
        ds = load_dataset(f"locomo:{path}")
    held = ids(ds, ds.memory_utterances(0))
    assert len(held) == len(set(held)) and [u for u in held if u.startswith(f"{first}#")] == [
        f"{first}#3", f"{first}#4", f"{first}#2"]
    assert [ds.bank.utt_texts[i] for i in ds.questions[0].evidence] == [conv["session_10"][0]["text"]]


def test_locomo_broken(tmp_path, locomo_samples):
    path = tmp_path / "lc.json"
    locomo_samples[1]["qa"][0]["evidence"] = [7]
    path.write_text(json.dumps(locomo_samples))
    with pytest.raises(DataFormatError, match="evidence entries must be strings"):
        load_dataset(f"locomo:{path}")


def test_meetingqa(meetingqa_file):
    ds = load_dataset(f"meetingqa:{meetingqa_file}")
    assert [q.id for q in ds.questions] == ["mqa:0", "mqa:1", "mqa:2", "mqa:3"]
    assert len(ds.memories) == 1 and ds.bank.n_sessions == 2
    assert ids(ds, ds.questions[0].evidence) == ["m1_000", "m2_002"]  # the exact duplicate counts too
    assert ids(ds, ds.questions[2].evidence) == ["m1_001"]
    assert ds.questions[3].answer == "invoice processing time"
    assert all(q.type is None and math.isnan(q.date) for q in ds.questions)
    assert ds.bank.encoded_texts()[1] == "Sam: The budget for Aurora is forty thousand dollars."


def test_meetingqa_broken(tmp_path, meetingqa_doc):
    meetingqa_doc["entries"][2]["transcript_message"] = None
    path = tmp_path / "m.json"
    path.write_text(json.dumps(meetingqa_doc))
    with pytest.raises(DataFormatError, match=r"entries\[2\], field 'transcript_message': missing"):
        load_dataset(f"meetingqa:{path}")


def test_jsonl(jsonl_file, tmp_path):
    ds = load_dataset(f"jsonl:{jsonl_file}")
    assert [q.id for q in ds.questions] == ["q1", "q2", "q3", "q4"]
    assert len(ds.memories) == 2
    assert ids(ds, ds.memory_utterances(ds.questions[0].memory)) == ["s1:0", "s1:1", "s2-a"]
    assert ids(ds, ds.questions[1].evidence) == ["s2-a"] and len(ds.questions[3].evidence) == 0
    assert format_timestamp(ds.questions[0].date) == "2024-03-09T00:00:00" and math.isnan(ds.questions[1].date)
    assert ds.bank.encoded_texts()[-1] == "Bob plays chess on Sundays."  # no speaker: bare text
    # the single-object JSON form reads the same
    rows = [json.loads(x) for x in jsonl_file.read_text().splitlines()]
    doc = {"sessions": [r for r in rows if r.pop("type") == "session"], "questions": [r for r in rows if "text" in r]}
    path = tmp_path / "mem.json"
    path.write_text(json.dumps(doc))
    same = load_dataset(f"jsonl:{path}")
    assert same.bank.utt_ids == ds.bank.utt_ids and [q.id for q in same.questions] == ["q1", "q2", "q3", "q4"]


@pytest.mark.parametrize("line, message", [
    ('{"type": "question", "id": "x", "text": "?", "memory": "alice", "evidence": ["nope"]}', "evidence id 'nope'"),
    ('{"type": "session", "id": "s1", "utterances": []}', "session id 's1' is used twice"),
    ('{"type": "note"}', "type must be 'session' or 'question'"),
    ('{"type": "session", "id": "s9", "memory": "alice", "utterances": [{"id": "s2-a", "text": "x"}]}',
     "utterance id 's2-a' is used twice"),
    ('{"type": "question", "id": "q1", "text": "again", "memory": "alice"}', "question id 'q1' is used twice"),
    ('{"type": "question", "id": "z", "text": "?", "memory": "carol"}', "memory 'carol' has no sessions"),
    ("{broken", "line 8: not valid JSON"),
])
def test_jsonl_broken(jsonl_file, line, message):
    jsonl_file.write_text(jsonl_file.read_text() + line + "\n")
    with pytest.raises(DataFormatError, match="mem.jsonl") as err:
        load_dataset(f"jsonl:{jsonl_file}")
    assert message in str(err.value)


def _many_sessions_file(tmp_path, n_questions=6, per=4):
    items = []
    for q in range(n_questions):
        sessions = {f"answer_{q}": [("user", f"evidence {q}", True)]}
        sessions.update({f"d{q}_{j}": [("user", f"filler {q} {j}", False)] for j in range(per - 1)})
        dates = [f"2023/0{1 + q % 8}/{10 + j:02d} (Mon) 10:00" for j in range(per)]
        items.append(lme_item(f"q{q}", f"question {q}", sessions, dates))
    path = tmp_path / "many.json"
    path.write_text(json.dumps(items))
    return path


def test_haystack_expansion(tmp_path):
    path = _many_sessions_file(tmp_path)
    ds = load_dataset(f"longmemeval:{path}")
    big = expand_haystacks(ds, 12, seed=3)
    evidence_sessions = {s for q in ds.questions for s in q.evidence_sessions}
    for mem, small in zip(big.memories, ds.memories):
        assert len(mem.sessions) == 12 and len(set(mem.sessions)) == 12
        assert set(small.sessions) <= set(mem.sessions)
        extra = set(mem.sessions) - set(small.sessions)
        assert not extra & evidence_sessions
        assert small.dates.min() <= mem.dates.min() and mem.dates.max() <= small.dates.max()
        assert np.all(np.diff(mem.dates) >= 0)  # ordered by date
    again = expand_haystacks(ds, 12, seed=3)
    other = expand_haystacks(ds, 12, seed=4)
    assert all(np.array_equal(a.sessions, b.sessions) for a, b in zip(big.memories, again.memories))
    assert any(not np.array_equal(a.sessions, b.sessions) for a, b in zip(big.memories, other.memories))
    with pytest.raises(ValueError, match="distractor sessions available"):
        expand_haystacks(ds, 40)


def test_limit_subset_keeps_haystacks_and_ids(tmp_path):
    path = _many_sessions_file(tmp_path)
    full = load_dataset(f"longmemeval:{path}", haystack_sessions=10, seed=1)
    part = load_dataset(f"longmemeval:{path}", haystack_sessions=10, seed=1, limit=2)
    assert len(part.questions) == 2
    for q in part.questions:
        f = next(x for x in full.questions if x.id == q.id)
        assert ids(part, part.memory_utterances(q.memory)) == ids(full, full.memory_utterances(f.memory))
        assert ids(part, q.evidence) == ids(full, f.evidence)
        assert np.array_equal(part.memories[q.memory].dates, full.memories[f.memory].dates)
    assert part.bank.n_sessions <= 20  # compact: only reachable sessions
    with pytest.raises(ValueError, match="limit must be positive"):
        load_dataset(f"longmemeval:{path}", limit=0)


def test_jsonl_numeric_zero_ids_are_kept(tmp_path):
    lines = [{"type": "session", "id": "s", "memory": 0, "utterances": [{"id": 0, "text": "zero"}]},
             {"type": "question", "id": "q", "text": "?", "memory": 0, "evidence": [0]}]
    path = tmp_path / "z.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    ds = load_dataset(f"jsonl:{path}")
    assert ds.bank.utt_ids == ["0"] and ids(ds, ds.questions[0].evidence) == ["0"]


def test_a_session_listed_twice_is_held_once(tmp_path, lme_items):
    item = lme_items[0]
    item["haystack_session_ids"].append(item["haystack_session_ids"][1])
    item["haystack_sessions"].append(item["haystack_sessions"][1])
    item["haystack_dates"].append("2024/01/01 (Mon) 00:00")
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(lme_items))
    ds = load_dataset(f"longmemeval:{path}")
    mem = ds.memories[0]
    assert len(mem.sessions) == 3 and len(set(mem.sessions.tolist())) == 3
    rows = ds.memory_utterances(0)
    assert len(rows) == len(set(rows.tolist()))
    assert mem.dates[1] < 1_700_000_000  # its first date (2023), not the repeat's (2024)


def test_longmemeval_dates_it_cannot_read_are_undated_with_one_warning(tmp_path, lme_items):
    """A benchmark file is not refused for a bad date (February 29 of 2023; a date without its year): the session or
    question is undated, and one warning names the file, the count and the first."""
    lme_items[0]["haystack_dates"][1] = "2023/02/29 (Wed) 10:00"
    lme_items[1]["question_date"] = "8 May"  # no year: not put in 2000
    path = tmp_path / "dates.json"
    path.write_text(json.dumps(lme_items))
    with pytest.warns(DataFormatWarning, match=r"dates.json: 2 date\(s\) could not be read .* record 0 \(q1\), "
                      r"field 'haystack_dates': not an absolute date: '2023/02/29"):
        ds = load_dataset(f"longmemeval:{path}")
    assert np.isnan(ds.memories[0].dates).tolist() == [False, True, False]
    assert math.isnan(ds.questions[1].date) and not math.isnan(ds.questions[0].date)
    jsonl = tmp_path / "own.jsonl"  # a user's own file stays strict: the date is theirs to mend
    jsonl.write_text(json.dumps({"type": "session", "id": "s", "date": "2023-02-29", "utterances": [{"text": "x"}]}))
    with pytest.raises(DataFormatError, match="field 'date': not an absolute date"):
        load_dataset(f"jsonl:{jsonl}")


def test_a_session_id_with_other_content_is_kept_apart_for_its_question(tmp_path, lme_items):
    """Another haystack's session of the same id with other content: that question reads its own copy, under the
    same utterance ids, its evidence and answer session on it; a warning names it; an expansion never draws either
    copy, so no memory holds an id twice."""
    changed = [{"role": "user", "content": "Max is a beagle.", "has_answer": True}]
    lme_items[1]["haystack_sessions"][0] = changed  # q2's shared_dog differs from q1's
    lme_items[1]["answer_session_ids"] = ["shared_dog"]
    lme_items.append({**lme_items[1], "question_id": "q4"})  # q4 holds q2's: one copy for both
    path = tmp_path / "apart.json"
    path.write_text(json.dumps(lme_items))
    with pytest.warns(DataFormatWarning, match="1 haystack session.* question 'q2', session 'shared_dog'"):
        ds = load_dataset(f"longmemeval:{path}")
    q1, q2, _, q4 = ds.questions
    assert ds.bank.n_sessions == 8 and list(ds.memories[q4.memory].sessions) == list(ds.memories[q2.memory].sessions)
    assert ids(ds, ds.memory_utterances(q2.memory))[:2] == ["shared_dog:0", "answer_s2:0"]
    assert [ds.bank.utt_texts[i] for i in ds.memory_utterances(q2.memory)][0] == "Max is a beagle."
    assert [ds.bank.utt_texts[i] for i in ds.memory_utterances(q1.memory)][2] == "I adopted a beagle puppy named Max " \
        "last week."
    assert ids(ds, q2.evidence) == ["shared_dog:0", "answer_s2:0"]
    assert sorted(ds.bank.session_ids[s] for s in q2.evidence_sessions) == ["answer_s2", "shared_dog@q2"]
    big = expand_haystacks(ds, 4)
    for m, (mem, small) in enumerate(zip(big.memories, ds.memories)):
        held = ids(big, big.memory_utterances(m))
        assert len(mem.sessions) == 4 and len(held) == len(set(held))
        drawn = set(mem.sessions.tolist()) - set(small.sessions.tolist())
        assert not {"shared_dog", "shared_dog@q2"} & {ds.bank.session_ids[s] for s in drawn}


def test_an_id_a_haystack_repeats_with_other_turns_is_a_session_of_its_own(tmp_path, lme_items):
    """A haystack that lists a session id again with other turns: that listing is kept as '<id>#<place>', its
    utterances '<id>#<place>:<turn>' (one memory never holds an id twice), its evidence counted; a warning names it;
    the same id again with the same turns stays one session."""
    item = lme_items[0]
    item["haystack_session_ids"] = ["s", "s", "t", "s"]
    item["haystack_dates"] = [item["haystack_dates"][0]] * 4
    a, b, c = ({"role": "user", "content": x} for x in "abc")
    item["haystack_sessions"] = [[a], [b, {"role": "user", "content": "b2", "has_answer": True}], [c], [a]]
    path = tmp_path / "twice.json"
    path.write_text(json.dumps(lme_items))
    with pytest.warns(DataFormatWarning, match="1 haystack session.* repeat a session id .* question 'q1', "
                                               "session 's'"):
        ds = load_dataset(f"longmemeval:{path}")
    q1 = ds.questions[0]
    held = ids(ds, ds.memory_utterances(q1.memory))
    assert held == ["s:0", "s#1:0", "s#1:1", "t:0"] and ids(ds, q1.evidence) == ["s#1:1"]
    assert [ds.bank.utt_texts[i] for i in ds.memory_utterances(q1.memory)] == ["a", "b", "b2", "c"]


@pytest.mark.parametrize("listed, texts, held", [
    (["s", "s", "s"], "abb", ["s:0", "s#1:0"]),  # a second listing of the same other turns: the session the first became
    (["s#2", "s", "s"], "xab", ["s#2:0", "s:0", "s#2#2:0"]),  # the place's name taken by an earlier listing
    (["s", "s", "s#1"], "abx", ["s:0", "s#1#1:0", "s#1:0"]),  # ... or by a later one, which keeps its own
])
def test_a_repeated_listing_never_takes_a_name_the_haystack_uses(tmp_path, lme_items, listed, texts, held):
    item = lme_items[0]
    item["haystack_session_ids"], item["haystack_dates"] = listed, [item["haystack_dates"][0]] * 3
    item["haystack_sessions"] = [[{"role": "user", "content": x, "has_answer": x == texts[-1]}] for x in texts]
    path = tmp_path / "named.json"
    path.write_text(json.dumps(lme_items))
    with pytest.warns(DataFormatWarning, match="repeat a session id"):
        ds = load_dataset(f"longmemeval:{path}")
    q1 = ds.questions[0]
    assert ids(ds, ds.memory_utterances(q1.memory)) == held
    assert [ds.bank.utt_texts[i] for i in q1.evidence] == [texts[-1]]  # counted once


def test_lone_surrogates_in_texts_are_repaired(tmp_path, lme_items, locomo_samples):
    """A JSON "\\ud83d" whose pair is missing (ShareGPT-derived text has them) would stop the embedding cache, the
    tokenizer and SQLite: every text a loader reads holds U+FFFD in its place, ids as they are."""
    lme_items[0]["haystack_sessions"][0][0]["content"] = "broken emoji \ud83d here, whole \U0001f600"
    lme_items[0]["question"] = "what \udc00?"
    lme_items[0]["answer"] = "a \ud800"
    locomo_samples[0]["conversation"]["session_1"][0]["text"] = "photo \udfff"
    locomo_samples[0]["conversation"]["session_1"][0]["blip_caption"] = "a cat \ud83d"
    for fmt, doc in (("longmemeval", lme_items), ("locomo", locomo_samples)):
        path = tmp_path / f"{fmt}.json"
        path.write_text(json.dumps(doc))  # (json.dumps writes them as escapes, as such files hold them)
        ds = load_dataset(f"{fmt}:{path}")
        for text in ds.bank.encoded_texts() + [q.text for q in ds.questions] + [q.answer or "" for q in ds.questions]:
            text.encode("utf-8")
    assert load_dataset(f"longmemeval:{tmp_path / 'longmemeval.json'}").bank.utt_texts[0] == \
        "broken emoji \ufffd here, whole \U0001f600"
    assert load_dataset(f"locomo:{tmp_path / 'locomo.json'}").bank.utt_texts[0] == \
        "photo \ufffd [shares a photo: a cat \ufffd]"


def test_locomo_as_the_public_file_writes_it(tmp_path, locomo_samples):
    """Zero-padded session keys; evidence ids padded or with a stray colon (``D1:03``, ``D:2:1``, as locomo10.json
    has them); a date it cannot read, undated with a warning; a repeated sample_id is refused (its question ids
    would repeat)."""
    conv = locomo_samples[0]["conversation"]
    conv["session_02"], conv["session_02_date_time"] = conv.pop("session_2"), conv.pop("session_2_date_time")
    conv["session_10_date_time"] = "8:00 pm on 31 September, 2023"
    locomo_samples[0]["qa"][0]["evidence"] = ["D1:03", "D:2:1"]
    path = tmp_path / "lc.json"
    path.write_text(json.dumps(locomo_samples))
    with pytest.warns(DataFormatWarning, match=r"1 date\(s\).*field 'session_10_date_time'"):
        ds = load_dataset(f"locomo:{path}")
    assert [ds.bank.session_ids[s] for s in ds.memories[0].sessions] == ["conv-1:session_1", "conv-1:session_02",
                                                                        "conv-1:session_10"]
    assert ids(ds, ds.questions[0].evidence) == ["D1:3", "D2:1"]
    assert np.isnan(ds.memories[0].dates).tolist() == [False, False, True]
    path.write_text(json.dumps(locomo_samples + [locomo_samples[1]]))
    with pytest.raises(DataFormatError, match=r"record 2 \(conv-2\), field 'sample_id': duplicate sample_id"):
        load_dataset(f"locomo:{path}")
    conv["session_10_date_time"] = "8:00 pm on 30 September, 2023"
    path.write_text(json.dumps(locomo_samples))  # every conversation repeats D1:1: growing one would repeat ids
    with pytest.raises(ValueError, match=r"only 0 distractor sessions available \(2 sessions hold utterance ids that "
                                         r"another session holds too"):
        load_dataset(f"locomo:{path}", haystack_sessions=4)
