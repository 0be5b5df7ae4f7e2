"""The tables ``python -m assomem_gpu.eval`` prints."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table


def print_report(report: dict, console: Console | None = None) -> None:
    console = console or Console(width=None if Console().is_terminal else 160)
    ks = report["ks"]
    results = report["results"]
    t = report["timing"]
    console.print(f"[bold]{report['dataset']}[/]: {report['n_questions']} questions ({report['n_evaluated']} with evidence), "
                  f"{report['sessions']} sessions, {report['utterances']} utterances; encoded {report['encoded_texts']} "
                  f"new texts; load {t['load_s']:.1f}s, encode {t['encode_s']:.1f}s, total {t['total_s']:.1f}s")
    overall = Table(title="utterance level (all questions with evidence)")
    overall.add_column("method")
    cols = [f"R@{k}" for k in ks] + [f"nDCG@{max(ks)}"]
    session_cols = [f"session_recall_any@{k}" for k in ks if k in (5, 10)]
    has_session = any(r["session_metrics"] for r in results.values())
    for c in cols + (session_cols if has_session else []) + ["retrieve s"]:
        overall.add_column(c.replace("session_recall_any", "S-Rany"), justify="right")
    for name, r in results.items():
        m, s = r["metrics"].get("all", {}), r["session_metrics"].get("all", {})
        row = [_pct(m.get(c)) for c in cols] + ([_pct(s.get(c)) for c in session_cols] if has_session else [])
        overall.add_row(name, *row, f"{r['retrieve_s']:.2f}")
    console.print(overall)
    types = sorted({t for r in results.values() for t in r["metrics"] if t != "all"})
    if types:
        k = 10 if 10 in ks else max(ks)
        by_type = Table(title=f"R@{k} per question type")
        by_type.add_column("method")
        for name in types:
            by_type.add_column(f"{name} (n={next(iter(results.values()))['metrics'][name]['n']})", justify="right")
        for name, r in results.items():
            by_type.add_row(name, *[_pct(r["metrics"].get(t, {}).get(f"R@{k}")) for t in types])
        console.print(by_type)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}"
