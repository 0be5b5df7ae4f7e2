"""Acc@k and F1@k of the answers beside R@k of the retrieval, one curve each over k (the paper's §8.3 figure)."""
from __future__ import annotations

from pathlib import Path


def write_curves(directory: str | Path, by_k: dict[int, dict], title: str) -> Path:
    """``by_k``: per k, ``"recall"`` (mean R@k or None) and ``"all"`` (means of EM, F1 and, when judged, Acc); a
    series with a missing value is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted(by_k)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    means = [by_k[k].get("all", {}) for k in ks]  # empty where no question has a reference
    series = [("R@k", [by_k[k]["recall"] for k in ks]), ("F1@k", [m.get("F1") for m in means]),
              ("Acc@k (judge)", [m.get("Acc") for m in means])]
    for label, ys in series:
        if all(y is not None for y in ys):
            ax.plot(ks, [100 * y for y in ys], marker="o", markersize=3, label=label)
    ax.set(xlabel="k (utterances retrieved)", ylabel="%", title=title, xticks=ks)
    ax.grid(alpha=0.3)
    ax.legend()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "answers_at_k.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
