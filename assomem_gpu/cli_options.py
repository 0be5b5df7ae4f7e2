"""Command-line options shared by ``eval``, ``eval.compare``, ``calibrate``, ``answer`` and ``finetune``: the data a
command reads, the AssoMem retriever's, where the work runs, and the methods they configure; and the config options
of a store's command lines (``serve``, ``store``)."""
from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

from .assomem import HYBRID_BASELINES, make_assomem
from .backend import Backend
from .config import CLUE_MODES, SIGNALS, AssoMemConfig
from .data import load_dataset
from .encode import Encoder
from .fusion import fixed_weights, load_weights, restrict
from .graph import CLUE_MERGES, GraphConfig
from .memory import Dataset
from .retrieve import METHODS, Method, make_method


ALL_METHODS = [*METHODS, *HYBRID_BASELINES, "assomem"]


DATASET_HELP = "<format>:<path>, format one of longmemeval, locomo, meetingqa, jsonl"


def add_dataset_options(p: argparse.ArgumentParser, limit_help: str, dataset_help: str = DATASET_HELP,
                        seed_help: str = "seed of --limit and --haystack-sessions") -> None:
    """``--dataset``, ``--limit`` (``limit_help``), ``--seed`` and ``--haystack-sessions``: the split a command reads
    (``dataset_from_options``)."""
    p.add_argument("--dataset", required=True, help=dataset_help)
    p.add_argument("--limit", type=int, help=limit_help)
    p.add_argument("--seed", type=int, default=0, help=seed_help)
    p.add_argument("--haystack-sessions", type=int, help="grow every LongMemEval haystack to this many sessions")


def dataset_from_options(args: argparse.Namespace) -> Dataset:
    """The split ``add_dataset_options``' options name."""
    return load_dataset(args.dataset, haystack_sessions=args.haystack_sessions, limit=args.limit, seed=args.seed)


def dataset_record(args: argparse.Namespace) -> dict:
    """``add_dataset_options``' options as a results file records them."""
    return {"dataset": args.dataset, "haystack_sessions": args.haystack_sessions, "limit": args.limit,
            "seed": args.seed}


def add_cluster_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", help="run the memories (and folds) as Dask tasks: local:N (N worker processes), "
                                     "local-cuda (one worker per GPU) or tcp://HOST:PORT (a running scheduler); "
                                     "the results are those of one process")


def add_store_config_options(p: argparse.ArgumentParser) -> None:
    """The config options of a store's command lines (the server's, ``python -m assomem_gpu.store``): a store's
    tenants are rebuilt from their rows when it opens with another config, so every command that opens it takes the
    same ones."""
    p.add_argument("--clue-merge", choices=CLUE_MERGES, default=GraphConfig().clue_merge,
                   help="how δ-similar session clues merge (leaders: no chains, so a growing memory keeps small clues "
                        "and a search's cost bounded; components: the paper's, whose chains can join most of a dense "
                        "memory into one clue and make every search read most of it)")
    p.add_argument("--no-sentences", action="store_true",
                   help="relevance from each utterance's own vector only, not also its sentences' (sentences.py): an "
                        "add encodes about a quarter as many texts, a search reads fewer vectors, retrieval is worse "
                        "(the shipped fusion weights were calibrated with them)")
    _add_user_speakers(p)


def _add_user_speakers(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--user-speakers``, for the store's command lines and the retriever's (the same default and check)."""
    p.add_argument("--user-speakers", nargs="+", default=list(AssoMemConfig().user_speakers), metavar="NAME",
                   help="speakers whose turns are the memory user's own (case-insensitive), which the user relevance "
                        "signal reads")


def store_config(args: argparse.Namespace) -> AssoMemConfig:
    """The config ``add_store_config_options``'s options describe (the rest: ``AssoMemConfig``'s defaults)."""
    try:
        return AssoMemConfig(graph=GraphConfig(clue_merge=args.clue_merge), sentences=not args.no_sentences,
                             user_speakers=tuple(args.user_speakers))
    except ValueError as exc:
        raise _named_options(exc) from None


def add_assomem_options(p: argparse.ArgumentParser, clue_llm_option: str = "--llm") -> None:
    """The retriever's options; ``clue_llm_option`` names the clue LLM's (a CLI whose ``--llm`` answers renames it)."""
    d, g = AssoMemConfig(), GraphConfig()
    a = p.add_argument_group("assomem")
    a.add_argument("--top-clues", type=int, default=d.top_clues, help="K: clues retrieved in the first step")
    a.add_argument("--min-candidates", type=int, default=d.min_candidates, help="take more clues until this many candidates")
    a.add_argument("--lexical-pool", type=int, default=d.lexical_pool,
                   help="each question's this many best utterances by BM25 join its candidates (0: none)")
    a.add_argument("--dense-pool", type=int, default=d.dense_pool,
                   help="each question's this many most similar utterances join its candidates (0: none; "
                        "not with --no-clues, where every utterance is one, nor in the hybrid baselines)")
    a.add_argument("--clue-mode", choices=CLUE_MODES, default=d.clue_mode, help="how session clues are made")
    a.add_argument(clue_llm_option, dest="llm", default=d.llm, help="LLM of --clue-mode llm: smollm2, hf:<model>[::<gguf>], openai:<url>#<model>")
    a.add_argument("--clue-mix", type=float, default=d.clue_mix, help="weight of the clue embedding in a clue's score")
    a.add_argument("--delta", type=float, default=g.delta, help="δ: clue merge threshold")
    a.add_argument("--clue-merge", choices=CLUE_MERGES, default=g.clue_merge,
                   help="δ-similar clues merge around a first session (leaders, the default) or transitively "
                        "(components, the paper's)")
    a.add_argument("--gamma", type=float, default=g.gamma, help="γ: similarity-edge threshold")
    a.add_argument("--max-neighbors", type=int, default=g.max_neighbors, help="similarity edges kept per node")
    a.add_argument("--adjacency-weight", type=float, default=g.adjacency_weight, help="weight of consecutive-turn edges")
    a.add_argument("--speakers", action="store_true", help="add speaker nodes to the graph")
    a.add_argument("--exact-limit", type=int, default=g.exact_limit,
                   help="utterances from which a memory's similarity edges come from an inverted file (IVF)")
    a.add_argument("--n-probe", type=int, default=g.n_probe, help="IVF lists an utterance searches for its neighbours")
    a.add_argument("--damping", type=float, default=d.damping, help="d: PPR damping")
    a.add_argument("--ppr-hops", type=int, default=d.ppr_hops,
                   help="PPR iterations, run on the candidates' neighbourhood of as many hops; 0: the whole graph, "
                        "to convergence")
    a.add_argument("--query-probe", type=int, default=d.query_probe,
                   help="past --exact-limit utterances: IVF lists a question's relevance is computed on; 0: every "
                        "utterance")
    a.add_argument("--temperature", type=float, default=d.temperature, help="T of the per-signal score softmax")
    a.add_argument("--weight-temperatures", type=float, nargs="+", default=list(d.weight_temperatures),
                   help="candidate T_w of the weights softmax(CMI / H / T_w): calibration picks one by an inner "
                        "cross-validation on its questions (default 0.05 0.1 0.2 0.5 1); one value fixes it")
    a.add_argument("--bin-edges", type=float, nargs="+", default=list(d.bin_edges),
                   help="quantile edges of the CMI score bins (two edges: low / medium / high)")
    a.add_argument("--type-prior", type=float, default=d.type_prior,
                   help="calibration shrinks each question type's CMI towards all questions' as if this many "
                        "questions said the latter; 0: each type's own")
    a.add_argument("--no-signal-selection", action="store_true",
                   help="every signal weighs: calibration leaves none out (by default it leaves out a signal that "
                        "ranks its inner cross-validation's questions worse, by a sign test); with --weights, the "
                        "file's weights with every signal")
    a.add_argument("--folds", type=int, default=5, help="cross-validation folds (calibration never sees a fold it scores)")
    a.add_argument("--context-window", type=int, default=d.context_window,
                   help="turns on each side of an utterance that make its context embedding")
    _add_user_speakers(a)
    for name in SIGNALS[1:]:  # every signal but relevance
        a.add_argument(f"--no-{name.replace('_', '-')}", action="store_true",
                       help=f"ablation: drop the {name.replace('_', ' ')} signal" + (
                           " (and its BM25 pool; the lexical context and the reply still read BM25: drop all three for "
                           "none)"
                           if name == "lexical" else ""))
    a.add_argument("--no-clues", action="store_true", help="ablation: no clue nodes; all utterances are candidates")
    a.add_argument("--no-sentences", action="store_true",
                   help="ablation: a candidate's relevance is its own vector's only, not its best passage's (itself or "
                        "one of its sentences, each embedded alone: sentences.py)")
    a.add_argument("--fixed-weights", action="store_true", help="ablation: equal signal weights, no CMI")
    a.add_argument("--weights", help="fusion weights and the config they were calibrated with (python -m "
                   "assomem_gpu.calibrate); that config replaces the options above, except the --no-* "
                   "ablations")


def config_from_options(args: argparse.Namespace, base: AssoMemConfig | None = None) -> AssoMemConfig:
    """The config the options describe; with ``base`` (from a weights file) that saved config is used as it is,
    except for the ``--no-*`` ablations."""
    if base is not None:
        return replace(base, signals=tuple(s for s in base.signals if not getattr(args, f"no_{s}", False)),
                       clues=base.clues and not args.no_clues, sentences=base.sentences and not args.no_sentences,
                       select_signals=base.select_signals and not args.no_signal_selection)
    if args.folds < 2:
        raise ValueError("--folds must be at least 2")
    signals = tuple(s for s in SIGNALS if not getattr(args, f"no_{s}", False))
    if not signals:
        raise ValueError("every signal is switched off")
    try:  # the configs check the values; their errors name the option
        graph = GraphConfig(delta=args.delta, clue_merge=args.clue_merge, gamma=args.gamma,
                            max_neighbors=args.max_neighbors, adjacency_weight=args.adjacency_weight,
                            speakers=args.speakers, exact_limit=args.exact_limit, n_probe=args.n_probe)
        return AssoMemConfig(graph=graph, signals=signals, clue_mode=args.clue_mode, llm=args.llm,
                             clues=not args.no_clues, top_clues=args.top_clues, min_candidates=args.min_candidates,
                             lexical_pool=args.lexical_pool, dense_pool=args.dense_pool,
                             clue_mix=args.clue_mix, damping=args.damping, ppr_hops=args.ppr_hops,
                             query_probe=args.query_probe, context_window=args.context_window,
                             sentences=not args.no_sentences, temperature=args.temperature,
                             weight_temperatures=tuple(args.weight_temperatures), bin_edges=tuple(args.bin_edges),
                             type_prior=args.type_prior, select_signals=not args.no_signal_selection,
                             user_speakers=tuple(args.user_speakers))
    except ValueError as exc:
        raise _named_options(exc) from None


def _named_options(exc: ValueError) -> ValueError:
    """A config's error with its fields named as the command line's options."""
    return ValueError(re.sub(r"(?:AssoMemConfig|GraphConfig)\.(\w+)", lambda m: "--" + m.group(1).replace("_", "-"),
                             str(exc)))


def build_methods(args: argparse.Namespace, encoder: Encoder, backend: Backend) -> list[Method]:
    """The methods named by ``--method``; AssoMem configured by the options or a weights file."""
    fusion, base = None, None
    if args.weights:
        fusion, saved = load_weights(args.weights, encoder.name)
        base = AssoMemConfig.from_json(saved)
    config = config_from_options(args, base)
    if fusion is not None and list(config.signals) != fusion.signals:
        fusion = restrict(fusion, config.signals)
    if fusion is not None and args.no_signal_selection:  # the file's weights, every signal weighing
        fusion = replace(fusion, left_out=())
    if args.fixed_weights:
        fusion = fixed_weights(config.signals)
    return [make_method(m) if m in METHODS else make_assomem(m, config, encoder, fusion, backend)
            for m in args.methods]


def fit_folds(args: argparse.Namespace, methods: list[Method], n_questions: int) -> None:
    """Where a method is cross-validated (``needs_calibration``) over fewer questions than ``args.folds``: one
    question a fold (``args.folds`` lowered); one question alone is ranked with the shipped weights
    (``AssoMem.default_fusion``), as a fold is whose other folds hold no labelled question. Each with a note on
    stderr; ``ValueError`` for none."""
    calibrated = [m for m in methods if getattr(m, "needs_calibration", False)]
    if n_questions >= args.folds or not calibrated:
        return
    if n_questions == 0:
        raise ValueError("no questions to rank")
    if n_questions == 1:
        for m in calibrated:
            m.fusion = m.default_fusion()
        print("note: 1 question: no other to calibrate on, ranked with the shipped weights (--weights FILE for "
              "others)", file=sys.stderr)
        return
    print(f"note: {n_questions} questions: cross-validated in {n_questions} folds (one question each) rather than "
          f"--folds {args.folds}", file=sys.stderr)
    args.folds = n_questions


def check_writable(path: Path) -> None:
    """Fail before any work when an output file cannot be written (its folder is made if missing)."""
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{path}: cannot create its folder ({exc.strerror})") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{path}: not writable")
