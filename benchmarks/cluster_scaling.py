"""The eval CLI in one process (with its default thread pools, and with one thread each, as a local worker runs) and
on Dask LocalClusters of 1, 2, … worker processes, on one machine, in one run: wall time, questions/s, the ratio to
one process, peak memory per worker, and whether every rankings file is byte-identical to the one-process run.

    python benchmarks/cluster_scaling.py --dataset longmemeval:../shared/data/longmemeval/longmemeval_s_dev.json.gz \
        --haystack-sessions 500 --workers 1 2 --output benchmarks/results/cluster_l500.json

Each configuration is its own process (``python -m assomem_gpu.eval``), so every run starts cold alike; embeddings
come from the on-disk cache (run once beforehand to fill it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--haystack-sessions", type=int)
    p.add_argument("--method", default="assomem")
    p.add_argument("--limit", type=int)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--output", required=True)
    args = p.parse_args()
    runs, work = [], Path(tempfile.mkdtemp(prefix="cluster_scaling_"))
    for workers in [None, 0, *args.workers]:  # None: one process; 0: one process of one thread
        name = {None: "one-process", 0: "one-process, 1 thread"}.get(workers, f"local:{workers}")
        tag = {None: "one", 0: "one1"}.get(workers, f"w{workers}")
        cmd = [sys.executable, "-m", "assomem_gpu.eval", "--quiet", "--dataset", args.dataset, "--method", args.method,
               "--rankings", str(work / f"{tag}.jsonl"), "--output", str(work / f"{tag}.json")]
        cmd += ["--haystack-sessions", str(args.haystack_sessions)] if args.haystack_sessions else []
        cmd += ["--limit", str(args.limit)] if args.limit else []
        cmd += ["--cluster", name] if workers else []
        env = {**os.environ, **(ONE_THREAD if workers == 0 else {})}
        print(" ".join(cmd), flush=True)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        wall = time.perf_counter() - start
        report = json.loads((work / f"{tag}.json").read_text())
        n = report["n_questions"]
        retrieve = sum(r["retrieve_s"] for r in report["results"].values())
        run = {"config": name, "wall_s": round(wall, 1), "retrieve_s": round(retrieve, 1),
               "questions_per_s": round(n / retrieve, 3), "client_peak_rss_mb": report["peak_rss_mb"],
               "worker_peak_rss_mb": report.get("cluster", {}).get("worker_peak_rss_mb"),
               "metrics": {m: r["metrics"]["all"] for m, r in report["results"].items()}}
        files = sorted([*work.glob(f"{tag}.jsonl"), *work.glob(f"{tag}.*.jsonl")])
        assert files, f"no rankings written for {name}"
        if workers is not None:  # every run but the first
            run["rankings_identical_to_one_process"] = all(
                f.read_bytes() == (work / ("one" + f.name[len(tag):])).read_bytes() for f in files)
        runs.append(run)
        print(json.dumps(run), flush=True)
    base = runs[0]["retrieve_s"]
    for run in runs:
        run["retrieve_speedup_vs_one_process"] = round(base / run["retrieve_s"], 2)
    out = {"command": " ".join(["python", *sys.argv]), "machine": {"cpus": os.cpu_count(), "cpu": cpu_model()},
           "n_questions": n, "runs": runs}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


def cpu_model() -> str:
    info = Path("/proc/cpuinfo")
    names = [l.split(":", 1)[1].strip() for l in info.read_text().splitlines() if l.startswith("model name")] \
        if info.exists() else []
    return names[0] if names else platform.machine()


if __name__ == "__main__":
    raise SystemExit(main())
