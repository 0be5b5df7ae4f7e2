"""Lexical context: the BM25 match of the turns around an utterance.

In a dialogue the words of a question often sit in the turn an answer replies to, or in the turn that confirms it,
and not in the answer itself ("Who owns the test plan?" — "So who's going to own the development of this test
plan?" / "I think you should take the lead on that, Isabella"). The ``lexical_context`` signal of an utterance is the
best BM25 score, for the question, among the turns within ``context_window`` of it in its session (itself
excluded; 0 for a turn alone in its session): the lexical counterpart of the ``context`` signal, which reads the
same turns' embeddings. It reads the memory's BM25 term counts only, so adds and removes keep it exactly.
"""
from __future__ import annotations

from .context import neighbour_values


def lexical_context_scores(of_pairs, at, session, window: int, xp, known=None):
    """(B, C) the lexical context signal of each question's utterance rows ``at`` (padding reads row 0: any value).

    ``of_pairs(questions, rows)`` gives the BM25 score of question ``questions[i]`` for utterance row ``rows[i]``
    (1-d; ``scoring.lexical_pairs``); ``session`` (n_utt,) each utterance's session row, on ``xp``; ``known`` (B, C):
    the BM25 scores of ``at`` themselves, each question's rows ascending (see ``context.neighbour_values``)."""
    scores, same = neighbour_values(of_pairs, at, session, window, xp, known)
    return xp.where(same, scores, 0.0).max(axis=2)  # BM25 scores are >= 0: no turn reads 0
