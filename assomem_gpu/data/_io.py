"""Reading JSON files and checking fields, with errors that name the file, record and field."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

from ..timeparse import parse_timestamp
from .errors import DataFormatError


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


def timestamp(path, record, obj: dict, name: str, optional: bool = True) -> float:
    value = field(path, record, obj, name, (str, int, float), optional=optional)
    try:
        return parse_timestamp(value) if value is not None else math.nan
    except ValueError as exc:
        raise DataFormatError(path, str(exc), record, name) from exc


def _as_tuple(kind) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
