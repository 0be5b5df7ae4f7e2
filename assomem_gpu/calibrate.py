"""Calibrating the fusion weights, and cross-validated evaluation that never calibrates on an evaluated question.

``python -m assomem_gpu.calibrate --dataset ... --output weights.json`` fits the CMI weights and the type classifier
on every question of a dataset and saves them with the retrieval config, for ``eval --weights`` on another dataset.
"""
from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Sequence

import numpy as np

from .assomem import AssoMem
from .cluster import Workers, connect
from .folds import fold_ids
from .retrieve import EmbeddedDataset, by_memory
from .scoring import Features


def folds_of(data: EmbeddedDataset, questions: Sequence[int], k: int, seed: int = 0) -> list[np.ndarray]:
    """``k`` disjoint folds of question rows, grouped by memory when there are at least ``k`` memories.

    Where all questions share fewer memories than folds (MeetingQA: one), folds split the questions themselves:
    calibration then sees other questions' labels on the same memory, never the evaluated questions' own.
    """
    qs = np.asarray(questions)
    fold = fold_ids([data.dataset.questions[q].memory for q in qs], k, seed)
    return [qs[fold == i] for i in range(k)]


def cross_validated_rankings(method: AssoMem, data: EmbeddedDataset, questions: Sequence[int], k: int, depth: int,
                             seed: int = 0, batch_size: int = 64, progress: bool = True,
                             workers: Workers | None = None) -> tuple[list[np.ndarray], list[Chosen]]:
    """Rankings of ``questions`` where each fold is ranked with weights calibrated on the other folds only, and what
    its fold's calibration chose for each question's weights (``Chosen``). ``workers``: run the memories and the
    folds as Dask tasks (``cluster``), with the same result."""
    feats = compute_features(method, data, questions, batch_size, progress, workers)
    folds = folds_of(data, questions, k, seed)
    if workers is not None:
        sent = workers.send(feats)
        try:
            out = workers.per_fold(method, folds, fold_rankings, list(questions), sent, depth, progress=progress)
        finally:
            workers.forget(sent)
    else:
        out = {}
        for fold in folds:
            out.update(zip(fold.tolist(), fold_rankings(method, data, fold, questions, feats, depth)))
    return [out[q][0] for q in questions], [out[q][1] for q in questions]


Chosen = tuple[float, tuple[str, ...]]  # what a calibration chose: the weight temperature, the signals left out


def fold_rankings(method: AssoMem, data: EmbeddedDataset, fold: np.ndarray, questions: Sequence[int],
                  feats: Sequence[Features], depth: int) -> list[tuple[np.ndarray, Chosen]]:
    """(ranking, what the calibration chose) of each question in ``fold`` (``feats`` align with ``questions``), fused
    with weights calibrated on the other questions; with the shipped weights when those hold no labelled question."""
    by_q = dict(zip(questions, feats))
    held = set(fold.tolist())
    train = [q for q in questions if q not in held]
    labelled = any(len(data.dataset.questions[q].evidence) for q in train)
    model = method.fit(data, train, [by_q[q] for q in train]) if labelled else method.default_fusion()
    chosen = (model.weight_temperature, model.left_out)
    return [(r, chosen) for r in method.fuse([by_q[q] for q in fold], data.questions[fold], model, depth)]


def compute_features(method: AssoMem, data: EmbeddedDataset, questions: Sequence[int], batch_size: int = 64,
                     progress: bool = True, workers: Workers | None = None) -> list[Features]:
    """Every question's features, a memory at a time (``memory_features``); on ``workers``, a task per memory."""
    from tqdm.auto import tqdm

    if workers is not None:
        return workers.per_memory(method, questions, memory_features, batch_size, progress=progress)
    out: dict[int, Features] = {}
    for group in tqdm(list(by_memory(data.dataset, questions).values()), desc=f"{method.name} signals",
                      unit="memory", disable=not progress):
        out.update(zip(group, memory_features(method, data, group, batch_size)))
    return [out[q] for q in questions]


def memory_features(method: AssoMem, data: EmbeddedDataset, group: Sequence[int], batch_size: int = 64) -> list[Features]:
    """The features of one memory's questions, in batches of ``batch_size``: the unit of work, in one process or in
    a Dask task (``cluster``), so both compute the same."""
    return [f for lo in range(0, len(group), batch_size) for f in method.features(data, group[lo : lo + batch_size])]


def main(argv: list[str] | None = None) -> int:
    from .cli_options import add_assomem_options, add_cluster_option, add_dataset_options
    from .encode import DEFAULT_MODEL, ENCODER_HELP, add_prompt_options

    p = argparse.ArgumentParser(prog="python -m assomem_gpu.calibrate", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_dataset_options(p, "calibrate on a seeded sample of this many questions",
                        "<format>:<path> of the labelled calibration data")
    p.add_argument("--output", required=True, help="weights file to write (JSON)")
    p.add_argument("--encoder", default=DEFAULT_MODEL, help=ENCODER_HELP)
    add_prompt_options(p)
    p.add_argument("--quiet", action="store_true")
    add_cluster_option(p)
    add_assomem_options(p)
    args = p.parse_args(argv)
    with ExitStack() as stack:
        return _calibrate(args, stack)


def _calibrate(args: argparse.Namespace, stack: ExitStack) -> int:
    """``main`` after parsing; ``stack`` closes the Dask client (and its local cluster) on the way out."""
    from .cli_options import check_writable, config_from_options, dataset_from_options
    from .encode import make_encoder, prompt_options
    from .fusion import save_weights

    client = None
    try:
        check_writable(Path(args.output))
        if args.cluster:
            client = stack.enter_context(connect(args.cluster))
        config = config_from_options(args)
        ds = dataset_from_options(args)
        encoder = make_encoder(args.encoder, prompts=prompt_options(args))
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    encoder.progress = not args.quiet
    data = EmbeddedDataset.build(ds, encoder)
    method = AssoMem(config, encoder=encoder)
    questions = list(range(len(ds.questions)))
    try:
        workers = None if client is None else Workers(client, data)
    except (ValueError, RuntimeError) as exc:  # (RuntimeError: the workers died while the data was sent)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        feats = compute_features(method, data, questions, progress=not args.quiet, workers=workers)
        model = method.fit(data, questions, feats)
    except (ValueError, RuntimeError) as exc:  # (RuntimeError: the cluster lost its workers, past the resends)
        if isinstance(exc, RuntimeError) and workers is None:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    save_weights(args.output, model, config.to_json(), encoder.name)
    print(f"calibrated on {sum(len(q.evidence) > 0 for q in ds.questions)} questions; weight temperature "
          f"{model.weight_temperature} (of {', '.join(map(str, config.weight_temperatures))}); signals left out: "
          f"{', '.join(model.left_out) or 'none'}; weights per type ({', '.join(model.signals)}):")
    for t, w in zip(model.types, model.type_weights):
        print(f"  {t:28s} " + "  ".join(f"{x:.3f}" for x in w))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
