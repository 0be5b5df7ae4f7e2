import json
from pathlib import Path

import numpy as np
import pytest

import assomem_gpu
from assomem_gpu.data import load_dataset
from assomem_gpu.eval.__main__ import main
from assomem_gpu.metrics import utterance_metrics


def run(tmp_path, dataset, *extra):
    out, ranks = tmp_path / "out.json", tmp_path / "ranks.jsonl"
    code = main(["--dataset", dataset, "--encoder", "hashing", "--quiet", "--output", str(out),
                 "--rankings", str(ranks), *extra])
    assert code == 0
    return json.loads(out.read_text()), [json.loads(line) for line in ranks.read_text().splitlines()]


def test_rankings_export_is_the_contract_and_metrics_come_from_it(tmp_path, jsonl_file, capsys):
    report, lines = run(tmp_path, f"jsonl:{jsonl_file}", "--method", "flat-dense", "--k", "1", "3")
    ds = load_dataset(f"jsonl:{jsonl_file}")
    assert [x["question_id"] for x in lines] == ["q1", "q2", "q3", "q4"]  # questions without evidence written too
    assert all(set(x) == {"question_id", "ranked"} for x in lines)
    for q, line in zip(ds.questions, lines):
        memory_ids = [ds.bank.utt_ids[i] for i in ds.memory_utterances(q.memory)]
        assert sorted(line["ranked"]) == sorted(memory_ids)  # fewer than 50 candidates: all of them, once
    # recomputing the metrics from the export gives the reported figures
    row = {u: i for i, u in enumerate(ds.bank.utt_ids)}
    per_q = [utterance_metrics(np.array([row[u] for u in line["ranked"]]), q.evidence, (1, 3))
             for q, line in zip(ds.questions, lines) if len(q.evidence)]
    summary = report["results"]["flat-dense"]["metrics"]["all"]
    assert summary["n"] == 3 and report["n_evaluated"] == 3 and report["n_questions"] == 4
    assert summary["R@3"] == pytest.approx(np.mean([m["R@3"] for m in per_q]))
    assert "flat-dense" in capsys.readouterr().out


def test_several_methods_write_one_rankings_file_each(tmp_path, jsonl_file):
    assert main(["--dataset", f"jsonl:{jsonl_file}", "--method", "bm25,flat-dense", "--encoder", "hashing", "--quiet",
                 "--rankings", str(tmp_path / "r.jsonl")]) == 0
    for name in ("r.bm25.jsonl", "r.flat-dense.jsonl"):
        assert len((tmp_path / name).read_text().splitlines()) == 4


def test_export_depth_is_at_least_fifty(tmp_path):
    lines = [{"type": "session", "id": f"s{i}", "utterances": [{"text": f"note number {i} about topic {i % 7}"}]}
             for i in range(80)]
    lines.append({"type": "question", "id": "q", "text": "topic 3", "evidence": ["s3:0"]})
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    report, ranks = run(tmp_path, f"jsonl:{path}", "--method", "bm25", "--depth", "10")
    assert len(ranks[0]["ranked"]) == 50 and len(set(ranks[0]["ranked"])) == 50


def test_several_methods_and_per_type_results(tmp_path, lme_file):
    out = tmp_path / "o.json"
    assert main(["--dataset", f"longmemeval:{lme_file}", "--method", "flat-dense,bm25,session-flat", "--encoder",
                 "hashing", "--quiet", "--output", str(out), "--plot", str(tmp_path / "plots")]) == 0
    for name in ("recall_at_k.png", "recall10_by_type.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"flat-dense", "bm25", "session-flat"}
    m = report["results"]["bm25"]["metrics"]
    assert m["all"]["n"] == 2 and m["multi-session"]["n"] == 1  # the abstention question has no evidence
    assert report["results"]["bm25"]["session_metrics"]["all"]["n"] == 2
    assert report["encoded_texts"] > 0


@pytest.mark.parametrize("args, message", [
    (["--dataset", "csv:x"], "format one of"),
    (["--dataset", "jsonl:/no/such/file.jsonl"], "no such file"),
])
def test_bad_dataset_exits_with_message(args, message, capsys):
    assert main([*args, "--encoder", "hashing", "--quiet"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--method", "nope"], ["--k", "0"]])
def test_bad_flags_are_rejected(args, jsonl_file):
    with pytest.raises(SystemExit) as exc:
        main(["--dataset", f"jsonl:{jsonl_file}", *args])
    assert exc.value.code == 2


def test_assomem_on_locomo_and_too_few_questions_for_folds(tmp_path, locomo_file, capsys):
    out = tmp_path / "o.json"
    assert main(["--dataset", f"locomo:{locomo_file}", "--method", "assomem", "--encoder", "hashing", "--quiet",
                 "--clue-merge", "components", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["results"]["assomem"]["metrics"]["all"]["n"] == 4
    assert report["configs"]["assomem"]["graph"]["clue_merge"] == "components"  # the config is recorded
    capsys.readouterr()
    assert main(["--dataset", f"locomo:{locomo_file}", "--method", "assomem", "--encoder", "hashing", "--quiet",
                 "--limit", "2", "--rankings", str(tmp_path / "two.jsonl")]) == 0  # fewer questions than folds
    assert "cross-validated in 2 folds" in capsys.readouterr().err
    assert len((tmp_path / "two.jsonl").read_text().splitlines()) == 2
    one = tmp_path / "one.jsonl"  # a question alone: nothing to calibrate on, so the shipped weights rank it
    assert main(["--dataset", f"locomo:{locomo_file}", "--method", "assomem,bm25", "--encoder", "hashing", "--quiet",
                 "--limit", "1", "--rankings", str(one)]) == 0
    assert "ranked with the shipped weights" in capsys.readouterr().err
    assert [len(p.read_text().splitlines()) for p in (tmp_path / "one.assomem.jsonl", tmp_path / "one.bm25.jsonl")
            ] == [1, 1]
    shipped = tmp_path / "shipped.jsonl"
    assert main(["--dataset", f"locomo:{locomo_file}", "--method", "assomem", "--encoder", "hashing", "--quiet",
                 "--limit", "1", "--weights", str(Path(assomem_gpu.__file__).parent / "weights" / "default.json"),
                 "--rankings", str(shipped)]) == 0
    assert shipped.read_text() == (tmp_path / "one.assomem.jsonl").read_text()
    assert main(["--dataset", f"locomo:{locomo_file}", "--method", "assomem", "--encoder", "hashing", "--quiet",
                 "--limit", "1", "--fixed-weights"]) == 0


def write_lines(path, lines):
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_memories_without_indexable_text_and_questions_without_evidence(tmp_path):
    stop = write_lines(tmp_path / "stop.jsonl", [
        {"type": "session", "id": "a", "utterances": [{"text": "the and of"}, {"text": "it is"}]},
        {"type": "session", "id": "b", "utterances": []},
        {"type": "question", "id": "q1", "text": "what is it?", "evidence": ["a:0"]},
        {"type": "question", "id": "q2", "text": "and the?"}])
    for method in ("bm25", "assomem"):
        report, lines = run(tmp_path, f"jsonl:{stop}", "--method", method, "--folds", "2")
        assert [x["question_id"] for x in lines] == ["q1", "q2"]
        assert report["results"][method]["metrics"]["all"]["n"] == 1
    unlabelled = write_lines(tmp_path / "noev.jsonl", [
        {"type": "session", "id": "a", "utterances": [{"text": "I like green tea"}, {"text": "my car is red"}]},
        {"type": "question", "id": "q1", "text": "what tea?"}, {"type": "question", "id": "q2", "text": "what car?"}])
    _, lines = run(tmp_path, f"jsonl:{unlabelled}", "--method", "assomem", "--folds", "2")  # the shipped weights rank
    assert [len(x["ranked"]) for x in lines] == [2, 2]


def test_outputs_are_checked_before_the_work_and_reported(tmp_path, jsonl_file, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for flag in ("--output", "--rankings"):
        assert main(["--dataset", f"jsonl:{jsonl_file}", "--encoder", "hashing", "--quiet", flag,
                     str(blocker / "x.json")]) == 2
        assert "cannot create its folder" in capsys.readouterr().err
    assert main(["--dataset", f"jsonl:{jsonl_file}", "--encoder", "hashing", "--quiet", "--output",
                 str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    run(tmp_path, f"jsonl:{jsonl_file}")
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'ranks.jsonl'}" in out and f"wrote {tmp_path / 'out.json'}" in out


def test_empty_and_non_utf8_files_are_clear_errors(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["--dataset", f"jsonl:{tmp_path / 'empty.jsonl'}", "--encoder", "hashing", "--quiet"]) == 2
    assert "no questions" in capsys.readouterr().err
    (tmp_path / "latin.jsonl").write_bytes(b'{"type": "session", "id": "a", "utterances": []}\n'
                                           b'{"type": "session", "id": "b", "utterances": [{"text": "caf\xe9"}]}\n')
    assert main(["--dataset", f"jsonl:{tmp_path / 'latin.jsonl'}", "--encoder", "hashing", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "latin.jsonl" in err and "line 2" in err and "UTF-8" in err


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "(default: 100)" in capsys.readouterr().out


def test_the_report_counts_what_each_folds_calibration_chose():
    from assomem_gpu.eval.runner import chosen_counts

    chosen = [(0.1, ()), (0.2, ("reply",)), (0.1, ("session", "reply")), (0.1, ())]
    assert chosen_counts(chosen, ["relevance", "session", "reply"]) == ({"0.1": 3, "0.2": 1},
                                                                       {"session": 1, "reply": 2})
    assert chosen_counts([(0.5, ())], ["relevance"]) == ({"0.5": 1}, {})
