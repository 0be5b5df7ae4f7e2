"""Where an add's time goes: the bench's synthetic memory, adds of 10-utterance sessions each followed by a removal
(as ``python -m assomem_gpu.bench`` writes), and the wall time of the graph update's stages within the adds (and the
removals' median time).

    python benchmarks/add_stages.py [--sessions 25000] [--adds 30] [--index PATH] [--no-removals] [--output FILE.json]

The memory is built (the bench's default config and synthetic encoder), or loaded from ``--index`` where that file
exists (else saved there once built); the first three adds (kernels loading) are left out of the figures. Each stage is
timed around the function named (a stage inside another counts in both); the add itself is the index's ``add_sessions``
less the encoding; the median, and the mean, which counts the adds that splice the graph's pools into packed ones
(``graph._appended``: where they would hold more garbage than rows; with ``--no-removals`` the adds follow one another,
else each is followed by a removal, which packs them). Runs of an engine against another should alternate: this
machine's speed drifts by 20% over minutes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from assomem_gpu import graph, ivf, state
from assomem_gpu.assomem import AssoMem
from assomem_gpu.backend import get_backend
from assomem_gpu.bench import SyntheticEncoder, TimedEncoder, synthetic_memory
from assomem_gpu.config import AssoMemConfig
from assomem_gpu.fusion import FusionModel
from assomem_gpu.index import MemoryIndex, Session, Utterance
from assomem_gpu.kernels import csr_splice

STAGES = ((state, "grow_graph"), (graph, "grow_clue_state"), (graph, "_spliced"), (graph, "_appended"),
          (graph, "_utterance_rows"), (graph, "_clue_rows"), (graph, "_symmetric"), (graph, "select_top"),
          (graph, "exact_cosines"),
          (graph.UttSearch, "grown"), (ivf, "candidate_pairs"), (ivf, "probing_pairs"), (ivf, "probes"),
          (ivf.Probers, "of"), (csr_splice, "splice"))
WARM = 3  # adds left out: the first ones load the kernels


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=25000)
    p.add_argument("--adds", type=int, default=30, help="adds timed, after the first three")
    p.add_argument("--index", help="a saved memory of these sessions: loaded where it exists, else saved there")
    p.add_argument("--no-removals", action="store_true", help="adds one after another (no removal between)")
    p.add_argument("--output", help="JSON file for the figures")
    args = p.parse_args()
    if not 1 <= args.adds <= args.sessions // 7 - WARM:  # add i reads session 7·i's texts
        p.error(f"--adds: 1 to {args.sessions // 7 - WARM} for {args.sessions} sessions, got {args.adds}")

    data = synthetic_memory(args.sessions, 300)
    encoder = TimedEncoder(SyntheticEncoder(data))
    config = AssoMemConfig()
    rng = np.random.default_rng(1)  # the bench's fusion weights: they do not touch an add
    fusion = FusionModel(list(config.signals), ["a", "b"], rng.random((2, len(config.signals))), 0.2,
                         rng.normal(size=(2, data.questions.shape[1])).astype(np.float32), np.zeros(2, np.float32))
    loaded = bool(args.index) and Path(args.index).exists()
    if loaded:
        index = MemoryIndex.load(args.index, encoder=encoder, device="cpu")
    else:
        index = AssoMem(config, fusion, encoder, device=get_backend("cpu"), cache=1).index(data, 0)
        if args.index:
            index.save(args.index)

    spent, adding = defaultdict(float), [False]
    for owner, name in STAGES:
        fn = getattr(owner, name)

        def timed(*a, _fn=fn, _name=name, **k):
            start = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spent[_name] += (time.perf_counter() - start) * adding[0]

        setattr(owner, name, timed)  # each is looked up where it is called: the module's name, or the class's

    ds, adds, removes = data.dataset, [], []
    for i in range(WARM + args.adds):
        said = ds.bank.utt_texts[ds.bank.offsets[7 * i] : ds.bank.offsets[7 * i] + 10]
        session = Session(f"added{i}", float(ds.memories[0].dates.max()),
                          [Utterance(f"{said[t % len(said)]} again {t}", "user") for t in range(10)])
        if i == WARM:
            spent.clear()
        encoder.seconds, adding[0] = 0.0, i >= WARM
        start = time.perf_counter()
        index.add_sessions([session])
        adds.append(1000 * (time.perf_counter() - start - encoder.seconds))
        adding[0] = False
        if not args.no_removals:
            start = time.perf_counter()
            index.remove_sessions([ds.bank.session_ids[3 * i + 1]])
            removes.append(1000 * (time.perf_counter() - start))
    by_time = sorted(spent.items(), key=lambda kv: -kv[1])
    out = {"sessions": args.sessions, "adds": args.adds, "loaded": loaded, "removals": not args.no_removals,
           "add_median_ms": round(statistics.median(adds[WARM:]), 2),
           "add_mean_ms": round(statistics.mean(adds[WARM:]), 2), "add_max_ms": round(max(adds[WARM:]), 2),
           "remove_median_ms": round(statistics.median(removes[WARM:]), 2) if removes else None,
           "stage_ms_per_add": {k: round(1000 * v / args.adds, 2) for k, v in by_time}}
    print(json.dumps(out, indent=1))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
