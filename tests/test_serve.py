"""The memory service as users run it: a real server process on loopback over a real SQLite file, driven with httpx
and the Python client. Auth, isolation, bad input (a 4xx naming the field, the store unchanged), limits, restart."""
import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("fastapi")
from assomem_gpu.serve.client import MemoryClient  # noqa: E402
from assomem_gpu.serve.models import HitOut, SearchOut  # noqa: E402

ADMIN = "admin-secret-for-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(data, port: int, llm: str = "smollm2", *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "assomem_gpu.serve", "--data", str(data), "--port", str(port),
                             "--encoder", "hashing", "--device", "cpu", "--max-body-mb", "0.25", "--llm", llm,
                             *extra],
                            env={**os.environ, "ASSOMEM_ADMIN_KEY": ADMIN}, stderr=subprocess.PIPE, text=True)
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the server did not start: {proc.stderr.read()[-2000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory, request):
    """A server whose answers come from the llama.cpp server (its own default LLM where llama-cpp-python is missing:
    only the answer tests skip then)."""
    try:
        llm = request.getfixturevalue("llama_server")
    except pytest.skip.Exception:
        llm = "smollm2"
    data, port = tmp_path_factory.mktemp("store"), free_port()
    proc = start(data, port, llm)
    yield f"http://127.0.0.1:{port}", data, port, proc
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def session(sid: str, text: str, day: int = 1) -> dict:
    return {"id": sid, "date": f"2024-03-{day:02d}", "metadata": {"source": "test"},
            "utterances": [{"speaker": "user", "text": text}, {"speaker": "assistant", "text": f"noted: {text}"}]}


def digest(data) -> str:
    db = sqlite3.connect(data / "store.sqlite")
    h = hashlib.sha256(repr([db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                             for t in ("tenants", "sessions", "utterances", "api_keys")]).encode()).hexdigest()
    db.close()
    return h


def test_health_metrics_and_openapi(server):
    url = server[0]
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    metrics = httpx.get(f"{url}/metrics").text
    assert "assomem_request_seconds" in metrics
    frozen = next(float(line.split()[-1]) for line in metrics.splitlines()
                  if line.startswith("assomem_gc_frozen_objects "))
    assert frozen > 10_000  # the libraries loaded at start are out of the collector's sight (no 0.3 s pauses)
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    assert {"/v1/tenants", "/v1/sessions", "/v1/sessions/{session_id}", "/v1/search"} <= set(paths)


def test_tenants_keys_and_isolation(server):
    url = server[0]
    admin = MemoryClient(url, ADMIN)
    a, b = MemoryClient(url, admin.create_tenant("iso-a")), MemoryClient(url, admin.create_tenant("iso-b"))
    a.add_sessions([session("same", "my passport number is in the blue drawer"), session("a-only", "I like figs")])
    b.add_sessions([session("same", "my passport number is in the blue drawer"), session("b-only", "I like plums")])
    for client, mine in ((a, "a-only"), (b, "b-only")):
        for q in client.search(["passport drawer", "I like fruit", "figs plums"], k=10):
            assert {h.session_id for h in q} <= {"same", mine}
    with pytest.raises(KeyError):
        b.get_session("a-only")
    with pytest.raises(KeyError, match="a-only"):
        b.remove_sessions(["b-only", "a-only"])  # all or none
    assert "a-only" in a.session_ids() and "b-only" in b.session_ids()
    # keys: none, unknown, a tenant's on an admin route, the admin's on a tenant route
    assert httpx.get(f"{url}/v1/sessions").status_code == 401
    assert httpx.get(f"{url}/v1/sessions", headers={"Authorization": "Bearer nope"}).status_code == 403
    with pytest.raises(PermissionError):
        a.create_tenant("sneaky")
    with pytest.raises(PermissionError):
        MemoryClient(url, ADMIN).session_ids()
    second = MemoryClient(url, admin.issue_key("iso-a"))
    assert second.session_ids() == a.session_ids()
    admin.delete_tenant("iso-b")
    with pytest.raises(PermissionError):
        b.session_ids()  # its key went with it
    for name in (".", ".."):  # names a URL path would read as the folder or its parent
        dots = MemoryClient(url, admin.create_tenant(name))
        dots.add_sessions([session(name, "a dotted session")])
        assert dots.get_session(name).id == name and MemoryClient(url, admin.issue_key(name)).session_ids() == [name]
        dots.remove_sessions([name])
        assert dots.session_ids() == []
        admin.delete_tenant(name)
        with pytest.raises(PermissionError):
            dots.session_ids()


def test_answers_come_from_the_tenants_own_memory(server, llama_server):
    url = server[0]
    admin = MemoryClient(url, ADMIN)
    keys = [admin.create_tenant(name) for name in ("answers-a", "answers-b")]
    with MemoryClient(url, keys[0]) as a, MemoryClient(url, keys[1]) as b:
        a.add_sessions([session("pets", "My cat is called Miso."), session("trip", "I fly to Lisbon in April.", 2)])
        b.add_sessions([session("pets", "My cat is called Pixel.")])
        found = a.answer("What is my cat called?", k=3, question_date="2024-03-10", max_new_tokens=16)
        assert isinstance(found.text, str) and len(found.hits) == 3
        assert "Miso" in found.prompt and "Pixel" not in found.prompt and "(asked on 2024-03-10)" in found.prompt
        assert {h.session_id for h in found.hits} <= {"pets", "trip"}
        assert "Pixel" in b.answer("What is my cat called?", k=1, max_new_tokens=16).prompt
        for bad, field in [({"k": 0}, "k"), ({"k": 21}, "k"), ({"max_new_tokens": 10_000}, "max_new_tokens"),
                           ({"max_new_tokens": True}, "max_new_tokens"), ({"max_new_tokens": 5.0}, "max_new_tokens"),
                           ({"question_date": "soon"}, "question_date"), ({"sessions": ["nope"]}, "sessions")]:
            with pytest.raises(ValueError, match=field):
                a.answer("What is my cat called?", **bad)
        with pytest.raises(ValueError, match=r"422: question: empty or whitespace-only text"):
            a.answer("   ")
    assert httpx.post(f"{url}/v1/answer", json={"question": "What is my cat called?"}).status_code == 401


def test_answers_are_bounded_and_a_failing_llm_is_a_503(tmp_path, llm_proxy):
    """In front of the real LLM server, a proxy that is slow (each reply 2 s late) or down (500s): with one answer at
    a time allowed, a second concurrent one is refused (429) while every other route answers; with the LLM down, an
    answer is a 503 once the client's retries are spent, and the server stays up. With one question allowed to wait
    for its search, a search of two is refused (429) and one of one is answered."""
    import threading

    llm_proxy.mode = "slow"
    port = free_port()
    proc = start(tmp_path, port, f"openai:{llm_proxy.url}#smollm2", "--max-answers", "1", "--max-waiting", "1")
    try:
        url = f"http://127.0.0.1:{port}"
        key = MemoryClient(url, ADMIN).create_tenant("bounded")
        with MemoryClient(url, key) as memory:
            memory.add_sessions([session("pets", "My cat is called Miso.")])
            assert memory.search("cat", k=1)[0].session_id == "pets"
        one = httpx.post(f"{url}/v1/search", json={"questions": ["cat"], "k": 1},
                         headers={"Authorization": f"Bearer {key}"})  # written without pydantic: still SearchOut's
        assert set(one.json()["results"][0][0]) == set(HitOut.model_fields)
        assert SearchOut.model_validate_json(one.content).results[0][0].session_id == "pets"
        two = httpx.post(f"{url}/v1/search", json={"questions": ["cat", "Miso"]},
                         headers={"Authorization": f"Bearer {key}"})
        assert two.status_code == 429 and two.headers["Retry-After"] == "1"
        assert two.json()["detail"] == "search: 0 questions are waiting, at most 1; retry later"
        ask = {"json": {"question": "What is my cat called?", "max_new_tokens": 8},
               "headers": {"Authorization": f"Bearer {key}"}, "timeout": 120}
        codes = []
        first = threading.Thread(target=lambda: codes.append(httpx.post(f"{url}/v1/answer", **ask).status_code))
        first.start()
        time.sleep(1)  # the first answer now waits on the slow LLM
        second = httpx.post(f"{url}/v1/answer", **ask)
        assert second.status_code == 429 and "answers: 1 in progress" in second.json()["detail"]
        assert httpx.get(f"{url}/healthz").status_code == 200
        first.join()
        assert codes == [200]
        llm_proxy.mode = "down"
        down = httpx.post(f"{url}/v1/answer", **ask)
        assert down.status_code == 503 and down.json()["detail"].startswith("llm: LLM endpoint")
        with MemoryClient(url, key) as memory, pytest.raises(RuntimeError, match="503: llm: LLM endpoint"):
            memory.answer("What is my cat called?", max_new_tokens=8)  # the server could not: not bad input
        assert httpx.get(f"{url}/readyz").status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_the_client_sends_dates_as_the_index_reads_them(server):
    """A datetime or date goes as ISO 8601, where it failed to serialise; a naive one is refused naming its field,
    as in process; the server's message comes whole (its closing quote was cut)."""
    from datetime import date, datetime, timezone

    key = MemoryClient(server[0], ADMIN).create_tenant("dates")
    with MemoryClient(server[0], key) as client:
        client.add_sessions([session("pets", "My cat is called Miso.", 5)])
        asked = datetime(2024, 3, 10, tzinfo=timezone.utc)
        assert client.search("What is my cat called?", k=1, question_date=asked)[0].session_id == "pets"
        found = client.search(["cat?", "Miso?"], k=1, question_date=date(2024, 3, 11), until=date(2024, 3, 5))
        assert [hits[0].session_id for hits in found] == ["pets", "pets"]  # until a day: that whole day
        assert client.search("cat?", k=1, until=date(2024, 3, 4)) == []
        with pytest.raises(ValueError, match=r"question_date: naive datetime '2024-03-10T00:00:00'; give a time zone"):
            client.search("cat?", question_date=datetime(2024, 3, 10))
        with pytest.raises(ValueError, match=r"question_date: not an ISO 8601 date: 'soon'$"):
            client.search("cat?", question_date="soon")


def test_sessions_round_trip_and_deletes(server):
    url = server[0]
    c = MemoryClient(url, MemoryClient(url, ADMIN).create_tenant("rt"))
    c.add_sessions([session(f"s{i}", f"note {i} about the {w} festival", 1 + i)
                    for i, w in enumerate(["lantern", "kite", "cheese", "jazz", "film"])])
    got = c.get_session("s2")
    assert got.utterances[0].text == "note 2 about the cheese festival" and got.metadata == {"source": "test"}
    assert c.session_ids(offset=1, limit=2) == ["s1", "s2"]
    assert c.search("cheese festival", k=1)[0].session_id == "s2"
    c.remove_sessions(["s2"])
    with pytest.raises(KeyError):
        c.get_session("s2")
    assert all(h.session_id != "s2" for h in c.search("cheese festival", k=20))
    hits = c.search("jazz", k=3, since="2024-03-04", until="2024-03-04")
    assert hits and {h.session_id for h in hits} == {"s3"}
    odd = ["notes/2024", "s1#draft", "s1?x=1", "50% off"]  # ids that a URL path does not carry as they are
    c.add_sessions([session(sid, f"odd id {n}") for n, sid in enumerate(odd)])
    assert [c.get_session(sid).id for sid in odd] == odd
    c.remove_sessions(odd[:3])
    assert c.session_ids(limit=100) == ["s0", "s1", "s3", "s4", "50% off"]
    longest = "L" * 256  # the longest id the service takes; its utterances' default ids are the server's to make
    c.add_sessions([session(longest, "a long id")])
    assert [u.id for u in c.get_session(longest).utterances] == [f"{longest}:0", f"{longest}:1"]


def nested(depth: int) -> dict:
    out: dict = {}
    for _ in range(depth):
        out = {"a": out}
    return out


BAD = [  # (what is sent, the field or limit the answer must name)
    ({"sessions": []}, "sessions"),
    ({"sessions": [{"id": "x", "date": "2024-01-01", "utterances": []}]}, "utterances"),
    ({"sessions": [{"id": "x", "date": "2024-01-01", "utterances": [{"text": ""}]}]}, "text"),
    ({"sessions": [{"id": "x", "date": "2024-01-01", "utterances": [{"text": "   "}]}]}, "text"),
    ({"sessions": [{"id": "", "date": "2024-01-01", "utterances": [{"text": "hi"}]}]}, "id"),
    ({"sessions": [{"id": 5, "date": "2024-01-01", "utterances": [{"text": "hi"}]}]}, "id"),
    ({"sessions": [{"date": "2024-01-01", "utterances": [{"text": "hi"}]}]}, "id"),
    ({"sessions": [{"id": "x", "date": "yesterday-ish", "utterances": [{"text": "hi"}]}]}, "date"),
    ({"sessions": [{"id": "x", "utterances": [{"text": "hi"}]}]}, "date"),
    ({"sessions": [{"id": "x", "date": "2024-01-01", "utterances": [{"text": "hi"}], "colour": 1}]}, "colour"),
    ({"sessions": [session("dup", "a"), session("dup", "b")]}, "dup"),
    ({"sessions": [session("kept", "already here")]}, "already in the index"),
    ({"sessions": [{"id": "x", "date": "2024-01-01", "utterances": [{"text": "x" * 20_001}]}]}, "text"),
    ({"sessions": [{"id": "x", "date": "2024-01-01", "metadata": [1], "utterances": [{"text": "hi"}]}]}, "metadata"),
    ({"sessions": [{"id": "x", "date": "2024-01-01", "metadata": nested(900), "utterances": [{"text": "hi"}]}]},
     "metadata"),
    ({"sessions": [{"id": "x", "date": True, "utterances": [{"text": "hi"}]}]}, "date"),
    ("not json at all", "json"),
    # a lone surrogate: FastAPI's own 422 echoed it, could not encode it, and answered 500 (the text in the log)
    ('{"sessions": [{"id": "x", "date": "2024-01-01", "utterances": [{"text": "secret \\ud800"}]}]}', "text"),
    ('{"sessions": [{"id": "x\\udc00", "date": "2024-01-01", "utterances": [{"text": "hi"}]}]}', "id"),
    # stored, it failed every search, read and save of the tenant's memory
    ('{"sessions": [{"id": "x", "date": "2024-01-01", "metadata": {"k": ["\\ud800"]}, '
     '"utterances": [{"text": "hi"}]}]}', "metadata"),
]
BAD_SEARCH = [
    ({"questions": [], "k": 3}, "questions"),
    ({"questions": ["a"], "k": 0}, "k"),
    ({"questions": ["a"], "k": True}, "k"),
    ({"questions": ["a"], "k": 10**9}, "k"),
    ({"questions": ["a"], "k": 3, "sessions": ["no-such-session"]}, "sessions"),
    ({"questions": ["a"], "k": 3, "since": "the day after"}, "since"),
    ({"questions": ["a"], "k": 3, "since": True}, "since"),
    ({"questions": ["a"], "k": 3, "question_date": False}, "question_date"),
    ({"questions": ["a"], "k": 3, "filter": {"x": 1}}, "filter"),
    ({"questions": [7], "k": 3}, "questions"),
    ({"questions": ["x" * 20_001], "k": 3}, "questions"),
    ({"questions": [""], "k": 3}, "questions"),
]


def test_bad_input_names_the_field_and_changes_nothing(server):
    url, data = server[0], server[1]
    key = MemoryClient(url, ADMIN).create_tenant("bad")
    headers = {"Authorization": f"Bearer {key}"}
    MemoryClient(url, key).add_sessions([session("kept", "already here")])
    before = digest(data)
    for body, field in BAD + [(b, f) for b, f in BAD_SEARCH]:
        route = "/v1/search" if (isinstance(body, dict) and "questions" in body) else "/v1/sessions"
        kwargs = {"content": body, "headers": {**headers, "content-type": "application/json"}} \
            if isinstance(body, str) else {"json": body, "headers": headers}
        r = httpx.post(f"{url}{route}", **kwargs)
        assert 400 <= r.status_code < 500 and field in r.text.lower(), (body, r.status_code, r.text[:300])
    big = {"sessions": [session(f"b{i}", "y" * 10_000) for i in range(30)]}  # about 600 KB: over the 0.25 MB limit
    r = httpx.post(f"{url}/v1/sessions", json=big, headers=headers)
    assert r.status_code == 413 and "limit" in r.text
    chunks = (part.encode() for part in json.dumps(big).partition('"sessions"'))  # chunked: no declared length
    r = httpx.post(f"{url}/v1/sessions", content=chunks, headers={**headers, "content-type": "application/json"})
    assert r.status_code == 413 and "limit" in r.text, r.text
    with MemoryClient(url, key) as client:  # the client checks sessions as MemoryIndex does, before any request
        with pytest.raises(TypeError, match=r"sessions\[0\]: expected a Session or a mapping"):
            client.add_sessions([42])
        with pytest.raises(ValueError, match=r"sessions\[0\]\.utterances\[0\]\.text: empty"):
            client.add_sessions([{"id": "y", "date": "2024-01-01", "utterances": [{"text": " "}]}])
    r = httpx.post(f"{url}/v1/search", content=b'{"questions": ["secret \\ud800"]}',
                   headers={**headers, "content-type": "application/json"})
    assert r.status_code == 422 and "questions" in r.text and "secret" not in r.text, r.text
    r = httpx.post(f"{url}/v1/sessions", content=b"\xff\xfe{not utf-8", headers={**headers,
                                                                                  "content-type": "application/json"})
    assert r.status_code == 422
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for r in (httpx.post(f"{url}/v1/tenants/%20/keys", headers=admin), httpx.delete(f"{url}/v1/tenants/%20%20",
                                                                                   headers=admin)):
        assert r.status_code == 422 and "tenant" in r.text, r.text
    assert digest(data) == before


def test_acknowledged_writes_survive_kill_9_and_restart(tmp_path):
    port = free_port()
    proc = start(tmp_path, port)
    url = f"http://127.0.0.1:{port}"
    c = MemoryClient(url, MemoryClient(url, ADMIN).create_tenant("durable"))
    c.add_sessions([session(f"d{i}", f"durable fact number {i}") for i in range(5)])
    c.remove_sessions(["d1"])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    started = time.perf_counter()
    proc = start(tmp_path, port)
    try:
        assert c.session_ids() == ["d0", "d2", "d3", "d4"]
        assert c.search("durable fact number 3", k=1)[0].session_id == "d3"
        assert time.perf_counter() - started < 60
        c.add_sessions([session("d9", "one more durable fact")])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    # a clean stop closes the store: the snapshot of the last commit (3 writes) is what the next start loads
    assert [p.name for p in (tmp_path / "snapshots").iterdir()] == ["1-3.npz"]


def test_concurrent_clients_mixing_searches_adds_and_deletes(server):
    """ASSOMEM_SOAK_CLIENTS clients for ASSOMEM_SOAK_SECONDS (CI: 16 for 6 s; the issue's full run: 32 for 60 s): no
    5xx, every acknowledged write there at the end, and searches answered by fewer engine calls than requests."""
    import random
    import threading

    url, seconds = server[0], float(os.environ.get("ASSOMEM_SOAK_SECONDS", "6"))
    key = MemoryClient(url, ADMIN).create_tenant("soak")
    MemoryClient(url, key).add_sessions([session(f"base{i}", f"base note {i} on topic {i % 4}") for i in range(10)])
    added, removed, errors, lock = set(), set(), [], threading.Lock()

    def client(n: int):
        rng, headers = random.Random(n), {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            i, deadline = 0, time.monotonic() + seconds
            while time.monotonic() < deadline:
                i += 1
                roll = rng.random()
                if roll < 0.7:
                    r = http.post("/v1/search", json={"questions": [f"topic {rng.randrange(4)} note"], "k": 5})
                elif roll < 0.9 or not added:
                    sid = f"c{n}-{i}"
                    r = http.post("/v1/sessions", json={"sessions": [session(sid, f"client {n} wrote {i}")]})
                    if r.status_code == 201:
                        with lock:
                            added.add(sid)
                else:
                    with lock:
                        mine = sorted(s for s in added - removed if s.startswith(f"c{n}-"))
                    if not mine:
                        continue
                    r = http.delete(f"/v1/sessions/{mine[0]}")
                    if r.status_code == 204:
                        with lock:
                            removed.add(mine[0])
                if r.status_code >= 500:
                    errors.append((r.status_code, r.text[:200]))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(int(os.environ.get("ASSOMEM_SOAK_CLIENTS",
                                                                                       "16")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    held = set(MemoryClient(url, key).session_ids(limit=1000))
    assert added - removed <= held and not (removed & held)
    metrics = httpx.get(f"{url}/metrics").text
    requests, batches = (float(line.split()[-1]) for line in metrics.splitlines()
                         if line.startswith(("assomem_search_requests ", "assomem_search_batches ")))
    assert 0 < batches < requests


@pytest.mark.parametrize("who", ["tenant", "admin"])
def test_schema_fuzzing_finds_no_server_error(server, who, tmp_path):
    """schemathesis generates requests for every operation of the OpenAPI document (its coverage, fuzzing and
    stateful phases): no answer may be a 5xx. (It found one: an offset too large for SQLite; now a 422.)"""
    import shutil

    cli = shutil.which("schemathesis", path=os.path.dirname(sys.executable))
    if cli is None:
        pytest.skip("schemathesis is not installed")
    url = server[0]
    key = MemoryClient(url, ADMIN).create_tenant(f"fuzz-{who}") if who == "tenant" else ADMIN
    done = subprocess.run([cli, "run", f"{url}/openapi.json", "-H", f"Authorization: Bearer {key}",
                           "--checks", "not_a_server_error", "-n", "25", "--seed", "1",
                           "--request-timeout", "120"],  # an answer may generate 512 tokens on a busy CPU
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "Server error" not in done.stdout


def test_server_killed_mid_stream_loses_no_acknowledged_write(tmp_path):
    """kill -9 the server at random moments during a stream of adds and deletes from a client; after each restart
    every acknowledged write is there, no session is half there, the file is sound, searches work.
    ASSOMEM_SERVER_CRASH_ROUNDS sets the rounds (CI: 3; the issue's full run: 50)."""
    import random
    import threading

    rng, port = random.Random(1), free_port()
    url, present, key = f"http://127.0.0.1:{port}", set(), None
    for round_ in range(int(os.environ.get("ASSOMEM_SERVER_CRASH_ROUNDS", "3"))):
        proc = start(tmp_path, port)
        if key is None:
            key = MemoryClient(url, ADMIN).create_tenant("crash")
        headers, acknowledged, stop = {"Authorization": f"Bearer {key}"}, [], threading.Event()

        def stream():
            with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
                for i in range(100_000):
                    if stop.is_set():
                        return
                    sid = f"r{round_}-{i}"
                    try:
                        if i % 4 == 3:
                            gone = f"r{round_}-{i - 2}"
                            if http.delete(f"/v1/sessions/{gone}").status_code == 204:
                                acknowledged.append(("removed", gone))
                        elif http.post("/v1/sessions", json={"sessions": [session(sid, f"crash note {i}")]}
                                       ).status_code == 201:
                            acknowledged.append(("added", sid))
                    except httpx.HTTPError:  # the server died under us: this write is unacknowledged
                        return

        writer = threading.Thread(target=stream)
        writer.start()
        time.sleep(rng.uniform(0.5, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stop.set()
        writer.join()
        for verb, sid in acknowledged:
            (present.add if verb == "added" else present.discard)(sid)
        db = sqlite3.connect(tmp_path / "store.sqlite")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT count(*) FROM utterances GROUP BY session HAVING count(*) != 2").fetchall() == []
        db.close()
        proc = start(tmp_path, port)
        try:
            held = set(MemoryClient(url, key).session_ids(limit=1000))
            differ = held ^ present  # at most the write in flight when it died, committed or not
            assert len(differ) <= 1 and all(sid.startswith(f"r{round_}-") for sid in differ)
            present = held
            assert bool(MemoryClient(url, key).search("crash note", k=3)) == bool(present)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def test_deleted_and_foreign_utterances_never_come_back(server):
    """Three tenants holding the same texts; random sessions deleted; then random searches under every key
    (ASSOMEM_RANDOM_SEARCHES per tenant, CI: 300; the issue's full run: 10,000) return neither a deleted utterance
    nor another tenant's."""
    import random

    url, rng = server[0], random.Random(7)
    n_search = int(os.environ.get("ASSOMEM_RANDOM_SEARCHES", "300"))
    words = "amber basil cedar delta ember fjord garnet harbor iris juniper kelp lotus".split()
    clients, deleted = {}, {}
    for t in ("red", "green", "blue"):
        clients[t] = MemoryClient(url, MemoryClient(url, ADMIN).create_tenant(f"many-{t}"))
        clients[t].add_sessions([session(f"{t}-{i}", " ".join(rng.sample(words, 4)) + f" shared {i}")
                                 for i in range(30)])
        deleted[t] = set(rng.sample([f"{t}-{i}" for i in range(30)], 8))
        clients[t].remove_sessions(sorted(deleted[t]))
    for t, client in clients.items():
        for lo in range(0, n_search, 50):
            questions = [" ".join(rng.sample(words, rng.randint(1, 3))) for _ in range(min(50, n_search - lo))]
            for hits in client.search(questions, k=rng.randint(1, 20)):
                for h in hits:
                    assert h.session_id.startswith(f"{t}-") and h.session_id not in deleted[t]
