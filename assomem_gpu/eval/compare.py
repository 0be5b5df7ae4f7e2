"""``python -m assomem_gpu.eval.compare``: two ranking exports of one dataset, question by question.

    python -m assomem_gpu.eval.compare --dataset SPEC [--haystack-sessions N --limit N --seed S] A.jsonl B.jsonl

A difference of a point or two of R@k over a few hundred questions is often a handful of questions that moved, which
chance alone moves too. For each metric (R@k at every ``--k``, and nDCG@10) this reports the mean of each export and
of B − A over the questions with evidence, a 95% confidence interval of that mean difference from a paired bootstrap
(questions resampled with replacement, ``--resamples`` times, seeded by ``--bootstrap-seed``; every metric of a group
reads the same resamples), the questions B ranks better, worse or the same, and the two-sided sign test's p-value
over the questions that differ (the chance of a split at least as uneven if neither export were better). The same
per question type, where the data has types. The dataset options must name the questions the exports were made for
(as ``python -m assomem_gpu.eval`` was given them); nothing is encoded.

Reading it: where few questions differ (under about ten) the bootstrap interval is too narrow (a resample that misses
all of them is rarer than 2.5%), so the sign test is the one to trust there; and several metrics and types tested at
once make a p near 0.05 weak evidence on its own.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..cli_options import add_dataset_options, check_writable, dataset_from_options, dataset_record
from ..memory import Dataset
from ..metrics import DEFAULT_KS, utterance_metrics
from .runner import read_rankings

RESAMPLES = 10_000  # bootstrap resamples of the questions, default


@dataclass(frozen=True)
class Paired:
    """One metric over the questions both exports ranked: means of A and B (percent), B − A and its 95% bootstrap
    interval (percentage points), how many questions B ranks better / worse / the same, and the sign test's p."""

    n: int
    a: float
    b: float
    diff: float
    low: float
    high: float
    better: int
    worse: int
    same: int
    p: float


def resampled(n: int, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """(resamples, n) question indices (int64) drawn with replacement: the bootstrap's resamples of ``n`` questions
    (8 bytes each: 10,000 resamples of 5,000 questions hold 400 MB)."""
    return np.random.default_rng(seed).integers(0, n, (resamples, n))


def paired(a: np.ndarray, b: np.ndarray, draws: np.ndarray | None = None) -> Paired:
    """The paired comparison of per-question values ``a`` and ``b`` (fractions, one per question); ``draws``: the
    bootstrap's resamples (``resampled``; default ``resampled(len(a))``)."""
    from scipy.stats import binomtest  # (scipy.stats loads ~0.3 s: only where a comparison runs)

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"a and b: one value per question, as many of each (got {a.shape} and {b.shape})")
    d = b - a
    draws = resampled(len(d)) if draws is None else draws
    if draws.ndim != 2 or draws.shape[1] != len(d):
        raise ValueError(f"draws: resamples of {len(d)} questions, got shape {draws.shape}")
    means = d[draws].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    better, worse = int((d > 0).sum()), int((d < 0).sum())
    p = binomtest(better, better + worse, 0.5).pvalue if better + worse else 1.0
    return Paired(len(d), 100 * a.mean(), 100 * b.mean(), 100 * d.mean(), 100 * low, 100 * high, better, worse,
                  len(d) - better - worse, float(p))


def compare(ds: Dataset, a: Sequence[np.ndarray], b: Sequence[np.ndarray], ks: Sequence[int] = DEFAULT_KS,
            resamples: int = RESAMPLES, seed: int = 0) -> dict[str, dict[str, Paired]]:
    """Per group (``"all"``, then each question type) and metric (``R@k``, ``nDCG@10``): ``paired`` of the rankings
    ``a`` and ``b`` (bank rows, best first, one per question of ``ds``) over the questions with evidence, each group's
    metrics on the same ``resamples`` (seeded by ``seed``)."""
    for name, side in (("a", a), ("b", b)):
        if len(side) != len(ds.questions):
            raise ValueError(f"{name}: one ranking per question of the dataset ({len(ds.questions)}), got {len(side)}")
    names = [f"R@{k}" for k in ks] + ["nDCG@10"]
    rows, types = [], []
    for q, ra, rb in zip(ds.questions, a, b):
        if len(q.evidence):
            ma, mb = utterance_metrics(ra, q.evidence, [*ks, 10]), utterance_metrics(rb, q.evidence, [*ks, 10])
            rows.append([(ma[m], mb[m]) for m in names])
            types.append(q.type)
    if not rows:
        raise ValueError("dataset: no question has evidence: nothing to compare")
    values = np.asarray(rows)  # (questions, metrics, 2)
    groups = {"all": np.ones(len(rows), bool)}
    groups.update({t: np.asarray([x == t for x in types]) for t in sorted({t for t in types if t is not None})})
    out = {}
    for g, at in groups.items():
        draws = resampled(int(at.sum()), resamples, seed)
        out[g] = {m: paired(values[at, i, 0], values[at, i, 1], draws) for i, m in enumerate(names)}
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m assomem_gpu.eval.compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("a", help="ranking export A (python -m assomem_gpu.eval --rankings)")
    p.add_argument("b", help="ranking export B, compared with A (B - A)")
    add_dataset_options(p, "the seeded sample of this many questions the exports were made for",
                        "<format>:<path>, as the exports were made with (and the options below)")
    p.add_argument("--k", type=int, nargs="+", default=list(DEFAULT_KS), help="cut-offs of R@k")
    p.add_argument("--resamples", type=int, default=RESAMPLES, help="bootstrap resamples")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap's resamples")
    p.add_argument("--output", help="write the comparison as JSON here")
    args = p.parse_args(argv)
    if any(k < 1 for k in args.k) or args.resamples < 1:
        p.error("--k values and --resamples must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.output:
            check_writable(Path(args.output))
        ds = dataset_from_options(args)
        result = compare(ds, read_rankings(args.a, ds), read_rankings(args.b, ds), args.k, args.resamples,
                         args.bootstrap_seed)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print(result, args)
    if args.output:
        report = {**dataset_record(args), "a": args.a, "b": args.b, "ks": args.k, "resamples": args.resamples,
                  "bootstrap_seed": args.bootstrap_seed,
                  "groups": {g: {m: asdict(x) for m, x in ms.items()} for g, ms in result.items()}}
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.output}")
    return 0


def _print(result: dict[str, dict[str, Paired]], args: argparse.Namespace) -> None:
    """Every metric over all questions, then R@10 (the largest ``--k`` where 10 is not among them) per type."""
    from rich.console import Console
    from rich.table import Table

    def table(title: str, first: str, rows: Iterable[tuple[str, Paired]]) -> Table:
        out = Table(title=title)
        for col in (first, "A", "B", "B−A", "95% CI", "better/worse/same", "p"):
            out.add_column(col, justify="left" if col == first else "right")
        for name, x in rows:
            out.add_row(name, f"{x.a:.2f}", f"{x.b:.2f}", f"{x.diff:+.2f}", f"{x.low:+.2f} … {x.high:+.2f}",
                        f"{x.better}/{x.worse}/{x.same}", f"{x.p:.3f}" if x.p >= 0.001 else "<0.001")
        return out

    console = Console(width=None if Console().is_terminal else 160)  # (as the eval report: a log keeps its rows)
    a, b = Path(args.a).name, Path(args.b).name
    overall = result["all"]
    console.print(table(f"B = {b} against A = {a}, {overall['nDCG@10'].n} questions", "metric", overall.items()))
    typed = [g for g in result if g != "all"]
    if typed:
        k = 10 if 10 in args.k else max(args.k)
        console.print(table(f"R@{k} per question type", "type", [(g, result[g][f"R@{k}"]) for g in typed]))


if __name__ == "__main__":
    sys.exit(main())
