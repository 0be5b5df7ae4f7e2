"""The eval CLI (``python -m assomem_gpu.eval``): the batch runner and ranking export, scored by ``metrics.py``."""
from ..metrics import DEFAULT_KS, mean_by_type, session_metrics, utterance_metrics
from .runner import EvalResult, evaluate, write_rankings

__all__ = ["DEFAULT_KS", "EvalResult", "evaluate", "mean_by_type", "session_metrics", "utterance_metrics",
           "write_rankings"]
