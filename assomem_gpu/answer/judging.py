"""Scoring a dataset's answers: exact match and token F1 per answer, the LLM judge's verdicts, and their means per
question type.

Abstention questions (the memory does not hold the answer) are not judged: their every score, Acc included, is
whether the reply abstains (``scores.abstains``), so the judge never compares a reply with a trap answer (LoCoMo's
``adversarial_answer``) or an explanation ("You did not mention ...").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..metrics import mean_by_type
from ..llm import LLM, ResponseCache, cached_chat
from ..memory import Dataset
from ..prompts import JUDGE_TOKENS, judge_prompt
from .scores import answer_scores, parse_verdict


@dataclass
class AnswerScores:
    per_question: list[dict[str, float] | None]  # EM, F1 (not for a rubric), and Acc and judge_errors when judged;
    # None: no reference (or a rubric, unjudged)
    summary: dict[str, dict[str, float]]  # "all" and per type: means and n


def judged(ds: Dataset) -> list[int]:
    """The questions a judge compares with their reference: those with one, abstention questions apart."""
    return [i for i, q in enumerate(ds.questions) if q.answer is not None and not q.abstention]


def judge(ds: Dataset, answers: Sequence[str], llm: LLM, cache: ResponseCache | None, progress: bool = False
          ) -> list[bool | None]:
    """The judge's verdict on each answer of ``judged(ds)`` (None elsewhere, and for a judge error)."""
    rows = judged(ds)
    replies = cached_chat(llm, [judge_prompt(ds.questions[i].text, ds.questions[i].answer, answers[i]) for i in rows],
                          JUDGE_TOKENS, cache, progress=progress, desc="judge")
    verdicts: list[bool | None] = [None] * len(answers)
    for i, reply in zip(rows, replies):
        verdicts[i] = parse_verdict(reply)
    return verdicts


def score_answers(ds: Dataset, answers: Sequence[str], verdicts: Sequence[bool | None] | None = None
                  ) -> AnswerScores:
    """EM and F1 of each answer (``scores.answer_scores``; LoCoMo's normalisation on LoCoMo; none for a rubric,
    which no reply matches) and, with ``verdicts``, Acc: 1 for Win, 0 for Lose; a judge error counts as a loss in Acc
    and is reported apart as ``judge_errors``; an abstention question's Acc is its EM. The means of each score are over
    the questions that have it."""
    style = "locomo" if ds.name == "locomo" else "squad"
    per_question, typed = [], []
    for i, (q, answer) in enumerate(zip(ds.questions, answers)):
        m = answer_scores(answer, None if q.rubric else q.answer, q.abstention, style, q.type)
        if verdicts is not None and (m is not None or (q.rubric and q.answer is not None)):
            if q.abstention:
                m = {**m, "Acc": m["EM"], "judge_errors": 0.0}
            else:
                m = {**(m or {}), "Acc": float(verdicts[i] is True), "judge_errors": float(verdicts[i] is None)}
        per_question.append(m)
        if m is not None:
            typed.append((q.type, m))
    return AnswerScores(per_question, mean_by_type(typed) if typed else {})
