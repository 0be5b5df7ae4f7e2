"""Reading JSON files and checking fields, with errors that name the file, record and field."""
from __future__ import annotations

import gzip
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

from ..timeparse import parse_timestamp
from .errors import DataFormatError, DataFormatWarning

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def read_json(path: str | Path) -> Any:
    """A whole JSON document from ``path`` (``.gz`` read transparently)."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(str(path), "no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8-sig") as fh:  # (a byte-order mark, as some editors write, is read)
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise DataFormatError(str(path), f"not valid JSON: {exc}") from exc


def field(path, record, obj: Any, name: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
    """``obj[name]`` checked to be of ``kind``; ``None`` if optional and absent."""
    if not isinstance(obj, dict):
        raise DataFormatError(path, f"expected an object, got {type(obj).__name__}", record)
    if name not in obj or obj[name] is None:
        if optional:
            return None
        raise DataFormatError(path, "missing", record, name)
    value = obj[name]
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in _as_tuple(kind):
        names = "/".join(k.__name__ for k in _as_tuple(kind))
        raise DataFormatError(path, f"expected {names}, got {type(value).__name__}", record, name)
    return value


def prose(path, record, obj: Any, name: str, optional: bool = False) -> str | None:
    """The text field ``obj[name]`` (``field``), each lone UTF-16 surrogate in it (a JSON ``\\ud83d`` escape whose
    pair is missing: no encoder, UTF-8 file or SQLite row holds one) replaced by U+FFFD, as a UTF-8 decoder replaces a
    bad byte. Ids are read with ``field``, exactly."""
    value = field(path, record, obj, name, str, optional)
    return None if value is None else repaired(value)


def repaired(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (see ``prose``)."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def timestamp(path, record, obj: dict, name: str, unread: list[DataFormatError] | None = None) -> float:
    """POSIX seconds of the optional date ``obj[name]`` (``timeparse.parse_timestamp``); NaN (undated) where it is
    absent. One that cannot be read is a ``DataFormatError``, or, given ``unread``, NaN with the error appended to it
    (``warn_unread``): a benchmark file is not refused for one bad date. A value of another JSON type is an error."""
    value = field(path, record, obj, name, (str, int, float), optional=True)
    try:
        return parse_timestamp(value) if value is not None else math.nan
    except ValueError as exc:
        error = DataFormatError(path, str(exc), record, name)
        if unread is None:
            raise error from exc
        unread.append(error)
        return math.nan


def warn_unread(path, unread: list[DataFormatError]) -> None:
    """One ``DataFormatWarning`` for the dates of file ``path`` that could not be read (taken as undated)."""
    if unread:
        warnings.warn(f"{path}: {len(unread)} date(s) could not be read and are taken as undated; the first: "
                      f"{unread[0]}", DataFormatWarning, stacklevel=3)


def _as_tuple(kind) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
