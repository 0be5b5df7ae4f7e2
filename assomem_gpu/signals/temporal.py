"""Temporal match: a question's time constraint against utterance times.

The question's time expressions are resolved against its date with dateparser into a window (``two weeks ago``,
``last month``, ``in May``, ``on March 3``; ``since`` stretches it to the question date) or an ordering intent
(``most recent``, ``first time``). An utterance's times are its session date plus the dates its own time expressions
resolve to, relative to that session date. People report events after they happen, so a session dated up to
``REPORT_LAG`` after the window still matches fully.

A question may also ask about time itself (``when``, ``how long``, ``how many days``, ``which came first``): what
answers it is an utterance that anchors an event in time. Each utterance carries a time mark (``time_mark``): 2 when
it holds an expression ``windows`` resolves, 1 when it anchors an event less precisely (``on 3/22``, ``last night``,
``for two weeks``, ``I just finished``), else 0; a question with any temporal intent (a window, an ordering or asking
about time) favours marked utterances. Questions without any get no temporal signal (and no weight).
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np

DAY = 86_400.0
REPORT_LAG = 14 * DAY  # how long after an event a session may still be the one reporting it
_UNITS = {"day": DAY, "week": 7 * DAY, "month": 30.44 * DAY, "year": 365.25 * DAY}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
            "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2, "a few": 3, "few": 3}
_COUNTS = "a couple of|couple of|a few|few"
_NUMBER_WORDS = "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
_NUM = rf"(\d+|{_COUNTS}|an|a|{_NUMBER_WORDS})"
_AGO = re.compile(rf"(?<!how many )(?<!how much )\b{_NUM}\s+(day|week|month|year)s?\s+ago\b", re.I)
_PAST = re.compile(rf"\b(?:last|past|previous)\s+(?:{_NUM}\s+)?(day|week|weekend|month|year)s?\b", re.I)
_THIS = re.compile(r"\b(?:this|current)\s+(week|weekend|month|year)\b", re.I)
_DAYWORD = re.compile(r"\b(yesterday|today|tonight|this morning|this afternoon|this evening)\b", re.I)
_WEEKDAY = re.compile(r"\blast\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", re.I)
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_DAYNUM = r"\d{1,2}(?:st|nd|rd|th)?"
# a month counts only with a day or a year, or after a preposition: "you may want" and "march on" are no dates
_ABSOLUTE = re.compile(rf"\b(?:(?:{_MONTHS})\s+{_DAYNUM}(?:,?\s+\d{{4}})?\b|(?:{_MONTHS}),?\s+\d{{4}}|{_DAYNUM}\s+"
                       rf"(?:of\s+)?(?:{_MONTHS})(?:,?\s+\d{{4}})?|(?:in|during|since|early|late|mid|until|before|after|"
                       rf"of)\s+(?:{_MONTHS})|\d{{4}}[/-]\d{{1,2}}[/-]\d{{1,2}}|(?:in|during)\s+\d{{4}})\b", re.I)
_DAY_NAMES = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_LATEST = re.compile(r"\b(most recent(?:ly)?|latest|last time|currently|current|right now|these days|nowadays|"
                     r"at the moment|recently|lately|now)\b", re.I)
_SINCE = re.compile(r"\b(since|ever since)\b", re.I)
_EARLIEST = re.compile(r"\b(first time|earliest|originally|initially|at first|used to)\b", re.I)
# a question about time itself: when, how long (ago), in which order
_ASKS = re.compile(r"\b(?:when|how long|how many (?:days|weeks|months|years|hours|minutes)|how much time|"
                   r"(?:what|which|the) (?:date|day|week|month|year|season)|(?:what|which) order|order of|"
                   r"(?:came|happened|occurred) (?:first|last|earlier|later))\b"
                   r"|\b(?:first|earlier|later|more recently|most recently)\s*(?:,|\?|$)", re.I)


@dataclass(frozen=True)
class TimeConstraint:
    start: float = math.nan  # window in POSIX seconds; NaN when the question names no window
    end: float = math.nan
    order: str | None = None  # "latest" or "earliest"
    asks: bool = False  # the question asks about time itself (when, how long, which first)

    @property
    def has_window(self) -> bool:
        return not math.isnan(self.start)

    @property
    def has_intent(self) -> bool:
        return self.has_window or self.order is not None or self.asks


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc).replace(tzinfo=None)


def _ts(dt: datetime) -> float:
    return dt.replace(tzinfo=timezone.utc).timestamp()


def _number(word: str) -> int:
    word = word.lower()
    return int(word) if word.isdigit() else _NUMBERS.get(word, 1)


def windows(text: str, ref: float) -> list[tuple[float, float]]:
    """Time windows that the expressions in ``text`` name, resolved against the reference time ``ref``."""
    if math.isnan(ref):
        return []
    out = []
    for m in _AGO.finditer(text):
        n, unit = _number(m.group(1)), _UNITS[m.group(2).lower()]
        centre = ref - n * unit
        out.append((centre - unit, centre + unit))
    for m in _PAST.finditer(text):
        n = _number(m.group(1)) if m.group(1) else 1
        unit = 7 * DAY if m.group(2).lower() == "weekend" else _UNITS[m.group(2).lower()]
        out.append((ref - (n + 1) * unit, ref))
    for m in _THIS.finditer(text):
        unit = 7 * DAY if m.group(1).lower() == "weekend" else _UNITS[m.group(1).lower()]
        out.append((ref - unit, ref + DAY))
    for m in _DAYWORD.finditer(text):
        back = 2 * DAY if m.group(1).lower() == "yesterday" else DAY
        out.append((ref - back, ref + DAY / 2))
    for m in _WEEKDAY.finditer(text):
        day = _resolve(m.group(0), ref)
        if day is not None:
            out.append((day - DAY, day + 2 * DAY))
    for m in _ABSOLUTE.finditer(text):
        span = _absolute_window(m.group(0), ref)
        if span is not None:
            out.append(span)
    return out


def _resolve(expr: str, ref: float) -> float | None:
    import dateparser

    parsed = dateparser.parse(expr, languages=["en"], settings={"RELATIVE_BASE": _dt(ref), "PREFER_DATES_FROM": "past",
                                                                "RETURN_AS_TIMEZONE_AWARE": False})
    return None if parsed is None else _ts(parsed)


def _absolute_window(expr: str, ref: float) -> tuple[float, float] | None:
    """A day for expressions with a day number, else the month, else the year."""
    clean = re.sub(r"^(in|during|since|early|late|mid|until|before|after|of)\s+", "", expr.strip(), flags=re.I)
    when = _resolve(clean, ref)
    if when is None:
        return None
    start = _dt(when).replace(hour=0, minute=0, second=0, microsecond=0)
    if re.fullmatch(r"\d{4}", clean):
        begin = start.replace(month=1, day=1)
        return _ts(begin), _ts(begin.replace(year=begin.year + 1))
    if not re.search(r"\d{1,2}(?:st|nd|rd|th)?\b(?!\d)", re.sub(r"\d{4}", "", clean)):
        begin = start.replace(day=1)
        nxt = (begin + timedelta(days=32)).replace(day=1)
        return _ts(begin), _ts(nxt)
    return _ts(start), _ts(start + timedelta(days=1))


def parse_constraint(question: str, date: float) -> TimeConstraint:
    """The question's time constraint: the union of the windows it names, any ordering intent, and whether it asks
    about time itself."""
    spans = windows(question, date)
    order = "latest" if _LATEST.search(question) else "earliest" if _EARLIEST.search(question) else None
    asks = _ASKS.search(question) is not None
    if spans:
        end = date if _SINCE.search(question) else max(e for _, e in spans)
        return TimeConstraint(min(s for s, _ in spans), end, order, asks)
    return TimeConstraint(order=order, asks=asks)


# ``_ABSOLUTE``'s forms without a month name (most texts with digits name no month: the full pattern costs ~8 times
# this one on them)
_NUMERIC_DATE = re.compile(r"\b(?:\d{4}[/-]\d{1,2}[/-]\d{1,2}|(?:in|during)\s+\d{4})\b", re.I)
_UNIT_WORDS = frozenset(u + s for u in ("day", "week", "month", "year") for s in ("", "s"))


_Form = tuple[re.Pattern, frozenset[str], tuple[frozenset[str], ...], str, re.Pattern | None]


def _form(pattern: re.Pattern, cues: Iterable[str], also: Sequence[Iterable[str]] = (), chars: str = "") -> _Form:
    """A time expression for ``_found``: its pattern, the words (or digits) it cannot match without (``cues``: a
    text holding none of them is not searched for it, and most texts hold none at all), and for an ASCII text more
    such sets (``also``: a word of each) and ``chars`` (one of them); with the pattern without IGNORECASE where it
    has it and no upper-case letter of its own, which finds in a lower-cased ASCII text what the pattern finds in the
    text. (The time marks of LongMemEval_S dev's and MeetingQA's 157,581 turns and questions, 40,000 of them also
    upper- or title-cased: 28.7 s with the cues alone and every pattern as given, 16.1 s so; the same marks.) The
    sets are kept by hand beside their patterns: a word a pattern gains must join them (``tests/test_signals.py``
    puts each of their words in a form it completes)."""
    bare = re.sub(r"\\.", "", pattern.pattern)  # (escapes such as \D are no letters)
    folded = re.compile(pattern.pattern, pattern.flags & ~re.I) \
        if pattern.flags & re.I and not re.search("[A-Z]", bare) else None
    return pattern, frozenset(cues), tuple(frozenset(a) for a in also), chars, folded


_EXPRESSIONS = (_form(_PAST, {"last", "past", "previous"}, [_UNIT_WORDS | {"weekend", "weekends"}]),
                _form(_THIS, {"this", "current"}, [{"week", "weekend", "month", "year"}]),
                _form(_DAYWORD, {"yesterday", "today", "tonight", "this"},
                      [{"yesterday", "today", "tonight", "morning", "afternoon", "evening"}]),
                _form(_WEEKDAY, {"last"}, [_DAY_NAMES.split("|")]),
                _form(_ABSOLUTE, _MONTHS.split("|")), _form(_NUMERIC_DATE, "0123456789"),
                _form(_AGO, {"ago"}, [_UNIT_WORDS]))
_WORD = re.compile(r"[a-z]+|[0-9]")


_MONTH_NAMES = "January|February|March|April|June|July|August|September|October|November|December"  # "May": a verb
_PAST_VERBS = ("got|began|bought|made|did|went|saw|met|took|came|had|won|ran|read|sold|left|found|gave|wrote|built|"
               "spent|heard|paid|lost|caught|hit|became|ate|drove|flew|grew|wore|swam|sang|threw|felt|kept|sent|set|"
               "put|told|learnt|agreed")
_DURATION_UNITS = "day|week|month|year|hour|minute|decade"
# a count of units that spans time: "a"/"an" only after a word that makes it one ("for a week", not "twice a day")
_SPAN = rf"(?:\d+|{_COUNTS}|{_NUMBER_WORDS}|(?:for|in|about|over|within|after|almost|nearly)\s+an?)"
# an event anchored in time less precisely than ``windows`` resolves, each form with its cue words (as
# ``_EXPRESSIONS``): a numeric month/day date (not a fraction of a unit such as "1/2 cup"), a month or weekday by name,
# a duration or offset, a day word, or an event just reported ("I just finished"; "-eed" words such as "need" are no
# past tense)
_ANCHORS = (
    _form(re.compile(r"\b(?:(?:1[0-2]|0?[1-9])/(?:3[01]|[12]\d|0?[1-9])\b(?!\s*(?:cups?|tsp|tbsp|teaspoons?|"
                     r"tablespoons?|inch|inches|oz|ounces?|pounds?|lbs?|miles?|of)\b)|"
                     r"(?:3[01]|[12]\d)/(?:1[0-2]|0?[1-9])/\d{2,4}\b)"), "0123456789", chars="/"),
    _form(re.compile(rf"\b(?:{_MONTH_NAMES})\b|(?i:\b(?:{_DAY_NAMES})s?\b|\b(?:mid|early|late)-(?:{_MONTHS})\b)"),
          _MONTH_NAMES.lower().split("|") + _DAY_NAMES.split("|") + [d + "s" for d in _DAY_NAMES.split("|")]
          + ["mid", "early", "late"]),
    _form(re.compile(rf"\b{_SPAN}\s+(?:{_DURATION_UNITS})s?\b", re.I),
          _DURATION_UNITS.split("|") + [u + "s" for u in _DURATION_UNITS.split("|")]),
    # (not "yesterday" and the like: ``_DAYWORD`` resolves them)
    _form(re.compile(r"\b(?:last night|the other day|lately|recently)\b", re.I),
          {"night", "other", "lately", "recently"}, [{"last", "day", "lately", "recently"}]),
    _form(re.compile(rf"\b(?:just|finally)\s+(?:\w+(?<!e)ed|{_PAST_VERBS})\b", re.I), {"just", "finally"}),
)
NO_TIME, ANCHORED, RESOLVED = 0, 1, 2  # the time marks (see ``time_mark``)
TIME_MARKS_VERSION = 2  # of the rules above: a snapshot's marks of another version are made again from its texts


def _found(forms: Sequence[_Form], words: set[str], text: str, low: str | None) -> bool:
    """Does ``text`` (whose lower-case words are ``words``) hold one of ``forms`` (``_form``)? ``low``: the text
    lower-cased where it is ASCII, else None. A form is searched for only where the text holds its cues."""
    for pattern, cues, also, chars, folded in forms:
        if cues.isdisjoint(words):
            continue
        if low is not None:
            if any(a.isdisjoint(words) for a in also) or (chars and not any(c in text for c in chars)):
                continue
            if folded is not None:
                if folded.search(low) is not None:
                    return True
                continue
        if pattern.search(text) is not None:
            return True
    return False


def _read(text: str) -> tuple[set[str], str | None]:
    """``_found``'s words and lower-cased ASCII text of ``text``."""
    low = text.lower()
    return set(_WORD.findall(low)), low if text.isascii() else None


def mentions_time(text: str) -> bool:
    """Does the text hold any expression ``windows`` could resolve?"""
    words, low = _read(text)
    return _found(_EXPRESSIONS, words, text, low)


def time_mark(text: str) -> int:
    """``RESOLVED`` (2) when the text holds an expression ``windows`` resolves, ``ANCHORED`` (1) when it anchors an
    event in time less precisely (``_ANCHORS``), else ``NO_TIME`` (0)."""
    words, low = _read(text)
    if _found(_EXPRESSIONS, words, text, low):
        return RESOLVED
    return ANCHORED if _found(_ANCHORS, words, text, low) else NO_TIME


def temporal_scores(constraint: TimeConstraint, when: np.ndarray, owners: np.ndarray,
                    mentioned: np.ndarray, marks: np.ndarray | None = None) -> np.ndarray:
    """Score of each candidate from its session date ``when`` (NaN: unknown), the times its utterance mentions
    (``mentioned[k]`` belongs to candidate ``owners[k]``) and its time mark (``marks``, see ``time_mark``).

    Window: 1 from its start to ``REPORT_LAG`` after its end, decaying as exp(−distance / window length) outside
    (the best of a candidate's times).
    Ordering: the candidate's session date ranked among the candidates (1 = latest for "latest", earliest otherwise).
    Unknown times score 0 in both. Time mark: its half (0, 0.5 or 1), for any question with an intent. The parts
    add up.
    """
    when = np.asarray(when, dtype=np.float64)
    score = np.zeros(len(when), np.float32)
    known = ~np.isnan(when)
    if constraint.has_window:
        width = max(constraint.end - constraint.start, DAY)

        def fit(ts: np.ndarray) -> np.ndarray:
            dist = np.maximum(constraint.start - ts, 0) + np.maximum(ts - constraint.end - REPORT_LAG, 0)
            return np.exp(-dist / width)

        score[known] = fit(when[known])
        keep = ~np.isnan(mentioned)
        np.maximum.at(score, owners[keep], fit(mentioned[keep]).astype(np.float32))
    if constraint.order is not None and known.sum() > 1 and np.ptp(when[known]) > 0:
        lo, hi = when[known].min(), when[known].max()
        pos = (when[known] - lo) / (hi - lo)
        score[known] += (pos if constraint.order == "latest" else 1 - pos).astype(np.float32)
    if constraint.has_intent and marks is not None:
        score += np.asarray(marks, np.float32) / RESOLVED
    return score
