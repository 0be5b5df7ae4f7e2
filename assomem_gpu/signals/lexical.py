"""Lexical relevance: BM25 over one memory's utterances, kept up to date as sessions come and go."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ..rows import Rows


@dataclass(frozen=True)
class TermCounts:
    """Texts' term counts: ``counts`` (texts, terms) float32 CSR with sorted indices, ``terms`` the term of each
    column (an object array of str)."""

    counts: sp.csr_matrix
    terms: np.ndarray

    def rows(self, at: np.ndarray) -> "TermCounts":
        return TermCounts(self.counts[at], self.terms)


class BM25Index:
    """Okapi BM25 in Lucene's form (as bm25s scores it): idf = log(1 + (N − df + 0.5) / (df + 0.5)), term weight
    tf / (tf + k1·(1 − b + b·len / mean len)), k1 = 1.5, b = 0.75; a query's repeated tokens count each time.

    Tokens come from bm25s (English stop words, Snowball stemming). Texts are appended (``add``, O(the texts
    added): the term counts are an appendable CSR, document frequencies and lengths integer counts kept up to date)
    and removed (``remove``, in place); a removed text's terms leave the vocabulary. Weights are made
    when a search reads them, for the texts it scores (``weights_of``), so they always equal those of an index built
    from the texts held; a query is its term counts (``query_terms``), a text's score the sum of its weights of the
    query's terms times their counts. Scoring only reads the counts (thread-safe) and runs on numpy/scipy or
    CuPy/cupyx alike (``scoring.lexical``); ``top`` also reads the counts by term (postings), made on the host under
    a lock on the first search after a write.
    """

    K1, B = 1.5, 0.75

    def __init__(self, texts: Sequence[str] = ()):
        import bm25s
        import Stemmer

        self._bm25s, self._stemmer = bm25s, Stemmer.Stemmer("english")
        self.vocab: dict[str, int] = {}
        self._data, self._indices = Rows(dtype=np.float32), Rows(dtype=np.int64)  # the counts' CSR arrays
        self._indptr = Rows(dtype=np.int64, data=[0])
        self._df = Rows(dtype=np.float64)  # per term: the texts holding it
        self._lengths = Rows(dtype=np.float64)  # per text: its tokens
        self.total_length = 0.0  # integer-valued, so exact whatever the order of writes
        # the counts by term (``top`` reads them: CSC indptr and indices int64, counts float32), made on first use
        self._postings: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._postings_lock = threading.Lock()  # concurrent searches after a write make them once
        self.add(texts)

    @property
    def counts(self) -> sp.csr_matrix:
        """(texts, terms) term frequencies (a view of the appendable buffers)."""
        return sp.csr_matrix((self._data.view, self._indices.view, self._indptr.view),
                             shape=(self._indptr.n - 1, len(self.vocab)))

    ARRAYS = ("data", "indices", "indptr", "df", "lengths")

    def array(self, name: str) -> np.ndarray:
        """A view of one of ``ARRAYS``: the term counts' CSR ``data`` (float32), ``indices`` (terms, int64) and
        ``indptr`` (int64); ``df`` (per term, the texts holding it) and ``lengths`` (per text, its tokens), float64."""
        return getattr(self, "_" + name).view

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        if not texts:
            return []
        return self._bm25s.tokenize(list(texts), stopwords="en", stemmer=self._stemmer, return_ids=False,
                                    show_progress=False)

    def count(self, texts: Sequence[str]) -> TermCounts:
        """The texts' term counts (tokens as ``add`` makes them), in a vocabulary of their own."""
        if not texts:
            return TermCounts(sp.csr_matrix((0, 0), dtype=np.float32), np.zeros(0, object))
        tokens = self._bm25s.tokenize(list(texts), stopwords="en", stemmer=self._stemmer, return_ids=True,
                                      show_progress=False)  # ids of this call's own vocabulary
        lengths = np.fromiter((len(t) for t in tokens.ids), np.int64, len(texts))
        flat = np.fromiter(chain.from_iterable(tokens.ids), np.int64, int(lengths.sum()))
        terms = np.empty(len(tokens.vocab), object)
        terms[list(tokens.vocab.values())] = list(tokens.vocab)
        counts = sp.csr_matrix((np.ones(len(flat), np.float32), (np.repeat(np.arange(len(texts)), lengths), flat)),
                               shape=(len(texts), len(terms)))
        counts.sum_duplicates()
        counts.sort_indices()
        return TermCounts(counts, terms)

    def add(self, texts: Sequence[str]) -> None:
        """Append these texts (they take the next rows); see ``add_counts``."""
        self.add_counts(self.count(texts))

    def add_counts(self, new: TermCounts) -> None:
        """Append texts given by their term counts (``count``; rows may be a selection of a larger ``count``).
        New terms join the vocabulary by the first text holding them, then alphabetically: the vocabulary's order
        depends on the texts alone, not on how their counts were made."""
        counts = new.counts
        if counts.shape[0] == 0:
            return
        used, first = np.unique(counts.indices, return_index=True)
        names = new.terms[used]
        ours = np.fromiter((self.vocab.get(t, -1) for t in names.tolist()), np.int64, len(used))
        fresh = np.flatnonzero(ours < 0)
        first_row = np.searchsorted(counts.indptr, first[fresh], side="right") - 1
        for _, term, i in sorted(zip(first_row.tolist(), names[fresh].tolist(), fresh.tolist())):
            ours[i] = self.vocab.setdefault(term, len(self.vocab))
        column = np.zeros(counts.shape[1], np.int64)
        column[used] = ours
        mine = sp.csr_matrix((counts.data.astype(np.float32), column[counts.indices], counts.indptr),
                             shape=(counts.shape[0], len(self.vocab)))
        mine.sort_indices()
        lengths = np.asarray(mine.sum(axis=1), np.float64).ravel()  # tokens per text (integer counts: exact)
        self._data.append(mine.data)
        self._indices.append(mine.indices.astype(np.int64))
        self._indptr.append(self._indptr.view[-1] + mine.indptr[1:].astype(np.int64))
        self._df.grow_to(len(self.vocab))
        self._df.view[:] += np.bincount(mine.indices, minlength=len(self.vocab))
        self._lengths.append(lengths)
        self.total_length += float(lengths.sum())
        self._postings = None

    def remove(self, keep: np.ndarray) -> None:
        """Keep only the rows where ``keep`` is True, in place (the buffers' freed rows zeroed); terms no text holds
        any more leave the vocabulary (the others keep their order), and the stemmer forgets the words it saw."""
        per_text = np.diff(self._indptr.view)
        stays = np.repeat(keep, per_text)  # per stored count: its text stays
        df = self._df.view
        df -= np.bincount(self._indices.view[~stays], minlength=len(df))  # integer-valued: exact
        self._data.keep(stays)
        self._indices.keep(stays)
        self._indptr = Rows(dtype=np.int64, data=np.concatenate([[0], np.cumsum(per_text[keep])]))
        self.total_length -= float(self._lengths.view[~keep].sum())
        self._lengths.keep(keep)
        self._postings = None
        size = self._stemmer.maxCacheSize  # PyStemmer keeps recently stemmed words; 0 empties its cache
        self._stemmer.maxCacheSize = 0
        self._stemmer.maxCacheSize = size
        used = df > 0
        if not used.all():
            self.vocab = {t: i for i, t in enumerate(t for t, u in zip(self.vocab, used) if u)}
            terms = self._indices.view
            terms[:] = (np.cumsum(used) - 1)[terms]  # order-preserving: each text's terms stay sorted
            self._df = Rows(dtype=np.float64, data=df[used])

    def _set(self, counts: sp.csr_matrix, df: np.ndarray) -> None:
        counts.sort_indices()
        self._data = Rows(dtype=np.float32, data=counts.data)
        self._indices = Rows(dtype=np.int64, data=counts.indices)
        self._indptr = Rows(dtype=np.int64, data=counts.indptr)
        self._df = Rows(dtype=np.float64, data=df)
        lengths = np.asarray(counts.sum(axis=1), np.float64).ravel()
        self._lengths, self.total_length = Rows(dtype=np.float64, data=lengths), float(lengths.sum())
        self._postings = None

    def weights_of(self, tf, df, lengths, xp=np):
        """What one occurrence of a term in a query adds to the score of a text of length ``lengths`` that holds it
        ``tf`` times, the term being in ``df`` texts (float64 arrays of one shape, on ``xp``). ``kernels/bm25_top.py``
        repeats these operations in this order: change both."""
        return self.idf_of(df, xp) * tf / (tf + self.K1 * (1 - self.B + self.B * lengths / self.mean_length))

    def idf_of(self, df, xp=np):
        """BM25's inverse document frequency of terms that ``df`` texts hold (float64, on ``xp``)."""
        n = self._indptr.n - 1
        return xp.log(1 + (n - df + 0.5) / (df + 0.5))

    @property
    def mean_length(self) -> float:
        """Tokens per text (1.0 for an index without tokens)."""
        n = self._indptr.n - 1
        return self.total_length / n if n and self.total_length > 0 else 1.0

    @property
    def weights(self) -> sp.csr_matrix:
        """(texts, terms): what one occurrence of the term in a query adds to the text's score (every text)."""
        counts = self.counts
        w = self.weights_of(counts.data.astype(np.float64), self._df.view[counts.indices],
                            np.repeat(self._lengths.view, np.diff(counts.indptr)))
        return sp.csr_matrix((w, counts.indices, counts.indptr), shape=counts.shape)

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

    def top(self, queries: Sequence[str], n: int, allowed: np.ndarray | None = None,
            terms: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """(len(queries), min(n, texts)) int64: each query's ``n`` best texts by BM25 score (``scores``' values,
        ties to the lower row), -1 past those that score above 0; ``allowed`` (queries, texts) bool: only those
        texts; ``terms``: ``query_terms(queries)`` when already made.

        Reads only the postings of the queries' terms (the counts by term, made once after each write), so a query
        costs what its terms' texts hold, plus scratch arrays over the texts per thread (``kernels/bm25_top.py``)."""
        width = max(min(n, self._indptr.n - 1), 0)  # no wider than the texts
        keys, times = self.query_terms(queries) if terms is None else terms
        if not len(keys) or width == 0:
            return np.full((len(queries), width), -1, np.int64)
        post = self._postings
        if post is None:
            with self._postings_lock:
                if self._postings is None:
                    by_term = self.counts.tocsc()
                    self._postings = (by_term.indptr.astype(np.int64), by_term.indices.astype(np.int64),
                                      by_term.data)
                post = self._postings
        q, term = divmod(keys, max(len(self.vocab), 1))
        from ..kernels.bm25_top import bm25_top  # Numba loads on the first search, not on import

        return bm25_top(np.searchsorted(q, np.arange(len(queries) + 1)), term, times,
                        self.idf_of(self._df.view[term]), *post, self._lengths.view, self.K1, self.B,
                        self.mean_length, width, allowed)

    def to_arrays(self) -> tuple[list[str], dict[str, np.ndarray]]:
        """The vocabulary (term of each column) and the term-count CSR arrays, for ``from_arrays``."""
        counts = self.counts
        return list(self.vocab), {"bm25_indptr": counts.indptr, "bm25_indices": counts.indices,
                                  "bm25_data": counts.data}

    @classmethod
    def from_arrays(cls, vocabulary: list[str], arrays) -> "BM25Index":
        index = cls()
        index.vocab = {t: i for i, t in enumerate(vocabulary)}
        n = len(arrays["bm25_indptr"]) - 1
        counts = sp.csr_matrix((arrays["bm25_data"], arrays["bm25_indices"], arrays["bm25_indptr"]),
                               shape=(n, len(index.vocab)))
        index._set(counts, np.diff(counts.tocsc().indptr).astype(np.float64))
        return index
