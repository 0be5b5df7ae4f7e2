"""Session clues: the text that names what a session is about, and the clue embeddings the graph starts from.

Modes: ``keywords`` (default, offline, extractive: the session's top TF-IDF terms, embedded as text), ``centroid``
(the normalised mean of the session's utterance embeddings, no text) and ``llm`` (the paper's topic prompt through
an LLM, see ``llm.py``; cached by session content).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .encode import Encoder
from .memory import MemoryBank

CLUE_MODES = ("keywords", "centroid", "llm")


def keyword_clues(bank: MemoryBank, n_terms: int = 8) -> list[str]:
    """Each session's ``n_terms`` highest TF-IDF unigrams and bigrams (IDF over the bank's sessions), as one string."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = [" ".join(bank.utt_texts[bank.offsets[s] : bank.offsets[s + 1]]) for s in range(bank.n_sessions)]
    vec = TfidfVectorizer(stop_words="english", ngram_range=(1, 2), sublinear_tf=True, min_df=1, max_df=0.5,
                          token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z0-9'-]+\b", dtype=np.float32)
    try:
        tfidf = vec.fit_transform(docs).tocsr()
    except ValueError:  # every session empty or stop words only
        return ["" for _ in docs]
    vocab = vec.get_feature_names_out()
    clues = []
    for s in range(bank.n_sessions):
        row = tfidf.getrow(s)
        top = row.indices[np.argsort(-row.data, kind="stable")[:n_terms]]
        clues.append(", ".join(vocab[top]))
    return clues


def centroid_embeddings(bank: MemoryBank, utt_emb: np.ndarray) -> np.ndarray:
    """Normalised mean utterance embedding of every session (zero for an empty session)."""
    out = np.zeros((bank.n_sessions, utt_emb.shape[1]), np.float32)
    np.add.at(out, bank.utt_session(), utt_emb)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def clue_embeddings(bank: MemoryBank, utt_emb: np.ndarray, mode: str, encoder: Encoder | None,
                    texts: Sequence[str] | None = None) -> np.ndarray:
    """Clue embedding of every bank session; ``texts`` are the clue texts for the text modes."""
    if mode == "centroid":
        return centroid_embeddings(bank, utt_emb)
    if mode not in CLUE_MODES:
        raise ValueError(f"unknown clue mode {mode!r}; choose from {', '.join(CLUE_MODES)}")
    if encoder is None or texts is None:
        raise ValueError(f"clue mode {mode!r} needs the clue texts and an encoder")
    emb = encoder.encode([f"topic: {t}" for t in texts])
    empty = np.asarray([not t for t in texts])
    if empty.any():  # a session without clue text falls back to its centroid
        emb[empty] = centroid_embeddings(bank, utt_emb)[empty]
    return emb
