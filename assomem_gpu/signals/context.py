"""Dialogue context: the turns around an utterance, as a second view of it.

A reply's meaning often lives in the turn it answers ("Yes, that was in May!"), and a question's in the answer that
follows it. An utterance's context is the sum of the embeddings of the turns within ``window`` turns of it in its
session, itself excluded; the ``context`` signal is the question's cosine to that sum (0 for a turn alone in its
session). The cosine is the sum of the question's cosines to those turns divided by the sum's norm, so an index
stores one norm per utterance (``context_norms``), not a second embedding table, and a search reads the turns'
cosines as it reads relevance's (``context_scores``). A norm depends on its session alone, so adds and removes keep
it exactly.
"""
from __future__ import annotations

import numpy as np


def context_norms(offsets: np.ndarray, emb: np.ndarray, window: int, block: int = 8192) -> np.ndarray:
    """(n_utt,) float32: the norm of each utterance's context sum (see the module docstring). ``offsets``: where
    each session's rows start (n_sessions + 1, the last the row count); ``emb`` (n_utt, dim) the embeddings. Made
    ``block`` rows at a time (a memory-sized temporary would double a build's peak)."""
    emb = np.asarray(emb, np.float32)
    n = len(emb)
    session = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    out = np.zeros(n, np.float32)
    for lo in range(0, n, block):
        rows = np.arange(lo, min(lo + block, n))
        total = np.zeros((len(rows), emb.shape[1]), np.float32)
        for d in _steps(window):  # in the order of context_scores' sum
            near = rows + d
            same = (near >= 0) & (near < n)
            same[same] = session[near[same]] == session[rows[same]]
            total[same] += emb[near[same]]
        out[rows] = np.linalg.norm(total, axis=1)
    return out


def _steps(window: int) -> np.ndarray:
    """The offsets of the turns around an utterance: −window … −1, 1 … window."""
    return np.r_[np.arange(-window, 0), np.arange(1, window + 1)]


def neighbours(at, session, steps: np.ndarray, xp=np):
    """The turns ``steps`` (S,) away from each utterance row ``at`` (B, C): ``near`` (B, C, S) their rows (the row
    itself where the offset falls outside the memory) and ``same`` (B, C, S) whether each is a turn of the row's
    session (``session`` (n_utt,) each utterance's session row)."""
    n = len(session)
    near = at[:, :, None] + xp.asarray(steps)
    inside = (near >= 0) & (near < n)
    near = xp.where(inside, near, at[:, :, None])
    return near, inside & (session[near] == session[at][:, :, None])


def neighbour_values(of_pairs, at, session, steps: np.ndarray, xp=np, known=None):
    """A value of each turn ``steps`` (S,) away from each question's utterance rows ``at`` (B, C) in their session:
    ``values`` (B, C, S), meaningful where ``same`` (B, C, S, see ``neighbours``) holds.

    ``of_pairs(questions, rows)`` gives the value of question ``questions[i]`` at utterance row ``rows[i]`` (1-d);
    ``session`` (n_utt,) each utterance's session row, on ``xp``. ``known`` (B, C), when given, holds the values of
    ``at`` themselves, each question's rows ascending: a turn ``d`` away from a row that is the row ``d`` places
    along (a clue brings whole sessions) is read there, and only the other turns are asked of ``of_pairs``."""
    b, c = at.shape
    if known is None:
        near, same = neighbours(at, session, steps, xp)
        return of_pairs(xp.repeat(xp.arange(b), near.shape[1] * near.shape[2]), near.ravel()).reshape(near.shape), same
    if xp is np:  # the CPU: the same in one pass (kernels/neighbours.py)
        from ..kernels.neighbours import known_neighbours

        near, same, values, other = known_neighbours(at, session, steps, known)
    else:
        near, same = neighbours(at, session, steps, xp)
        along = xp.clip(xp.arange(c)[:, None] + xp.asarray(steps), 0, max(c - 1, 0)).reshape(1, -1)  # d along
        along = xp.broadcast_to(along, (b, along.shape[1]))
        hit = xp.take_along_axis(at, along, axis=1).reshape(near.shape) == near
        values = xp.where(hit, xp.take_along_axis(known, along, axis=1).reshape(near.shape), 0.0)
        other = same & ~hit
    qb, cc, kk = xp.nonzero(other)  # the turns not read from ``known``
    if len(qb):
        values[qb, cc, kk] = of_pairs(qb, near[qb, cc, kk])
    return values, same


def context_scores(of_pairs, at, session, norms, window: int, xp=np, known=None):
    """(B, C) the context signal of each question's candidate rows ``at`` (valid rows; padding reads row 0).

    ``of_pairs(questions, rows)`` gives the cosine of question ``questions[i]`` to utterance row ``rows[i]`` (1-d;
    ``scoring.Relevance.of_pairs``); ``session`` (n_utt,) each utterance's session row and ``norms`` its
    ``context_norms``, on ``xp``; ``known`` (B, C): the cosines of ``at`` themselves (see ``neighbour_values``)."""
    cos, same = neighbour_values(of_pairs, at, session, _steps(window), xp, known)
    total = xp.where(same & xp.isfinite(cos), cos, 0.0).sum(axis=2)  # a filtered-out turn (-inf) adds nothing
    norm = norms[at]
    return xp.where(norm > 0, total / xp.where(norm > 0, norm, 1.0), 0.0)
