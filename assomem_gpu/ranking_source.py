"""Where a command that consumes rankings (``answer``, ``finetune``) gets them: a ranking export, or retrieval with
``--method`` and the retriever's options."""
from __future__ import annotations

import argparse

import numpy as np

from .backend import get_backend
from .cli_options import ALL_METHODS, add_assomem_options, build_methods, fit_folds
from .encode import DEFAULT_MODEL, ENCODER_HELP, add_prompt_options, make_encoder, prompt_options
from .eval.runner import evaluate, read_rankings
from .memory import Dataset
from .retrieve import EmbeddedDataset


def add_rankings_options(p: argparse.ArgumentParser, purpose: str) -> None:
    """The options: ``--from-rankings``, or ``--method`` with the retriever's (its clue LLM's option is
    ``--clue-llm``)."""
    p.add_argument("--method", default="assomem", choices=ALL_METHODS, help=f"the retriever {purpose}")
    p.add_argument("--from-rankings", help="a ranking export (python -m assomem_gpu.eval --rankings) to use instead "
                                           "of retrieving")
    p.add_argument("--encoder", default=DEFAULT_MODEL, help=f"the retrieval's encoder: {ENCODER_HELP}")
    add_prompt_options(p)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where the retrieval engine runs")
    add_assomem_options(p, clue_llm_option="--clue-llm")


def rankings_from_options(args: argparse.Namespace, ds: Dataset, ks: list[int], progress: bool) -> list[np.ndarray]:
    """Per question of ``ds``: its ranking (bank rows, best first), read from ``--from-rankings`` or retrieved."""
    if args.from_rankings:
        return read_rankings(args.from_rankings, ds)
    encoder = make_encoder(args.encoder, prompts=prompt_options(args))
    encoder.progress = progress
    (method,) = build_methods(argparse.Namespace(**{**vars(args), "methods": [args.method]}), encoder,
                              get_backend(args.device))
    fit_folds(args, [method], len(ds.questions))
    return evaluate(EmbeddedDataset.build(ds, encoder), method, ks, progress=progress, folds=args.folds,
                    seed=args.seed).rankings
