"""``python -m assomem_gpu.answer``: retrieve, answer each question from its top-k utterances with an LLM, score the
answers (EM, token F1, and the LLM judge with ``--judge``), write answers JSONL and a report.

With ``--curve`` the questions are answered at every k from 1 to 10, and the report (and ``--plot``) holds Acc@k and
F1@k beside R@k, as the paper's §8.3 figure. Replies are cached by (model, prompt, token limit) in the cache folder,
so a rerun asks the LLM only what it has not answered before (``--no-cache``: ask everything once).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..cli_options import add_dataset_options, check_writable, dataset_from_options
from ..eval.plots import recall_curve
from ..llm import LLM, ResponseCache, cached_chat, fitting, knows_context, make_llm, reply_fitting
from ..memory import Dataset
from ..prompts import ANSWER_TOKENS, final_answer
from ..ranking_source import add_rankings_options, rankings_from_options
from .context import PromptMaker
from .judging import judge, score_answers

CURVE_KS = tuple(range(1, 11))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m assomem_gpu.answer", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_dataset_options(p, "answer a seeded random sample of this many questions")
    p.add_argument("--k", type=int, default=6,
                   help="retrieved utterances shown to the LLM (at most: the best that fit a local LLM's context)")
    p.add_argument("--curve", action="store_true", help=f"also answer at every k in {CURVE_KS[0]}..{CURVE_KS[-1]}")
    p.add_argument("--llm", dest="answer_llm", default="smollm2",
                   help="answering LLM: smollm2, hf:<model>[::<gguf>], hf:<file.gguf>, openai:<url>#<model>")
    p.add_argument("--judge", help="judging LLM (same forms as --llm; 'same': the answering one); without it, no judge")
    p.add_argument("--max-new-tokens", type=int, default=ANSWER_TOKENS, help="token limit of an answer")
    p.add_argument("--questions", help="answer only the held-out questions of this split.json "
                                       "(python -m assomem_gpu.finetune writes it)")
    p.add_argument("--output", required=True,
                   help="answers as JSON Lines: question_id, answer, used (ids), k, reference, scores")
    p.add_argument("--report", help="write scores per k and question type, and timings, as JSON here")
    p.add_argument("--plot", help="write Acc@k / F1@k / R@k curves here (PNG; needs --curve)")
    p.add_argument("--no-cache", action="store_true",
                   help="ask the LLM every prompt once: replies are neither read from nor written to the cache "
                        "file (the run keeps its own in memory)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_rankings_options(p, "whose top k the LLM is shown")
    args = p.parse_args(argv)
    if args.k < 1 or args.max_new_tokens < 1:
        p.error("--k and --max-new-tokens must be positive")
    if args.plot and not args.curve:
        p.error("--plot needs --curve")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    try:
        for path in [args.output, args.report]:
            if path:
                check_writable(Path(path))
        ds = dataset_from_options(args)
        if args.questions:
            ds = heldout_only(ds, args.questions)
        if not ds.questions:
            raise ValueError(f"{args.dataset}: the dataset holds no questions")
        llm = make_llm(args.answer_llm)
        judge_llm = None if not args.judge else llm if args.judge == "same" else make_llm(args.judge)
        ks = sorted({args.k, *CURVE_KS}) if args.curve else [args.k]
        rankings = rankings_from_options(args, ds, ks, progress=not args.quiet)
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cache = ResponseCache(":memory:" if args.no_cache else None)  # --no-cache: the run's own replies only
    prepare_s = time.perf_counter() - t0  # the dataset loaded, the rankings read or retrieved
    try:
        by_k, answered, generate_s, judge_s, generated = answer_at(ds, rankings, ks, llm, judge_llm, cache, args)
    except (ValueError, RuntimeError) as exc:  # the endpoint is down, a prompt is over the context, ...
        print(f"error: {exc}", file=sys.stderr)
        return 2
    prompts, answers, scored = answered[args.k]
    with open(args.output, "w", encoding="utf-8") as fh:
        for q, (_, used), answer, m in zip(ds.questions, prompts, answers, scored.per_question):
            fh.write(json.dumps({"question_id": q.id, "answer": answer, "used": used, "k": args.k,
                                 "reference": q.answer, "scores": m}) + "\n")
    report = {"dataset": args.dataset, "n_questions": len(ds.questions), "questions": args.questions,
              "method": args.method, "rankings": args.from_rankings, "llm": llm.name,
              "judge": judge_llm.name if judge_llm else None,
              "max_new_tokens": args.max_new_tokens, "k": args.k, "ks": ks,
              "by_k": {str(k): v for k, v in by_k.items()},
              "trimmed": {str(k): sum(len(used) < min(k, len(ranked)) for (_, used), ranked in zip(p, rankings))
                          for k, (p, _, _) in answered.items()},
              "timing": {"prepare_s": round(prepare_s, 3), "generate_s": round(generate_s, 3),
                         "judge_s": round(judge_s, 3), "answers": len(ds.questions) * len(ks), "generated": generated,
                         "s_per_generated": round(generate_s / generated, 4) if generated else None,
                         "note": "answers read from the cache cost ~0 s; generate_s is the time of the others"}}
    print_summary(report)
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.report}")
    if args.plot:
        from .plots import write_curves

        title = f"{args.dataset.split(':', 1)[0]}: {args.method}, {llm.name}"
        print(f"wrote {write_curves(args.plot, by_k, title)}")
    print(f"wrote {args.output}")
    return 0


def each_fitting(make: PromptMaker, rankings: list[np.ndarray], k: int, llm: LLM, cache: ResponseCache | None,
                 max_new_tokens: int, generated: list[int]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """Per question, the prompt over the most of its first ``k`` utterances that ``llm`` takes (``reply_fitting``)
    with their ids, and its reply: for an endpoint that refused a prompt, which tells its context by refusing. The
    questions run ``llm.concurrency`` at a time (an endpoint's requests in flight); those ``cache`` answered already
    cost nothing."""
    def one(i: int) -> tuple[tuple[str, list[str]], str]:
        top = [int(r) for r in rankings[i][:k]]
        try:
            n, prompt, reply = reply_fitting(llm, lambda m: make(i, top[:m]), len(top), max_new_tokens, cache,
                                             generated)
        except ValueError as exc:
            raise ValueError(f"question {make.ds.questions[i].id!r}: {str(exc).removeprefix('question: ')}") from exc
        return (prompt, [make.ds.bank.utt_ids[r] for r in top[:n]]), reply

    with ThreadPoolExecutor(getattr(llm, "concurrency", 1)) as pool:
        done = list(pool.map(one, range(len(rankings))))
    return [p for p, _ in done], [r for _, r in done]


def answer_at(ds: Dataset, rankings: list[np.ndarray], ks: list[int], llm: LLM, judge_llm: LLM | None,
              cache: ResponseCache | None, args: argparse.Namespace) -> tuple[dict, dict, float, float, int]:
    """Every question answered (and judged) at each k: the scores per k, (prompts, answers, scores) per k, and the
    seconds spent generating and judging, and the answers generated (not read from the cache)."""
    by_k, answered, generate_s, judge_s, generated = {}, {}, 0.0, 0.0, []
    make = PromptMaker(ds)
    recall = recall_curve(ds, rankings, ks) if any(len(q.evidence) for q in ds.questions) else [None] * len(ks)
    for k, r_at_k in zip(ks, recall):
        prompts = make.top_k(rankings, k, fits=lambda ps: fitting(llm, ps, args.max_new_tokens))
        t1 = time.perf_counter()
        try:
            replies = cached_chat(llm, [p for p, _ in prompts], args.max_new_tokens, cache, progress=not args.quiet,
                                  desc=f"answers k={k}", asked=generated)
        except ValueError:  # an endpoint refused a prompt (over its context): each question the most it takes
            if knows_context(llm):
                raise
            prompts, replies = each_fitting(make, rankings, k, llm, cache, args.max_new_tokens, generated)
        answers = [final_answer(r) for r in replies]
        t2 = time.perf_counter()
        verdicts = judge(ds, answers, judge_llm, cache, progress=not args.quiet) if judge_llm else None
        generate_s, judge_s = generate_s + t2 - t1, judge_s + time.perf_counter() - t2
        scored = score_answers(ds, answers, verdicts)
        by_k[k] = {"recall": None if r_at_k is None else float(r_at_k), **scored.summary}
        answered[k] = (prompts, answers, scored)
    return by_k, answered, generate_s, judge_s, sum(generated)


def heldout_only(ds: Dataset, split: str) -> Dataset:
    """``ds`` with only the questions listed as ``heldout`` in the split file."""
    try:
        keep = set(json.loads(Path(split).read_text())["heldout"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{split}: not a split file with a 'heldout' list ({exc})") from None
    return ds.subset([i for i, q in enumerate(ds.questions) if q.id in keep])


def print_summary(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report['dataset']}: {report['n_questions']} questions, {report['llm']}")
    cols = ["n", "R@k", "EM", "F1"] + (["Acc", "judge errors"] if report["judge"] else [])
    for c in ["k", "questions", *cols]:
        table.add_column(c, justify="right")
    for k, row in report["by_k"].items():
        types = [t for t in row if t != "recall"]
        for t in types:
            m = row[t]
            cells = [str(m["n"]), pct(row["recall"]) if t == "all" else "", *(held(m, c) for c in ("EM", "F1"))]
            if report["judge"]:
                cells += [held(m, "Acc"), held(m, "judge_errors")]
            table.add_row(k if t == "all" else "", t, *cells)
    Console().print(table)
    t = report["timing"]
    print(f"answers generated: {t['generated']} of {t['answers']}, {t['s_per_generated']} s each")
    for k, n in report["trimmed"].items():
        if n:
            print(f"k={k}: {n} prompts over fewer utterances, the most that fit the LLM's context")


def pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.2f}"


def held(means: dict, key: str) -> str:
    """``pct`` of a mean, with how many questions it is over where fewer than ``n`` hold it (rubrics have no EM)."""
    over = means.get(f"n_{key}")
    return pct(means.get(key)) + ("" if over is None else f" ({over})")


if __name__ == "__main__":
    sys.exit(main())
