"""The retrieval config: every default of the method in one place, checked when a config is made."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

from .graph import GraphConfig

# the signals: at most as many as the fused top-K kernels take (kernels/fused_topk.py, MAX_SIGNALS)
SIGNALS = ("relevance", "importance", "temporal", "lexical", "context", "session", "lexical_context",
           "user_relevance", "reply")
BM25_SIGNALS = frozenset({"lexical", "lexical_context", "reply"})  # the signals that read the memory's BM25 index
CLUE_MODES = ("keywords", "centroid", "llm")
WEIGHT_TEMPERATURES = (0.05, 0.1, 0.2, 0.5, 1.0)  # a span of T_w to choose from: sharp (one signal per type) to
# near-equal weights (README, Method notes, Fusion)


@dataclass(frozen=True)
class AssoMemConfig:
    """How a memory is indexed and searched. Invalid values raise ``ValueError`` naming the field and its range."""

    graph: GraphConfig = field(default_factory=GraphConfig)
    signals: tuple[str, ...] = SIGNALS
    clue_mode: str = "keywords"  # how a session's clue is made (see clues.py); each depends on its session alone
    llm: str = "smollm2"  # the LLM of clue_mode "llm" (see llm.make_llm)
    clues: bool = True  # False (--no-clues): no clue nodes, every utterance of the memory is a candidate
    top_clues: int = 10  # K of the two-step retrieval
    min_candidates: int = 50  # more clues are taken, best first, until the candidates reach this many
    lexical_pool: int = 10  # each question's this many best utterances by BM25 join its candidates (the clues'
    # utterances): a turn that shares the question's rare words is scored even when its clue was not picked
    dense_pool: int = 50  # each question's this many most similar utterances (relevance) join them too: the clue
    # cut never drops what flat dense retrieval ranks first
    clue_mix: float = 0.5  # clue score = mix·cos(q, clue) + (1 − mix)·max cos(q, utterance of the clue)
    damping: float = 0.5  # d of eq. 2
    tol: float = 1e-6  # PPR stops when the largest per-question L1 change is below this
    max_iter: int = 100  # PPR iteration cap
    ppr_hops: int = 3  # importance = this many PPR iterations, run on the nodes within as many hops of the
    # candidates (which gives the candidates the whole graph's values of those iterations); 0 = the whole graph,
    # iterated until the change is below tol
    context_window: int = 2  # the context signal's turns on each side of an utterance (signals/context.py)
    sentences: bool = True  # a candidate's relevance is its best passage's, itself or one of its sentences, each
    # embedded alone (sentences.py; needs an encoder at add time; docs/results-history.md, "Sentence passages"); False
    # (--no-sentences): the utterance's own vector only
    query_probe: int = 32  # in a memory past graph.exact_limit utterances, a question's relevance is computed on the
    # members of the IVF lists of its this many nearest centroids, its candidates' and PPR neighbourhood's (0 = on
    # every utterance)
    temperature: float = 4.0  # T of the per-signal softmax over a question's candidates
    weight_temperatures: tuple[float, ...] = WEIGHT_TEMPERATURES  # candidate T_w of the fusion weights
    # softmax(U / T_w), U = CMI / H(λ) in [0, 1]: calibration picks one by an inner cross-validation on its own
    # questions (fusion.calibrate_fusion); a single value fixes it
    select_signals: bool = True  # calibration leaves out a signal where leaving it out ranks its inner folds'
    # questions better by a sign test (fusion.select_signals); False (--no-signal-selection): every signal weighs
    bin_edges: tuple[float, ...] = (0.5, 0.9)  # quantile edges of the low / medium / high score bins
    type_prior: float = 10.0  # calibration shrinks each question type's CMI towards the CMI of all the calibration
    # questions as if that many questions said the latter: (n·CMI_type + prior·CMI_all) / (n + prior); 0 = each
    # type's own. Calibration alone reads it: a config saved before it calibrates with it too
    user_speakers: tuple[str, ...] = ("user",)  # speakers whose turns are the memory user's own (held stripped and
    # case-folded, and so compared): the user_relevance signal reads relevance on them, or on the others' for a
    # question that recalls what the assistant said (signals/user_relevance.py)

    def __post_init__(self):
        if not isinstance(self.graph, GraphConfig):
            raise TypeError(f"AssoMemConfig.graph must be a GraphConfig, got {type(self.graph).__name__}")
        object.__setattr__(self, "signals", tuple(self.signals))
        object.__setattr__(self, "bin_edges", tuple(self.bin_edges))
        if isinstance(self.user_speakers, str) or not isinstance(self.user_speakers, Iterable):
            raise ValueError(f"AssoMemConfig.user_speakers must be a sequence of speaker names, got "
                             f"{self.user_speakers!r}")
        if not all(isinstance(s, str) and s.strip() for s in self.user_speakers):
            raise ValueError(f"AssoMemConfig.user_speakers must be non-empty names, got {self.user_speakers!r}")
        object.__setattr__(self, "user_speakers", tuple(s.strip().casefold() for s in self.user_speakers))
        if isinstance(self.weight_temperatures, str) or not isinstance(self.weight_temperatures, Iterable):
            raise ValueError(f"AssoMemConfig.weight_temperatures must be a sequence of temperatures, got "
                             f"{self.weight_temperatures!r} (one fixed value: ({self.weight_temperatures!r},))")
        object.__setattr__(self, "weight_temperatures", tuple(self.weight_temperatures))
        if not self.signals or len(set(self.signals)) != len(self.signals) or set(self.signals) - set(SIGNALS):
            raise ValueError(f"AssoMemConfig.signals must be distinct names from {SIGNALS}, got {self.signals}")
        for name in ("sentences", "clues", "select_signals"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"AssoMemConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if not (isinstance(self.llm, str) and self.llm.strip()):
            raise ValueError(f"AssoMemConfig.llm must be an LLM spec (see llm.make_llm), got {self.llm!r}")
        if self.clue_mode not in CLUE_MODES:
            raise ValueError(f"AssoMemConfig.clue_mode must be one of {CLUE_MODES}, got {self.clue_mode!r}")
        for name, low in (("top_clues", 1), ("min_candidates", 0), ("max_iter", 1), ("ppr_hops", 0),
                          ("query_probe", 0), ("context_window", 1), ("lexical_pool", 0),
                          ("dense_pool", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"AssoMemConfig.{name} must be an integer >= {low}, got {value!r}")
        _in_range("clue_mix", self.clue_mix, 0, 1, closed=True)
        _in_range("damping", self.damping, 0, 1, closed=False)
        for name in ("tol", "temperature"):
            _in_range(name, getattr(self, name), 0, math.inf, closed=False)
        _in_range("type_prior", self.type_prior, 0, math.inf, closed=True)
        for t in self.weight_temperatures:
            _in_range("weight_temperatures", t, 0, math.inf, closed=False)
        if not self.weight_temperatures or list(self.weight_temperatures) != sorted(set(self.weight_temperatures)):
            raise ValueError(f"AssoMemConfig.weight_temperatures must be increasing values, got "
                             f"{self.weight_temperatures}")
        if len(self.bin_edges) < 1 or any(not 0 < e < 1 for e in self.bin_edges) \
                or list(self.bin_edges) != sorted(set(self.bin_edges)):
            raise ValueError(f"AssoMemConfig.bin_edges must be increasing quantiles strictly between 0 and 1, "
                             f"got {self.bin_edges}")

    def ranks_like(self, other: AssoMemConfig) -> bool:
        """Whether an index built with ``other`` holds and ranks what one built with this config does: the two may
        differ only in what calibration alone reads (``weight_temperatures``, ``bin_edges``, ``type_prior``,
        ``select_signals``), and in ``user_speakers`` where neither ranks by the user relevance signal."""
        unread = {} if "user_relevance" in self.signals + other.signals else {"user_speakers": self.user_speakers}
        return replace(other, weight_temperatures=self.weight_temperatures, bin_edges=self.bin_edges,
                       type_prior=self.type_prior, select_signals=self.select_signals, **unread) == self

    def to_json(self) -> dict:
        out = asdict(self)
        out["signals"], out["bin_edges"] = list(self.signals), list(self.bin_edges)
        out["weight_temperatures"], out["user_speakers"] = list(self.weight_temperatures), list(self.user_speakers)
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "AssoMemConfig":
        obj = dict(obj)
        obj.setdefault("lexical_pool", 0)  # a config saved before the BM25 pool existed ranked without it
        obj.setdefault("dense_pool", 0)  # (and before the dense pool, without that)
        obj.setdefault("sentences", False)  # (and before sentence passages, without them)
        obj.setdefault("select_signals", False)  # (and before signal selection, weighing every signal)
        if "weight_temperature" in obj:  # (and before T_w was chosen by calibration, with the one it fixed)
            obj.setdefault("weight_temperatures", (obj.pop("weight_temperature"),))
        graph = GraphConfig(**{"clue_merge": "components", **obj.pop("graph", {})})  # (and before leader clues, by
        # components)
        return cls(graph=graph, signals=tuple(obj.pop("signals", SIGNALS)),
                   bin_edges=tuple(obj.pop("bin_edges", cls.bin_edges)), **obj)


def _in_range(name: str, value, low: float, high: float, closed: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and ((low <= value <= high) if closed else (low < value < high))
    if not ok:
        span = f"[{low}, {high}]" if closed else f"({low}, {high})"
        raise ValueError(f"AssoMemConfig.{name} must lie in {span}, got {value!r}")
