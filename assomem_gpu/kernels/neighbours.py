"""The turns around each candidate, for the context signals on the CPU (Numba): one pass over a batch's (question,
candidate, offset) entries where the array expression of ``signals.context.neighbour_values`` (the device's) makes a
dozen (B, C, S) temporaries (~35 of ~350 ms a batch of 256 questions at 2,500 sessions, an ad hoc line profile).
The same entries, the same values: a turn that is a candidate of its question is read from the candidates' own
values, and the others are listed for the caller to look up.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import drive

PARALLEL_ENTRIES = 1 << 15  # entries (B·C·S) from which the thread pool runs a batch (a launch costs ~80 us)


@njit(cache=True, nogil=True)
def _question(b, at, session, steps, known, near, same, values, other):
    n, c_max = len(session), at.shape[1]
    for c in range(c_max):
        row = at[b, c]
        for k in range(len(steps)):
            d = steps[k]
            turn = row + d
            inside = 0 <= turn < n
            if not inside:
                turn = row
            near[b, c, k] = turn
            same[b, c, k] = inside and session[turn] == session[row]
            along = min(max(c + d, 0), max(c_max - 1, 0))  # the candidate d places along, which a whole
            if at[b, along] == turn:  # session among the candidates makes this turn
                values[b, c, k] = known[b, along]
                other[b, c, k] = False
            else:
                values[b, c, k] = 0.0
                other[b, c, k] = same[b, c, k]


@njit(cache=True, nogil=True, parallel=True)
def _parallel(at, session, steps, known, near, same, values, other):
    for b in prange(at.shape[0]):
        _question(b, at, session, steps, known, near, same, values, other)


@njit(cache=True, nogil=True)
def _serial(at, session, steps, known, near, same, values, other):
    for b in range(at.shape[0]):
        _question(b, at, session, steps, known, near, same, values, other)


def known_neighbours(at: np.ndarray, session: np.ndarray, steps: np.ndarray, known: np.ndarray):
    """For each question's utterance rows ``at`` (B, C; each question's ascending) and the turns ``steps`` (S,)
    away: ``near`` (B, C, S) int64 the turns' rows (the row itself where the offset falls outside the memory),
    ``same`` (B, C, S) whether each is a turn of the row's session (``session`` (n_utt,) each row's session),
    ``values`` (B, C, S) the turn's value read from ``known`` (B, C, the rows' own values) where it is the row as
    many places along, else 0, and ``other`` (B, C, S) the turns of the session that were not (to look up)."""
    at = np.ascontiguousarray(at, np.int64)
    shape = at.shape + (len(steps),)
    near, values = np.empty(shape, np.int64), np.empty(shape, np.asarray(known).dtype)
    same, other = np.empty(shape, np.bool_), np.empty(shape, np.bool_)
    if at.size and len(steps):
        drive(_parallel, _serial, near.size >= PARALLEL_ENTRIES, at, np.ascontiguousarray(session, np.int64),
              np.ascontiguousarray(steps, np.int64), np.ascontiguousarray(known), near, same, values, other)
    return near, same, values, other
