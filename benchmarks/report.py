"""Markdown tables from the JSON files benchmarks/tables.sh writes (for the README and issue notes)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = ["R@1", "R@3", "R@5", "R@6", "R@10", "nDCG@10"]


def rows(path: Path, label_suffix: str = "") -> list[tuple[str, dict, dict, float]]:
    report = json.loads(path.read_text())
    return [(name + label_suffix, r["metrics"], r["session_metrics"], r["retrieve_s"]) for name, r in report["results"].items()]


def table(prefix: str) -> str:
    entries = rows(RESULTS / f"{prefix}_methods.json")
    for ablation, label in (*((a, f"--{a}") for a in ("no-temporal", "no-importance", "no-lexical", "no-context",
                                                          "no-session", "no-lexical-context",
                                                          "no-user-relevance", "no-reply", "no-clues",
                                                          "fixed-weights", "no-sentences",
                                                          "no-signal-selection")),
                            ("no-lexical-pool", "--lexical-pool 0"), ("no-dense-pool", "--dense-pool 0"),
                            ("components", "--clue-merge components")):
        path = RESULTS / f"{prefix}_{ablation}.json"
        if path.exists():
            entries += rows(path, f" {label}")
    types = sorted({t for _, m, _, _ in entries for t in m if t != "all"})
    has_session = any(s for _, _, s, _ in entries)
    head = ["method", *COLUMNS] + (["S-Rany@5", "S-Rany@10"] if has_session else []) + [f"R@10 {t}" for t in types]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m, s, _ in entries:
        cells = [f"{100 * m['all'][c]:.2f}" for c in COLUMNS]
        if has_session:
            cells += [f"{100 * s['all'][c]:.2f}" for c in ("session_recall_any@5", "session_recall_any@10")]
        cells += [f"{100 * m[t]['R@10']:.2f}" if t in m else "-" for t in types]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    n = json.loads((RESULTS / f"{prefix}_methods.json").read_text())
    return f"{n['dataset']}: {n['n_evaluated']} questions with evidence\n\n" + "\n".join(lines)


if __name__ == "__main__":
    for prefix in sys.argv[1:] or ["meetingqa", "longmemeval_s", "longmemeval_l2500"]:
        if (RESULTS / f"{prefix}_methods.json").exists():
            print(f"### {prefix}\n\n{table(prefix)}\n")
