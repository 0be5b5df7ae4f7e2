"""Dataset loaders. ``load_dataset("<format>:<path>")`` reads any supported format."""
from __future__ import annotations

import numpy as np

from ..memory import Dataset
from .errors import DataFormatError, DataFormatWarning
from .haystack import expand_haystacks
from .jsonl import load_jsonl
from .locomo import load_locomo
from .longmemeval import load_longmemeval
from .meetingqa import load_meetingqa

LOADERS = {"longmemeval": load_longmemeval, "locomo": load_locomo, "meetingqa": load_meetingqa, "jsonl": load_jsonl}


def load_dataset(spec: str, haystack_sessions: int | None = None, limit: int | None = None, seed: int = 0) -> Dataset:
    """Load ``"<format>:<path>"``; optionally grow haystacks, then keep a seeded sample of ``limit`` questions."""
    fmt, sep, path = spec.partition(":")
    if not sep or fmt not in LOADERS or not path:
        raise ValueError(f"dataset must be '<format>:<path>' with format one of {sorted(LOADERS)}, got {spec!r}")
    ds = LOADERS[fmt](path)
    if haystack_sessions:
        ds = expand_haystacks(ds, haystack_sessions, seed)
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be positive, got {limit}")
        if limit < len(ds.questions):
            rows = np.sort(np.random.default_rng(seed).choice(len(ds.questions), size=limit, replace=False))
            ds = ds.subset(rows.tolist())
    return ds


__all__ = ["DataFormatError", "DataFormatWarning", "LOADERS", "expand_haystacks", "load_dataset"]
