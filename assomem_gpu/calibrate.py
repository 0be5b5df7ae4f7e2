"""Calibrating the fusion weights, and cross-validated evaluation that never calibrates on an evaluated question.

``python -m assomem_gpu.calibrate --dataset ... --output weights.json`` fits the CMI weights and the type classifier
on every question of a dataset and saves them with the retrieval config, for ``eval --weights`` on another dataset.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .assomem import AssoMem, Features
from .retrieve import EmbeddedDataset


def folds_of(data: EmbeddedDataset, questions: Sequence[int], k: int, seed: int = 0) -> list[np.ndarray]:
    """``k`` disjoint folds of question rows, grouped by memory when there are at least ``k`` memories.

    Where all questions share fewer memories than folds (MeetingQA: one), folds split the questions themselves:
    calibration then sees other questions' labels on the same memory, never the evaluated questions' own.
    """
    if k < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {k}")
    qs = np.asarray(questions)
    mem = np.asarray([data.dataset.questions[q].memory for q in qs])
    rng = np.random.default_rng(seed)
    units = np.unique(mem)
    if len(units) >= k:
        shuffled = rng.permutation(units)
        assign = {u: i % k for i, u in enumerate(shuffled)}
        fold = np.asarray([assign[m] for m in mem])
    else:
        if len(qs) < k:
            raise ValueError(f"{len(qs)} questions cannot fill {k} folds")
        fold = np.empty(len(qs), int)
        fold[rng.permutation(len(qs))] = np.arange(len(qs)) % k
    return [qs[fold == i] for i in range(k)]


def cross_validated_rankings(method: AssoMem, data: EmbeddedDataset, questions: Sequence[int], k: int, depth: int,
                             seed: int = 0, batch_size: int = 64, progress: bool = True) -> list[np.ndarray]:
    """Rankings of ``questions`` where each fold is ranked with weights calibrated on the other folds only."""
    feats = compute_features(method, data, questions, batch_size, progress)
    by_q = dict(zip(questions, feats))
    out: dict[int, np.ndarray] = {}
    for fold in folds_of(data, questions, k, seed):
        held = set(fold.tolist())
        train = [q for q in questions if q not in held]
        model = method.fit(data, train, [by_q[q] for q in train])
        ranked = method.fuse([by_q[q] for q in fold], data.questions[fold], model, depth)
        out.update(zip(fold.tolist(), ranked))
    return [out[q] for q in questions]


def compute_features(method: AssoMem, data: EmbeddedDataset, questions: Sequence[int], batch_size: int = 64,
                     progress: bool = True) -> list[Features]:
    from tqdm.auto import tqdm

    feats: list[Features] = []
    for lo in tqdm(range(0, len(questions), batch_size), desc=f"{method.name} signals", unit="batch",
                   disable=not progress):
        feats += method.features(data, list(questions[lo : lo + batch_size]))
    return feats
