"""Evaluation: the batch runner and the ranking export (``python -m assomem_gpu.eval``); metrics in ``..metrics``."""
from ..metrics import DEFAULT_KS, mean_by_type, session_metrics, utterance_metrics
from .runner import EvalResult, evaluate, write_rankings

__all__ = ["DEFAULT_KS", "EvalResult", "evaluate", "mean_by_type", "session_metrics", "utterance_metrics",
           "write_rankings"]
