import json

import numpy as np
import pytest

from assomem_gpu.data import load_dataset
from assomem_gpu.eval.__main__ import main
from assomem_gpu.eval.metrics import utterance_metrics


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
                 "--output", str(out)]) == 0
    assert json.loads(out.read_text())["results"]["assomem"]["metrics"]["all"]["n"] == 4
    assert main(["--dataset", f"locomo:{locomo_file}", "--method", "assomem", "--encoder", "hashing", "--quiet",
                 "--limit", "2"]) == 2
    assert "needs at least 5 questions" in capsys.readouterr().err
    assert main(["--dataset", f"locomo:{locomo_file}", "--method", "assomem", "--encoder", "hashing", "--quiet",
                 "--limit", "2", "--fixed-weights"]) == 0
