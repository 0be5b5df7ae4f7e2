"""assomem_gpu: associative multi-signal memory retrieval (AssoMem), batched, with CPU and GPU paths.

The live memory is ``MemoryIndex`` (add sessions, remove them, search with text, save, load); the benchmark tools
(``python -m assomem_gpu.eval``, ``.calibrate``, ``.bench``) run the same engine.
"""
from .kernels.parallel import quiet_idle_threads

quiet_idle_threads()  # before anything imports numpy or torch

from .config import AssoMemConfig  # noqa: E402
from .data import DataFormatError, load_dataset
from .encode import (CachedEncoder, EmbeddingCache, HashingEncoder, OnnxEncoder, TransformersEncoder, make_encoder,
                     text_encoder)
from .eval import evaluate
from .graph import GraphConfig
from .index import Answer, Hit, LabelledQuestion, MemoryIndex, Session, Utterance
from .memory import Dataset, Memory, MemoryBank, Question
from .retrieve import METHODS, EmbeddedDataset, make_method
from .snapshot import SnapshotError
from .store import MemoryStore, StoreError

__version__ = "0.2.0"

__all__ = ["Answer", "AssoMemConfig", "CachedEncoder", "DataFormatError", "Dataset", "EmbeddedDataset", "EmbeddingCache",
           "GraphConfig", "HashingEncoder", "Hit", "LabelledQuestion", "METHODS", "Memory", "MemoryBank",
           "MemoryIndex", "MemoryStore", "OnnxEncoder", "Question", "Session", "SnapshotError", "StoreError",
           "TransformersEncoder", "Utterance", "evaluate", "load_dataset", "make_encoder", "make_method", "text_encoder"]
