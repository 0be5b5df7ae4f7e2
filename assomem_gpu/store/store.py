"""Persistent, multi-tenant memories: one SQLite file is the source of truth, each tenant's ``MemoryIndex`` is
derived state.

A write is checked, embedded, then committed in one transaction, and only then applied to the tenant's index: when a
call returns, the write is on disk, whole (a session is all there or not at all). An index is loaded from its
snapshot when the snapshot holds the tenant's last commit (``snapshots/<tenant>-<commits>.npz``), otherwise rebuilt
from the rows, which gives the same index (an index equals a fresh build of what it holds). At most ``max_loaded``
indexes stay in memory (least recently used out; its snapshot is written first).

Deleting a session or a tenant deletes its rows (``secure_delete`` overwrites them), checkpoints the WAL into the
file and truncates it, and deletes the tenant's snapshots: afterwards no byte of a deleted text is in any file of the
store's directory. Tenants are hard partitions: each has its own index, so a search reads one tenant's rows only.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from ..backend import Backend, get_backend
from ..config import AssoMemConfig
from ..encode import DEFAULT_MODEL, Encoder, TransformersEncoder
from ..fusion import FusionModel, default_fusion
from ..index import MemoryIndex, Session
from ..snapshot import SnapshotError
from .schema import StoreError, connect


class MemoryStore:
    """Memories of many tenants in one directory (``store.sqlite`` and ``snapshots/``); see the module docstring.

    ``encoder``, ``config``, ``fusion``, ``device``, ``dated``: as for ``MemoryIndex``, shared by every tenant. A store
    records its encoder's name and dimension on first use and refuses another encoder later (``StoreError``).
    Thread-safe: writes to one tenant take turns, searches run in parallel.
    """

    def __init__(self, directory: str | Path, encoder: Encoder | str = DEFAULT_MODEL,
                 config: AssoMemConfig | None = None, fusion: FusionModel | None = None,
                 device: str | Backend = "auto", dated: bool = True, max_loaded: int = 8):
        if not (isinstance(max_loaded, int) and max_loaded >= 1):
            raise ValueError(f"max_loaded must be an integer >= 1, got {max_loaded!r}")
        self.directory = Path(directory)
        (self.directory / "snapshots").mkdir(parents=True, exist_ok=True)
        self.encoder = TransformersEncoder(encoder) if isinstance(encoder, str) else encoder
        self.config = AssoMemConfig() if config is None else config
        self.fusion = default_fusion(self.config.signals, self.encoder.name) if fusion is None else fusion
        self.backend = device if isinstance(device, Backend) else get_backend(device)
        self.dated, self.max_loaded = dated, max_loaded
        self._db = connect(self.directory / "store.sqlite")
        self._db_lock = threading.Lock()  # one connection: one statement or transaction at a time
        self._lock = threading.Lock()  # the loaded indexes and the per-tenant locks
        self._loaded: OrderedDict[str, tuple[int, MemoryIndex]] = OrderedDict()  # name -> (tenant id, index)
        self._writing: dict[str, threading.Lock] = {}
        self._check_encoder()

    # ---- tenants -------------------------------------------------------------------------------------------------
    def create_tenant(self, name: str) -> None:
        """A new, empty tenant. ``ValueError`` if the name is taken or not a non-empty string."""
        _name(name)
        with self._db_lock:
            if self._db.execute("SELECT 1 FROM tenants WHERE name = ?", [name]).fetchone():
                raise ValueError(f"tenant: {name!r} exists")
            self._db.execute("INSERT INTO tenants (name) VALUES (?)", [name])

    def issue_key(self, tenant: str) -> str:
        """A new API key for the tenant (returned once; only its sha256 is stored)."""
        tenant_id = self._tenant_id(tenant)
        key = secrets.token_urlsafe(32)
        with self._db_lock:
            self._db.execute("INSERT INTO api_keys VALUES (?, ?)", [_digest(key), tenant_id])
        return key

    def tenant_of_key(self, key: str) -> str | None:
        """The tenant an API key belongs to, or None."""
        if not isinstance(key, str) or not key:
            return None
        digest = _digest(key)
        with self._db_lock:
            found = self._db.execute("SELECT k.hash, t.name FROM api_keys k JOIN tenants t ON t.id = k.tenant "
                                     "WHERE k.hash = ?", [digest]).fetchone()
        return found[1] if found is not None and hmac.compare_digest(found[0], digest) else None

    def tenants(self) -> list[str]:
        with self._db_lock:
            return [r[0] for r in self._db.execute("SELECT name FROM tenants ORDER BY id")]

    def delete_tenant(self, name: str) -> None:
        """Delete the tenant and everything it holds, on disk and in memory."""
        with self._tenant(name):
            tenant = self._tenant_id(name)
            with self._lock:
                self._loaded.pop(name, None)
            with self._db_lock:
                self._db.execute("DELETE FROM tenants WHERE id = ?", [tenant])
            self._forget(tenant)

    # ---- writes --------------------------------------------------------------------------------------------------
    def add_sessions(self, tenant: str, sessions: Iterable[Session | Mapping]) -> None:
        """Add sessions to the tenant (as ``MemoryIndex.add_sessions``): durable and whole when this returns;
        bad input raises ``ValueError``/``TypeError`` naming the field and changes nothing."""
        with self._tenant(tenant):
            tenant_id, index = self._index(tenant)
            committed: list[bool] = []

            def commit(records, vectors):
                rows = []
                for sid, date, turns, meta in records:
                    rows.append((sid, None if math.isnan(date) else date, json.dumps(meta), turns))
                offsets = np.cumsum([0] + [len(r[3]) for r in rows])
                with self._db_lock, self._transaction():
                    for (sid, date, meta, turns), lo in zip(rows, offsets):
                        session = self._db.execute("INSERT INTO sessions (tenant, session_id, date, metadata) "
                                                   "VALUES (?, ?, ?, ?)", [tenant_id, sid, date, meta]).lastrowid
                        self._db.executemany(
                            "INSERT INTO utterances VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [(session, p, tenant_id, uid, speaker, text, np.asarray(vectors[lo + p], np.float32)
                              .tobytes()) for p, (uid, speaker, text) in enumerate(turns)])
                    self._db.execute("UPDATE tenants SET commits = commits + 1 WHERE id = ?", [tenant_id])
                committed.append(True)

            self._apply(tenant, committed, lambda: index.add_sessions(sessions, journal=commit))

    def remove_sessions(self, tenant: str, session_ids: Iterable[str]) -> None:
        """Remove sessions from the tenant: their rows, vectors and snapshots leave every file of the store."""
        with self._tenant(tenant):
            tenant_id, index = self._index(tenant)
            committed: list[bool] = []

            def commit(ids):
                with self._db_lock, self._transaction():
                    self._db.executemany("DELETE FROM sessions WHERE tenant = ? AND session_id = ?",
                                         [(tenant_id, sid) for sid in ids])
                    self._db.execute("UPDATE tenants SET commits = commits + 1 WHERE id = ?", [tenant_id])
                committed.append(True)

            self._apply(tenant, committed, lambda: index.remove_sessions(session_ids, journal=commit))
            self._forget(tenant_id)

    # ---- reads ---------------------------------------------------------------------------------------------------
    def search(self, tenant: str, questions, **options) -> list:
        """``MemoryIndex.search`` over the tenant's memory (``k``, ``question_date``, ``sessions``, ``since``,
        ``until``)."""
        return self._index(tenant)[1].search(questions, **options)

    def get_session(self, tenant: str, session_id: str) -> Session:
        """The session as held; ``KeyError`` if the tenant holds none of that id."""
        return self._index(tenant)[1].get_session(session_id)

    def session_ids(self, tenant: str, offset: int = 0, limit: int | None = None) -> list[str]:
        """The tenant's session ids in the order they were added, from ``offset``, at most ``limit``."""
        for name, value in (("offset", offset), ("limit", limit)):
            if value is not None and not (isinstance(value, int) and 0 <= value <= 2**62):
                raise ValueError(f"{name}: must be an integer from 0 to 2**62, got {value!r}")
        tenant_id = self._tenant_id(tenant)
        with self._db_lock:
            return [r[0] for r in self._db.execute("SELECT session_id FROM sessions WHERE tenant = ? ORDER BY id "
                                                   "LIMIT ? OFFSET ?", [tenant_id, -1 if limit is None else limit,
                                                                        offset])]

    def stats(self, tenant: str) -> dict:
        """Sessions and utterances the tenant holds, and its writes committed."""
        tenant_id = self._tenant_id(tenant)
        with self._db_lock:
            sessions = self._db.execute("SELECT count(*) FROM sessions WHERE tenant = ?", [tenant_id]).fetchone()[0]
            utterances = self._db.execute("SELECT count(*) FROM utterances WHERE tenant = ?", [tenant_id]).fetchone()[0]
        return {"sessions": sessions, "utterances": utterances, "commits": self._commits(tenant_id)}

    def loaded(self) -> int:
        """Tenant indexes held in memory now."""
        with self._lock:
            return len(self._loaded)

    def index(self, tenant: str) -> MemoryIndex:
        """The tenant's index (loaded or rebuilt if it is not in memory)."""
        return self._index(tenant)[1]

    # ---- upkeep --------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Write the snapshots of the loaded indexes and close the file."""
        with self._lock:
            loaded, self._loaded = list(self._loaded.items()), OrderedDict()
        for name, (tenant_id, index) in loaded:
            with self._tenant(name):
                self._save(tenant_id, index)
        with self._db_lock:
            self._db.close()

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- inside --------------------------------------------------------------------------------------------------
    def _check_encoder(self) -> None:
        want = {"encoder": self.encoder.name, "dim": str(self.encoder.dim)}
        with self._db_lock:
            held = dict(self._db.execute("SELECT key, value FROM meta WHERE key IN ('encoder', 'dim')").fetchall())
            if not held:
                self._db.executemany("INSERT INTO meta VALUES (?, ?)", list(want.items()))
            elif held != want:
                raise StoreError(f"{self.directory}: the store holds vectors of encoder {held.get('encoder')!r} "
                                 f"(dim {held.get('dim')}); it was opened with {want['encoder']!r} (dim {want['dim']})")

    def _tenant(self, name: str) -> threading.Lock:
        _name(name)
        with self._lock:
            return self._writing.setdefault(name, threading.Lock())

    def _tenant_id(self, name: str) -> int:
        _name(name)
        with self._db_lock:
            found = self._db.execute("SELECT id FROM tenants WHERE name = ?", [name]).fetchone()
        if found is None:
            raise KeyError(f"tenant {name!r}")
        return int(found[0])

    @contextmanager
    def _transaction(self):
        """One transaction (the caller holds the connection's lock): all of it commits, or none of it."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _apply(self, name: str, committed: list[bool], write) -> None:
        """Run a write whose journal commits to SQLite (and then appends to ``committed``); if the index fails after
        the commit, drop it from memory (the next use rebuilds it from the rows, which hold the write)."""
        try:
            write()
        except BaseException:
            if committed:
                with self._lock:
                    self._loaded.pop(name, None)
            raise

    def _commits(self, tenant_id: int) -> int | None:
        """Writes committed to the tenant (None once it is deleted)."""
        with self._db_lock:
            found = self._db.execute("SELECT commits FROM tenants WHERE id = ?", [tenant_id]).fetchone()
        return None if found is None else int(found[0])

    def _index(self, name: str) -> tuple[int, MemoryIndex]:
        tenant_id = self._tenant_id(name)
        with self._lock:
            if name in self._loaded:
                self._loaded.move_to_end(name)
                return self._loaded[name]
        index = self._load(tenant_id)
        with self._lock:
            found = self._loaded.setdefault(name, (tenant_id, index))
            self._loaded.move_to_end(name)
            evicted = []
            while len(self._loaded) > self.max_loaded:
                old_name, (old_id, old) = self._loaded.popitem(last=False)
                evicted.append((old_name, old_id, old))
        for old_name, old_id, old in evicted:
            writing = self._tenant(old_name)
            if writing.acquire(blocking=False):  # busy: skip the snapshot (rebuilt from rows), never wait on it
                try:
                    self._save(old_id, old)
                finally:
                    writing.release()
        return found

    def _snapshot(self, tenant_id: int, commits: int) -> Path:
        return self.directory / "snapshots" / f"{tenant_id}-{commits}.npz"

    def _load(self, tenant_id: int) -> MemoryIndex:
        """The tenant's index from its snapshot of the last commit, else rebuilt from the rows."""
        path = self._snapshot(tenant_id, self._commits(tenant_id))
        if path.exists():
            try:
                index = MemoryIndex.load(path, encoder=self.encoder, device=self.backend)
                if index.config == self.config and index.dated == self.dated:
                    index.fusion = self.fusion
                    return index
            except (SnapshotError, ValueError):
                pass  # rebuilt below
        index = MemoryIndex(self.encoder, self.config, self.fusion, self.backend, self.dated)
        with self._db_lock:
            sessions = self._db.execute("SELECT id, session_id, date, metadata FROM sessions WHERE tenant = ? "
                                        "ORDER BY id", [tenant_id]).fetchall()
            turns = self._db.execute("SELECT session, utterance_id, speaker, text, embedding FROM utterances "
                                     "WHERE tenant = ? ORDER BY session, position", [tenant_id]).fetchall()
        by_session: dict[int, list] = {}
        for row in turns:
            by_session.setdefault(row[0], []).append(row[1:])
        records = [(sid, math.nan if date is None else float(date),
                    [(u, s, t) for u, s, t, _ in by_session.get(key, [])], json.loads(meta))
                   for key, sid, date, meta in sessions]
        vectors = [np.frombuffer(v, np.float32) for key, *_ in sessions for *_, v in by_session.get(key, [])]
        index._add(records, np.stack(vectors) if vectors else np.zeros((0, self.encoder.dim), np.float32))
        return index

    def _save(self, tenant_id: int, index: MemoryIndex) -> None:
        """Write the index's snapshot under the commit it holds, unless it is there (a deleted tenant has none).
        The caller holds the tenant's write lock, so a delete cannot pass between the check and the write."""
        commits = self._commits(tenant_id)
        if commits is None:
            return
        path = self._snapshot(tenant_id, commits)
        if not path.exists():
            index.save(path)
        self._forget(tenant_id, keep=path)

    def _forget(self, tenant_id: int, keep: Path | None = None) -> None:
        """Delete the tenant's snapshots (but ``keep``) and move every committed page into the file, truncating the
        WAL, so that deleted rows leave no copy behind."""
        for old in (self.directory / "snapshots").glob(f"{tenant_id}-*.npz"):
            if old != keep:
                old.unlink()
        if keep is None:
            with self._db_lock:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _name(name: Any) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"tenant: must be a non-empty string, got {name!r}")
