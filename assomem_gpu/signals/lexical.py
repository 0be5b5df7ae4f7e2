"""Lexical relevance: BM25 over one memory's utterances, kept up to date as sessions come and go."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp


class BM25Index:
    """Okapi BM25 in Lucene's form (as bm25s scores it): idf = log(1 + (N − df + 0.5) / (df + 0.5)), term weight
    tf / (tf + k1·(1 − b + b·len / mean len)), k1 = 1.5, b = 0.75; a query's repeated tokens count each time.

    Tokens come from bm25s (English stop words, Snowball stemming). Texts are appended (``add``) and removed
    (``remove``); the scores always equal those of an index built from the texts held, and a removed text's terms
    leave the vocabulary. A write recomputes ``weights`` (texts × terms, each term's weight in each text); a query
    is its term counts (``query_terms``), a text's score the sum of its weights of the query's terms times their
    counts, so scoring only reads (thread-safe) and runs on numpy/scipy or CuPy/cupyx alike (``scoring.lexical``).
    """

    K1, B = 1.5, 0.75

    def __init__(self, texts: Sequence[str] = ()):
        import bm25s
        import Stemmer

        self._bm25s, self._stemmer = bm25s, Stemmer.Stemmer("english")
        self.vocab: dict[str, int] = {}
        self.counts = sp.csr_matrix((0, 0), dtype=np.float32)  # (texts, terms) term frequencies
        self.add(texts)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        if not texts:
            return []
        return self._bm25s.tokenize(list(texts), stopwords="en", stemmer=self._stemmer, return_ids=False,
                                    show_progress=False)

    def add(self, texts: Sequence[str]) -> None:
        """Append these texts (they take the next rows)."""
        rows, cols = [], []
        for r, tokens in enumerate(self.tokenize(texts)):
            for t in tokens:
                cols.append(self.vocab.setdefault(t, len(self.vocab)))
                rows.append(r)
        new = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(texts), len(self.vocab)))
        new.sum_duplicates()
        old = self.counts
        old = sp.csr_matrix((old.data, old.indices, old.indptr), shape=(old.shape[0], len(self.vocab)))
        self._set(sp.vstack([old, new], format="csr"))

    def remove(self, keep: np.ndarray) -> None:
        """Keep only the rows where ``keep`` is True; terms no text holds any more leave the vocabulary."""
        counts = self.counts[np.flatnonzero(keep)]
        used = np.diff(counts.tocsc().indptr) > 0
        if not used.all():
            self.vocab = {t: i for i, t in enumerate(t for t, u in zip(self.vocab, used) if u)}
            counts = counts[:, np.flatnonzero(used)].tocsr()
        self._set(counts)

    def _set(self, counts: sp.csr_matrix) -> None:
        counts.sort_indices()
        self.counts = counts
        lengths = np.asarray(counts.sum(axis=1), dtype=np.float64).ravel()
        n, mean = counts.shape[0], (lengths.mean() if len(lengths) and lengths.sum() > 0 else 1.0)
        df = np.diff(counts.tocsc().indptr).astype(np.float64)
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        tf = counts.data.astype(np.float64)
        norm = self.K1 * (1 - self.B + self.B * np.repeat(lengths, np.diff(counts.indptr)) / mean)
        # (texts, terms): what one occurrence of the term in a query adds to the text's score
        self.weights = sp.csr_matrix((idf[counts.indices] * tf / (tf + norm), counts.indices, counts.indptr),
                                     shape=counts.shape)

    def query_terms(self, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The queries' terms as sorted keys ``query · n_terms + term`` (int64) with how often the query holds the
        term (float64; a repeated token counts each time; terms no text holds are left out)."""
        keys = [j * len(self.vocab) + term for j, tokens in enumerate(self.tokenize(queries)) for t in tokens
                if (term := self.vocab.get(t)) is not None]
        keys, counts = np.unique(np.asarray(keys, np.int64), return_counts=True)
        return keys, counts.astype(np.float64)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """(len(queries), n_texts) float32 BM25 scores."""
        keys, counts = self.query_terms(queries)
        q = sp.csr_matrix((counts, divmod(keys, max(len(self.vocab), 1))), shape=(len(queries), len(self.vocab)))
        return np.asarray((q @ self.weights.T).todense(), np.float32)

    def to_arrays(self) -> tuple[list[str], dict[str, np.ndarray]]:
        """The vocabulary (term of each column) and the term-count CSR arrays, for ``from_arrays``."""
        return list(self.vocab), {"bm25_indptr": self.counts.indptr, "bm25_indices": self.counts.indices,
                                  "bm25_data": self.counts.data}

    @classmethod
    def from_arrays(cls, vocabulary: list[str], arrays) -> "BM25Index":
        index = cls()
        index.vocab = {t: i for i, t in enumerate(vocabulary)}
        n = len(arrays["bm25_indptr"]) - 1
        index._set(sp.csr_matrix((arrays["bm25_data"], arrays["bm25_indices"], arrays["bm25_indptr"]),
                                 shape=(n, len(index.vocab))))
        return index
