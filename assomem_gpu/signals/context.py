"""Dialogue context: the turns around an utterance, as a second embedding of it.

A reply's meaning often lives in the turn it answers ("Yes, that was in May!"), and a question's in the answer that
follows it. An utterance's context embedding is the L2-normalised sum of the embeddings of the turns within
``window`` turns of it in its session, itself excluded (zero for a turn alone in its session); the ``context``
signal is a question's cosine to it. It depends on its session alone, so adds and removes keep it exactly.
"""
from __future__ import annotations

import numpy as np


def context_embeddings(offsets: np.ndarray, emb: np.ndarray, window: int) -> np.ndarray:
    """(n_utt, dim) float32: each utterance's context embedding (see the module docstring). ``offsets``: where each
    session's rows start (n_sessions + 1, the last the row count); ``emb`` (n_utt, dim) its utterances' embeddings."""
    emb = np.asarray(emb, np.float32)
    n = len(emb)
    session = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    out = np.zeros_like(emb)
    for d in range(1, min(window, max(n - 1, 0)) + 1):
        same = np.flatnonzero(session[d:] == session[:-d])  # pairs (i, i + d) of one session
        out[same] += emb[same + d]
        out[same + d] += emb[same]
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
