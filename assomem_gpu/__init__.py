"""assomem_gpu: associative multi-signal memory retrieval (AssoMem), batched, with CPU and GPU paths."""
import os

# OpenBLAS's idle workers otherwise spin for ~2^28 cycles after every call and starve Numba's threads (and the next
# small call waits for them): on 2 cores this tripled single-question latency. It takes effect only when this package
# is imported before numpy (the CLIs always are); set the variable yourself to choose otherwise.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from .data import DataFormatError, load_dataset
from .encode import CachedEncoder, EmbeddingCache, HashingEncoder, TransformersEncoder, make_encoder
from .eval import evaluate
from .memory import Dataset, Memory, MemoryBank, Question
from .retrieve import METHODS, EmbeddedDataset, make_method

__version__ = "0.1.0"

__all__ = ["CachedEncoder", "DataFormatError", "Dataset", "EmbeddedDataset", "EmbeddingCache", "HashingEncoder",
           "METHODS", "Memory", "MemoryBank", "Question", "TransformersEncoder", "evaluate", "load_dataset",
           "make_encoder", "make_method"]
