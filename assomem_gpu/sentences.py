"""An utterance's sentences, each embedded alone: the passages of the relevance's MaxP (``best_cosines``).

A turn often carries its fact in one clause beside an unrelated request ("Can you suggest recipes? By the way, I
replaced my kitchen faucet last Sunday"); one vector for the whole turn blurs that clause, a vector per sentence keeps
it. Sentences end at ``.``, ``!`` or ``?`` before white space, or at a line break; a piece of fewer than ``MIN_WORDS``
words joins the sentence before it ("Thanks!"), or the one after it where none is before ("Sure!"), and an utterance
keeps its first ``MAX_SENTENCES``: the maximum over more passages is larger by chance alone, so a long turn would gain
by its length (and cost its encoding); 4 was picked among 4, 8, 12 and 32 on the dev figures (the fusion
cross-validated; docs/results-history.md, "Sentence passages"). A single-sentence utterance has no sentence vectors: its
own vector is its only passage. Vectors stored under other rules (``SENTENCES_VERSION``) are embedded again.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Sequence

import numpy as np

from .rows import spans

MIN_WORDS = 4  # a shorter piece joins the sentence before it (after it, where none is before)
MAX_SENTENCES = 4  # per utterance: its first 4 (see above)
SENTENCES_VERSION = 1  # of the rules above: raise it when they change, so stored vectors are made again
_END = re.compile(r"(?<=[.!?])\s+|\n+")


def _pieces(text: str) -> Iterator[str]:
    """``_END.split(text)``, one piece at a time, so that a long turn's split stops once its first sentences are
    settled (the sentences of LongMemEval_S dev's 113,412 turns 4.2 / 4.6 -> 1.9 / 2.0 s, two runs; the same ones)."""
    start = 0
    for m in _END.finditer(text):
        yield text[start : m.start()]
        start = m.end()
    yield text[start:]


def split(text: str, limit: int = MAX_SENTENCES) -> list[str]:
    """``text``'s first ``limit`` sentences (see the module docstring); one or none means it is not split."""
    out: list[str] = []
    opening = ""  # short pieces before the first sentence, waiting for it ("Sure! I can help with that.")
    for piece in _pieces(text):
        piece = piece.strip()
        if not piece:
            continue
        if len(piece.split()) >= MIN_WORDS:
            if out and len(out) >= limit:  # a sentence past the limit: what is kept is settled
                break
            out.append(piece if out or not opening else f"{opening} {piece}")
        elif out:
            out[-1] += " " + piece
        else:
            opening = f"{opening} {piece}" if opening else piece
    return out[:limit] if out else [opening] if opening else []


def sentence_texts(speakers: Sequence[str], texts: Sequence[str], limit: int = MAX_SENTENCES
                   ) -> tuple[list[str], np.ndarray]:
    """The texts to embed for utterances ``(speaker, text)``: each sentence of a multi-sentence utterance, as
    ``"<speaker>: <sentence>"`` where it has a speaker (as its utterance is embedded), at most ``limit`` of each, and
    (n,) int32 how many each utterance has (0 for a single sentence)."""
    out: list[str] = []
    counts = np.zeros(len(texts), np.int32)
    for i, (speaker, text) in enumerate(zip(speakers, texts)):
        parts = split(text, limit)
        if len(parts) < 2:
            continue
        counts[i] = len(parts)
        out.extend(f"{speaker}: {p}" if speaker else p for p in parts)
    return out, counts


def starts_of(counts: np.ndarray) -> np.ndarray:
    """(n,) int64 each utterance's first row in the sentence vectors (their rows in utterance order)."""
    counts = np.asarray(counts, np.int64)
    return np.cumsum(counts) - counts


def rows_of(counts: np.ndarray, utterances: np.ndarray) -> np.ndarray:
    """The sentence rows of ``utterances`` (rows of ``counts``), utterance after utterance."""
    return spans(starts_of(counts)[utterances], np.asarray(counts, np.int64)[utterances])


def best_cosines(rel_at, q, at, valid, vectors, starts, counts, backend):
    """(B, C) each candidate's relevance as its best passage's: the larger of its own cosine ``rel_at`` and its
    sentences' (``vectors`` rows ``starts[u] .. starts[u] + counts[u] − 1`` of utterance ``u``; none: its own).
    ``q`` (B, dim) the questions, ``at`` (B, C) candidate rows, ``valid`` (B, C) which are real; all the backend's
    arrays. Each cosine is a (question, sentence) pair's (``Backend.pair_cosines``: a question's own bits in any
    batch on the CPU), their maximum per candidate ``Backend.segment_max``'s."""
    xp = backend.xp
    n = xp.where(valid, counts[at], 0).ravel()
    has = xp.flatnonzero(n)
    if len(has) == 0:
        return rel_at
    rows = backend.spans(starts[at.ravel()[has]], n[has])
    questions = backend.repeat(has // at.shape[1], n[has])
    cos = backend.pair_cosines(vectors, q, questions, rows)
    first = xp.cumsum(n[has]) - n[has]
    best = backend.segment_max(cos[None, :], xp.arange(len(cos)), first)[0]
    out = rel_at.copy().ravel()
    out[has] = xp.maximum(out[has], best.astype(out.dtype))
    return out.reshape(rel_at.shape)
