"""``python -m assomem_gpu.eval``: batch retrieval over a dataset split, metrics table, JSON results, ranking export."""
from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from ..backend import get_backend
from ..cli_options import (ALL_METHODS, add_assomem_options, add_cluster_option, add_dataset_options, build_methods,
                           check_writable, dataset_from_options, dataset_record, fit_folds)
from ..cluster import Workers, connect, worker_peak_rss_mb
from ..encode import DEFAULT_MODEL, ENCODER_HELP, add_prompt_options, make_encoder, prompt_options
from ..retrieve import EmbeddedDataset
from ..rss import peak_rss_mb
from ..metrics import DEFAULT_KS
from .report import print_report
from .runner import evaluate, write_rankings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m assomem_gpu.eval", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_dataset_options(p, "evaluate a seeded random sample of this many questions")
    p.add_argument("--method", default="flat-dense", help=f"one or more of {', '.join(ALL_METHODS)}, comma-separated")
    p.add_argument("--k", type=int, nargs="+", default=list(DEFAULT_KS), help="cut-offs for the metrics")
    p.add_argument("--rankings", help="write the rankings here as JSON Lines (with several methods: one file each, "
                                      "NAME.<method>.jsonl)")
    p.add_argument("--depth", type=int, default=100, help="ranking length kept and exported (at least 50)")
    p.add_argument("--output", help="write results as JSON here")
    p.add_argument("--encoder", default=DEFAULT_MODEL, help=ENCODER_HELP)
    add_prompt_options(p)
    p.add_argument("--batch-size", type=int, default=64, help="questions per retrieval batch")
    p.add_argument("--plot", help="write R@k curves and R@10 per question type here (PNG)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where the engine runs")
    add_cluster_option(p)
    add_assomem_options(p)
    args = p.parse_args(argv)
    args.methods = [m.strip() for m in args.method.split(",") if m.strip()]
    unknown = [m for m in args.methods if m not in ALL_METHODS]
    if unknown or not args.methods:
        p.error(f"unknown method {', '.join(unknown) or '(none)'}; choose from {', '.join(ALL_METHODS)}")
    if any(k < 1 for k in args.k):
        p.error("--k values must be positive")
    if args.depth < 1 or args.batch_size < 1:
        p.error("--depth and --batch-size must be positive")
    return args


def rankings_path(path: str, method: str, n_methods: int) -> Path:
    """``path`` itself for one method; ``<stem>.<method><suffix>`` beside it for several."""
    p = Path(path)
    return p if n_methods == 1 else p.with_name(f"{p.stem}.{method}{p.suffix or '.jsonl'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with ExitStack() as stack:
        return run(args, stack)


def run(args: argparse.Namespace, stack: ExitStack) -> int:
    """``main`` after parsing; ``stack`` closes the Dask client (and its local cluster) on the way out."""
    t0 = time.perf_counter()
    client = None
    try:
        outputs = [rankings_path(args.rankings, m, len(args.methods)) for m in args.methods] if args.rankings else []
        for path in outputs + ([Path(args.output)] if args.output else []):
            check_writable(path)
        ds = dataset_from_options(args)
        if not ds.questions:
            raise ValueError(f"{args.dataset}: the dataset holds no questions")
        encoder = make_encoder(args.encoder, prompts=prompt_options(args))
        backend = get_backend(args.device)
        methods = build_methods(args, encoder, backend)
        fit_folds(args, methods, len(ds.questions))
        if args.cluster:  # before the encoding: an unreachable scheduler fails early
            client = stack.enter_context(connect(args.cluster))
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    load_s = time.perf_counter() - t0
    encoder.progress = not args.quiet
    t1 = time.perf_counter()
    data = EmbeddedDataset.build(ds, encoder)
    encode_s = time.perf_counter() - t1
    try:
        workers = None if client is None else Workers(client, data)
    except (ValueError, RuntimeError) as exc:  # (RuntimeError: the workers died while the data was sent)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        results = [evaluate(data, m, args.k, depth=args.depth, batch_size=args.batch_size, progress=not args.quiet,
                            folds=args.folds, seed=args.seed, workers=workers) for m in methods]
    except RuntimeError as exc:  # the cluster lost its workers or what was sent to them, past the resends
        if workers is None:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    written = []
    if args.rankings:
        for r in results:
            written.append(rankings_path(args.rankings, r.method, len(results)))
            write_rankings(written[-1], data, r.rankings)
    report = {
        **dataset_record(args), "n_questions": len(ds.questions),
        "n_evaluated": sum(len(q.evidence) > 0 for q in ds.questions),
        "sessions": ds.bank.n_sessions, "utterances": ds.bank.n_utterances,
        "ks": args.k,
        "encoder": encoder.name, "encoded_texts": encoder.encoded, "device": args.device,
        "engine": backend.describe(),
        "timing": {"load_s": round(load_s, 3), "encode_s": round(encode_s, 3),
                   "total_s": round(time.perf_counter() - t0, 3)},
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "results": {r.method: r.to_json() for r in results},
        "configs": {r.method: m.config.to_json() for m, r in zip(methods, results) if hasattr(m, "config")},
    }
    if client is not None:
        peaks = worker_peak_rss_mb(client)
        report["cluster"] = {"spec": args.cluster, "workers": len(peaks), "worker_peak_rss_mb": list(peaks.values())}
    print_report(report)
    if args.plot:
        from .plots import write_plots

        for path in write_plots(args.plot, ds, results, args.dataset.split(":", 1)[0]):
            print(f"wrote {path}")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
        written.append(Path(args.output))
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
