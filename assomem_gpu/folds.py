"""Seeded k-fold splits that keep a memory's questions together (cross-validated evaluation, and the inner
cross-validation that chooses the fusion's weight temperature)."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def fold_ids(groups: Sequence, k: int, seed: int = 0) -> np.ndarray:
    """The fold (0 .. k − 1) of each item: whole groups (memories) dealt to the folds in a seeded order when there are
    at least ``k`` groups, else the items themselves (then a fold's items share groups with the others' items)."""
    if k < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {k}")
    groups = np.asarray(groups)
    rng = np.random.default_rng(seed)
    units = np.unique(groups)
    if len(units) >= k:
        assign = {u: i % k for i, u in enumerate(rng.permutation(units))}
        return np.asarray([assign[g] for g in groups], int)
    if len(groups) < k:
        raise ValueError(f"{len(groups)} questions cannot fill {k} folds")
    fold = np.empty(len(groups), int)
    fold[rng.permutation(len(groups))] = np.arange(len(groups)) % k
    return fold
