"""Scores of a generated answer against the reference: exact match and token F1 as SQuAD's and LoCoMo's official
scripts compute them, abstention, and the strict parse of an LLM judge's verdict.

Normalisation (SQuAD's ``normalize_answer``, with LoCoMo's removal of thousands separators so that "1,000" and
"1000" match): lower case, drop punctuation, drop the articles a/an/the, collapse white space. Answers that are
numbers are compared as their text ("3" matches "3", not "three"), as both scripts do.
"""
from __future__ import annotations

import re
import string
from collections import Counter

_PUNCT = set(string.punctuation)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# replies that decline to answer: the generation prompt asks for "IDK"; small models paraphrase it
_ABSTAINS = re.compile(r"^idk\b|\bi (?:do not|dont|don't) know\b|\bnot (?:mentioned|specified|provided|stated)\b|"
                       r"\bno (?:information|mention|record)\b|\bcannot (?:answer|determine)\b|\bunknown\b")


def normalize_answer(text: str) -> str:
    text = _THOUSANDS.sub("", str(text).lower())
    text = "".join(ch for ch in text if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(reference))


def token_f1(prediction: str, reference: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not pred or not ref:
        return float(pred == ref)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def abstains(reply: str) -> bool:
    """Whether ``reply`` says the memory does not hold the answer ("IDK", "I don't know", "not mentioned", ...)."""
    return bool(_ABSTAINS.search(" ".join(str(reply).lower().replace("’", "'").split())))


def answer_scores(prediction: str, reference: str | None, abstention: bool) -> dict[str, float] | None:
    """``{"EM", "F1"}`` of one answer; an abstention question (LongMemEval ``_abs``, LoCoMo category 5) scores 1 on
    both when the reply abstains and 0 otherwise. None when there is no reference to score against."""
    if abstention:
        score = float(abstains(prediction))
        return {"EM": score, "F1": score}
    if reference is None:
        return None
    return {"EM": exact_match(prediction, reference), "F1": token_f1(prediction, reference)}


def parse_verdict(reply: str) -> bool | None:
    """The judge's verdict: True for a reply that is exactly ``Win`` once stripped, False for exactly ``Lose``, None
    (a judge error, counted apart) for anything else. A substring test would be wrong: "Lose. The golden answer
    says Win..." and "Winning" are not verdicts."""
    reply = reply.strip()
    return True if reply == "Win" else False if reply == "Lose" else None
