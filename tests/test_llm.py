"""LLM clients and clues: the bundled SmolLM2 (real weights, via transformers), and the OpenAI-compatible client against
a real llama.cpp server process serving the same GGUF on loopback."""
import json
from pathlib import Path

import numpy as np
import pytest

from assomem_gpu.assomem import AssoMem
from assomem_gpu.config import AssoMemConfig
from assomem_gpu.data import load_dataset
from assomem_gpu.encode import HashingEncoder
from assomem_gpu.llm import (OpenAICompatibleLLM, ResponseCache, TransformersLLM, cached_chat, llm_clues, make_llm,
                             session_prompt)
from assomem_gpu.retrieve import EmbeddedDataset


@pytest.fixture(scope="module")
def smollm2():
    return make_llm("smollm2")


@pytest.fixture
def two_sessions(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [
        {"type": "session", "id": "a", "utterances": [{"speaker": "user", "text": "How do I care for leather boots?"},
                                                       {"speaker": "assistant", "text": "Condition them monthly."}]},
        {"type": "session", "id": "b", "utterances": [{"speaker": "user", "text": "Plan a trip to Lisbon in April."}]},
    ]))
    return load_dataset(f"jsonl:{path}")


class CountingLLM:
    """Wraps a real LLM and counts the prompts it is asked."""

    def __init__(self, inner):
        self.inner, self.name, self.calls = inner, inner.name, 0

    def chat(self, prompts, max_new_tokens=48):
        self.calls += len(prompts)
        return self.inner.chat(prompts, max_new_tokens)


def test_bundled_smollm2_writes_cached_clues(tmp_path, smollm2, two_sessions):
    llm = CountingLLM(smollm2)
    cache = ResponseCache(tmp_path / "c.sqlite")
    clues = llm_clues(two_sessions.bank, llm, cache, progress=False)
    assert len(clues) == 2 and all(isinstance(c, str) and c for c in clues) and llm.calls == 2
    assert llm_clues(two_sessions.bank, llm, ResponseCache(tmp_path / "c.sqlite"), progress=False) == clues
    assert llm.calls == 2  # second run: all from the cache
    assert "Dialogue session: user: How do I care for leather boots?" in session_prompt(two_sessions.bank, 0)


def test_openai_compatible_client_against_a_llama_cpp_server(llama_server):
    remote = make_llm(llama_server)
    assert isinstance(remote, OpenAICompatibleLLM)
    prompts = ["Name one colour.", "Name one fruit.", "Name one animal.", "Name one city."]
    replies = remote.chat(prompts, 8)  # four requests, at most four in flight
    assert len(replies) == 4 and all(isinstance(r, str) and r for r in replies)
    assert remote.chat(prompts[::-1], 8) == replies[::-1]  # greedy: neither order nor concurrency changes a reply
    with pytest.raises(ValueError, match="prompt: the LLM endpoint refused it"):
        remote.chat(["word " * 9_000], 8)  # over the server's 8,192-token context: a 400


def test_openai_compatible_client_retries_then_gives_up(llama_server, llm_proxy):
    """A proxy in front of the real server answers 503 to the first two requests: the client retries (with backoff)
    and gets the real reply; with no retries left it raises, naming the endpoint."""
    prompt, url = "Name one colour.", llm_proxy.url
    llm_proxy.fail_next = 2
    assert OpenAICompatibleLLM(url, "smollm2", retries=2).chat([prompt], 8) == make_llm(llama_server).chat([prompt], 8)
    llm_proxy.fail_next = 1
    with pytest.raises(RuntimeError, match=f"LLM endpoint {url} .*failed"):
        OpenAICompatibleLLM(url, "smollm2", retries=0).chat([prompt], 8)
    with pytest.raises(ValueError, match="concurrency"):
        OpenAICompatibleLLM(url, "smollm2", concurrency=0)


def test_batched_generation_answers_as_one_at_a_time(smollm2):
    prompts = ["Name one colour.", "Write the first three letters of the alphabet, separated by commas."]
    one = TransformersLLM(smollm2.model_ref, smollm2.gguf_file, batch_size=1)
    assert smollm2.chat(prompts, 12) == one.chat(prompts, 12)  # left padding changes no greedy reply


def test_a_prompt_over_the_models_context_is_refused_before_any_generation(smollm2):
    """As an endpoint refuses it: transformers would run it past the model's positions for minutes and reply with
    noise (a 14,753-token prompt: 149 s on 2 cores)."""
    over = "one two three four five six seven eight nine ten " * 900  # ~9,000 tokens of SmolLM2's 8,192
    with pytest.raises(ValueError, match=r"prompt: its \d+ tokens and max_new_tokens 8 exceed the context of "
                                         r"8192 tokens"):
        smollm2.chat(["Name one colour.", over], 8)
    assert smollm2.chat(["Name one colour."], 4)  # the same model answers a prompt that fits


def test_a_fit_is_told_without_the_weights():
    from assomem_gpu.llm import bundled_smollm2

    llm = TransformersLLM(*bundled_smollm2(), context=600)
    prompts = ["Name one colour.", "one two three four five six seven eight nine ten " * 60]  # ~600 tokens
    assert llm.fits(prompts, 8) == [True, False]
    assert make_llm("smollm2").fits(prompts, 8) == [True, True]  # the model's own 8,192
    assert llm._loaded is None  # the tokenizer and the config told it: no weights loaded
    with pytest.raises(ValueError, match="context: a positive number of tokens"):
        TransformersLLM(*bundled_smollm2(), context=0)


def test_a_model_that_cannot_load_is_named(tmp_path, monkeypatch):
    """Its tokenizer (read by a fit, and first by a chat) or its weights (a chat's): the same error, naming it."""
    from transformers import AutoModelForCausalLM

    from assomem_gpu.llm import bundled_smollm2

    missing = TransformersLLM(tmp_path / "no-model")
    for call in (lambda: missing.fits(["Name one colour."]), lambda: missing.chat(["Name one colour."])):
        with pytest.raises(RuntimeError, match=f"cannot load the LLM {tmp_path / 'no-model'}"):
            call()

    def unreadable(*args, **kwargs):
        raise OSError("weights unreadable")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", unreadable)
    llm = TransformersLLM(*bundled_smollm2())
    assert llm.fits(["Name one colour."]) == [True]  # the tokenizer and config load
    with pytest.raises(RuntimeError, match=r"cannot load the LLM .*: weights unreadable"):
        llm.chat(["Name one colour."])


def test_llm_clue_mode_feeds_the_graph(tmp_path, monkeypatch, smollm2, two_sessions):
    monkeypatch.setenv("ASSOMEM_CACHE_DIR", str(tmp_path / "cache"))
    llm_clues(two_sessions.bank, smollm2, progress=False)  # warm the clue cache the method will read
    enc = HashingEncoder()
    data = EmbeddedDataset.build(two_sessions, enc)
    method = AssoMem(AssoMemConfig(clue_mode="llm"), encoder=enc)
    emb = method.index(data, 0)._state.clue_emb.view
    assert emb.shape == (2, enc.dim) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)


def test_bad_llm_spec():
    with pytest.raises(ValueError, match="LLM must be"):
        make_llm("gpt-9000")


def test_llm_specs_name_a_folder_a_file_in_it_or_a_gguf_file(smollm2):
    folder, name = smollm2.model_ref, smollm2.gguf_file
    for spec in (f"hf:{folder}::{name}", f"hf:{folder / name}"):
        llm = make_llm(spec)
        assert isinstance(llm, TransformersLLM) and (Path(llm.model_ref), llm.gguf_file) == (folder, name)
        assert llm.name == smollm2.name  # one model, one identity in the reply cache


def test_llm_clues_of_a_live_index_stay_off_disk(tmp_path, isolated_cache):
    from assomem_gpu import MemoryIndex, Session, Utterance

    index = MemoryIndex(HashingEncoder(), AssoMemConfig(clue_mode="llm"), device="cpu")
    index.add_sessions([Session("a", "2024-01-01", [Utterance("How do I care for leather boots?", "user")])])
    assert index._state.clue_emb.view.shape == (1, index.dim)
    index.remove_sessions(["a"])
    files = [p for p in isolated_cache.rglob("*") if p.is_file()] if isolated_cache.exists() else []
    assert not any(b"leather" in p.read_bytes() for p in files)


def test_an_endpoint_that_fails_stops_the_batch_at_the_first_failure():
    """A hung endpoint (a loopback socket that accepts and never answers): the first timeout fails the batch, and the
    prompts not yet sent are not sent (each would wait out its own timeout)."""
    import socket
    import threading

    opened = []

    def accept() -> None:
        try:
            while True:
                opened.append(server.accept()[0])
        except OSError:  # the socket closed: the test is over
            pass

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        threading.Thread(target=accept, daemon=True).start()
        llm = OpenAICompatibleLLM(f"http://127.0.0.1:{server.getsockname()[1]}/v1", "m", timeout=1.0, retries=0,
                                  concurrency=2)
        with pytest.raises(RuntimeError, match="failed"):
            llm.chat([f"prompt {i}" for i in range(8)], 8)
        assert len(opened) <= 4
        for conn in opened:
            conn.close()


def test_a_batch_cut_short_by_a_failing_endpoint_keeps_the_replies_it_got(tmp_path, llm_proxy):
    """The endpoint answers two prompts and is then down: the two replies are cached and counted before the failure
    is raised (``Failed``, a ``RuntimeError``), so a rerun asks only the rest."""
    from assomem_gpu.llm import Failed

    llm = OpenAICompatibleLLM(llm_proxy.url, "smollm2", retries=0, concurrency=1)
    prompts = ["Name one colour.", "Name one fruit.", "Name one animal.", "Name one city."]
    cache, asked = ResponseCache(tmp_path / "replies.sqlite"), []
    llm_proxy.ok_left = 2
    with pytest.raises(Failed, match="failed") as failed:
        cached_chat(llm, prompts, 8, cache, asked=asked)
    assert [r is not None for r in failed.value.replies] == [True, True, False, False] and asked == [2]
    assert [cache.get(llm.name, p, 8) for p in prompts[:2]] == failed.value.replies[:2]
    llm_proxy.ok_left = None
    llm_proxy.mode = "ok"
    assert cached_chat(llm, prompts, 8, cache, asked=asked)[:2] == failed.value.replies[:2] and asked == [2, 2]
