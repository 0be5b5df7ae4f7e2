"""Timestamps of sessions and questions as POSIX seconds (naive times read as UTC)."""
from __future__ import annotations

import math
from datetime import datetime, timezone

_FORMATS = (
    "%Y/%m/%d (%a) %H:%M",  # LongMemEval: 2023/04/10 (Mon) 23:07
    "%I:%M %p on %d %B, %Y",  # LoCoMo: 1:56 pm on 8 May, 2023
    "%I:%M %p on %d %b, %Y",
)


def parse_timestamp(value: str | float | int | None) -> float:
    """POSIX seconds for a date string (LongMemEval, LoCoMo, ISO 8601, or anything dateparser reads) or a number.

    ``None`` and ``""`` give NaN (unknown). Raises ``ValueError`` naming the value when it cannot be read.
    """
    if value is None or value == "":
        return math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"not a date: {value!r}")
    text = value.strip()
    for fmt in _FORMATS:
        try:
            return _posix(datetime.strptime(text, fmt))
        except ValueError:
            pass
    try:
        return _posix(datetime.fromisoformat(text))
    except ValueError:
        pass
    import dateparser

    parsed = dateparser.parse(text, languages=["en"], settings={"PREFER_DAY_OF_MONTH": "first",
                                                                 "RELATIVE_BASE": datetime(2000, 1, 1),
                                                                 "REQUIRE_PARTS": ["year"]})
    if parsed is None or _is_relative(text):  # (a date without its year, or a weekday, time or "ago" alone)
        raise ValueError(f"not an absolute date: {value!r}")
    return _posix(parsed)


def _is_relative(text: str) -> bool:
    words = text.lower().split()
    return any(w in words for w in ("ago", "yesterday", "today", "tomorrow", "now", "last", "next"))


def _posix(dt: datetime) -> float:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def format_timestamp(ts: float) -> str | None:
    """ISO 8601 (UTC) for a POSIX timestamp, ``None`` for NaN."""
    return None if math.isnan(ts) else datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
