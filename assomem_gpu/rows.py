"""``Rows``: an array that grows by appended rows in amortised O(rows), for state that adds must not copy."""
from __future__ import annotations

import ctypes

import numpy as np


def spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(sum of ``lengths``,) int64 the positions ``starts[i] .. starts[i] + lengths[i] − 1`` of every span, span after
    span (the rows of some sessions' utterances, of some utterances' sentences)."""
    lengths = np.asarray(lengths, np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(np.asarray(starts, np.int64) - (ends - lengths), lengths) + np.arange(int(ends[-1]) if len(ends)
                                                                                            else 0)


class Rows:
    """An array of rows of ``shape`` (() for a vector) and ``dtype`` (default float32) that grows by appended rows in
    amortised O(rows): a buffer with doubling room, ``view`` the rows held."""

    def __init__(self, shape: tuple[int, ...] = (), dtype=np.float32, data=None):
        self._buf = np.zeros((0, *shape), dtype) if data is None else np.array(data, dtype, order="C")
        self.n = len(self._buf)

    @classmethod
    def selected(cls, data: np.ndarray, mask: np.ndarray) -> "Rows":
        """The rows of ``data`` where ``mask`` is True, in order, in one pass, with room for as many again (a
        removal's survivors, which the next add appends to without a copy)."""
        rows = cls(data.shape[1:], data.dtype)
        rows.n = int(np.count_nonzero(mask))
        rows._buf = np.zeros((max(2 * rows.n, 256), *data.shape[1:]), data.dtype)
        np.compress(mask, data, axis=0, out=rows._buf[: rows.n])
        return rows

    @classmethod
    def holding(cls, data: np.ndarray, room: int, dtype=None, take: np.ndarray | None = None) -> "Rows":
        """``data``'s rows (or its rows ``take``, in that order, each a row of ``data``: not checked; one copy, as
        ``dtype``, default its own) in a buffer with room for ``room`` more rows (at least 256)."""
        n = len(data) if take is None else len(take)
        buffer = np.empty((n + max(room, 256), *data.shape[1:]), dtype or data.dtype)
        if take is None:
            buffer[:n] = data
        else:  # "clip": numpy buffers ``out`` where it must raise (25,000 rows of 384: 25 ms against 10)
            np.take(data, take, axis=0, out=buffer[:n], mode="clip")
        return cls.over(buffer, n)

    @classmethod
    def over(cls, buffer: np.ndarray, n: int) -> "Rows":
        """The first ``n`` rows of ``buffer`` held, the rest its room (not copied: the buffer is the Rows' own)."""
        rows = cls(buffer.shape[1:], buffer.dtype)
        rows._buf, rows.n = buffer, n
        return rows

    @property
    def view(self) -> np.ndarray:
        return self._buf[: self.n]

    def append(self, rows: np.ndarray) -> None:
        k = len(rows)
        if self.n + k > len(self._buf):
            buf = np.zeros((max(2 * self.n, self.n + k, 256), *self._buf.shape[1:]), self._buf.dtype)
            buf[: self.n] = self.view
            self._buf = buf
        self._buf[self.n : self.n + k] = rows
        self.n += k

    def grow_to(self, n: int) -> None:
        """At least ``n`` rows, the new ones 0."""
        if n > self.n:
            self.append(np.zeros((n - self.n, *self._buf.shape[1:]), self._buf.dtype))

    def keep(self, mask: np.ndarray) -> None:
        """Keep the rows where ``mask`` is True, in order, in place (the room stays for later appends); the rows
        after the first removed one move up and the freed rows are zeroed, so a removed row leaves memory."""
        edges = np.flatnonzero(np.diff(np.concatenate([[False], mask, [False]]).astype(np.int8)))
        kept = 0
        for start, end in zip(edges[::2].tolist(), edges[1::2].tolist()):  # runs of kept rows: block moves
            if start != kept:  # memmove: overlapping rows move without a temporary copy
                ctypes.memmove(self._buf[kept:].ctypes.data, self._buf[start:].ctypes.data,
                               (end - start) * self._buf.strides[0])
            kept += end - start
        self._buf[kept : self.n] = 0
        self.n = kept
