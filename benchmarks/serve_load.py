"""Load benchmark of the memory service: a real server process (the bundled MiniLM encoder) on loopback.

    python benchmarks/serve_load.py [--sessions 2500] [--seconds 20] [--clients 1 8 32] [--device cpu]
                                    [--clue-merge leaders] [--encoder-runtime auto] [--output FILE]

One tenant of ``--sessions`` synthetic sessions (10 utterances each, topic vocabularies) is ingested over HTTP in
batches of 50 (sessions/s, the server's encoding included, and without it: the same sessions again with the
hashing encoder). After one search and 6 s (the kernels loaded, the background snapshot written), ``--clients``
concurrent clients (threads on keep-alive connections, the standard library's HTTP client) each send one-question
searches for ``--seconds``: p50 and p99 latency (the question's encoding included), throughput, failed requests
(counted, not timed), the CPU milliseconds a search took in the server and in the clients, and the share of the
machine's CPU time its host stole meanwhile. Then the server is killed (kill -9: it restarts from the snapshot its
background thread wrote) and restarted, then stopped cleanly and restarted: the time to ready (the model loaded)
and to its first answer, sent at once. Resident memory of the server process with the tenant loaded. JSON to ``benchmarks/results/serve_load.json`` unless ``--output`` says where.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np

ADMIN = "bench-admin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(data: Path, port: int, encoder: str, device: str = "cpu", clue_merge: str = "leaders",
          runtime: str = "auto") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "assomem_gpu.serve", "--data", str(data), "--port", str(port),
                             "--encoder", encoder, "--device", device, "--clue-merge", clue_merge,
                             "--encoder-runtime", runtime],
                            env={**os.environ, "ASSOMEM_ADMIN_KEY": ADMIN})
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise RuntimeError("the server exited")
            time.sleep(0.05)


def sessions(n: int, seed: int = 0) -> list[dict]:
    """Synthetic dated sessions: each a topic of 6 words out of 60 topics, 10 utterances of 8 to 16 words (English
    words, so that the encoder tells the topics apart: with made-up tokens every clue merged into one)."""
    from wordfreq import top_n_list

    rng = random.Random(seed)
    vocab = [w for w in top_n_list("en", 6000) if w.isalpha() and len(w) > 3][:2000]
    topics = [rng.sample(vocab, 6) for _ in range(60)]
    out = []
    for s in range(n):
        topic = topics[s % len(topics)]
        out.append({"id": f"s{s}", "date": 1_600_000_000 + 3600 * s,
                    "utterances": [{"speaker": ["user", "assistant"][t % 2],
                                    "text": " ".join(rng.choice(topic + vocab) for _ in range(rng.randint(8, 16)))}
                                   for t in range(10)]})
    return out


def ingest(url: str, key: str, batch: list[dict]) -> float:
    start_t = time.perf_counter()
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600) as http:
        for lo in range(0, len(batch), 50):
            http.post("/v1/sessions", json={"sessions": batch[lo : lo + 50]}).raise_for_status()
    return len(batch) / (time.perf_counter() - start_t)


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has run: what a search costs, whatever else the machine runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_times() -> tuple[int, int]:
    """The machine's stolen and total CPU time so far (jiffies, /proc/stat): a virtual machine's host may run others
    on its cores, and the share stolen during a run slows its wall-clock figures, not its CPU ones."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return values[7], sum(values[:8])


def load(url: str, key: str, clients: int, seconds: float, questions: list[str], server_pid: int) -> dict:
    """``clients`` threads, each on its own keep-alive connection, sending one-question searches for ``seconds``.
    They use the standard library's ``http.client`` (~0.3 ms of CPU a request, a fifth of httpx's): the clients share
    the server's cores, and what they spend is taken from it."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    where = urlsplit(url)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    bodies = [json.dumps({"questions": [q], "k": 10}).encode() for q in questions]

    def client(n: int):
        rng = random.Random(n)
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/search", rng.choice(bodies), headers)
                response = conn.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as exc:  # counted and reported; it reconnects and goes on
                conn.close()
                with lock:
                    errors.append(repr(exc))
                continue
            if response.status != 200:  # read whole, so the connection is kept
                with lock:
                    errors.append(f"HTTP {response.status}: {body[:200]!r}")
                continue
            with lock:
                latencies.append(time.perf_counter() - t0)
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    server_t0, client_t0, (steal_t0, total_t0) = cpu_s(server_pid), cpu_s(os.getpid()), cpu_times()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    server_cpu, client_cpu = cpu_s(server_pid) - server_t0, cpu_s(os.getpid()) - client_t0
    steal, total = (now - then for now, then in zip(cpu_times(), (steal_t0, total_t0)))
    ms = 1000 * np.asarray(latencies)
    return {"clients": clients, "searches": len(ms), "errors": len(errors),
            "first_error": errors[0] if errors else None, "p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2), "searches_per_s": round(len(ms) / wall, 1),
            "server_cpu_ms_per_search": round(1000 * server_cpu / len(ms), 2),
            "client_cpu_ms_per_search": round(1000 * client_cpu / len(ms), 2),
            "machine_steal_share": round(steal / max(total, 1), 3)}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_json(path: str, result: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=2500)
    p.add_argument("--seconds", type=float, default=20.0, help="per client count")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"], help="the server's engine")
    p.add_argument("--clue-merge", default="leaders", choices=["components", "leaders"],
                   help="the server's --clue-merge")
    p.add_argument("--encoder-runtime", default="auto", choices=["auto", "torch", "onnx"],
                   help="the server's --encoder-runtime")
    p.add_argument("--output", default="benchmarks/results/serve_load.json")
    args = p.parse_args()
    data = sessions(args.sessions)
    questions = [" ".join(s["utterances"][0]["text"].split()[:6]) for s in data[:200]]
    result: dict = {"sessions": args.sessions, "utterances": 10 * args.sessions, "machine": f"{os.cpu_count()} cores",
                    "load_client": "http.client",
                    "device": args.device, "clue_merge": args.clue_merge, "encoder_runtime": args.encoder_runtime}
    with tempfile.TemporaryDirectory() as tmp:
        for encoder, field in (("hashing", "ingest_sessions_per_s_without_encoding"),
                               ("all-MiniLM-L6-v2", "ingest_sessions_per_s")):
            folder, port = Path(tmp) / encoder, free_port()
            proc = start(folder, port, encoder, args.device, args.clue_merge, args.encoder_runtime)
            url = f"http://127.0.0.1:{port}"
            key = httpx.post(f"{url}/v1/tenants", json={"name": "load"},
                             headers={"Authorization": f"Bearer {ADMIN}"}).json()["api_key"]
            result[field] = round(ingest(url, key, data), 2)
            print(json.dumps({field: result[field]}), flush=True)
            if encoder != "hashing":
                httpx.post(f"{url}/v1/search", json={"questions": [questions[0]], "k": 10},
                           headers={"Authorization": f"Bearer {key}"}, timeout=600).raise_for_status()
                time.sleep(6)  # one-time costs out of the timed runs: the kernels loaded, the background snapshot
                result["load"] = []
                for clients in args.clients:
                    result["load"].append(load(url, key, clients, args.seconds, questions, proc.pid))
                    print(json.dumps(result["load"][-1]), flush=True)
                result["server_rss_mb"] = round(rss_mb(proc.pid), 1)
            proc.send_signal(signal.SIGKILL)  # the restart loads the background snapshot: no clean stop wrote one
            proc.wait()
            if encoder != "hashing":
                for how in ("after_kill", "after_clean_stop"):
                    t0 = time.perf_counter()
                    proc = start(folder, port, encoder, args.device, args.clue_merge, args.encoder_runtime)
                    result[f"restart_to_ready_s_{how}"] = round(time.perf_counter() - t0, 2)
                    httpx.post(f"{url}/v1/search", json={"questions": [questions[0]], "k": 10},
                               headers={"Authorization": f"Bearer {key}"}, timeout=600).raise_for_status()
                    result[f"restart_to_first_answer_s_{how}"] = round(time.perf_counter() - t0, 2)
                    proc.send_signal(signal.SIGTERM)  # a clean stop writes the snapshot the next restart loads
                    proc.wait()
    write_json(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
