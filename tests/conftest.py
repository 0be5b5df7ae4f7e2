"""Shared fixtures: small hand-written datasets in every supported format, an isolated embedding cache, and a real
OpenAI-compatible LLM server (llama.cpp's, serving the bundled SmolLM2 GGUF) on loopback."""
from __future__ import annotations

import os

# CUDA kernels run in Numba's simulator unless a GPU run asks for the device (benchmarks/gpu_check.sh sets it to 0).
# This must happen before anything imports numba.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import gzip
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def onnx_exports(tmp_path_factory):
    """One folder of exported encoders for the whole run: the bundled MiniLM is exported (seconds) once, not per test."""
    folder = tmp_path_factory.mktemp("onnx")
    before = os.environ.get("ASSOMEM_ONNX_DIR")
    os.environ["ASSOMEM_ONNX_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("ASSOMEM_ONNX_DIR")
    else:
        os.environ["ASSOMEM_ONNX_DIR"] = before


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own embedding cache folder, so no test reads vectors another one wrote."""
    monkeypatch.setenv("ASSOMEM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """``openai:<url>#smollm2``: llama-cpp-python's server process serving the bundled GGUF on a free loopback port
    (greedy replies; one request at a time, as the server decodes them). Prompts are read one token at a time
    (``--n_batch 1``): the server reuses the cached prefix a prompt shares with the previous one and reads only the
    rest, and read in batches of another split the 135M model's greedy reply could change with the previous prompt."""
    yield from _llama_server(tmp_path_factory, "--n_ctx", "8192", "--n_batch", "1")


@pytest.fixture(scope="session")
def small_llama_server(tmp_path_factory):
    """``llama_server`` in a context of 512 tokens, which refuses a prompt that its reply would take past them (a
    400), prompts read in batches."""
    yield from _llama_server(tmp_path_factory, "--n_ctx", "512")


def _llama_server(tmp_path_factory, *options: str):
    pytest.importorskip("llama_cpp.server")
    from assomem_gpu.llm import bundled_smollm2

    folder, name = bundled_smollm2()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "w") as fh:  # a file, not a pipe: the server logs every request and would fill a pipe and stall
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(folder / name), "--host",
                                 "127.0.0.1", "--port", str(port), "--seed", "0", *options],
                                stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{url}/models", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"the llama.cpp server stopped: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        else:
            raise RuntimeError("the llama.cpp server did not start in 60 s")
        yield f"openai:{url}#smollm2"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class LLMProxy:
    """An HTTP proxy in front of the real LLM server that can misbehave: ``fail_next`` requests answered 503, then,
    by ``mode``, forwarded (``"ok"``), forwarded ``delay_s`` late (``"slow"``) or answered 500 (``"down"``); with
    ``ok_left`` set, that many more are forwarded and then it is down."""

    def __init__(self, upstream: str):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.upstream, self.mode, self.fail_next, self.delay_s, self.ok_left = upstream, "ok", 0, 2.0, None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if proxy.ok_left is not None:
                    proxy.mode = "ok" if proxy.ok_left > 0 else "down"
                    proxy.ok_left -= 1
                if proxy.fail_next > 0 or proxy.mode == "down":
                    code = 503 if proxy.fail_next > 0 else 500
                    proxy.fail_next = max(0, proxy.fail_next - 1)
                    self.send_response(code)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if proxy.mode == "slow":
                    time.sleep(proxy.delay_s)
                request = urllib.request.Request(proxy.upstream + self.path.removeprefix("/v1"), data=body,
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request) as resp:
                    data = resp.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()


@pytest.fixture
def llm_proxy(llama_server):
    proxy = LLMProxy(llama_server.split(":", 1)[1].split("#")[0])
    yield proxy
    proxy.close()


def lme_item(qid, question, sessions, dates, qtype="single-session-user", qdate="2023/05/30 (Tue) 20:36", answer="x"):
    """A LongMemEval question; ``sessions`` maps session id -> list of (role, content, has_answer)."""
    return {
        "question_id": qid, "question_type": qtype, "question": question, "question_date": qdate, "answer": answer,
        "answer_session_ids": [s for s, turns in sessions.items() if any(h for _, _, h in turns)],
        "haystack_dates": dates, "haystack_session_ids": list(sessions),
        "haystack_sessions": [[{"role": r, "content": c, **({"has_answer": True} if h else {})} for r, c, h in turns]
                              for turns in sessions.values()],
    }


@pytest.fixture
def lme_items():
    shared = [("user", "I adopted a beagle puppy named Max last week.", False),
              ("assistant", "Congratulations on Max! Beagles are energetic.", False)]
    return [
        lme_item("q1", "How long is my daily commute?", {
            "answer_s1": [("user", "My daily commute to work takes 45 minutes each way.", True),
                          ("assistant", "That is a long commute; podcasts can help.", False)],
            "shared_dog": shared,
            "noise_a": [("user", "Give me a recipe for banana bread.", False),
                        ("assistant", "Mix flour, bananas, sugar and eggs, then bake.", False)],
        }, ["2023/05/20 (Sat) 03:29", "2023/05/21 (Sun) 10:00", "2023/05/22 (Mon) 11:00"]),
        lme_item("q2", "What is the name of my dog?", {
            "shared_dog": shared,
            "answer_s2": [("user", "Max loves the park near my house.", True)],
            "noise_b": [("user", "How do I change a bike tire?", False)],
        }, ["2023/03/01 (Wed) 09:00", "2023/03/02 (Thu) 09:00", "2023/03/03 (Fri) 09:00"], qtype="multi-session"),
        lme_item("q3_abs", "What colour is my car?", {
            "answer_s3_abs": [("user", "I am thinking about buying a car.", False)],
            "noise_c": [("user", "Tell me a joke about cats.", False)],
        }, ["2023/01/01 (Sun) 09:00", "2023/01/05 (Thu) 09:00"]),
    ]


@pytest.fixture
def answered_lme(tmp_path, lme_items):
    """``lme_file`` with reference answers."""
    answers = {"q1": "45 minutes each way", "q2": "Max", "q3_abs": "You did not mention the colour of your car."}
    for item in lme_items:
        item["answer"] = answers[item["question_id"]]
    path = tmp_path / "lme.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(lme_items, fh)
    return path


@pytest.fixture
def lme_file(tmp_path, lme_items):
    path = tmp_path / "lme.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(lme_items, fh)
    return path


@pytest.fixture
def locomo_samples():
    def turns(prefix, texts, speakers=("Caroline", "Melanie")):
        return [{"speaker": speakers[i % 2], "dia_id": f"{prefix}:{i + 1}", "text": t} for i, t in enumerate(texts)]

    conv = {"speaker_a": "Caroline", "speaker_b": "Melanie",
            "session_1": turns("D1", ["I went to a pottery class yesterday.", "Nice! What did you make?",
                                      "A blue bowl for my mother."]),
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2": turns("D2", ["We are going camping in June.", "Bring a warm sleeping bag."]),
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_10": turns("D10", ["I started learning the violin."]),
            "session_10_date_time": "8:00 pm on 1 August, 2023"}
    qa = [{"question": "What did Caroline make in pottery class?", "answer": "A blue bowl", "evidence": ["D1:1; D1:3"],
           "category": 1},
          {"question": "When is the camping trip?", "answer": "June", "evidence": ["D2:1, D9:9"], "category": 2},
          {"question": "What instrument does Melanie play?", "adversarial_answer": "violin", "evidence": ["D10:1 D1:2"],
           "category": 5},
          {"question": "What is Caroline's favourite food?", "answer": "unknown", "evidence": [], "category": 3}]
    other = {"speaker_a": "Ann", "speaker_b": "Bob",
             "session_1": turns("D1", ["Ann here, I love jazz.", "Bob likes rock."], ("Ann", "Bob")),
             "session_1_date_time": "9:00 am on 1 January, 2022"}
    return [{"sample_id": "conv-1", "conversation": conv, "qa": qa},
            {"sample_id": "conv-2", "conversation": other,
             "qa": [{"question": "What music does Ann love?", "answer": "jazz", "evidence": ["D1:1"], "category": 1}]}]


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


@pytest.fixture
def locomo_file(tmp_path, locomo_samples):
    return write_json(tmp_path / "locomo.json", locomo_samples)


@pytest.fixture
def meetingqa_doc():
    def entry(eid, session, speaker, text, qa=None):
        e = {"session_id": session, "entry_id": eid, "transcript_message": text, "speaker_id": speaker,
             "metadata": {"queries": "[]"}}
        if qa:
            e["qa_pairs"] = [{"question": q, "answer": a} for q, a in qa]
        return e

    return {"dataset_name": "t", "dataset_type": "voice_memo", "description": "t", "entries": [
        entry("m1_000", "meeting_a", "Lily", "Let's review the Aurora CRM rollout.", [("Which CRM is rolled out?", "Aurora")]),
        entry("m1_001", "meeting_a", "Sam", "The budget for Aurora is forty thousand dollars.",
              [("What is the Aurora budget?", "40k"), ("How much does Aurora cost?", "40k")]),
        entry("m1_002", "meeting_a", "Lily", "Sounds good."),
        entry("m2_000", "meeting_b", "Mei", "Sounds good."),
        entry("m2_001", "meeting_b", "Ravi", "Flux reduced our invoice processing time by half.",
              [("What did Flux reduce?", "invoice processing time")]),
        entry("m2_002", "meeting_b", "Mei", "Let's review the Aurora CRM rollout."),
    ]}


@pytest.fixture
def meetingqa_file(tmp_path, meetingqa_doc):
    return write_json(tmp_path / "meeting_qa_raw.json", meetingqa_doc)


@pytest.fixture
def jsonl_file(tmp_path):
    lines = [
        {"type": "session", "id": "s1", "date": "2024-03-01T10:00", "memory": "alice", "utterances": [
            {"speaker": "Alice", "text": "I booked flights to Lisbon for April."},
            {"speaker": "Bot", "text": "Lisbon is lovely in spring."}]},
        {"type": "session", "id": "s2", "date": "2024-03-05", "memory": "alice", "utterances": [
            {"id": "s2-a", "speaker": "Alice", "text": "My sister Jane starts a new job at the bakery."}]},
        {"type": "session", "id": "s3", "memory": "bob", "utterances": [{"text": "Bob plays chess on Sundays."}]},
        {"type": "question", "id": "q1", "text": "Where am I flying in April?", "memory": "alice", "date": "2024-03-09",
         "question_type": "single-session-user", "evidence": ["s1:0"], "answer": "Lisbon"},
        {"type": "question", "id": "q2", "text": "Where does Jane work?", "memory": "alice", "evidence": ["s2-a"]},
        {"type": "question", "id": "q3", "text": "When does Bob play chess?", "memory": "bob", "evidence": ["s3:0"]},
        {"type": "question", "id": "q4", "text": "What is my favourite colour?", "memory": "bob"},
    ]
    path = tmp_path / "mem.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path
