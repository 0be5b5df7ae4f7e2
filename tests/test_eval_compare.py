import json

import numpy as np
import pytest

from assomem_gpu.eval.__main__ import main as eval_main
from assomem_gpu.eval.compare import compare, main, paired, resampled
from assomem_gpu.data import load_dataset


def write_ranks(path, ranked: dict[str, list[str]]):
    path.write_text("".join(json.dumps({"question_id": q, "ranked": r}) + "\n" for q, r in ranked.items()))
    return str(path)


def test_paired_counts_interval_and_sign_test():
    a, b = np.array([0, 0, 0, 0, 0, 0, 1.0]), np.ones(7)
    x = paired(a, b)
    assert (x.n, x.better, x.worse, x.same) == (7, 6, 0, 1)
    assert x.diff == pytest.approx(100 * 6 / 7) and x.a == pytest.approx(100 / 7) and x.b == 100
    assert x.p == pytest.approx(2 / 2**6)  # six wins of six that differ: 2 · (1/2)^6
    assert 0 < x.low <= x.diff <= x.high <= 100
    back = paired(b, a)  # B and A swapped: the difference and its interval mirror, wins become losses
    assert (back.better, back.worse, back.p) == (0, 6, x.p)
    assert (back.diff, back.low, back.high) == pytest.approx((-x.diff, -x.high, -x.low))
    same = paired(a, a)
    assert (same.diff, same.low, same.high, same.p, same.same) == (0, 0, 0, 1.0, 7)
    assert paired(a, b) == x  # seeded: the same interval every run
    with pytest.raises(ValueError, match="a and b"):
        paired(a, b[:3])
    with pytest.raises(ValueError, match="draws: resamples of 7 questions"):
        paired(a, b, resampled(5))
    assert paired(a, b, resampled(7)) == x  # the default resamples: 10,000, seed 0


def test_cli_compares_two_exports_per_metric_and_type(tmp_path, jsonl_file, capsys):
    # q1 (typed): evidence s1:0; q2: s2-a; q3: s3:0; q4 has no evidence (skipped)
    a = write_ranks(tmp_path / "a.jsonl", {"q1": ["s1:1", "s1:0", "s2-a"], "q2": ["s2-a", "s1:0"], "q3": ["s3:0"],
                                             "q4": ["s3:0"]})
    b = write_ranks(tmp_path / "b.jsonl", {"q1": ["s1:0", "s1:1", "s2-a"], "q2": ["s1:0", "s1:1", "s2-a"],
                                             "q3": ["s3:0"], "q4": []})
    out = tmp_path / "cmp" / "c.json"
    assert main(["--dataset", f"jsonl:{jsonl_file}", a, b, "--k", "1", "3", "--resamples", "500",
                 "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    r1, r3 = report["groups"]["all"]["R@1"], report["groups"]["all"]["R@3"]
    assert (r1["n"], r1["better"], r1["worse"], r1["same"]) == (3, 1, 1, 1)  # q1 gains its top, q2 loses it
    assert r1["a"] == pytest.approx(200 / 3) and r1["b"] == pytest.approx(200 / 3) and r1["p"] == 1.0
    assert (r3["better"], r3["worse"], r3["same"]) == (0, 0, 3)  # all found in the top 3 either way
    assert set(report["groups"]) == {"all", "single-session-user"}
    assert report["groups"]["single-session-user"]["R@1"]["diff"] == 100.0
    assert "nDCG@10" in report["groups"]["all"]
    printed = capsys.readouterr().out
    assert "b.jsonl against A = a.jsonl" in printed and "R@3 per question type" in printed


def test_figures_agree_with_the_eval_report(tmp_path, jsonl_file):
    for method in ("bm25", "flat-dense"):
        assert eval_main(["--dataset", f"jsonl:{jsonl_file}", "--method", method, "--encoder", "hashing", "--quiet",
                          "--rankings", str(tmp_path / f"{method}.jsonl"),
                          "--output", str(tmp_path / f"{method}.json")]) == 0
    out = tmp_path / "c.json"
    assert main(["--dataset", f"jsonl:{jsonl_file}", str(tmp_path / "bm25.jsonl"), str(tmp_path / "flat-dense.jsonl"),
                 "--output", str(out)]) == 0
    groups = json.loads(out.read_text())["groups"]
    for side, method in (("a", "bm25"), ("b", "flat-dense")):
        metrics = json.loads((tmp_path / f"{method}.json").read_text())["results"][method]["metrics"]
        for key in ("R@1", "R@5", "nDCG@10"):
            assert groups["all"][key][side] == pytest.approx(100 * metrics["all"][key])


def test_exports_that_do_not_fit_the_dataset_are_clear_errors(tmp_path, jsonl_file, capsys):
    full = {"q1": ["s1:0"], "q2": ["s2-a"], "q3": ["s3:0"], "q4": []}
    good = write_ranks(tmp_path / "good.jsonl", full)
    short = write_ranks(tmp_path / "short.jsonl", {k: v for k, v in full.items() if k != "q3"})
    stranger = write_ranks(tmp_path / "stranger.jsonl", {**full, "q2": ["nobody:0"]})
    for other, message in ((short, "no ranking for question 'q3'"), (stranger, "'nobody:0' is not in question 'q2'")):
        out = tmp_path / "never.json"
        assert main(["--dataset", f"jsonl:{jsonl_file}", good, other, "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and "error:" in err and not out.exists()
    out = tmp_path / "never.json"
    (tmp_path / "bad.jsonl").write_text(json.dumps({"question_id": "q1", "ranked": "s1:0"}) + "\n")
    assert main(["--dataset", f"jsonl:{jsonl_file}", good, str(tmp_path / "bad.jsonl"), "--output", str(out)]) == 2
    assert "bad.jsonl:1: ranked: expected a list" in capsys.readouterr().err and not out.exists()
    for flag in (["--resamples", "0"], ["--k", "0"]):
        with pytest.raises(SystemExit) as exc:
            main(["--dataset", f"jsonl:{jsonl_file}", good, good, *flag])
        assert exc.value.code == 2
    ds = load_dataset(f"jsonl:{jsonl_file}")
    with pytest.raises(ValueError, match="b: one ranking per question of the dataset"):
        compare(ds, [np.zeros(0, np.int64)] * 4, [np.zeros(0, np.int64)] * 3)
