"""Reply: the lexical context of an utterance whose turn before asks a question.

A question put in a conversation is answered by the turn after it, and that turn often shares few of its words ("Who
was tasked with developing a comprehensive test plan?" — "Okay, so who's going to own the development of this test
plan?" / "Well, I think you should take the lead on that, Isabella"). The turn that asks matches the user's question
best by words and by meaning, and so ranks above its answer: of the wrong first hits on MeetingQA, a quarter were the
turn just before the evidence, nearly all of them asking something (docs/results-history.md, "Replies"). The
``lexical_context`` signal gives every turn the BM25 score of the turn before it, what ever that turn says; the
``reply`` signal gives it only where that turn asks (``asks``: it holds a question mark), so the fusion can weigh an
answer to a matching question apart from a turn that merely follows a matching one. Which turns ask is a function of
each utterance's text alone, so adds, removals and loads keep it exactly.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

QUESTION_MARKS = ("?", "？")  # ASCII, and the full-width mark of Chinese and Japanese text


def asks(texts: Sequence[str]) -> np.ndarray:
    """(len(texts),) bool: whether each text asks a question (holds one of ``QUESTION_MARKS``)."""
    return np.fromiter((any(m in t for m in QUESTION_MARKS) for t in texts), bool, len(texts))


def reply_scores(context, at, asking, xp):
    """(B, C) the reply signal of each question's utterance rows ``at`` (padding reads row 0: any value), from their
    ``lexical_context`` signal ``context`` (B, C: the BM25 score of the turn before in the same session, 0 where
    there is none) and ``asking`` (n_utt,) bool, ``asks`` of every utterance, on ``xp``: ``context`` where the turn
    before asks, else 0."""
    return xp.where(asking[xp.maximum(at - 1, 0)], context, 0.0)
