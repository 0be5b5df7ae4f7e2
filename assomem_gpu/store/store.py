"""Persistent, multi-tenant memories: one SQLite file is the source of truth, each tenant's ``MemoryIndex`` is
derived state.

A write is checked, embedded, then committed in one transaction, and only then applied to the tenant's index: when a
call returns, the write is on disk, whole (a session is all there or not at all). An index is loaded from its
snapshot when the snapshot holds the tenant's last commit (``snapshots/<tenant>-<commits>.npz``), otherwise rebuilt
from the rows, which gives the same index (an index equals a fresh build of what it holds). At most ``max_loaded``
indexes stay in memory (least recently used out, its snapshot written first, under its write lock: a tenant that a
write holds stays until a later load, so a write always lands in the index that searches read).

Deleting a session or a tenant deletes its rows (``secure_delete`` overwrites them), checkpoints the WAL into the
file and truncates it, and deletes the tenant's snapshots: afterwards no byte of a deleted text is in any file of the
store's directory. Tenants are hard partitions: each has its own index, so a search reads one tenant's rows only.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import secrets
import sqlite3
import threading
from collections import OrderedDict
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

import numpy as np

from ..backend import Backend, get_backend
from ..clues import keyword_clue
from ..config import AssoMemConfig
from ..encode import DEFAULT_MODEL, Encoder, prompted, text_encoder
from ..fusion import FusionModel, default_fusion
from ..index import Answer, MemoryIndex, Session, check_fusion
from ..llm import LLM
from ..sentences import SENTENCES_VERSION
from ..snapshot import SnapshotError, sync_folder
from .schema import BUSY_TIMEOUT_MS, StoreError, UnknownTenant, connect

log = logging.getLogger(__name__)
CHECKPOINT_WAIT_MS = 1_000  # at most, for another connection's read to end (a delete's checkpoint)


class Tenant(NamedTuple):
    """A tenant as one of its API keys names it (``MemoryStore.tenant_of_key``): its name and its id. Every call that
    takes a tenant takes a name or this; given this, it raises ``UnknownTenant`` once the name no longer has that id
    (deleted, perhaps made again since: another tenant, whose rows the old key must not reach)."""

    name: str
    id: int


class MemoryStore:
    """Memories of many tenants in one directory (``store.sqlite`` and ``snapshots/``); see the module docstring.

    ``encoder``, ``config``, ``fusion``, ``device``, ``dated``: as for ``MemoryIndex``, shared by every tenant. A store
    records its encoder's name and dimension, and how clues are made, on first use and refuses others later
    (``StoreError``); another config is taken (a tenant's snapshot of the old one is replaced as it loads: one
    process per directory). ``max_loaded``: indexes held in memory (default 8). ``snapshot_every_s``: a background thread
    writes the snapshot of each loaded tenant written to since, at most this often (default 5 s; None: only on
    ``close`` and eviction), so that a restart after a crash loads a recent snapshot and adds only the newer sessions.
    Thread-safe: writes to one tenant take turns, searches run in parallel.
    """

    def __init__(self, directory: str | Path, encoder: Encoder | str = DEFAULT_MODEL,
                 config: AssoMemConfig | None = None, fusion: FusionModel | None = None,
                 device: str | Backend = "auto", dated: bool = True, max_loaded: int = 8,
                 snapshot_every_s: float | None = 5.0):
        if not (isinstance(max_loaded, int) and max_loaded >= 1):
            raise ValueError(f"max_loaded must be an integer >= 1, got {max_loaded!r}")
        if snapshot_every_s is not None and not (isinstance(snapshot_every_s, (int, float)) and snapshot_every_s > 0):
            raise ValueError(f"snapshot_every_s must be a number > 0 or None, got {snapshot_every_s!r}")
        self.directory = Path(directory)
        (self.directory / "snapshots").mkdir(parents=True, exist_ok=True)
        self.encoder = text_encoder(encoder) if isinstance(encoder, str) else encoder
        self.config = AssoMemConfig() if config is None else config
        self.fusion = default_fusion(self.config.signals, self.encoder.name) if fusion is None else fusion
        check_fusion(self.fusion, self.config)  # here, not at a tenant's first load
        self.backend = device if isinstance(device, Backend) else get_backend(device)
        self.dated, self.max_loaded = dated, max_loaded
        self._db = connect(self.directory / "store.sqlite")
        self._db_lock = threading.Lock()  # one connection: one statement or transaction at a time
        self._wal_held = False  # whether a reader kept the last checkpoint from completing (_truncate_wal)
        self._lock = threading.Lock()  # the loaded indexes and the per-tenant locks
        self._loaded: OrderedDict[str, tuple[int, MemoryIndex]] = OrderedDict()  # name -> (tenant id, index)
        self._writing: dict[str, threading.Lock] = {}
        self._behind: set[str] = set()  # loaded tenants whose newest snapshot is older than their last commit
        self._deleted: set[int] = set()  # ids of the tenants deleted since the store opened: a load that ran across
        # the delete does not keep its index (ids are never reused)
        self._check_encoder()
        self._check_sentence_rules()
        self._sweep()
        self._checkpoint()  # a delete that a crash cut short of its checkpoint leaves its rows in the file until then
        with self._db_lock:  # every key's digest -> its tenant: the store is the only writer of its directory
            self._keys: dict[str, Tenant] = {digest: Tenant(name, tenant_id) for digest, name, tenant_id in
                                             self._db.execute("SELECT k.hash, t.name, t.id FROM api_keys k "
                                                              "JOIN tenants t ON t.id = k.tenant")}
        self._loading: dict[str, threading.Lock] = {}  # per tenant: one load at a time, the others wait for it
        self._stop = threading.Event()
        self._snapshotter = self._preloader = None
        if snapshot_every_s is not None:
            self._snapshotter = threading.Thread(target=self._snapshot_loop, args=(snapshot_every_s,),
                                                 name="assomem-snapshots", daemon=True)
            self._snapshotter.start()

    # ---- tenants -------------------------------------------------------------------------------------------------
    def create_tenant(self, name: str) -> None:
        """A new, empty tenant. ``ValueError`` if the name is taken or not a non-empty string."""
        _tenant_name(name)
        with self._db_lock:
            if self._db.execute("SELECT 1 FROM tenants WHERE name = ?", [name]).fetchone():
                raise ValueError(f"tenant: {name!r} exists")
            self._db.execute("INSERT INTO tenants (name) VALUES (?)", [name])

    def issue_key(self, tenant: str) -> str:
        """A new API key for the tenant (returned once; only its sha256 is stored). Under the tenant's write lock, as
        ``delete_tenant``: a key is never given to a tenant deleted (or made again) meanwhile."""
        key = secrets.token_urlsafe(32)
        with self._tenant(tenant):
            tenant_id = self._tenant_id(tenant)
            with self._db_lock:
                self._db.execute("INSERT INTO api_keys VALUES (?, ?)", [_digest(key), tenant_id])
                self._keys[_digest(key)] = Tenant(_tenant_name(tenant), tenant_id)
        return key

    def tenant_of_key(self, key: str) -> Tenant | None:
        """The tenant an API key belongs to, or None. Looked up in memory by the key's SHA-256 digest (microseconds,
        no database, no lock: the service checks a request's key on its event loop), so how long it takes tells
        nothing of the key."""
        if not isinstance(key, str) or not key:
            return None
        return self._keys.get(_digest(key))

    def tenants(self) -> list[str]:
        with self._db_lock:
            return [r[0] for r in self._db.execute("SELECT name FROM tenants ORDER BY id")]

    def delete_tenant(self, tenant: str | Tenant) -> None:
        """Delete the tenant and everything it holds, on disk and in memory."""
        name = _tenant_name(tenant)
        with self._tenant(name):
            tenant_id = self._tenant_id(tenant)
            with self._lock:  # from here no load keeps the tenant's index (``_index``)
                self._deleted.add(tenant_id)
                if self._loaded.get(name, (None,))[0] == tenant_id:
                    del self._loaded[name]
                self._loading.pop(name, None)
                self._behind.discard(name)
            self._drop_snapshots(tenant_id)  # first: no snapshot outlives the rows it was made from
            with self._db_lock:
                self._db.execute("DELETE FROM tenants WHERE id = ?", [tenant_id])
                self._keys = {k: t for k, t in self._keys.items() if t.id != tenant_id}
            self._checkpoint()

    # ---- writes --------------------------------------------------------------------------------------------------
    def add_sessions(self, tenant: str | Tenant, sessions: Iterable[Session | Mapping]) -> None:
        """Add sessions to the tenant (as ``MemoryIndex.add_sessions``): durable and whole when this returns;
        bad input raises ``ValueError``/``TypeError`` naming the field and changes nothing."""
        name = _tenant_name(tenant)
        with self._tenant(name):
            tenant_id, index = self._index(tenant)
            committed: list[bool] = []

            def commit(records, vectors, derived):
                clues, blobs = derived.clue_emb, _sentence_blobs(derived)
                rows = []
                for sid, date, turns, meta in records:
                    rows.append((sid, None if math.isnan(date) else date, json.dumps(meta), turns))
                offsets = np.cumsum([0] + [len(r[3]) for r in rows])
                with self._db_lock, self._transaction():
                    for (sid, date, meta, turns), lo, clue in zip(rows, offsets, clues):
                        session = self._db.execute(
                            "INSERT INTO sessions (tenant, session_id, date, metadata, clue) VALUES (?, ?, ?, ?, ?)",
                            [tenant_id, sid, date, meta, np.asarray(clue, np.float32).tobytes()]).lastrowid
                        self._db.executemany(
                            "INSERT INTO utterances VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            [(session, p, tenant_id, uid, speaker, text, np.asarray(vectors[lo + p], np.float32)
                              .tobytes(), None if blobs is None else blobs[lo + p])
                             for p, (uid, speaker, text) in enumerate(turns)])
                    self._db.execute("UPDATE tenants SET commits = commits + 1 WHERE id = ?", [tenant_id])
                committed.append(True)

            self._apply(name, committed, lambda: index.add_sessions(sessions, journal=commit))
            self._mark_behind(name)

    def remove_sessions(self, tenant: str | Tenant, session_ids: Iterable[str]) -> None:
        """Remove sessions from the tenant: their rows, vectors and snapshots leave every file of the store."""
        name = _tenant_name(tenant)
        with self._tenant(name):
            tenant_id, index = self._index(tenant)
            committed: list[bool] = []

            def commit(ids):
                self._drop_snapshots(tenant_id)  # first: a snapshot never holds a deleted session
                with self._db_lock, self._transaction():
                    self._db.executemany("DELETE FROM sessions WHERE tenant = ? AND session_id = ?",
                                         [(tenant_id, sid) for sid in ids])
                    self._db.execute("UPDATE tenants SET commits = commits + 1 WHERE id = ?", [tenant_id])
                committed.append(True)

            try:
                self._apply(name, committed, lambda: index.remove_sessions(session_ids, journal=commit))
            finally:
                if committed:  # the rows are gone, even where the index failed after: no copy stays in the WAL
                    self._checkpoint()
            self._mark_behind(name)

    # ---- reads ---------------------------------------------------------------------------------------------------
    def search(self, tenant: str | Tenant, questions, **options) -> list:
        """``MemoryIndex.search`` over the tenant's memory (``k``, ``question_date``, ``sessions``, ``since``,
        ``until``)."""
        return self._index(tenant)[1].search(questions, **options)

    def answer(self, tenant: str | Tenant, question: str, llm: str | LLM, **options) -> Answer:
        """``MemoryIndex.answer`` by ``llm`` over the tenant's memory (``k``, ``question_date``, ``sessions``,
        ``since``, ``until``, ``max_new_tokens``)."""
        return self._index(tenant)[1].answer(question, llm=llm, **options)

    def get_session(self, tenant: str | Tenant, session_id: str) -> Session:
        """The session as held; ``KeyError`` if the tenant holds none of that id."""
        return self._index(tenant)[1].get_session(session_id)

    def session_ids(self, tenant: str | Tenant, offset: int = 0, limit: int | None = None) -> list[str]:
        """The tenant's session ids in the order they were added, from ``offset``, at most ``limit``."""
        for name, value in (("offset", offset), ("limit", limit)):
            if value is not None and not (isinstance(value, int) and 0 <= value <= 2**62):
                raise ValueError(f"{name}: must be an integer from 0 to 2**62, got {value!r}")
        tenant_id = self._tenant_id(tenant)
        with self._db_lock:
            return [r[0] for r in self._db.execute("SELECT session_id FROM sessions WHERE tenant = ? ORDER BY id "
                                                   "LIMIT ? OFFSET ?", [tenant_id, -1 if limit is None else limit,
                                                                        offset])]

    def stats(self, tenant: str | Tenant) -> dict:
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

    def index(self, tenant: str | Tenant) -> MemoryIndex:
        """The tenant's index (loaded or rebuilt if it is not in memory)."""
        return self._index(tenant)[1]

    # ---- upkeep --------------------------------------------------------------------------------------------------
    def warm_up(self) -> None:
        """Load what the first requests would otherwise wait for: the encoder's weights (seconds on a CPU), in this
        thread; then, in the background, the indexes ``preload`` picks and after them the word lists keyword clues
        are made with (about half a second, for the first write). All of it is Python holding the interpreter's lock,
        so each part started at once would only slow the others: a restart's first search waits for the encoder and
        its tenant's index, not for the words."""
        self.encoder.encode(prompted(self.encoder, "query", ["warm up"]))
        if self._preloader is None:
            self._preloader = threading.Thread(target=self._warm_up_rest, name="assomem-warm-up", daemon=True)
            self._preloader.start()

    def _warm_up_rest(self) -> None:
        try:
            self.preload()
        finally:
            if self.config.clue_mode == "keywords" and not self._stop.is_set():
                keyword_clue(["warm up"])

    def preload(self) -> list[str]:
        """Load the indexes of the tenants whose snapshots were saved last (by ``close``, an eviction or the
        background snapshots: the tenants last in memory; at most ``max_loaded``), and search each once with a
        placeholder vector, so that their first searches after a restart wait neither for the snapshot (~0.5 s at
        2,500 sessions) nor for the engine's compiled kernels to load (~0.5 s, once a process). A tenant without a
        snapshot is left to its first use (it is rebuilt from rows). Returns the names loaded, most recent first."""
        with self._db_lock:
            names = dict(self._db.execute("SELECT id, name FROM tenants").fetchall())
        newest: dict[str, float] = {}
        for path in (self.directory / "snapshots").glob("*-*.npz"):
            name = names.get(int(path.stem.split("-")[0]))
            try:
                if name is not None:
                    newest[name] = max(newest.get(name, 0.0), path.stat().st_mtime)
            except OSError:  # deleted meanwhile
                continue
        loaded = []
        for name in sorted(newest, key=newest.get, reverse=True)[: self.max_loaded]:
            if self._stop.is_set():
                break
            try:
                index = self.index(name)
            except KeyError:  # deleted meanwhile
                continue
            if len(index):
                index.search_embeddings(np.full(index.dim, index.dim ** -0.5, np.float32), k=1)
            loaded.append(name)
        with self._lock:  # newest loaded first, to answer first; now made the most recently used, to be evicted last
            for name in reversed(loaded):
                if name in self._loaded:
                    self._loaded.move_to_end(name)
        return loaded

    def close(self) -> None:
        """Write the snapshots of the loaded indexes and close the file."""
        self._stop.set()
        for thread in (self._snapshotter, self._preloader):
            if thread is not None:
                thread.join()
        with self._lock:
            names = list(self._loaded)
        for name in names:  # each taken out under its write lock: no write passes between that and its snapshot
            with self._tenant(name):
                with self._lock:
                    held = self._loaded.pop(name, None)
                    self._behind.discard(name)
                if held is not None:
                    self._save(*held)
        with self._db_lock:
            if self._wal_held:
                self._truncate_wal()
            self._db.close()

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- inside --------------------------------------------------------------------------------------------------
    def _check_encoder(self) -> None:
        clues = self.config.clue_mode + (f"|{self.config.llm}" if self.config.clue_mode == "llm" else "")
        want = {"encoder": self.encoder.name, "dim": str(self.encoder.dim), "clues": clues}
        with self._db_lock:
            held = dict(self._db.execute("SELECT key, value FROM meta WHERE key IN ('encoder', 'dim', 'clues')"))
            if not held:
                self._db.executemany("INSERT INTO meta VALUES (?, ?)", list(want.items()))
                return
            # a store made before encoders named their model's files knows this one by the model as given
            renamed = held.get("encoder") != want["encoder"] and held.get("dim") == want["dim"] \
                and held.get("encoder") == getattr(self.encoder, "legacy_name", None)
            if not renamed and (held.get("encoder"), held.get("dim")) != (want["encoder"], want["dim"]):
                raise StoreError(f"{self.directory}: the store holds vectors of encoder {held.get('encoder')!r} "
                                 f"(dim {held.get('dim')}); it was opened with {want['encoder']!r} (dim {want['dim']})")
            if held.get("clues", clues) != clues:  # a version-2 store recorded no clue mode: it takes this one
                raise StoreError(f"{self.directory}: the store holds clues made by {held['clues']!r}; it was opened "
                                 f"with config.clue_mode {clues!r}")
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('clues', ?)", [clues])
            if renamed:
                self._db.execute("UPDATE meta SET value = ? WHERE key = 'encoder'", [want["encoder"]])

    def _check_sentence_rules(self) -> None:
        """Drop stored sentence vectors made under other rules (``sentences.SENTENCES_VERSION``): a build embeds
        them again."""
        with self._db_lock:
            held = self._db.execute("SELECT value FROM meta WHERE key = 'sentences_version'").fetchone()
            if held is None or held[0] != str(SENTENCES_VERSION):
                with self._transaction():
                    if held is not None:
                        self._db.execute("UPDATE utterances SET sentences = NULL")
                    self._db.execute("INSERT OR REPLACE INTO meta VALUES ('sentences_version', ?)",
                                     [str(SENTENCES_VERSION)])

    def _tenant(self, tenant: str | Tenant) -> threading.Lock:
        """The tenant's write lock (by name)."""
        name = _tenant_name(tenant)
        with self._lock:
            return self._writing.setdefault(name, threading.Lock())

    def _tenant_id(self, tenant: str | Tenant) -> int:
        """The id of the tenant of that name; ``UnknownTenant`` if there is none, or, for a ``Tenant``, if its name
        now has another id."""
        name = _tenant_name(tenant)
        with self._db_lock:
            found = self._db.execute("SELECT id FROM tenants WHERE name = ?", [name]).fetchone()
        if found is None or isinstance(tenant, Tenant) and int(found[0]) != tenant.id:
            raise UnknownTenant(f"tenant {name!r}")
        return int(found[0])

    @contextmanager
    def _transaction(self):
        """One transaction (the caller holds the connection's lock): all of it commits, or none of it. A COMMIT that
        fails may leave the transaction open (SQLite does, for a busy database or a deferred constraint): it is rolled
        back, or the next statements would run inside it and their writes report success uncommitted."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        if self._wal_held:  # a delete's checkpoint that a reader held back: tried again, without waiting
            self._truncate_wal(wait_ms=0)

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

    def _index(self, tenant: str | Tenant) -> tuple[int, MemoryIndex]:
        name, tenant_id = _tenant_name(tenant), self._tenant_id(tenant)
        with self._lock:
            held = self._held(name, tenant_id)
            if held is not None:
                return held
            loading = self._loading.setdefault(name, threading.Lock())
        evicted: list[tuple[str, int, MemoryIndex]] = []
        with loading:  # a search that arrives while the tenant loads waits for that load instead of making another
            with self._lock:
                held = self._held(name, tenant_id)
            if held is None:
                index = self._load(tenant_id)
                commits = self._commits(tenant_id)
                with self._lock:
                    if commits is None or tenant_id in self._deleted:
                        raise UnknownTenant(f"tenant {name!r}")  # deleted while it loaded: nothing kept
                    held, evicted = (tenant_id, index), self._keep(name, tenant_id, index, commits)
        with ExitStack() as locks:  # after the load: its waiters do not wait for other tenants' snapshots
            for *_, writing in evicted:
                locks.callback(writing.release)  # each released, whatever the saves do
            for old_id, old, _ in evicted:
                try:
                    self._save(old_id, old)
                except OSError:  # (a full disk, say) a snapshot is derived: the rows rebuild the index without it
                    continue
        return held

    def _held(self, name: str, tenant_id: int) -> tuple[int, MemoryIndex] | None:
        """The tenant's loaded index, now the most recently used, or None; ``UnknownTenant`` if the tenant was deleted
        since its id was read (a request must not touch what the name holds now). An index held under the name for a
        deleted tenant (the name taken again since) is dropped. The caller holds ``_lock``."""
        if tenant_id in self._deleted:
            raise UnknownTenant(f"tenant {name!r}")
        held = self._loaded.get(name)
        if held is not None and held[0] != tenant_id:  # (then the held one's tenant is the deleted one)
            del self._loaded[name]
            self._behind.discard(name)
            held = None
        if held is not None:
            self._loaded.move_to_end(name)
        return held

    def _keep(self, name: str, tenant_id: int, index: MemoryIndex,
              commits: int) -> list[tuple[int, MemoryIndex, threading.Lock]]:
        """Hold a loaded index as the most recently used; returns those evicted past ``max_loaded``, least recently
        used first, each with its tenant's write lock held (the caller saves its snapshot, then releases the lock).
        A tenant whose write lock is taken is not evicted (a write in progress lands in the index held, and no write
        passes between an eviction and its snapshot), so while writes run more than ``max_loaded`` may stay. The
        caller holds ``_lock``."""
        self._loaded[name] = (tenant_id, index)
        if not self._snapshot(tenant_id, commits).exists():
            self._behind.add(name)  # brought up to date from an older snapshot, or rebuilt
        evicted = []
        for old_name in list(self._loaded):  # least recently used first
            if len(self._loaded) <= self.max_loaded:
                break
            writing = self._writing.setdefault(old_name, threading.Lock())
            if old_name != name and writing.acquire(blocking=False):
                old_id, old = self._loaded.pop(old_name)
                evicted.append((old_id, old, writing))
        return evicted

    def _snapshot(self, tenant_id: int, commits: int) -> Path:
        return self.directory / "snapshots" / f"{tenant_id}-{commits}.npz"

    def _newest_snapshot(self, tenant_id: int) -> MemoryIndex | None:
        """The tenant's newest readable snapshot made with this store's settings, or None. A snapshot made with
        other settings (the store opened with a config that ranks otherwise: ``AssoMemConfig.ranks_like``) is deleted,
        so that this config's takes its name; so is one that cannot be read (kept, it held its name against a new
        one, and every load rebuilt the tenant from its rows)."""
        paths = (self.directory / "snapshots").glob(f"{tenant_id}-*.npz")
        for _, path in sorted(((int(p.stem.split("-")[1]), p) for p in paths), reverse=True):
            try:
                index = MemoryIndex.load(path, encoder=self.encoder, device=self.backend)
            except (SnapshotError, ValueError, OSError):
                path.unlink(missing_ok=True)
                continue
            if self.config.ranks_like(index.config) and index.dated == self.dated:
                index.fusion = self.fusion
                return index
            path.unlink(missing_ok=True)
        return None

    def _load(self, tenant_id: int) -> MemoryIndex:
        """The tenant's index: its newest snapshot with the sessions committed since added to it, else rebuilt from
        the rows. A snapshot never holds a session deleted after it (a delete removes the tenant's snapshots before it
        commits), so what the rows hold beyond a snapshot is only newer sessions; rows of vectors, clue vectors and
        sentence vectors, so nothing is encoded again (but the clues of rows from a version-2 store, and the sentence
        vectors of rows from a version-2 or 3 store, written without them, or under other sentence rules)."""
        index = self._newest_snapshot(tenant_id)
        with self._db_lock:
            sessions = self._db.execute("SELECT id, session_id, date, metadata, clue FROM sessions WHERE tenant = ? "
                                        "ORDER BY id", [tenant_id]).fetchall()
        if index is not None:
            held = set(index.session_ids)
            if held <= {row[1] for row in sessions}:
                sessions = [row for row in sessions if row[1] not in held]
            else:  # not a snapshot this store wrote: rebuild
                index = None
        if index is None:
            index = MemoryIndex(self.encoder, self.config, self.fusion, self.backend, self.dated)
        if not sessions:
            return index
        with self._db_lock:
            turns = self._db.execute("SELECT session, utterance_id, speaker, text, embedding, sentences "
                                     "FROM utterances WHERE tenant = ? AND session >= ? ORDER BY session, position",
                                     [tenant_id, sessions[0][0]]).fetchall()
        by_session: dict[int, list] = {}
        for row in turns:
            by_session.setdefault(row[0], []).append(row[1:])
        records = [(sid, math.nan if date is None else float(date),
                    [(u, s, t) for u, s, t, _, _ in by_session.get(key, [])], json.loads(meta))
                   for key, sid, date, meta, _ in sessions]
        vectors = [np.frombuffer(v, np.float32) for key, *_ in sessions for *_, v, _ in by_session.get(key, [])]
        blobs = [b for key, *_ in sessions for *_, b in by_session.get(key, [])]
        clues = None if any(row[4] is None for row in sessions) else \
            np.stack([np.frombuffer(row[4], np.float32) for row in sessions])
        index._add(records, np.stack(vectors) if vectors else np.zeros((0, self.encoder.dim), np.float32), clues,
                   sentences=None if any(b is None for b in blobs) else _sentences(blobs, self.encoder.dim))
        return index

    def _save(self, tenant_id: int, index: MemoryIndex) -> None:
        """Write the index's snapshot under the commit it holds, or touch it if it is there, so that its time says when
        the tenant was last saved from memory (a deleted tenant has none). The caller holds the tenant's write lock,
        so a delete cannot pass between the check and the write."""
        commits = self._commits(tenant_id)
        if commits is None:
            return
        path = self._snapshot(tenant_id, commits)
        if path.exists():
            path.touch()  # its time says when the tenant was last in memory (``preload`` picks by it)
        else:
            index.save(path)
        self._drop_snapshots(tenant_id, keep=path)

    def _mark_behind(self, name: str) -> None:
        with self._lock:
            if name in self._loaded:
                self._behind.add(name)

    def _snapshot_loop(self, every_s: float) -> None:
        """The background snapshots: every ``every_s`` seconds, those of the loaded tenants written to since."""
        while not self._stop.wait(every_s):
            if self._wal_held:
                self._checkpoint()
            with self._lock:
                due, self._behind = [(n, self._loaded[n]) for n in self._behind if n in self._loaded], set()
            for name, (tenant_id, index) in due:
                with self._tenant(name):
                    with self._lock:
                        current = self._loaded.get(name, (None, None))[1] is index  # not deleted or evicted
                    if current:
                        try:
                            self._save(tenant_id, index)
                        except OSError:  # (a full disk, say) tried again next round; the rows hold every write
                            self._mark_behind(name)

    def _drop_snapshots(self, tenant_id: int, keep: Path | None = None) -> None:
        """Delete the tenant's snapshots (but ``keep``) and any left half-written, for good (the folder synced: a
        power loss does not bring one back)."""
        folder = self.directory / "snapshots"
        gone = [old for old in [*folder.glob(f"{tenant_id}-*.npz"), *folder.glob(f".{tenant_id}-*.tmp")] if old != keep]
        for old in gone:
            old.unlink(missing_ok=True)
        if gone:
            sync_folder(folder)

    def _checkpoint(self) -> None:
        """Move every committed page into the file and truncate the WAL, so that deleted rows leave no copy behind
        (``_truncate_wal``)."""
        with self._db_lock:
            self._truncate_wal()

    def _truncate_wal(self, wait_ms: int = CHECKPOINT_WAIT_MS) -> None:
        """``PRAGMA wal_checkpoint(TRUNCATE)`` (the caller holds ``_db_lock``). Another connection reading the file (a
        backup, say: the directory should be this process's alone) keeps it from completing: it waits ``wait_ms`` at
        most, warns once, and ``_wal_held`` has the snapshot thread's rounds, the next write (without waiting) and
        ``close`` try again until one completes."""
        self._db.execute(f"PRAGMA busy_timeout = {wait_ms}")
        try:
            held = bool(self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0])
        except sqlite3.Error:  # (after a write's commit: the write stands, the checkpoint is tried again)
            held = True
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if held and not self._wal_held:
            log.warning("another connection reads %s: deleted rows stay in its WAL until a checkpoint completes "
                        "(tried again at each write and snapshot round)", self.directory / "store.sqlite")
        self._wal_held = held

    def _sweep(self) -> None:
        """At open: delete the snapshots of tenants that are gone and the files a crash left half-written."""
        with self._db_lock:
            live = {str(r[0]) for r in self._db.execute("SELECT id FROM tenants")}
        for path in (self.directory / "snapshots").iterdir():
            if path.name.startswith(".") or path.name.split("-")[0] not in live:
                path.unlink(missing_ok=True)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _tenant_name(tenant: str | Tenant) -> str:
    """A tenant's name, checked (``ValueError`` naming the field)."""
    name = tenant.name if isinstance(tenant, Tenant) else tenant
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"tenant: must be a non-empty string, got {name!r}")
    return name


def _sentence_blobs(derived) -> list[bytes] | None:
    """Each utterance's sentence vectors as stored (float32 bytes, empty for one sentence); None without them."""
    if derived.sentence_counts is None:
        return None
    ends = np.cumsum(derived.sentence_counts)
    return [derived.sentences[end - n : end].tobytes() for n, end in zip(derived.sentence_counts.tolist(), ends)]


def _sentences(blobs: list[bytes], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(counts, vectors) of stored sentence vectors (``_sentence_blobs``)."""
    parts = [np.frombuffer(b, np.float32).reshape(-1, dim) for b in blobs]
    return (np.array([len(p) for p in parts], np.int32),
            np.concatenate(parts) if parts else np.zeros((0, dim), np.float32))
