"""assomem_gpu: associative multi-signal memory retrieval (AssoMem), batched, with CPU and GPU paths."""
from .data import DataFormatError, load_dataset
from .encode import CachedEncoder, EmbeddingCache, HashingEncoder, TransformersEncoder, make_encoder
from .eval import evaluate
from .memory import Dataset, Memory, MemoryBank, Question
from .retrieve import METHODS, EmbeddedDataset, make_method

__version__ = "0.1.0"

__all__ = ["CachedEncoder", "DataFormatError", "Dataset", "EmbeddedDataset", "EmbeddingCache", "HashingEncoder",
           "METHODS", "Memory", "MemoryBank", "Question", "TransformersEncoder", "evaluate", "load_dataset",
           "make_encoder", "make_method"]
