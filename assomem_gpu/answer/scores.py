"""Scores of a generated answer against the reference: exact match and token F1 as the official scripts compute them,
abstention, and the strict parse of an LLM judge's verdict.

Two normalisations, by dataset (``STYLES``):

- ``squad`` (SQuAD v2's ``normalize_answer``; every dataset but LoCoMo): lower case, drop punctuation, drop the
  articles a/an/the, collapse white space; F1 over the tokens, 1 when both sides are empty.
- ``locomo`` (LoCoMo's ``evaluation.py``): drop commas first (so "1,000" is "1000"), then as SQuAD but "and" is
  dropped with the articles; exact match compares the sets of tokens ("Paris and London" is "London and Paris"; the
  script defines it, its question answering reports only F1), F1 compares Porter stems (NLTK's ``PorterStemmer``,
  the script's: "playful" is "play", "is" is not "i") and is 0 where no token is shared, empty sides included. By
  category, as its ``eval_question_answering``: a multi-hop question's (category 1) F1 is the mean over the
  reference's comma-separated answers of the best F1 of the reply's; an open-domain one's (category 3) reference is
  its text before the first ";".

Answers that are numbers are compared as their text ("3" matches "3", not "three"), as both scripts do.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

STYLES = ("squad", "locomo")
_PUNCT = set(string.punctuation)
_ARTICLES = {"squad": re.compile(r"\b(a|an|the)\b"), "locomo": re.compile(r"\b(a|an|the|and)\b")}
# replies that decline to answer: the generation prompt asks for "IDK" (quoted or not); small models paraphrase it.
# "unknown" as the reply's last word, or first or after "is" with a stop after it ("Unknown, sorry", "it's unknown;
# ..."), or "unknown to me": not as a word of an answer ("Unknown Mortal Orchestra", "an unknown landscape")
_ABSTAINS = re.compile(r"(?<![\w-])idk(?![\w-])|\bi (?:do not|dont|don't) know\b|"
                       r"\bnot (?:mentioned|specified|provided|stated)\b|\bno (?:information|mention|record)\b|"
                       r"\bcannot (?:answer|determine)\b|\bunknown\W*$|\bunknown to (?:me|us)\b|"
                       r"(?:^\W*|(?:\banswer|\bis|'s|\bare|\bwas|\bwere|\bremains?)\W*)unknown\s*[.;,:(!]")


@lru_cache(maxsize=1)
def _porter():
    """NLTK's ``PorterStemmer()`` in its default mode, as LoCoMo's script makes it."""
    from nltk.stem import PorterStemmer

    return PorterStemmer()


@lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    return _porter().stem(word)


def normalize_answer(text: str, style: str = "squad") -> str:
    text = str(text)
    if style == "locomo":
        text = text.replace(",", "")
    elif style != "squad":
        raise ValueError(f"style: one of {STYLES}, got {style!r}")
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES[style].sub(" ", text).split())


def exact_match(prediction: str, reference: str, style: str = "squad") -> float:
    pred, ref = normalize_answer(prediction, style), normalize_answer(reference, style)
    return float(set(pred.split()) == set(ref.split()) if style == "locomo" else pred == ref)


def token_f1(prediction: str, reference: str, style: str = "squad") -> float:
    pred, ref = normalize_answer(prediction, style).split(), normalize_answer(reference, style).split()
    if style == "locomo":
        pred, ref = [_stem(w) for w in pred], [_stem(w) for w in ref]
    if style == "squad" and (not pred or not ref):
        return float(pred == ref)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def abstains(reply: str) -> bool:
    """Whether ``reply`` says the memory does not hold the answer ("IDK", "I don't know", "not mentioned", ...)."""
    return bool(_ABSTAINS.search(" ".join(str(reply).lower().replace("’", "'").split())))


def answer_scores(prediction: str, reference: str | None, abstention: bool, style: str = "squad",
                  question_type: str | None = None) -> dict[str, float] | None:
    """``{"EM", "F1"}`` of one answer; an abstention question (LongMemEval ``_abs``, LoCoMo category 5) scores 1 on
    both when the reply abstains and 0 otherwise. None when there is no reference to score against. In the
    ``locomo`` style ``question_type`` (the loader's ``category-<n>``) picks its category's rule (module docstring)."""
    if abstention:
        score = float(abstains(prediction))
        return {"EM": score, "F1": score}
    if reference is None:
        return None
    prediction, reference = str(prediction), str(reference)
    if style == "locomo" and question_type == "category-3":
        reference = reference.split(";")[0].strip()
    if style == "locomo" and question_type == "category-1":
        parts, answers = prediction.split(","), reference.split(",")
        f1 = sum(max(token_f1(p, a, style) for p in parts) for a in answers) / len(answers)
        return {"EM": exact_match(prediction, reference, style), "F1": f1}
    return {"EM": exact_match(prediction, reference, style), "F1": token_f1(prediction, reference, style)}


def parse_verdict(reply: str) -> bool | None:
    """The judge's verdict: True for a reply that is exactly ``Win`` once stripped, False for exactly ``Lose``, None
    (a judge error, counted apart) for anything else. A substring test would be wrong: "Lose. The golden answer
    says Win..." and "Winning" are not verdicts."""
    reply = reply.strip()
    return True if reply == "Win" else False if reply == "Lose" else None
