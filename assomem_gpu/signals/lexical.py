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
    leave the vocabulary. A write updates the postings (term → texts, counts); a query weighs only its terms'
    postings, so ``scores`` only reads (thread-safe).
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
        self._lengths = np.asarray(counts.sum(axis=1), dtype=np.float64).ravel()
        csc = counts.tocsc()
        self._docs, self._starts, self._tf = csc.indices, csc.indptr, csc.data.astype(np.float64)

    def scores(self, queries: Sequence[str], rows: Sequence[np.ndarray] | None = None) -> np.ndarray:
        """BM25 scores, float32: (len(queries), n_texts); with ``rows`` (one array of text rows per query), only each
        query's scores at its rows, concatenated (a search needs its candidates' alone)."""
        n = self.counts.shape[0]
        mean = self._lengths.mean() if n and self._lengths.sum() > 0 else 1.0
        tokens = self.tokenize(queries)
        if rows is None:
            out = np.zeros((len(queries), n), np.float64)
            for j, terms in enumerate(tokens):
                self._accumulate(terms, out[j], n, mean)
            return out.astype(np.float32)
        row, parts = np.zeros(n, np.float64), []
        for terms, at in zip(tokens, rows):
            touched = self._accumulate(terms, row, n, mean)
            parts.append(row[at].astype(np.float32))
            for docs in touched:
                row[docs] = 0.0
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def _accumulate(self, terms: list[str], row: np.ndarray, n: int, mean: float) -> list[np.ndarray]:
        """Add one query's term weights into ``row`` (one entry per text); returns the postings it touched."""
        touched = []
        for t in terms:
            term = self.vocab.get(t)
            if term is None:
                continue
            lo, hi = self._starts[term], self._starts[term + 1]
            docs, tf = self._docs[lo:hi], self._tf[lo:hi]
            idf = np.log(1 + (n - (hi - lo) + 0.5) / (hi - lo + 0.5))
            row[docs] += idf * (tf / (tf + self.K1 * (1 - self.B + self.B * self._lengths[docs] / mean)))
            touched.append(docs)
        return touched

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
