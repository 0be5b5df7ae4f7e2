"""Session relevance: how well the question matches the session an utterance belongs to.

The evidence of a question often spans several turns of one session (the turn that names the thing and the turns
that update or date it), and a turn that matches the question well marks its session as the one being asked about.
The ``session`` signal of a candidate is the best relevance (cosine to the question) among the question's candidates
from the same session, the candidate itself included: a turn that says little on its own rises with a session-mate
that matches. It reads only the candidates' relevance, so it needs no stored state and adds and removes keep it
exactly.
"""
from __future__ import annotations

import numpy as np


def session_scores(rel_at, at, valid, session, backend):
    """(B, C) the session signal of each question's candidate rows ``at`` (ascending where ``valid``; padding after
    them), from their relevance ``rel_at`` (B, C) and ``session`` (n_utt,), each utterance's session row, on the
    backend's arrays; 0 at padding.

    A session's rows are consecutive, so each question's candidates of one session form one run along its row: the
    runs' maxima come from one ``backend.segment_max`` over the flattened batch."""
    xp = backend.xp
    b, c = at.shape
    if b * c == 0:
        return xp.zeros((b, c))
    of = xp.where(valid, session[at], -1)  # padding makes a run of its own at the end of its row
    start = xp.ones((b, c), bool)
    start[:, 1:] = of[:, 1:] != of[:, :-1]
    start = start.ravel()
    values = xp.where(valid, rel_at, -np.inf).reshape(1, -1)
    best = backend.segment_max(values, xp.arange(b * c), xp.flatnonzero(start))[0]
    run = xp.cumsum(start) - 1
    return xp.where(valid, best[run].reshape(b, c), 0.0)
