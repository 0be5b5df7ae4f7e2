"""PNG plots of an evaluation: R@k curves per method and R@10 per question type (matplotlib, no display needed)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..memory import Dataset
from .runner import EvalResult


def recall_curve(ds: Dataset, rankings: Sequence[np.ndarray], ks: Sequence[int]) -> np.ndarray:
    """Mean R@k over the questions with evidence, for each k."""
    rows = [np.isin(r[: max(ks)], q.evidence) for q, r in zip(ds.questions, rankings) if len(q.evidence)]
    return np.array([np.mean([h[:k].sum() / len(q.evidence) for h, q in
                              zip(rows, [q for q in ds.questions if len(q.evidence)])]) for k in ks])


def write_plots(directory: str | Path, ds: Dataset, results: Sequence[EvalResult], title: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ks = list(range(1, 21))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        ax.plot(ks, 100 * recall_curve(ds, r.rankings, ks), marker="o", markersize=3, label=r.method)
    ax.set(xlabel="k", ylabel="R@k (%)", title=f"{title}: recall at k", xticks=ks[::2])
    ax.grid(alpha=0.3)
    ax.legend()
    paths = [out / "recall_at_k.png"]
    fig.tight_layout()
    fig.savefig(paths[0], dpi=120)
    plt.close(fig)
    types = sorted({t for r in results for t in r.summary if t != "all"})
    if types:
        fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(types)), 4.5))
        width = 0.8 / len(results)
        for i, r in enumerate(results):
            ax.bar(np.arange(len(types)) + i * width, [100 * r.summary.get(t, {}).get("R@10", 0) for t in types],
                   width, label=r.method)
        ax.set_xticks(np.arange(len(types)) + 0.4 - width / 2, types, rotation=20, ha="right")
        ax.set(ylabel="R@10 (%)", title=f"{title}: R@10 per question type")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        paths.append(out / "recall10_by_type.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths
