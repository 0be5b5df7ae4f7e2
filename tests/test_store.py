"""MemoryStore: SQLite as the source of truth, indexes derived; durable, whole writes; deletes that leave no byte;
tenants that never see each other. Real SQLite files, and a real process killed with SIGKILL mid-write."""
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from assomem_gpu import AssoMemConfig, GraphConfig
from assomem_gpu.encode import HashingEncoder
from assomem_gpu.store import MemoryStore, StoreError, UnknownTenant

CONFIG = AssoMemConfig(top_clues=2, min_candidates=3, graph=GraphConfig(delta=0.5, gamma=0.3))
WORDS = "kiwi banjo violet harbor mango quartz lantern tulip cobalt maple ember falcon".split()


def session(sid: str, i: int, text: str | None = None) -> dict:
    words = [WORDS[(i + j) % len(WORDS)] for j in range(4)]
    return {"id": sid, "date": f"2024-01-{1 + i % 28:02d}", "metadata": {"i": i},
            "utterances": [{"id": f"{sid}:{t}", "speaker": ["user", "assistant"][t % 2],
                            "text": text if text and t == 0 else " ".join(words[t:] + words[:t])} for t in range(3)]}


def open_store(path, **kw) -> MemoryStore:
    return MemoryStore(path, HashingEncoder(), CONFIG, device="cpu", **kw)


def hits(store, tenant, questions=("kiwi banjo", "harbor lantern", "falcon maple ember")):
    return [[(h.utterance_id, round(h.score, 9) if h.score else None) for h in q]
            for q in store.search(tenant, list(questions), k=5, question_date="2024-02-01")]


def rows_digest(path) -> str:
    db = sqlite3.connect(path / "store.sqlite")
    h = hashlib.sha256()
    for table in ("tenants", "sessions", "utterances"):
        for row in db.execute(f"SELECT * FROM {table} ORDER BY 1, 2"):
            h.update(repr(row).encode())
    db.close()
    return h.hexdigest()


def files_holding(folder, text: bytes) -> list[str]:
    """The files under ``folder`` that hold ``text``."""
    return [p.name for p in folder.rglob("*") if p.is_file() and text in p.read_bytes()]


def test_a_store_opened_with_another_config_replaces_the_snapshot(tmp_path):
    from dataclasses import replace

    from assomem_gpu.index import MemoryIndex

    with open_store(tmp_path) as store:
        store.create_tenant("ana")
        store.add_sessions("ana", [session(f"s{i}", i) for i in range(12)])
    components = replace(CONFIG, graph=replace(CONFIG.graph, clue_merge="components"))
    with MemoryStore(tmp_path, HashingEncoder(), components, device="cpu") as other:
        live = hits(other, "ana")  # rebuilt from the rows: the snapshot is another config's
    snapshots = list((tmp_path / "snapshots").glob("*.npz"))
    assert len(snapshots) == 1 and MemoryIndex.load(snapshots[0], encoder=HashingEncoder()).config == components
    with MemoryStore(tmp_path, HashingEncoder(), components, device="cpu") as again:
        assert hits(again, "ana") == live
    sharp = replace(components, weight_temperatures=(0.05,), bin_edges=(0.9,), type_prior=0.0)  # what only
    # calibration reads
    with MemoryStore(tmp_path, HashingEncoder(), sharp, device="cpu") as same:
        assert hits(same, "ana") == live  # from the snapshot, kept: rebuilt, it would be saved with ``sharp``
    snapshots = list((tmp_path / "snapshots").glob("*.npz"))
    assert len(snapshots) == 1 and MemoryIndex.load(snapshots[0], encoder=HashingEncoder()).config == components
    assert components.ranks_like(sharp) and not components.ranks_like(CONFIG)


def test_writes_survive_a_reopen_from_snapshot_or_from_rows(tmp_path):
    store = open_store(tmp_path)
    store.create_tenant("ana")
    store.add_sessions("ana", [session(f"s{i}", i) for i in range(12)])
    store.remove_sessions("ana", ["s3", "s7"])
    store.add_sessions("ana", [session("late", 40)])
    live = hits(store, "ana")
    store.close()  # writes the snapshot
    assert len(list((tmp_path / "snapshots").glob("*.npz"))) == 1
    with open_store(tmp_path) as again:
        assert hits(again, "ana") == live and again.session_ids("ana")[-2:] == ["s11", "late"]
        assert again.get_session("ana", "s1").metadata == {"i": 1}
    for snap in (tmp_path / "snapshots").glob("*.npz"):
        snap.unlink()  # no snapshot: rebuilt from the rows, the same index
    with open_store(tmp_path) as rebuilt:
        assert hits(rebuilt, "ana") == live
        assert rebuilt.session_ids("ana", offset=1, limit=2) == ["s1", "s2"]


class CountingEncoder(HashingEncoder):
    """The hashing encoder, counting the texts it embeds."""

    def __init__(self):
        super().__init__()
        self.texts = 0

    def encode(self, texts):
        self.texts += len(texts)
        return super().encode(texts)


def test_a_commit_that_fails_leaves_no_transaction_open(tmp_path):
    """SQLite keeps a transaction open when its COMMIT fails (a deferred constraint here, a busy database in use):
    left so, the next writes would run inside it, acknowledged and never committed."""
    store = open_store(tmp_path)
    db = store._db
    db.execute("CREATE TEMP TABLE p (id INTEGER PRIMARY KEY)")
    db.execute("CREATE TEMP TABLE c (pid INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(sqlite3.IntegrityError), store._db_lock, store._transaction():
        db.execute("INSERT INTO temp.c VALUES (5)")  # fails at COMMIT
    assert not db.in_transaction
    store.create_tenant("after")
    store.add_sessions("after", [session("s0", 0)])
    del store  # a crash
    with open_store(tmp_path) as again:
        assert again.session_ids("after") == ["s0"]


def test_a_snapshot_that_cannot_be_read_is_replaced(tmp_path):
    with open_store(tmp_path) as store:
        store.create_tenant("t")
        store.add_sessions("t", [session(f"s{i}", i) for i in range(6)])
        want = hits(store, "t")
    snap = tmp_path / "snapshots" / "1-1.npz"
    raw = bytearray(snap.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one byte flipped
    snap.write_bytes(bytes(raw))
    from assomem_gpu.index import MemoryIndex

    with open_store(tmp_path) as again:
        assert hits(again, "t") == want  # rebuilt from the rows
    # a readable snapshot in its place (the unreadable one had kept its name, and every load rebuilt the tenant)
    assert MemoryIndex.load(snap, encoder=HashingEncoder()).session_ids == [f"s{i}" for i in range(6)]


def test_a_restart_brings_the_newest_snapshot_up_to_date_without_encoding_anything(tmp_path):
    with open_store(tmp_path) as store:
        store.create_tenant("t")
        store.add_sessions("t", [session(f"s{i}", i) for i in range(6)])
    assert [p.name for p in (tmp_path / "snapshots").iterdir()] == ["1-1.npz"]
    store = open_store(tmp_path, snapshot_every_s=None)
    store.add_sessions("t", [session("new", 9, "a note about the zeppelin museum. It opens again next spring")])
    store.add_sessions("t", [session("newer", 10)])
    want = hits(store, "t", ["zeppelin museum", "kiwi banjo"])
    del store  # a crash: no snapshot of the last commits
    counting = CountingEncoder()
    with MemoryStore(tmp_path, counting, CONFIG, device="cpu", snapshot_every_s=None) as again:
        assert hits(again, "t", ["zeppelin museum", "kiwi banjo"]) == want and want[0][0][0] == "new:0"
        assert counting.texts == 2  # the two questions: the rows hold the new sessions' utterance, clue and sentence
        # vectors
        assert again.session_ids("t")[-2:] == ["new", "newer"]
    assert [p.name for p in (tmp_path / "snapshots").iterdir()] == ["1-3.npz"]


def test_warm_up_preloads_the_tenants_snapshotted_last_and_a_tenant_loads_once(tmp_path):
    """After a restart, ``warm_up`` loads (in the background) the indexes of the tenants whose snapshots were
    written last, at most ``max_loaded``, newest first; they answer as a fresh load does. Threads that ask for a
    tenant while it loads wait for that one load."""
    import threading

    with open_store(tmp_path) as store:
        for name in ("a", "b", "c", "d"):
            store.create_tenant(name)
            store.add_sessions(name, [session(f"{name}{i}", i + ord(name)) for i in range(5)])
    with open_store(tmp_path, snapshot_every_s=None) as store:
        store.add_sessions("d", [session("d-new", 3)])
        del store._loaded["d"]  # as after a crash: its newest snapshot is one commit behind (still picked)
    shutil.copytree(tmp_path, tmp_path.parent / "copy")
    with open_store(tmp_path.parent / "copy", snapshot_every_s=None, max_loaded=4) as store:
        want = {name: hits(store, name) for name in "abcd"}  # each loaded on first use
    for age, name in enumerate("cadb"):  # snapshot mtimes: c newest, then a, d, b
        for path in (tmp_path / "snapshots").glob(f"{ord(name) - ord('a') + 1}-*.npz"):
            os.utime(path, (time.time() - 100 * (age + 1),) * 2)
    with open_store(tmp_path, max_loaded=3, snapshot_every_s=None) as store:
        store.warm_up()
        store._preloader.join()
        assert list(store._loaded) == ["d", "a", "c"]  # least recently used first: c, snapshotted last, goes last
        assert {name: hits(store, name) for name in "abcd"} == want
    with open_store(tmp_path, snapshot_every_s=None) as store:
        loads, real = [], store._load
        store._load = lambda tenant_id: loads.append(tenant_id) or real(tenant_id)
        threads = [threading.Thread(target=store.index, args=("b",)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(loads) == 1 and store.loaded() == 1

        commits = store._commits

        def commits_then_replace(tenant_id):  # "c" deleted and its name taken again as its loaded index is kept
            del store._commits
            found = commits(tenant_id)
            store.delete_tenant("c")
            store.create_tenant("c")
            return found

        store._commits = commits_then_replace
        with pytest.raises(UnknownTenant):  # the tenant it loaded is gone: nothing of it is kept or given
            store.index("c")
        store.add_sessions("c", [session("fresh", 0, "a fresh zeppelin note")])
        assert [[u for u, _ in q] for q in hits(store, "c", ["zeppelin"])] == [["fresh:0", "fresh:1", "fresh:2"]]


def test_background_snapshots_follow_the_writes_and_a_delete_drops_them_before_it_commits(tmp_path):
    def snapshots():
        return sorted(p.name for p in (tmp_path / "snapshots").iterdir())

    def wait_for(names):
        deadline = time.monotonic() + 30
        while snapshots() != names and time.monotonic() < deadline:
            time.sleep(0.02)
        return snapshots()

    with open_store(tmp_path, snapshot_every_s=0.05) as store:
        store.create_tenant("t")
        store.add_sessions("t", [session(f"s{i}", i) for i in range(4)])
        assert wait_for(["1-1.npz"]) == ["1-1.npz"]
        store.remove_sessions("t", ["s2"])
        assert wait_for(["1-2.npz"]) == ["1-2.npz"]
    with pytest.raises(ValueError, match="snapshot_every_s"):
        open_store(tmp_path, snapshot_every_s=0)


def test_a_background_snapshot_that_fails_is_tried_again(tmp_path):
    """A snapshot the disk refuses (full, say) is written in a later round; the thread goes on."""
    with open_store(tmp_path, snapshot_every_s=0.05) as store:
        save, failed = store._save, []

        def full_once(tenant_id, index):
            if not failed:
                failed.append(tenant_id)
                raise OSError(28, "No space left on device")
            save(tenant_id, index)

        store._save = full_once
        store.create_tenant("t")
        store.add_sessions("t", [session(f"s{i}", i) for i in range(3)])
        deadline = time.monotonic() + 30
        while not (tmp_path / "snapshots" / "1-1.npz").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert failed == [1] and (tmp_path / "snapshots" / "1-1.npz").exists()


def two_sentence_tenant(tmp_path, n: int) -> list:
    """A store with tenant "t" of ``n`` sessions whose first turns have two sentences; its hits."""
    with open_store(tmp_path) as store:
        store.create_tenant("t")
        store.add_sessions("t", [session(f"s{i}", i, "kiwi banjo violet harbor. The quartz lantern by the tulip")
                                 for i in range(n)])
        return hits(store, "t")


def test_a_store_opens_clean_of_what_a_crash_left_and_reads_version_2(tmp_path):
    want = two_sentence_tenant(tmp_path, 5)
    (tmp_path / "snapshots" / ".1-2.npz.x1.tmp").write_bytes(b"half a snapshot")
    (tmp_path / "snapshots" / "7-3.npz").write_bytes(b"the snapshot of a deleted tenant")
    for p in (tmp_path / "snapshots").glob("1-*.npz"):
        p.unlink()
    db = sqlite3.connect(tmp_path / "store.sqlite")  # back to version 2: no clue or sentence vectors, no clue mode
    db.executescript("ALTER TABLE sessions DROP COLUMN clue; ALTER TABLE utterances DROP COLUMN sentences; "
                     "DELETE FROM meta WHERE key = 'clues'; UPDATE meta SET value = '2' WHERE key = 'schema_version';")
    db.close()
    with open_store(tmp_path) as store:
        assert list((tmp_path / "snapshots").iterdir()) == []
        assert hits(store, "t") == want  # clues and sentence vectors made again from the text
    db = sqlite3.connect(tmp_path / "store.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("4",)
    db.close()
    with pytest.raises(StoreError, match="centroid"):
        MemoryStore(tmp_path, HashingEncoder(), AssoMemConfig(clue_mode="centroid"), device="cpu")


def test_sentence_vectors_stored_under_other_rules_are_made_again(tmp_path):
    want = two_sentence_tenant(tmp_path, 4)
    for p in (tmp_path / "snapshots").glob("*.npz"):
        p.unlink()
    db = sqlite3.connect(tmp_path / "store.sqlite")
    db.executescript("UPDATE meta SET value = '0' WHERE key = 'sentences_version'; "
                     "UPDATE utterances SET sentences = zeroblob(length(sentences));")  # other rules' vectors
    db.close()
    with open_store(tmp_path) as store:
        assert hits(store, "t") == want
    db = sqlite3.connect(tmp_path / "store.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key = 'sentences_version'").fetchone() == ("1",)
    assert db.execute("SELECT count(*) FROM utterances WHERE sentences IS NULL").fetchone() == (12,)
    db.close()


def test_deleted_sessions_and_tenants_leave_no_byte_in_any_file(tmp_path):
    secret = "my locker code is quetzalcoatl-7731"
    store = open_store(tmp_path)
    for tenant in ("a", "b"):
        store.create_tenant(tenant)
        store.add_sessions(tenant, [session(f"s{i}", i) for i in range(5)] + [session("secret", 7, secret)])
    store.close()  # snapshots hold the secret too
    store = open_store(tmp_path)
    assert files_holding(tmp_path, secret.encode())  # it is there before
    store.remove_sessions("a", ["secret"])
    assert all(h.session_id != "secret" for q in store.search("a", [secret, "locker code"], k=20) for h in q)
    store.delete_tenant("b")
    assert store.tenants() == ["a"]
    assert files_holding(tmp_path, secret.encode()) == [] and files_holding(tmp_path, b"quetzalcoatl") == []
    with pytest.raises(KeyError):
        store.search("b", "locker")
    store.close()
    assert files_holding(tmp_path, b"quetzalcoatl") == []


def test_a_delete_cut_short_before_its_checkpoint_leaves_no_byte_once_the_store_opens_again(tmp_path):
    """A removal commits (the overwritten pages to the WAL), then moves the WAL into the file and truncates it; a
    crash between the two leaves the deleted rows in the file until a checkpoint, which the next open makes."""
    secret = b"quetzalcoatl-7731"
    with open_store(tmp_path, snapshot_every_s=None) as store:
        store.create_tenant("a")
        store.add_sessions("a", [session("s0", 0), session("secret", 7, secret.decode())])
    crashed = open_store(tmp_path, snapshot_every_s=None)
    crashed._checkpoint = lambda: None  # as if the process died right after the delete committed
    crashed.remove_sessions("a", ["secret"])
    assert "store.sqlite" in files_holding(tmp_path, secret)
    with open_store(tmp_path, snapshot_every_s=None) as store:
        assert store.session_ids("a") == ["s0"]
        assert files_holding(tmp_path, secret) == []
    crashed._db.close()


def test_a_delete_whose_checkpoint_a_reader_holds_back_leaves_no_byte_once_the_reader_ends(tmp_path, caplog):
    """Another connection's open read keeps a delete's checkpoint from completing: the delete returns within
    ``CHECKPOINT_WAIT_MS`` (not the 30 s lock wait) with a warning, and the next write moves the WAL into the file."""
    secret = b"quetzalcoatl-7731"
    with open_store(tmp_path, snapshot_every_s=None) as store:
        store.create_tenant("a")
        store.add_sessions("a", [session("s0", 0), session("secret", 7, secret.decode())])
        reader = sqlite3.connect(tmp_path / "store.sqlite")
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sessions").fetchone()  # a read transaction, open
        started = time.perf_counter()
        store.remove_sessions("a", ["secret"])
        assert time.perf_counter() - started < 10 and "deleted rows stay in its WAL" in caplog.text
        assert files_holding(tmp_path, secret)  # the WAL holds what the file no longer does
        reader.close()
        store.add_sessions("a", [session("s1", 1)])
        assert files_holding(tmp_path, secret) == [] and store.session_ids("a") == ["s0", "s1"]


def test_a_removal_whose_index_fails_after_the_commit_still_leaves_no_byte(tmp_path):
    """The rows are deleted and the WAL checkpointed even where the index fails after the commit; the index is
    dropped and made again from the rows."""
    secret = b"quetzalcoatl-7731"
    with open_store(tmp_path, snapshot_every_s=None) as store:
        store.create_tenant("a")
        store.add_sessions("a", [session("s0", 0), session("secret", 7, secret.decode())])
    with open_store(tmp_path, snapshot_every_s=None) as store:

        def broken(sessions):
            raise RuntimeError("the index failed")

        store.index("a")._state.remove = broken
        with pytest.raises(RuntimeError, match="the index failed"):
            store.remove_sessions("a", ["secret"])
        assert files_holding(tmp_path, secret) == []
        assert store.session_ids("a") == ["s0"]
        assert [h.session_id for h in store.search("a", secret.decode(), k=5)] == ["s0"] * 3


@pytest.mark.parametrize("write", ["add", "remove"])
def test_a_tenant_being_written_to_is_not_evicted_and_its_write_lands_where_searches_read(tmp_path, write):
    """With one index in memory, other tenants' loads while a write of "a" is under way (held at its encoding, or
    a removal at its commit) leave "a"'s index held (no eviction, no snapshot of it, no reload from rows that lack
    the write): the write, once acknowledged, is in what the searches read, now and after a restart, and a removed
    session's text is in no file."""
    import threading

    holding, go = threading.Event(), threading.Event()

    def held(then):
        def run(*args, **kwargs):
            if threading.current_thread().name == "writer":
                holding.set()
                assert go.wait(30)
            return then(*args, **kwargs)
        return run

    encoder = HashingEncoder()
    store = MemoryStore(tmp_path, encoder, CONFIG, device="cpu", max_loaded=1, snapshot_every_s=None)
    for name in ("a", "b", "c"):
        store.create_tenant(name)
        store.add_sessions(name, [session(f"{name}0", 0), session(f"{name}1", 1, f"{name}'s pin is 4711 okapi")])
    store.index("a")
    snapshots = sorted((tmp_path / "snapshots").glob("1-*.npz"))
    if write == "add":
        encoder.encode = held(encoder.encode)
        job = threading.Thread(target=store.add_sessions, args=("a", [session("new", 2, "my zebra is Stripes")]),
                               name="writer")
    else:
        store._drop_snapshots = held(store._drop_snapshots)  # a removal's first step inside its commit
        job = threading.Thread(target=store.remove_sessions, args=("a", ["a1"]), name="writer")
    job.start()
    assert holding.wait(30)
    store.search("b", "kiwi banjo")  # each load would evict "a" but for its write
    store.search("c", "kiwi banjo")
    assert "a" in store._loaded and sorted((tmp_path / "snapshots").glob("1-*.npz")) == snapshots
    go.set()
    job.join()
    want = {"a0", "a1", "new"} if write == "add" else {"a0"}
    assert set(store.index("a").session_ids) == want
    assert {h.session_id for h in store.search("a", "zebra Stripes pin okapi", k=10)} == want
    store.search("b", "kiwi banjo")  # "a" is evicted now, its snapshot written
    assert [p.name for p in (tmp_path / "snapshots").glob("1-*.npz")] == [f"1-{store._commits(1)}.npz"]
    store.close()
    with open_store(tmp_path, snapshot_every_s=None) as again:
        assert {h.session_id for h in again.search("a", "zebra Stripes pin okapi", k=10)} == want
    if write == "remove":
        assert not [p for p in tmp_path.rglob("*") if p.is_file() and b"a's pin" in p.read_bytes()]


def test_a_failed_snapshot_at_eviction_holds_no_tenant_and_fails_no_search(tmp_path):
    """Two tenants evicted at once (one was skipped while a write held it): the first one's snapshot fails (a full
    disk), yet the search that evicted them answers and neither tenant's write lock stays taken."""
    store = MemoryStore(tmp_path, HashingEncoder(), CONFIG, device="cpu", max_loaded=1, snapshot_every_s=None)
    for name in ("a", "b", "c"):
        store.create_tenant(name)
        store.add_sessions(name, [session(f"{name}0", 0)])
    store.index("a")
    with store._tenant("a"):  # a write of "a" under way: loading "b" keeps both
        store.index("b")
    assert set(store._loaded) == {"a", "b"}
    save, calls = store._save, []

    def failing(tenant_id, index):
        calls.append(tenant_id)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return save(tenant_id, index)

    store._save = failing
    assert store.search("c", "kiwi banjo")  # evicts "a" and "b"
    assert len(calls) == 2 and not store._tenant("a").locked() and not store._tenant("b").locked()
    store.add_sessions("b", [session("b1", 1)])
    store.close()


def test_tenants_never_see_each_other(tmp_path):
    with open_store(tmp_path, max_loaded=1) as store:  # one index in memory: tenants take turns through the LRU
        for tenant in ("red", "blue", "green"):
            store.create_tenant(tenant)
            store.add_sessions(tenant, [session(f"{tenant}-{i}", i) for i in range(4)]
                               + [session("shared", 3)])  # the same id and text in every tenant
        for _ in range(3):
            for tenant in ("red", "blue", "green"):
                for q in store.search(tenant, ["kiwi banjo", "violet", "shared words"], k=20):
                    assert q and all(h.session_id in (f"{tenant}-{i}" for i in range(4)) or h.session_id == "shared"
                                     for h in q)
                    assert {h.session_id for h in q} - {"shared"} <= {f"{tenant}-{i}" for i in range(4)}
        store.remove_sessions("red", ["shared"])
        assert "shared" in store.session_ids("blue") and "shared" not in store.session_ids("red")
        with pytest.raises(KeyError):
            store.get_session("red", "shared")


@pytest.mark.parametrize("bad, error", [
    ([session("s0", 0)], "already in the index"),  # duplicate session id
    ([{"id": "x", "date": "2024-01-01", "utterances": [{"text": "  "}]}], "text"),
    ([{"id": "x", "date": "not a date", "utterances": [{"text": "hi"}]}], "date"),
    ([{"id": 7, "date": "2024-01-01", "utterances": [{"text": "hi"}]}], "id"),
    ([session("ok", 1), session("ok", 2)], "ok"),  # the same id twice in one batch: not even the first is added
])
def test_bad_input_changes_nothing_on_disk(tmp_path, bad, error):
    with open_store(tmp_path) as store:
        store.create_tenant("t")
        store.add_sessions("t", [session("s0", 0)])
        before, want = rows_digest(tmp_path), hits(store, "t")
        with pytest.raises((ValueError, TypeError), match=error):
            store.add_sessions("t", bad)
        with pytest.raises(ValueError, match="not in the index"):
            store.remove_sessions("t", ["s0", "nope"])
        assert rows_digest(tmp_path) == before and hits(store, "t") == want
        with pytest.raises(ValueError, match="exists"):
            store.create_tenant("t")
        with pytest.raises(ValueError, match="tenant"):
            store.create_tenant("  ")


def test_a_store_refuses_another_encoder_another_version_or_another_file(tmp_path):
    open_store(tmp_path).close()
    with pytest.raises(StoreError, match="hashing"):
        MemoryStore(tmp_path, HashingEncoder(dim=64), CONFIG, device="cpu")
    db = sqlite3.connect(tmp_path / "store.sqlite")
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    db.commit(), db.close()
    with pytest.raises(StoreError, match="schema version 99"):
        open_store(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "store.sqlite").write_bytes(b"this is not a database, just text" * 100)
    with pytest.raises(StoreError, match="not a memory store"):
        open_store(other)


def test_a_store_made_before_encoders_named_their_model_files_opens_with_that_encoder(tmp_path):
    """Its meta holds the name the encoder had then (``legacy_name``): the store opens and takes the new name; a
    store of another encoder still refuses, and a refused open changes nothing."""
    old = HashingEncoder()
    old.name = "./my-model|mean|norm=True|max=256"  # as an encoder of a local folder was named before
    with MemoryStore(tmp_path, old, CONFIG, device="cpu") as store:
        store.create_tenant("t")
        store.add_sessions("t", [session("s0", 0)])
    new = HashingEncoder()
    with pytest.raises(StoreError, match="my-model"):  # no legacy name: another encoder
        MemoryStore(tmp_path, new, CONFIG, device="cpu")
    new.legacy_name = old.name
    with pytest.raises(StoreError, match="clues"):  # refused for another reason: the name is left as it was
        MemoryStore(tmp_path, new, AssoMemConfig(clue_mode="centroid"), device="cpu")
    db = sqlite3.connect(tmp_path / "store.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key = 'encoder'").fetchone()[0] == old.name
    db.close()
    with MemoryStore(tmp_path, new, CONFIG, device="cpu") as store:
        assert store.session_ids("t") == ["s0"] and hits(store, "t", ["kiwi banjo"])[0]
    db = sqlite3.connect(tmp_path / "store.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key = 'encoder'").fetchone()[0] == new.name
    db.close()


WRITER = """
import sys
from assomem_gpu import AssoMemConfig, GraphConfig
from assomem_gpu.encode import HashingEncoder
from assomem_gpu.store import MemoryStore
sys.path.insert(0, sys.argv[2])
from test_store import CONFIG, session
store = MemoryStore(sys.argv[1], HashingEncoder(), CONFIG, device="cpu")
if "t" not in store.tenants():
    store.create_tenant("t")
start = int(sys.argv[3])
for i in range(start, start + 10_000):
    store.add_sessions("t", [session(f"s{i}", i)])
    print(f"added s{i}", flush=True)
    if i % 3 == 0 and i > start:
        store.remove_sessions("t", [f"s{i - 1}"])
        print(f"removed s{i - 1}", flush=True)
"""


def test_every_acknowledged_write_survives_kill_9(tmp_path):
    """A writer process killed with SIGKILL at random moments; after each kill every acknowledged add and remove is
    there, no session is half there, and the file is sound. ASSOMEM_CRASH_ROUNDS sets the rounds (CI: 6)."""
    import random

    rng = random.Random(0)
    present: set[str] = set()
    start = 0
    for _ in range(int(os.environ.get("ASSOMEM_CRASH_ROUNDS", "6"))):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), os.path.dirname(__file__), str(start)],
                                stdout=subprocess.PIPE, text=True, env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
        acknowledged, partial = [], ""
        deadline = time.monotonic() + rng.uniform(0.5, 2.5)
        os.set_blocking(proc.stdout.fileno(), False)
        while time.monotonic() < deadline or not acknowledged:
            read = proc.stdout.readline()  # on a non-blocking pipe, perhaps part of a line: kept until its end
            if read:
                *lines, partial = (partial + read).split("\n")
                acknowledged += [line.split() for line in lines]
            else:
                time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        os.set_blocking(proc.stdout.fileno(), True)
        rest = partial + proc.communicate()[0]
        acknowledged += [line.split() for line in rest.splitlines() if line.strip()]
        for verb, sid in acknowledged:
            (present.add if verb == "added" else present.discard)(sid)
        verb, sid = acknowledged[-1]  # the write that may have committed without its acknowledgement
        i = int(sid[1:])
        if verb == "added" and i % 3 == 0 and i > start:
            in_flight = present - {f"s{i - 1}"}
        else:
            in_flight = present | {f"s{i + 1 if verb == 'added' else i + 2}"}
        start += 100_000
        db = sqlite3.connect(tmp_path / "store.sqlite")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT count(*) FROM utterances GROUP BY session HAVING count(*) != 3").fetchall() == []
        db.close()
        with open_store(tmp_path) as store:
            held = set(store.session_ids("t"))
            assert held in (present, in_flight)
            present = held
            assert store.search("t", "kiwi banjo", k=3)


def test_concurrent_searches_share_one_engine_call_and_get_their_own_answers(tmp_path):
    """The service's micro-batching (serve/batching.py) over a real store: 12 requests at once, each with its own
    questions, k and date; every answer equals the search run alone; one engine call for all; a bad request fails
    alone; a cancelled request leaves the others their answers."""
    import asyncio

    pytest.importorskip("fastapi")
    from assomem_gpu.serve.batching import Busy, SearchBatcher

    config = AssoMemConfig(top_clues=2, min_candidates=3, graph=GraphConfig(delta=0.5, gamma=0.3), tol=1e-10)
    with MemoryStore(tmp_path, HashingEncoder(), config, device="cpu") as store:
        store.create_tenant("t")
        store.add_sessions("t", [session(f"s{i}", i) for i in range(20)])
        batcher = SearchBatcher(store, wait_s=0.05)
        asks = [([f"{WORDS[i % 12]} {WORDS[(i * 5) % 12]}", WORDS[(i + 3) % 12]], 1 + i % 6, f"2024-02-{1 + i:02d}")
                for i in range(12)]

        def alone(questions, k, date):
            return [[h.utterance_id for h in q] for q in store.search("t", questions, k=k, question_date=date)]

        async def together(asked, cancel=None):
            tasks = [asyncio.create_task(batcher.search("t", *a)) for a in asked]
            if cancel is not None:
                await asyncio.sleep(0)
                tasks[cancel].cancel()
            return await asyncio.gather(*tasks, return_exceptions=True)

        got = asyncio.run(together(asks))
        assert batcher.requests == 12 and batcher.batches == 1
        for found, ask in zip(got, asks):
            assert [[h.utterance_id for h in q] for q in found] == alone(*ask)
        got = asyncio.run(together([asks[0], (["kiwi"], 3, "not a date"), asks[1], (["kiwi"], -1, None)]))
        assert isinstance(got[1], ValueError) and "question_date" in str(got[1])
        assert [[h.utterance_id for h in q] for q in got[2]] == alone(*asks[1])
        assert isinstance(got[3], ValueError) and "k:" in str(got[3])  # not the batch's largest k, cut to k - 1
        searched, search = [], store.search
        store.search = lambda tenant, questions, **kw: searched.append(list(questions)) or search(tenant, questions,
                                                                                                  **kw)
        got = asyncio.run(together(asks[:3], cancel=0))  # the request whose arrival started the batch leaves
        assert isinstance(got[0], asyncio.CancelledError)
        assert searched == [asks[1][0] + asks[2][0]]  # its questions were not searched for nobody
        del store.search
        assert [[[h.utterance_id for h in q] for q in found] for found in got[1:]] == [alone(*a) for a in asks[1:3]]

        async def crowd():  # two questions each, at most three waiting: the second request is refused
            busy = SearchBatcher(store, max_waiting=3)
            tasks = [asyncio.create_task(busy.search("t", *a)) for a in asks[:2]]
            return await asyncio.gather(*tasks, return_exceptions=True), busy.waiting

        got, waiting = asyncio.run(crowd())
        assert len(got[0]) == 2 and isinstance(got[1], Busy) and waiting == 0
        assert str(got[1]) == "search: 2 questions are waiting, at most 3; retry later"

        async def batch_cancelled():  # the batch itself stopped while it gathers: its requests hear it, later ones run
            tasks = [asyncio.create_task(batcher.search("t", *a)) for a in asks[:2]]
            await asyncio.sleep(0.01)
            next(iter(batcher._running)).cancel()
            return await asyncio.gather(*tasks, return_exceptions=True), await batcher.search("t", *asks[2])

        got, later = asyncio.run(batch_cancelled())
        assert all(isinstance(g, RuntimeError) and "did not finish" in str(g) for g in got)
        assert [[h.utterance_id for h in q] for q in later] == alone(*asks[2])
        assert batcher._engine == {} and batcher._groups == {}  # nothing of a tenant kept once its searches end


def test_store_cli_imports_exports_and_counts(tmp_path, meetingqa_file):
    """import a dataset file into a tenant, export it as JSON Lines (what was imported comes back), stats."""
    import json

    from assomem_gpu.data import load_dataset

    data = tmp_path / "store"
    run = [sys.executable, "-m", "assomem_gpu.store"]
    common = ["--data", str(data), "--encoder", "hashing"]
    done = subprocess.run(run + ["import", *common, "--tenant", "mq", "--dataset", f"meetingqa:{meetingqa_file}",
                                 "--undated"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    bank = load_dataset(f"meetingqa:{meetingqa_file}").bank
    out = tmp_path / "mq.jsonl"
    done = subprocess.run(run + ["export", *common, "--tenant", "mq", "--output", str(out)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s["id"] for s in exported] == [sid for s, sid in enumerate(bank.session_ids)
                                           if any(t.strip() for t in bank.utt_texts[bank.offsets[s]:bank.offsets[s + 1]])]
    assert exported[0]["utterances"][0]["text"] == bank.utt_texts[0]
    stats = json.loads(subprocess.run(run + ["stats", *common], capture_output=True, text=True).stdout)
    assert stats["tenants"]["mq"]["sessions"] == len(exported) and "store.sqlite" in stats["files_bytes"]
    again = subprocess.run(run + ["import", *common, "--tenant", "mq", "--dataset", f"meetingqa:{meetingqa_file}",
                                  "--undated"], capture_output=True, text=True)
    assert again.returncode == 0 and "imported 0 sessions" in again.stdout
    bad = subprocess.run(run + ["export", *common, "--tenant", "nobody"], capture_output=True, text=True)
    assert bad.returncode == 2 and "nobody" in bad.stderr
    plain = tmp_path / "plain"  # the server's config options: without sentence passages no row holds sentence vectors
    done = subprocess.run(run + ["import", "--data", str(plain), "--encoder", "hashing", "--no-sentences", "--tenant",
                                 "mq", "--dataset", f"meetingqa:{meetingqa_file}", "--undated"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for where, held in ((data, len(exported)), (plain, 0)):
        db = sqlite3.connect(where / "store.sqlite")
        try:
            rows = db.execute("SELECT COUNT(DISTINCT session) FROM utterances WHERE sentences IS NOT NULL").fetchone()
        finally:
            db.close()
        assert rows[0] == held


def test_an_export_imports_again_whole_and_a_bad_record_is_named(tmp_path):
    """An export is a JSONL dataset: imported into another store and exported again, the same bytes (metadata,
    dates, utterance ids, speakers, texts); a bad record is named by its session, with what was imported before it."""
    import json

    run = [sys.executable, "-m", "assomem_gpu.store"]

    def store(*args, data="a"):
        return subprocess.run(run + [args[0], "--data", str(tmp_path / data), "--encoder", "hashing", *args[1:]],
                              capture_output=True, text=True)

    lines = [{"type": "session", "id": f"s{i}", "date": f"2024-05-0{i + 1}T10:00:00+00:00",
              "metadata": {"channel": "chat", "n": i}, "utterances": [
                  {"id": f"s{i}:0", "speaker": "user", "text": f"note {i}: the café  opens\nat nine"},
                  {"id": f"s{i}:1", "speaker": "assistant", "text": "Noted."}]} for i in range(3)]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert store("import", "--tenant", "t", "--dataset", f"jsonl:{source}").returncode == 0
    assert store("export", "--tenant", "t", "--output", str(tmp_path / "one.jsonl")).returncode == 0
    done = store("import", "--tenant", "t", "--dataset", f"jsonl:{tmp_path / 'one.jsonl'}", data="b")
    assert done.returncode == 0, done.stderr
    assert store("export", "--tenant", "t", "--output", str(tmp_path / "two.jsonl"), data="b").returncode == 0
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    assert json.loads((tmp_path / "one.jsonl").read_text().splitlines()[2])["metadata"] == {"channel": "chat", "n": 2}
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(json.dumps({**x, "id": f"n{i}", "utterances": [
        {**u, "id": f"n{i}:{t}"} for t, u in enumerate(x["utterances"])]} | ({"date": None} if i == 1 else {}))
                                for i, x in enumerate(lines)) + "\n")
    done = store("import", "--tenant", "t", "--dataset", f"jsonl:{broken}")
    assert done.returncode == 2 and "session 'n1'" in done.stderr and "date" in done.stderr
    assert store("import", "--tenant", "t", "--dataset", f"jsonl:{source}", "--limit", "0").returncode == 2
    repeated = tmp_path / "repeated.jsonl"  # an id in two sessions (as LoCoMo's dia_ids): refused before any write
    repeated.write_text("\n".join(json.dumps({**x, "memory": f"m{i}", "utterances": [{"id": "d1", "text": "hi"}]})
                                  for i, x in enumerate(lines)) + "\n")
    done = store("import", "--tenant", "fresh", "--dataset", f"jsonl:{repeated}", data="c")
    assert done.returncode == 2 and "utterance id 'd1' is in sessions 's0' and 's1'" in done.stderr, done.stderr
    assert "fresh" not in json.loads(store("stats", data="c").stdout)["tenants"]


def test_a_new_tenant_never_inherits_a_deleted_ones_files(tmp_path):
    """Tenant ids are never reused, so a file a deleted tenant left (a snapshot written by a racing eviction, say)
    can never be taken for a new tenant's."""
    with open_store(tmp_path) as store:
        store.create_tenant("old")
        store.add_sessions("old", [session("s0", 0, "the old tenant's private note")])
    snapshot = next((tmp_path / "snapshots").glob("*.npz"))
    kept = snapshot.read_bytes()
    with open_store(tmp_path) as store:
        store.delete_tenant("old")
        snapshot.write_bytes(kept)  # as if a racing write had left it behind
        store.create_tenant("new")
        store.add_sessions("new", [session("s0", 5)])  # one commit, as the old tenant's snapshot holds
    with open_store(tmp_path) as store:  # the new tenant's index is loaded, from its own snapshot or its rows
        assert all("private" not in h.text for q in store.search("new", ["private note", "old tenant"], k=5) for h in q)


def test_a_store_refuses_weights_of_other_signals_as_it_opens(tmp_path):
    from dataclasses import replace

    from assomem_gpu.fusion import fixed_weights

    with pytest.raises(ValueError, match=r"fusion\.signals .* differ from config\.signals"):
        MemoryStore(tmp_path, HashingEncoder(), CONFIG, fixed_weights(CONFIG.signals[:-1]), device="cpu")
    assert not (tmp_path / "store.sqlite").exists()
    fewer = replace(CONFIG, signals=CONFIG.signals[:-1])  # weights fitted before a signal: their config with them
    with MemoryStore(tmp_path, HashingEncoder(), fewer, fixed_weights(fewer.signals), device="cpu") as store:
        store.create_tenant("t")
        store.add_sessions("t", [session("s0", 0)])
        assert hits(store, "t", ["kiwi banjo"])[0]


def test_keys_outlive_a_restart_and_die_with_their_tenant(tmp_path):
    with open_store(tmp_path) as store:
        store.create_tenant("a")
        key = store.issue_key("a")
        assert store.tenant_of_key(key).name == "a" and store.tenant_of_key(key + "x") is None
    with open_store(tmp_path) as store:  # read back from the file
        assert store.tenant_of_key(key).name == "a"
        store.delete_tenant("a")
        store.create_tenant("a")  # the same name again: the old key is not its key
        assert store.tenant_of_key(key) is None
        new = store.issue_key("a")
    with open_store(tmp_path) as store:
        assert store.tenant_of_key(key) is None and store.tenant_of_key(new).name == "a"


def test_a_key_held_across_a_delete_never_reaches_the_tenant_made_again_under_its_name(tmp_path):
    """The service resolves a request's key before the request runs (a search may wait for its batch): the tenant
    it names, by name and id, is refused once the name is deleted, even after a new tenant takes the name."""
    with open_store(tmp_path) as store:
        store.create_tenant("ana")
        store.add_sessions("ana", [session("s0", 0, "the first ana's diary")])
        who = store.tenant_of_key(store.issue_key("ana"))
        assert hits(store, who) == hits(store, "ana")
        store.delete_tenant("ana")
        store.create_tenant("ana")
        store.add_sessions("ana", [session("s0", 3, "the second ana's secret zebra pin")])
        for call in (lambda: store.search(who, ["zebra pin"], k=5), lambda: store.session_ids(who),
                     lambda: store.get_session(who, "s0"), lambda: store.add_sessions(who, [session("s1", 1)]),
                     lambda: store.remove_sessions(who, ["s0"]), lambda: store.stats(who)):
            with pytest.raises(UnknownTenant):
                call()
        assert store.session_ids("ana") == ["s0"] and "zebra" in store.get_session("ana", "s0").utterances[0].text


def test_a_search_that_loads_a_tenant_while_it_is_deleted_keeps_nothing_of_it(tmp_path):
    """A search that arrives after the delete began (and before the rows went) is refused, and no index of the
    tenant is kept in memory."""
    import threading

    with open_store(tmp_path) as store:
        store.create_tenant("b")
        store.add_sessions("b", [session("s0", 0, "my locker code is quetzalcoatl")])
    with open_store(tmp_path, snapshot_every_s=None) as store:  # nothing loaded yet
        dropping, searched = threading.Event(), threading.Event()
        drop = store._drop_snapshots

        def slow_drop(tenant_id, keep=None):  # the delete pauses between clearing what is loaded and the rows
            dropping.set()
            searched.wait(30)
            drop(tenant_id, keep)

        store._drop_snapshots = slow_drop
        deleting = threading.Thread(target=store.delete_tenant, args=("b",))
        deleting.start()
        assert dropping.wait(30)
        with pytest.raises(UnknownTenant):  # the rows are still there, but the delete has begun
            store.search("b", "locker code", k=1)
        searched.set()
        deleting.join(30)
        assert store.tenants() == [] and store.loaded() == 0


def test_a_request_whose_tenant_was_deleted_after_its_id_was_read_leaves_the_new_tenant_alone(tmp_path):
    """Deleted and made again between the read of its id and the look at what is loaded: the request is refused and
    the new tenant's loaded index stays as it was (not dropped, its snapshot still due)."""
    with open_store(tmp_path, snapshot_every_s=None) as store:
        store.create_tenant("c")
        who = store.tenant_of_key(store.issue_key("c"))
        store.delete_tenant("c")
        store.create_tenant("c")
        store.add_sessions("c", [session("s0", 0)])  # the new tenant, loaded and behind its snapshot
        read = store._tenant_id
        store._tenant_id = lambda tenant: who.id if tenant == who else read(tenant)  # its id, read before the delete
        with pytest.raises(UnknownTenant):
            store.search(who, "kiwi", k=1)
        assert store.loaded() == 1 and store._loaded["c"][0] != who.id and "c" in store._behind
