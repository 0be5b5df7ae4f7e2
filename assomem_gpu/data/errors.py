"""The one error type every loader raises on malformed input, and the warning for what a loader repaired."""
from __future__ import annotations


class DataFormatError(ValueError):
    """Malformed input, with the file, the record and the field that are wrong."""

    def __init__(self, path: str, message: str, record: str | int | None = None, field: str | None = None):
        where = str(path)
        if record is not None:
            where += f", record {record}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {message}")
        self.path, self.record, self.field = str(path), record, field


class DataFormatWarning(UserWarning):
    """Input a loader read after a repair (a date it could not read, taken as undated; a session id reused with
    other content, kept apart), naming the file and how many."""
