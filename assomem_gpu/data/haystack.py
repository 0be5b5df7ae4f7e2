"""Growing LongMemEval haystacks to a fixed number of sessions (500 ≈ LongMemEval_M, 2,500 ≈ the paper's L)."""
from __future__ import annotations

import hashlib

import numpy as np

from ..memory import Dataset, Memory


def expand_haystacks(ds: Dataset, n_sessions: int, seed: int = 0) -> Dataset:
    """Each memory padded to ``n_sessions`` with distractor sessions of other memories, dated inside its own range.

    Distractors are never sessions that any question counts as evidence, nor sessions that share an utterance id
    with another session of the bank (a LongMemEval session kept apart), so a memory never holds an id twice: a
    LoCoMo file, whose ``dia_id`` values every conversation repeats, cannot be grown. The draw for a memory depends
    only on ``seed`` and the ids of the questions asking it, so a subset of questions gets the same haystacks.
    """
    if n_sessions < 1:
        raise ValueError(f"haystack size must be positive, got {n_sessions}")
    evidence, utt_session = set(), ds.bank.utt_session()
    for q in ds.questions:
        evidence.update(utt_session[q.evidence].tolist())
        if q.evidence_sessions is not None:
            evidence.update(q.evidence_sessions.tolist())
    sharing = _sharing_ids(ds)
    pool = np.asarray(sorted(set(range(ds.bank.n_sessions)) - evidence - sharing), dtype=np.int64)
    askers: dict[int, list[str]] = {}
    for q in ds.questions:
        askers.setdefault(q.memory, []).append(q.id)
    memories = []
    for m, mem in enumerate(ds.memories):
        need = n_sessions - len(mem.sessions)
        if need <= 0:
            memories.append(mem)
            continue
        free = np.setdiff1d(pool, mem.sessions, assume_unique=True)
        if len(free) < need:
            why = f" ({len(sharing)} sessions hold utterance ids that another session holds too, and are never drawn)" \
                if sharing else ""
            raise ValueError(f"only {len(free)} distractor sessions available{why}, memory {m} needs {need}")
        key = hashlib.sha256(f"{seed}|{'|'.join(sorted(askers.get(m, [str(m)])))}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(key[:8], "little"))
        extra = rng.choice(free, size=need, replace=False)
        known = mem.dates[~np.isnan(mem.dates)]
        dates = rng.uniform(known.min(), known.max(), size=need) if len(known) else np.full(need, np.nan)
        sessions, all_dates = np.concatenate([mem.sessions, extra]), np.concatenate([mem.dates, dates])
        order = np.argsort(all_dates, kind="stable")
        memories.append(Memory(sessions[order], all_dates[order]))
    return Dataset(ds.name, ds.bank, memories, ds.questions, ds.session_metadata)


def _sharing_ids(ds: Dataset) -> set[int]:
    """The session rows holding an utterance id that another session of the bank also holds."""
    first: dict[str, int] = {}
    shared: set[int] = set()
    for utt, session in zip(ds.bank.utt_ids, ds.bank.utt_session().tolist()):
        held = first.setdefault(utt, session)
        if held != session:
            shared.update((held, session))
    return shared
