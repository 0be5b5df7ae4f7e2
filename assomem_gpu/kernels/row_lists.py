"""Lists of row numbers, one per key, in one arena (Numba): row ``first + i`` joins the list of each of its keys
``keys[i, :]``, so every list ascends; an append to any number of lists is one pass, in amortised O(rows · keys),
with no Python loop over the lists (``ivf.Probers``: the rows that probe each of a memory's ~600 IVF lists at 25,000
sessions, ~70 of which an add of ten rows appends to; a ``Rows`` buffer per list cost ~5 us a list, a sort of the
keys ~20 us).

Each list holds a slot of the arena with room for as many rows again. A list that outgrows its slot moves to a new
one at the arena's end (its old slot becomes garbage); when the arena's end is reached, the live lists are copied
into a new arena, made first, half as large again as they need.
"""
from __future__ import annotations

import numpy as np
from numba import njit

MIN_ROOM = 16  # rows a list's slot holds at least


@njit(cache=True, nogil=True)
def _counts(keys, n_lists):
    counts = np.zeros(n_lists, np.int64)
    for i in range(keys.shape[0]):
        for j in range(keys.shape[1]):
            counts[keys[i, j]] += 1
    return counts


@njit(cache=True, nogil=True)
def _room_needed(length, room, counts):
    """The arena room the lists that outgrow their slots need."""
    need = 0
    for k in range(counts.shape[0]):
        if counts[k] > 0 and length[k] + counts[k] > room[k]:
            need += max(2 * (length[k] + counts[k]), MIN_ROOM)
    return need


@njit(cache=True, nogil=True)
def _append(pool, start, length, room, top, keys, first, counts):
    """Row ``first + i`` to the end of the lists ``keys[i, :]`` (the arena has the room ``_room_needed`` says);
    returns the arena's new end."""
    for k in range(counts.shape[0]):
        if counts[k] > 0 and length[k] + counts[k] > room[k]:  # to a new slot at the end
            r = max(2 * (length[k] + counts[k]), MIN_ROOM)
            for t in range(length[k]):
                pool[top + t] = pool[start[k] + t]
            start[k], room[k] = top, r
            top += r
    for i in range(keys.shape[0]):
        for j in range(keys.shape[1]):
            k = keys[i, j]
            pool[start[k] + length[k]] = first + i
            length[k] += 1
    return top


@njit(cache=True, nogil=True)
def _compact(pool, start, length, new_room, out):
    """Every list into ``out``, in list order, each in a slot of ``new_room``; returns the new end."""
    top = 0
    for k in range(start.shape[0]):
        for t in range(length[k]):
            out[top + t] = pool[start[k] + t]
        start[k] = top
        top += new_room[k]
    return top


@njit(cache=True, nogil=True)
def _gather(pool, start, length, lists, out):
    at = 0
    for k in lists:
        for t in range(length[k]):
            out[at + t] = pool[start[k] + t]
        at += length[k]


class RowLists:
    """``n_lists`` ascending lists of row numbers (int32)."""

    def __init__(self, n_lists: int):
        self._pool = np.zeros(0, np.int32)
        self._start, self._length, self._room = (np.zeros(n_lists, np.int64) for _ in range(3))
        self._top = 0

    @property
    def n_lists(self) -> int:
        return len(self._start)

    def append(self, keys: np.ndarray, first: int) -> None:
        """Rows ``first``, ``first + 1``, ... (above every row held), row ``first + i`` to the lists ``keys[i, :]``
        (int, (n, k), each in 0..n_lists − 1; a row's keys distinct)."""
        keys = np.ascontiguousarray(keys)
        if keys.size and (keys.min() < 0 or keys.max() >= self.n_lists):
            raise ValueError(f"keys: list numbers in 0..{self.n_lists - 1}")
        counts = _counts(keys, self.n_lists)
        need = _room_needed(self._length, self._room, counts)
        if self._top + need > len(self._pool):  # a new arena, made before anything changes (it may not fit);
            room = np.maximum(2 * self._length, MIN_ROOM)  # np.empty: a slot past its rows is never read
            top = int(room.sum())
            pool = np.empty((top + _room_needed(self._length, room, counts)) * 3 // 2, np.int32)
            self._top = _compact(self._pool, self._start, self._length, room, pool)
            self._pool, self._room = pool, room
        self._top = _append(self._pool, self._start, self._length, self._room, self._top, keys, first, counts)

    def gather(self, lists: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of these lists (int64 list numbers), list after list (int32), and how many each list holds
        (int64)."""
        lists = np.ascontiguousarray(lists, np.int64)
        counts = self._length[lists]
        out = np.empty(int(counts.sum()), np.int32)
        _gather(self._pool, self._start, self._length, lists, out)
        return out, counts
