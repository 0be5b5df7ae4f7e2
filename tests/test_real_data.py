"""Checks against the real dev data in ../shared/data; skipped where it is absent."""
import pytest

from assomem_gpu.data import load_dataset

from conftest import SHARED_DATA

LME = SHARED_DATA / "longmemeval" / "longmemeval_s_dev.json.gz"
MQA = SHARED_DATA / "meetingqa" / "meeting_qa_raw.json"


@pytest.mark.skipif(not LME.exists(), reason="../shared/data/longmemeval is absent")
def test_longmemeval_dev_split_counts():
    ds = load_dataset(f"longmemeval:{LME}")
    assert len(ds.questions) == 258 and ds.bank.n_sessions == 10_901 and ds.bank.n_utterances == 113_412
    assert sum(len(q.evidence) for q in ds.questions) == 446
    assert sum(q.abstention for q in ds.questions) == 13
    ids = set(ds.bank.utt_ids)
    assert len(ids) == ds.bank.n_utterances  # session:turn ids are unique across the pool


@pytest.mark.skipif(not LME.exists(), reason="../shared/data/longmemeval is absent")
def test_longmemeval_expansion_to_l_scale():
    ds = load_dataset(f"longmemeval:{LME}", haystack_sessions=2500, limit=5, seed=0)
    assert all(len(m.sessions) == 2500 for m in ds.memories)
    evidence_ids = {ds.bank.session_ids[s] for q in ds.questions for s in q.evidence_sessions}
    assert all(sid.startswith("answer_") for sid in evidence_ids)
    for q in ds.questions:  # no distractor is an evidence session of any question
        extra = {ds.bank.session_ids[s] for s in ds.memories[q.memory].sessions} - evidence_ids
        assert not any(sid.startswith("answer_") for sid in extra)


@pytest.mark.skipif(not MQA.exists(), reason="../shared/data/meetingqa is absent")
def test_meetingqa_counts():
    ds = load_dataset(f"meetingqa:{MQA}")
    assert len(ds.questions) == 295 and ds.bank.n_utterances == 3616 and ds.bank.n_sessions == 50
    assert all(len(q.evidence) >= 1 for q in ds.questions)
