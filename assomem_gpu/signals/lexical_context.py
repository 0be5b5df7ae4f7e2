"""Lexical context: the BM25 match of the turn an utterance replies to.

In a dialogue the words of a question often sit in the turn an answer replies to, and not in the answer ("Who was
tasked with developing a comprehensive test plan?" — "Okay, so who's going to own the development of this test
plan?" / "Well, I think you should take the lead on that, Isabella"). The ``lexical_context`` signal of an utterance
is the BM25 score, for the question, of the turn before it in its session (0 for a session's first turn): the lexical
counterpart of the ``context`` signal, which reads the embeddings of the turns around it. Of the forms measured (the
best score among the turns within 1, 2 or 3 on either side, their mean within 2, the turn before, the turn after) the
turn before has the best mean R@1–R@10 over the three dev sets and gains the most on MeetingQA
(docs/results-history.md, "Lexical context"). It reads the memory's BM25 term counts only, so adds and removes keep
it exactly.
"""
from __future__ import annotations

import numpy as np

from .context import neighbour_values

BEFORE = np.array([-1])  # the turn an utterance replies to


def lexical_context_scores(of_pairs, at, session, xp, known=None):
    """(B, C) the lexical context signal of each question's utterance rows ``at`` (padding reads row 0: any value).

    ``of_pairs(questions, rows)`` gives the BM25 score of question ``questions[i]`` for utterance row ``rows[i]``
    (1-d; ``scoring.lexical_pairs``); ``session`` (n_utt,) each utterance's session row, on ``xp``; ``known`` (B, C):
    the BM25 scores of ``at`` themselves, each question's rows ascending (see ``context.neighbour_values``)."""
    scores, same = neighbour_values(of_pairs, at, session, BEFORE, xp, known)
    return xp.where(same, scores, 0.0)[:, :, 0]
