"""Lexical relevance: BM25 (bm25s) over one memory's utterances."""
from __future__ import annotations

from typing import Sequence

import numpy as np


class BM25Index:
    """Okapi BM25 over a fixed list of texts, English stop words and Snowball stemming."""

    def __init__(self, texts: Sequence[str]):
        import bm25s
        import Stemmer

        self._bm25s, self._stemmer = bm25s, Stemmer.Stemmer("english")
        self.index = bm25s.BM25()
        self.index.index(self._tokenize(texts), show_progress=False)

    def _tokenize(self, texts: Sequence[str], **kw):
        return self._bm25s.tokenize(list(texts), stopwords="en", stemmer=self._stemmer, show_progress=False, **kw)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """(len(queries), n_texts) BM25 scores."""
        tokens = self._tokenize(queries, return_ids=False)
        return np.stack([self.index.get_scores(t) for t in tokens]).astype(np.float32)
