"""Session clues: the text that names what a session is about, and the clue embeddings the graph starts from.

Every mode makes a session's clue from that session alone, so adding or removing other sessions never changes it (an
index grows and shrinks exactly):

- ``keywords`` (default, offline, extractive): the session's top terms by TF-IDF, where the IDF comes from general
  English word frequencies (``wordfreq``) rather than from the other sessions; embedded as text;
- ``centroid``: the normalised mean of the session's utterance embeddings, no text;
- ``llm``: the paper's topic prompt through an LLM (see ``llm.py``; cached by session content).
"""
from __future__ import annotations

import functools
import importlib.util
import math
import re
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from .config import CLUE_MODES
from .encode import Encoder, prompted
from .memory import MemoryBank

_TOKEN = re.compile(r"(?u)\b[a-zA-Z][a-zA-Z0-9'-]+\b")
RAREST = 1e-9  # frequency given to words wordfreq has never seen (names, typos): they are the most telling terms


_LOADING = threading.Lock()


def _english() -> tuple[dict[str, float], frozenset[str]]:
    """wordfreq's English frequencies and the stop words, loaded once (about a second), whichever thread asks first."""
    with _LOADING:
        return _load_english()


@functools.lru_cache(maxsize=1)
def _load_english() -> tuple[dict[str, float], frozenset[str]]:
    from wordfreq import get_frequency_dict

    return get_frequency_dict("en"), _stop_words()


def _stop_words() -> frozenset[str]:
    """scikit-learn's English stop words (the Glasgow IR group's list), read from its data module alone: the public
    import, ``sklearn.feature_extraction.text``, imports most of scikit-learn first (about 2 s on a 2-core CPU), and a
    restarted server's first search waited for it; the public import where the module has moved."""
    spec = importlib.util.find_spec("sklearn")
    file = None if spec is None else Path(spec.origin).parent / "feature_extraction" / "_stop_words.py"
    if file is not None and file.exists():
        names: dict = {}
        exec(compile(file.read_text(), str(file), "exec"), names)  # a frozenset literal; runpy would swap sys.argv
        return frozenset(names["ENGLISH_STOP_WORDS"])
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def keyword_clue(texts: Sequence[str], n_terms: int = 8) -> str:
    """A session's ``n_terms`` best unigrams and bigrams (stop words removed; bigrams within an utterance) by
    (1 + log tf) · idf, where idf = −log(frequency in English) and a bigram's is its rarer word's; ties alphabetical.
    Empty when the session has no such term."""
    return keyword_clues([texts], n_terms)[0]


def keyword_clues(sessions: Sequence[Sequence[str]], n_terms: int = 8) -> list[str]:
    """``keyword_clue`` of each session (a list of its utterance texts), the sessions counted and scored together:
    Python only splits the words; counting, scoring and choosing run on arrays."""
    _, stop = _english()
    ids: dict[str, int] = {}
    tokens, text_ends, session_ends = [], [], []
    for texts in sessions:
        for text in texts:
            tokens += [ids.setdefault(w, len(ids)) for w in _TOKEN.findall(text.lower()) if w not in stop]
            text_ends.append(len(tokens))
        session_ends.append(len(text_ends))
    words = list(ids)
    tok = np.asarray(tokens, np.int64)
    text_of = np.repeat(np.arange(len(text_ends)), np.diff(np.asarray([0] + text_ends)))
    session_of_text = np.repeat(np.arange(len(sessions)), np.diff(np.asarray([0] + session_ends)))
    owner = session_of_text[text_of]
    pair = np.flatnonzero(text_of[1:] == text_of[:-1])  # bigrams: neighbours in one utterance
    v = max(len(words), 1)
    idf = _idf(words)
    uni, uni_n = np.unique(owner * v + tok, return_counts=True)
    pairs, pair_id = np.unique(tok[pair] * v + tok[pair + 1], return_inverse=True)  # each distinct bigram once
    bi, bi_n = np.unique(owner[pair] * max(len(pairs), 1) + pair_id, return_counts=True)  # keys < sessions · pairs
    bigram = pairs[bi % max(len(pairs), 1)]
    session = np.concatenate([uni // v, bi // max(len(pairs), 1)])
    count = np.concatenate([uni_n, bi_n])
    first, second = np.concatenate([uni % v, bigram // v]), np.concatenate([np.full(len(uni), -1), bigram % v])
    log = np.asarray([0.0] + [math.log(n) for n in range(1, int(count.max(initial=1)) + 1)])
    score = (1 + log[count]) * np.where(second >= 0, np.maximum(idf[first], idf[np.maximum(second, 0)]), idf[first])
    order = np.lexsort((-score, session))
    session, first, second, score = session[order], first[order], second[order], score[order]
    starts = np.searchsorted(session, np.arange(len(sessions) + 1))
    last = np.minimum(starts[:-1] + n_terms, starts[1:]) - 1  # each session's n_terms-th best term
    floor = np.append(score, np.inf)[np.where(last >= starts[:-1], last, len(score))]  # inf: a session without terms
    out = []
    for s in range(len(sessions)):  # those tied at the floor are ordered by their text
        at = range(starts[s], starts[s] + int(np.searchsorted(-score[starts[s]:starts[s + 1]], -floor[s], "right")))
        named = sorted((-score[i], words[first[i]] + ("" if second[i] < 0 else " " + words[second[i]])) for i in at)
        out.append(", ".join(t for _, t in named[:n_terms]))
    return out


def _idf(words: Sequence[str]) -> np.ndarray:
    """−log(frequency in English) of each word (float64), at most −log(``RAREST``). Not cached across calls: a
    process-wide cache would hold the words of sessions deleted since."""
    freq = _english()[0]
    return np.asarray([-math.log(max(freq.get(w, 0.0), RAREST)) for w in words], np.float64)


def centroid_embeddings(offsets: np.ndarray, utt_emb: np.ndarray) -> np.ndarray:
    """Normalised mean utterance embedding of every session (sessions own rows ``offsets[s]:offsets[s+1]``; zero
    for an empty session)."""
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    out = np.zeros((len(offsets) - 1, utt_emb.shape[1]), np.float32)
    np.add.at(out, owner, utt_emb)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def clue_texts(bank: MemoryBank, sessions: Sequence[int], mode: str, llm: str = "smollm2",
               llm_cache: bool = False) -> list[str] | None:
    """The clue text of each of the bank's ``sessions``, or None for ``centroid``. ``llm_cache``: keep LLM clue texts
    in the on-disk cache (``llm.ResponseCache``) for later runs over the same sessions."""
    if mode == "centroid":
        return None
    if mode == "keywords":
        return keyword_clues([bank.utt_texts[bank.offsets[s] : bank.offsets[s + 1]] for s in sessions])
    if mode == "llm":
        from .llm import ResponseCache, llm_clues, make_llm

        return llm_clues(bank, make_llm(llm), None if llm_cache else ResponseCache(":memory:"), progress=False,
                         sessions=sessions)
    raise ValueError(f"unknown clue mode {mode!r}; choose from {', '.join(CLUE_MODES)}")


def clue_embeddings(offsets: np.ndarray, utt_emb: np.ndarray, texts: Sequence[str] | None,
                    encoder: Encoder | None) -> np.ndarray:
    """Clue embedding of every session: its clue text embedded, or its centroid when it has no text (``texts`` None:
    the centroid mode)."""
    centroids = centroid_embeddings(offsets, utt_emb)
    if texts is None:
        return centroids
    if encoder is None:
        raise ValueError("text clues (clue_mode 'keywords' or 'llm') need an encoder; pass one or use "
                         "clue_mode='centroid'")
    emb = np.array(centroids)
    has = [i for i, t in enumerate(texts) if t]
    if has:
        emb[has] = encoder.encode(prompted(encoder, "passage", [f"topic: {texts[i]}" for i in has]))
    return emb
