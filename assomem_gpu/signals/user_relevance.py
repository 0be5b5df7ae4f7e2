"""User relevance: the question's relevance, read on the memory user's own turns only.

A question about the user's past ("What did I buy for my sister?", "How long have I been learning the piano?") is
answered by what the user said, and in an assistant's memory half the turns are the assistant's: long, fluent and
close to the question in topic, they fill the top of a ranking by relevance alone (on LongMemEval_S dev, 423 of the
446 evidence turns are the user's, and the default ranked 4.6 assistant turns into a question's top 10). The
``user_relevance`` signal of a candidate is its relevance (its best passage's, as the relevance signal reads it)
where one of ``AssoMemConfig.user_speakers`` says it, and the lowest relevance among the question's candidates
elsewhere. Calibration weighs it per question type like every signal (a question that asks what the assistant said
leaves it little weight). A question none of whose candidates the user said, or all of them, has no such signal (its
weight goes to the others): a memory of named speakers (meetings, LoCoMo's pairs of friends) is ranked as without it,
with one type's weights or several (``FusionModel.weights`` renormalises each type's over a question's signals
before it mixes them).

Which turns are the user's is a function of each utterance's speaker alone (``own_turns``), so adds, removals and
loads keep it exactly.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def own_turns(speakers: Sequence[str], user_speakers: Sequence[str]) -> np.ndarray:
    """(len(speakers),) bool: which speakers name the memory's user (compared stripped and case-folded)."""
    names = {s.strip().casefold() for s in user_speakers}  # (a config holds them so already)
    return np.fromiter((s.strip().casefold() in names for s in speakers), bool, len(speakers))


def user_relevance_scores(best, mine, valid, xp):
    """(B, C) the signal of each question's candidates from their relevance ``best`` (B, C), ``mine`` (B, C) bool,
    whether the user said each (``own_turns`` of its row), and ``valid`` (B, C) marking the candidates (padding after
    them), on the backend's arrays (``xp``): ``best`` where the candidate is the user's, else the lowest ``best`` of
    the question's candidates; 0 at padding."""
    b, c = best.shape
    if b * c == 0:
        return xp.zeros((b, c))
    low = xp.min(xp.where(valid, best, xp.inf), axis=1, keepdims=True)
    return xp.where(valid, xp.where(mine, best, low), 0.0)
