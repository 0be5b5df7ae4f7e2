"""The denoising QA dataset of §3.3, built from labelled questions and their retrieval rankings.

Per training question two samples, each the generation prompt the answer pipeline uses (``prompts``) over a
memory context, and the multi-task target (``TARGET_FORMAT``: the question type, then the answer):

- **mixed**: the question's evidence utterances among its hardest negatives (the best-ranked utterances that are not
  evidence and do not hold its reference answer: what retrieval confuses with the answer), shuffled, ``context``
  utterances in all; target: its answer;
- **negative-only**: ``context`` hardest negatives alone; target: its type and "IDK" (the answer is not there).

A turn that is not labelled evidence may still say the answer (a meeting repeats who takes which task; by BM25's
rankings, MeetingQA's hardest negatives held the reference verbatim for 27 of its 235 training questions): one whose
words hold the reference's, as ``answer.scores.normalize_answer`` reads both, is no negative.

Abstention questions give only a negative-only sample (their answer is "not in the memory" whatever is shown),
with or without a reference (LoCoMo's category 5 holds only its trap answer). Other questions without a reference
answer, or without evidence, give none, nor do those whose answer is a rubric (``Question.rubric``: a reply that says
it is no answer, and without the evidence a preference question is still answered, not declined).

The split is by evidence: questions that share an evidence session (directly or through others) fall on the same
side, and no training context shows a held-out question's evidence utterance (not even as a negative), so nothing a
held-out question is answered from is trained on. (A split by memory would not do: MeetingQA's one memory holds all
its meetings.)
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from ..answer.context import PromptMaker
from ..answer.scores import normalize_answer
from ..prompts import TARGET_FORMAT
from ..memory import Dataset

IDK = "IDK"


def split_questions(ds: Dataset, heldout: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """(train, held-out) question rows: questions linked by shared evidence sessions form a group (a question without
    evidence is its own), and a group goes to the held-out side when a seeded hash of its first question's id falls
    under ``heldout`` (a share, 0 < heldout < 1)."""
    if not 0 < heldout < 1:
        raise ValueError(f"heldout: a share between 0 and 1, got {heldout}")
    utt_session = ds.bank.utt_session()
    parent = list(range(len(ds.questions)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_asker: dict[int, int] = {}
    for i, q in enumerate(ds.questions):
        for session in np.unique(utt_session[q.evidence]).tolist():
            parent[root(i)] = root(first_asker.setdefault(session, i))
    train, held = [], []
    for i in range(len(ds.questions)):
        group = ds.questions[root(i)].id
        draw = int.from_bytes(hashlib.sha256(f"{seed}:{group}".encode()).digest()[:8], "big") / 2**64
        (held if draw < heldout else train).append(i)
    return train, held


def denoising_samples(ds: Dataset, rankings: Sequence[np.ndarray], questions: Sequence[int], context: int = 6,
                      seed: int = 0, unseen: Sequence[int] = ()) -> list[dict]:
    """Conversational prompt-completion samples (``{"prompt": [user message], "completion": [assistant message],
    "question_id", "kind"}``, the form trl's ``SFTTrainer`` trains on the completion of) for ``questions``; no
    context shows the evidence of the ``unseen`` questions (the held-out side)."""
    if context < 1:
        raise ValueError(f"context: at least one utterance, got {context}")
    rng = np.random.default_rng(seed)
    make = PromptMaker(ds)
    hidden = {int(r) for i in unseen for r in ds.questions[i].evidence}
    samples = []
    for i in questions:
        q = ds.questions[i]
        if not q.abstention and (q.answer is None or q.rubric or not len(q.evidence)):
            continue
        qtype = q.type or "unknown"
        evidence = [int(r) for r in q.evidence]
        says = None if q.abstention else f" {normalize_answer(q.answer)} "  # the reference's words
        negatives = [int(r) for r in rankings[i] if r not in evidence and r not in hidden
                     and (says is None or says not in f" {normalize_answer(ds.bank.utt_texts[r])} ")][:context]
        contexts = [("negative-only", negatives, IDK)]
        if not q.abstention:
            mixed = evidence[:context] + negatives[: context - len(evidence[:context])]
            contexts.insert(0, ("mixed", [mixed[j] for j in rng.permutation(len(mixed))], q.answer))
        for kind, rows, answer in contexts:
            samples.append({"prompt": [{"role": "user", "content": make(i, rows)}],
                            "completion": [{"role": "assistant",
                                            "content": TARGET_FORMAT.format(type=qtype, answer=answer)}],
                            "question_id": q.id, "kind": kind})
    return samples
