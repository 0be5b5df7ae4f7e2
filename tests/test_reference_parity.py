"""The fast AssoMem path and the networkx reference agree on the top-10."""
import json

import numpy as np
import pytest

from assomem_gpu.assomem import AssoMem
from assomem_gpu.config import SIGNALS, AssoMemConfig
from assomem_gpu.data import load_dataset
from assomem_gpu.encode import HashingEncoder
from assomem_gpu.fusion import FusionModel
from assomem_gpu.graph import GraphConfig
from assomem_gpu.reference import reference_top
from assomem_gpu.retrieve import EmbeddedDataset

from conftest import SHARED_DATA, lme_item


def random_memories(tmp_path, seed, n_questions=6):
    rng = np.random.default_rng(seed)
    words = "apple river guitar market winter doctor garden laptop ticket museum coffee soccer bridge violin".split()
    items = []
    for q in range(n_questions):
        sessions = {}
        for s in range(rng.integers(4, 9)):
            turns = [("user" if t % 2 == 0 else "assistant", " ".join(rng.choice(words, size=rng.integers(3, 9)))
                      + "?" * (t % 3 == 1), bool(s == 0 and t == 0)) for t in range(rng.integers(1, 7))]  # (some
            # turns ask: the reply signal reads the turn after)
            sessions[f"{'answer_' if s == 0 else ''}m{seed}_{q}_{s}"] = turns
        dates = [f"2023/0{rng.integers(1, 9)}/{rng.integers(10, 28)} (Mon) 10:00" for _ in sessions]
        recall = "what did you say about " if q % 3 == 2 else ""  # (user relevance reads the assistant's turns)
        items.append(lme_item(f"q{q}", recall + " ".join(rng.choice(words, size=4)) + " last month", sessions, dates,
                              qtype=["a", "b"][q % 2], qdate="2023/09/01 (Fri) 10:00"))
    path = tmp_path / f"rand{seed}.json"
    path.write_text(json.dumps(items))
    return path


def weights(signals, rng):
    cmi = rng.random((2, len(signals)))
    return FusionModel(list(signals), ["a", "b"], cmi, 0.2, rng.normal(size=(2, 256)).astype(np.float32),
                       np.zeros(2, np.float32))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("config", [
    AssoMemConfig(clue_mode="centroid", top_clues=2, min_candidates=5,
                  graph=GraphConfig(delta=0.6, gamma=0.3, clue_merge="components")),
    AssoMemConfig(clue_mode="centroid", top_clues=2, min_candidates=5,
                  graph=GraphConfig(delta=0.6, gamma=0.3, clue_merge="leaders")),
    AssoMemConfig(clue_mode="centroid", clues=False, graph=GraphConfig(gamma=0.2, adjacency_weight=0.0)),
    AssoMemConfig(clue_mode="keywords", top_clues=3, min_candidates=0, graph=GraphConfig(gamma=0.4, max_neighbors=3),
                  sentences=False),
], ids=["clues", "leader-clues", "no-clues", "keywords-no-sentences"])
def test_top10_matches_reference_on_random_memories(tmp_path, seed, config):
    enc = HashingEncoder()
    data = EmbeddedDataset.build(load_dataset(f"longmemeval:{random_memories(tmp_path, seed)}"), enc)
    fusion = weights(SIGNALS, np.random.default_rng(seed))
    method = AssoMem(config, fusion, enc)
    qs = list(range(len(data.dataset.questions)))
    fast = method.rank(data, qs, depth=10)
    for q, ranked in zip(qs, fast):
        assert list(ranked[:10]) == reference_top(data, q, method, fusion)


LME = SHARED_DATA / "longmemeval" / "longmemeval_s_dev.json.gz"


@pytest.mark.skipif(not LME.exists(), reason="../shared/data/longmemeval is absent")
def test_top10_matches_reference_on_real_memories():
    enc = HashingEncoder()  # the real memories' structure; the encoder only needs to be deterministic here
    data = EmbeddedDataset.build(load_dataset(f"longmemeval:{LME}", limit=4, seed=7), enc)
    rng = np.random.default_rng(0)
    types = sorted({q.type for q in data.dataset.questions})
    fusion = FusionModel(list(SIGNALS), types, rng.random((len(types), len(SIGNALS))), 0.2,
                         rng.normal(size=(len(types), 256)).astype(np.float32), np.zeros(len(types), np.float32))
    method = AssoMem(AssoMemConfig(), fusion, enc)
    fast = method.rank(data, [0, 1, 2, 3], depth=10)
    agree = sum(list(r[:10]) == reference_top(data, q, method, fusion) for q, r in enumerate(fast))
    assert agree == 4
