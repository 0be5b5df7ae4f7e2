"""The store's SQLite file: its schema, its version, and the connection settings every write relies on.

WAL with ``synchronous=FULL`` (a commit is on disk when it returns), ``secure_delete=ON`` (deleted rows are
overwritten, not left in free pages), foreign keys (a tenant's or session's rows go with it), a busy timeout.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA_VERSION = 4

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tenants (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a deleted tenant's files can never be taken for a new one's
    name TEXT NOT NULL UNIQUE,
    commits INTEGER NOT NULL DEFAULT 0  -- writes committed: a snapshot of the tenant's index names the count it holds
);
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,  -- insertion order: the order a rebuilt index adds them in
    tenant INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    date REAL,  -- POSIX seconds; NULL when undated
    metadata TEXT NOT NULL,  -- JSON
    clue BLOB,  -- the session's clue vector (float32, the store's dimension); NULL: made again when the index is built
    UNIQUE (tenant, session_id)
);
CREATE TABLE utterances (
    session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    tenant INTEGER NOT NULL,
    utterance_id TEXT NOT NULL,
    speaker TEXT NOT NULL,
    text TEXT NOT NULL,
    embedding BLOB NOT NULL,  -- float32, the store's dimension
    sentences BLOB,  -- its sentence vectors (float32, sentences.py), none for one sentence; NULL: made again when
    -- the index is built
    PRIMARY KEY (session, position),
    UNIQUE (tenant, utterance_id)
);
CREATE TABLE api_keys (
    hash TEXT PRIMARY KEY,  -- sha256 of the key: the key itself is never stored
    tenant INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE
);
"""


class StoreError(RuntimeError):
    """The store cannot be opened as asked (another schema version, another encoder, a file that is no store)."""


class UnknownTenant(KeyError):
    """No tenant of that name (never made, or deleted, perhaps while the call waited)."""


BUSY_TIMEOUT_MS = 30_000  # a statement waits this long for the file's lock


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) the store at ``path`` with its settings, and check its schema version."""
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    try:
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON", "foreign_keys=ON",
                       f"busy_timeout={BUSY_TIMEOUT_MS}"):
            db.execute(f"PRAGMA {pragma}")
        if db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:  # a new file: the schema, atomically
            db.executescript(f"BEGIN; {SCHEMA} INSERT INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}'); COMMIT;")
        found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if found is not None and found[0] == "2":  # version 2 kept no clue vectors: they are made again on a build
            db.executescript("BEGIN; ALTER TABLE sessions ADD COLUMN clue BLOB; "
                             "UPDATE meta SET value = '3' WHERE key = 'schema_version'; COMMIT;")
            found = ("3",)
        if found is not None and found[0] == "3":  # version 3 kept no sentence vectors: they are made again
            db.executescript("BEGIN; ALTER TABLE utterances ADD COLUMN sentences BLOB; "
                             "UPDATE meta SET value = '4' WHERE key = 'schema_version'; COMMIT;")
            found = ("4",)
    except sqlite3.DatabaseError as exc:  # not SQLite, or SQLite without our tables
        db.close()
        raise StoreError(f"{path}: not a memory store ({exc})") from exc
    if found is None or found[0] != str(SCHEMA_VERSION):
        db.close()
        raise StoreError(f"{path}: schema version {None if found is None else found[0]}, this version reads "
                         f"{SCHEMA_VERSION}")
    return db
