"""Scoring a dataset's answers: exact match and token F1 per answer, the LLM judge's verdicts, and their means per
question type."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..eval.metrics import mean_by_type
from ..llm import LLM, ResponseCache, cached_chat
from ..memory import Dataset
from .prompts import JUDGE_TOKENS, judge_prompt
from .scores import answer_scores, parse_verdict


@dataclass
class Scored:
    per_question: list[dict[str, float] | None]  # EM, F1, and Acc when judged; None: nothing to score against
    summary: dict[str, dict[str, float]]  # "all" and per type: means and n; "judge_errors": share of unparsed verdicts


def judge(ds: Dataset, answers: Sequence[str], llm: LLM, cache: ResponseCache | None, progress: bool = False
          ) -> list[bool | None]:
    """The judge's verdict on each answer (None: a question without a reference answer, or a judge error)."""
    rows = [i for i, q in enumerate(ds.questions) if q.answer is not None]
    replies = cached_chat(llm, [judge_prompt(ds.questions[i].text, ds.questions[i].answer, answers[i]) for i in rows],
                          JUDGE_TOKENS, cache, progress=progress, desc="judge")
    verdicts: list[bool | None] = [None] * len(answers)
    for i, reply in zip(rows, replies):
        verdicts[i] = parse_verdict(reply)
    return verdicts


def score_answers(ds: Dataset, answers: Sequence[str], verdicts: Sequence[bool | None] | None = None) -> Scored:
    """EM and F1 of each answer (``scores.answer_scores``) and, with ``verdicts``, Acc (1 for Win, 0 for Lose; a judge
    error counts as a loss in Acc and is reported apart as ``judge_errors``)."""
    per_question, typed = [], []
    for i, (q, answer) in enumerate(zip(ds.questions, answers)):
        m = answer_scores(answer, q.answer, q.abstention)
        if m is not None and verdicts is not None:
            m = {**m, "Acc": float(verdicts[i] is True), "judge_errors": float(verdicts[i] is None)}
        per_question.append(m)
        if m is not None:
            typed.append((q.type, m))
    return Scored(per_question, mean_by_type(typed) if typed else {})
