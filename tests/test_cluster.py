"""Batch retrieval on Dask: a real LocalCluster of worker processes gives the rankings of one process, a worker
killed in the middle costs nothing, data the workers lost is sent again, and a scheduler that is not there is a clear
error."""
from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")

from assomem_gpu.assomem import AssoMem
from assomem_gpu.cluster import Workers, connect
from assomem_gpu.data import load_dataset
from assomem_gpu.encode import make_encoder
from assomem_gpu.eval.__main__ import main as eval_main
from assomem_gpu.eval.runner import evaluate
from assomem_gpu.fusion import fixed_weights
from assomem_gpu.retrieve import EmbeddedDataset, make_method

from conftest import lme_item

WORDS = ("garden tomato recipe guitar lesson flight tokyo budget invoice puppy vet marathon shoes piano concert "
         "novel library camera lens bakery bread coffee beans yoga class bike tire salary raise dentist visit").split()


@pytest.fixture
def many_memories(tmp_path):
    """A LongMemEval file of 16 questions, each asking its own memory of 8 sessions (grown with --haystack-sessions)."""
    rng = np.random.default_rng(7)
    items = []
    for q in range(16):
        sessions = {}
        for s in range(8):
            turns = [("user" if t % 2 == 0 else "assistant",
                      f"{' '.join(rng.choice(WORDS, 6))} on day {rng.integers(1, 28)} of May", s == 0 and t == 0)
                     for t in range(3)]
            sessions[f"q{q}_s{s}"] = turns
        dates = [f"2023/05/{d:02d} (Mon) 10:00" for d in range(1, 9)]
        items.append(lme_item(f"q{q}", f"what about the {rng.choice(WORDS)} and {rng.choice(WORDS)}?", sessions, dates,
                              qtype=("multi-session", "temporal-reasoning")[q % 2]))
    path = tmp_path / "many.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(items, fh)
    return path


def test_cluster_gives_the_rankings_and_results_of_one_process(tmp_path, many_memories):
    common = ["--dataset", f"longmemeval:{many_memories}", "--haystack-sessions", "40", "--encoder", "hashing",
              "--method", "flat-dense,bm25,topic-grouping,assomem", "--quiet"]
    assert eval_main([*common, "--rankings", str(tmp_path / "one.jsonl"), "--output", str(tmp_path / "one.json")]) == 0
    assert eval_main([*common, "--rankings", str(tmp_path / "two.jsonl"), "--output", str(tmp_path / "two.json"),
                      "--cluster", "local:2"]) == 0
    for method in ("flat-dense", "bm25", "topic-grouping", "assomem"):
        one, two = (tmp_path / f"{n}.{method}.jsonl" for n in ("one", "two"))
        assert one.read_bytes() == two.read_bytes(), method
        assert len(one.read_text().splitlines()) == 16
    single, spread = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    assert {m: r["metrics"] for m, r in spread["results"].items()} == \
        {m: r["metrics"] for m, r in single["results"].items()}
    assert spread["cluster"]["workers"] == 2 and "cluster" not in single
    assert all(mb > 50 for mb in spread["cluster"]["worker_peak_rss_mb"])  # a worker process holds the package


def fixed_weights_run(memories, sessions: int):
    """The dataset of ``memories`` grown to ``sessions`` a haystack (hashing encoder), AssoMem with fixed weights, and
    its rankings in one process."""
    ds = load_dataset(f"longmemeval:{memories}", haystack_sessions=sessions)
    data = EmbeddedDataset.build(ds, make_encoder("hashing"))
    method = AssoMem(fusion=fixed_weights(AssoMem().config.signals), encoder=make_encoder("hashing"), device="cpu")
    return data, method, evaluate(data, method, [1, 10], progress=False).rankings


def test_a_worker_killed_mid_run_is_replaced_and_no_question_is_lost_or_doubled(many_memories):
    data, method, expected = fixed_weights_run(many_memories, 100)
    with connect("local:2") as client:
        workers = Workers(client, data)
        pids = client.run(os.getpid)
        done: dict = {}

        def job():
            try:
                done["result"] = evaluate(data, method, [1, 10], progress=False, workers=workers)
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                done["error"] = exc

        thread = threading.Thread(target=job, daemon=True)
        thread.start()
        victim, deadline = None, time.monotonic() + 120
        while victim is None and thread.is_alive() and time.monotonic() < deadline:
            victim = next((w for w, keys in client.processing().items() if keys), None)
            time.sleep(0.002)
        assert victim is not None, "no worker was seen holding a task"
        os.kill(pids[victim], signal.SIGKILL)
        thread.join(timeout=300)
        assert not thread.is_alive() and "error" not in done, done.get("error")
        removed = [msg for _, msg in client.get_events(victim) if msg.get("action") == "remove-worker"]
        after = client.run(os.getpid)
    assert removed and removed[0]["processing-tasks"]  # it died holding tasks, and they ran again elsewhere
    assert victim not in after
    got = done["result"].rankings
    assert len(got) == len(expected) == 16
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))


def test_a_run_whose_sent_data_was_lost_sends_it_again(many_memories):
    """Dask does not recompute a scattered value (dask/distributed#3149): when the dataset sent to the workers is
    lost (here: cancelled; in use: the death of the workers holding it), the tasks that needed it are cancelled for
    "lost dependencies", and the run sends it again and gives the rankings of one process."""
    data, method, expected = fixed_weights_run(many_memories, 30)
    with connect("local:2") as client:
        workers = Workers(client, data)
        sent = workers._data
        client.cancel(sent)
        got = evaluate(data, method, [1, 10], progress=False, workers=workers).rankings
        assert workers._data.key != sent.key
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))


def test_cross_validation_whose_sent_features_were_lost_sends_them_again(many_memories):
    """The features that cross-validation sends for its fold tasks are sent again where the workers lose them
    (here: cancelled as they are sent), as the dataset is."""
    from assomem_gpu.calibrate import cross_validated_rankings

    ds = load_dataset(f"longmemeval:{many_memories}", haystack_sessions=30)
    data = EmbeddedDataset.build(ds, make_encoder("hashing"))
    method, questions = AssoMem(encoder=make_encoder("hashing"), device="cpu"), list(range(len(ds.questions)))
    one, chosen = cross_validated_rankings(method, data, questions, 4, 50, progress=False)
    with connect("local:1") as client:
        workers, send, lost = Workers(client, data), Workers.send, []

        def send_and_lose(self, value):
            future = send(self, value)
            if isinstance(value, list) and not lost:  # the features, the first time
                client.cancel(future)
                lost.append(future.key)
            return future

        workers.send = send_and_lose.__get__(workers)
        spread, spread_chosen = cross_validated_rankings(method, data, questions, 4, 50, progress=False,
                                                         workers=workers)
        assert lost and not [v for v in workers._values.values() if isinstance(v, list)]  # forgotten once run
    assert all(np.array_equal(a, b) for a, b in zip(one, spread)) and spread_chosen == chosen  # (T_w, left out)


def test_a_cluster_that_keeps_losing_what_it_was_sent_is_a_clear_error(monkeypatch, jsonl_file, capsys):
    """Past ``cluster.RESENDS`` losses the eval command stops with an error naming the cluster, not a traceback."""
    send = Workers.send

    def send_and_lose(self, value):
        future = send(self, value)
        self.client.cancel(future)
        return future

    monkeypatch.setattr(Workers, "send", send_and_lose)
    assert eval_main(["--dataset", f"jsonl:{jsonl_file}", "--encoder", "hashing", "--method", "bm25", "--quiet",
                      "--cluster", "local:1"]) == 2
    assert "error: cluster: bm25's tasks were cancelled" in capsys.readouterr().err


def test_baselines_and_cross_validation_run_as_tasks(many_memories):
    ds = load_dataset(f"longmemeval:{many_memories}", haystack_sessions=30)
    data = EmbeddedDataset.build(ds, make_encoder("hashing"))
    method = AssoMem(encoder=make_encoder("hashing"), device="cpu")  # no weights: cross-validated, folds as tasks
    with connect("local:1") as client:
        workers = Workers(client, data)
        spread = [evaluate(data, m, [5], folds=4, progress=False, workers=workers).rankings
                  for m in (make_method("session-flat"), method)]
    single = [evaluate(data, m, [5], folds=4, progress=False).rankings for m in (make_method("session-flat"), method)]
    for a, b in zip(spread, single):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_scheduler_that_is_not_there_is_a_clear_error(capsys, jsonl_file):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ValueError, match=f"no Dask scheduler answered at tcp://127.0.0.1:{port} within 1 s"):
        with connect(f"tcp://127.0.0.1:{port}", timeout_s=1):
            pass
    for greeting in (b"", b"SSH-2.0-OpenSSH_9.6\r\n"):  # a service that never speaks (an HTTP server), or one that
        # greets first: neither is a scheduler
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            address = f"tcp://127.0.0.1:{server.getsockname()[1]}"

            def answer():
                peer, _ = server.accept()
                peer.sendall(greeting)
                time.sleep(8)
                peer.close()

            threading.Thread(target=answer, daemon=True).start()
            start = time.monotonic()
            with pytest.raises(ValueError, match=f"at {address}"):
                with connect(address, timeout_s=1):
                    pass
            assert time.monotonic() - start < 6
    for spec in ("local:0", "local:two", "mpi://x", "local:²", "local:2 ", "tcp://", "tcp://host"):
        assert eval_main(["--dataset", f"jsonl:{jsonl_file}", "--encoder", "hashing", "--cluster", spec]) == 2
        assert "cluster must be 'local:N'" in capsys.readouterr().err


def test_a_service_that_is_no_scheduler_ends_the_run_at_once(jsonl_file):
    """The eval CLI pointed at another service that greets first: a clear error and the process ends (a client made
    of it waited 20 s at the interpreter's exit)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer():
            peer, _ = server.accept()
            peer.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            time.sleep(30)
            peer.close()

        threading.Thread(target=answer, daemon=True).start()
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "assomem_gpu.eval", "--dataset", f"jsonl:{jsonl_file}", "--encoder",
                              "hashing", "--cluster", f"tcp://127.0.0.1:{server.getsockname()[1]}", "--quiet"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and "is not a Dask scheduler" in run.stderr, run.stderr
        assert time.monotonic() - start < 12 and "Traceback" not in run.stderr


def test_workers_of_several_threads_are_refused(jsonl_file):
    from distributed import Client, LocalCluster

    data = EmbeddedDataset.build(load_dataset(f"jsonl:{jsonl_file}"), make_encoder("hashing"))
    with LocalCluster(n_workers=1, threads_per_worker=2, dashboard_address=":0") as cluster, Client(cluster) as client:
        with pytest.raises(ValueError, match="one thread each"):
            Workers(client, data)


def test_calibrate_on_a_cluster_writes_the_weights_of_one_process(tmp_path, many_memories):
    from assomem_gpu.calibrate import main as calibrate_main

    common = ["--dataset", f"longmemeval:{many_memories}", "--haystack-sessions", "30", "--encoder", "hashing",
              "--quiet"]
    assert calibrate_main([*common, "--output", str(tmp_path / "one.json")]) == 0
    assert calibrate_main([*common, "--output", str(tmp_path / "two.json"), "--cluster", "local:2"]) == 0
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


def test_local_cuda_cluster_ranks_as_one_gpu_process(many_memories):
    pytest.importorskip("dask_cuda")
    from assomem_gpu.backend import cupy_reason

    if cupy_reason():
        pytest.skip(f"no usable GPU: {cupy_reason()}")
    ds = load_dataset(f"longmemeval:{many_memories}", haystack_sessions=40)
    data = EmbeddedDataset.build(ds, make_encoder("hashing"))
    method = AssoMem(fusion=fixed_weights(AssoMem().config.signals), encoder=make_encoder("hashing"), device="cuda")
    expected = evaluate(data, method, [10], progress=False).rankings
    with connect("local-cuda") as client:
        got = evaluate(data, method, [10], progress=False, workers=Workers(client, data)).rankings
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
