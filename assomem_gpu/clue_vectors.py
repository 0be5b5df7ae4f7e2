"""``ClueVectors``: the merged clues' embeddings, each clue's row anywhere in an appendable pool.

An add changes one clue's embedding (the normalised mean of its sessions, when a session joins it) or adds one. Held as
one (clues, dim) array, the state grown from keeps its own, so each add copied every clue's vector: at 100,000
sessions the largest O(memory) cost an add had left (7.5 of its ~47 ms). Here clue ``c``'s vector is row ``row[c]`` of
a pool: an add appends the row it makes and copies ``row`` (8 bytes a clue, not ``dim`` floats), leaving every other
row where it lies. A state appends to the pool in place only where its rows end the pool's (the state grown from keeps
reading what it held: a failed write, a second growth from one state), else to a copy; once superseded rows would
outnumber live ones (past 256 rows) the pool is packed. Each new pool has as much room again as it holds, so the
copies (packing, a second growth, a full pool) cost an add O(1) amortised.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rows import Rows


@dataclass(frozen=True)
class ClueVectors:
    """Clue ``c``'s vector is ``view[row[c]]``: ``pool`` the appendable buffer (rows past ``view`` may belong to newer
    states), ``view`` this state's rows of it (its clues' vectors and superseded ones; float32, L2-normalised),
    ``row`` int64 per clue; ``in_order``: ``view`` is the clues' vectors in clue order (``row`` the identity, as a
    build, a load or a removal leaves them)."""

    pool: Rows
    view: np.ndarray
    row: np.ndarray
    in_order: bool = False

    @classmethod
    def packed_from(cls, emb: np.ndarray) -> "ClueVectors":
        """The vectors of ``emb`` (clues, dim), clue ``c`` at row ``c``."""
        pool = Rows.holding(emb, len(emb), np.float32)
        return cls(pool, pool.view, np.arange(len(emb), dtype=np.int64), True)

    @property
    def n_clues(self) -> int:
        return len(self.row)

    @property
    def dim(self) -> int:
        return self.view.shape[1]

    @property
    def packed(self) -> np.ndarray:
        """(clues, dim) every clue's vector in clue order: ``view`` itself where it holds them so, else a copy (for a
        snapshot; a search reads ``view`` and ``row``)."""
        return self.view if self.in_order else self.view[self.row]

    def of(self, clues) -> np.ndarray:
        """The vectors of ``clues`` (an index or an int64 array)."""
        return self.view[self.row[clues]]

    def cosines(self, v: np.ndarray) -> np.ndarray:
        """(clues,) float32 each clue's vector times ``v`` (the pool's rows, then each clue's)."""
        return (self.view @ v)[self.row]

    def with_vector(self, row: np.ndarray, clue: int, vector: np.ndarray) -> "ClueVectors":
        """These vectors with clue numbering ``row`` (rows of ``view``; ``clue``'s entry is replaced, -1 for a new
        clue) and ``vector`` as clue ``clue``'s, appended to the pool: in place where this state's rows end it (the
        pool's rows only grow, so an older state's ``view`` is a shorter prefix), else to a copy; into a packed pool
        where superseded rows would outnumber live ones past 256 rows."""
        row = row.copy()
        if len(self.view) + 1 > 2 * max(len(row), 128):  # packed: the live rows, then this one
            keep = np.delete(row, clue)
            pool = Rows.holding(self.view, len(keep), take=keep)
            row[np.arange(len(row)) != clue] = np.arange(len(keep))
        else:
            pool = self.pool if self.pool.n == len(self.view) else Rows.holding(self.view, len(self.view))
        row[clue] = pool.n
        pool.append(np.asarray(vector, np.float32)[None])
        return ClueVectors(pool, pool.view, row)
