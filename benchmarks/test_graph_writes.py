"""pytest-benchmark suite for the graph's part of an add: ``python -m pytest benchmarks/test_graph_writes.py
--benchmark-json benchmarks/results/graph_add_cpu.json``. Sessions of the bench's synthetic memory added one at a
time (``graph.grow_graph``) to a graph of 2,500 and of 25,000 sessions, its rows appended to the graph's pools (the
default, ``graph._appended``) against the same adds spliced into packed pools, every row copied (``GARBAGE_SHARE``
below zero: the path of every add before the pools, and now of an add whose pools would hold more garbage than live
entries; ``_appended`` finds the rows to rescale before it gives way). Each variant grows the same built graph by
the same sessions; the bank of each add is made outside the timing."""
import numpy as np
import pytest

from assomem_gpu import graph
from assomem_gpu.bench import synthetic_memory
from assomem_gpu.clues import centroid_embeddings
from assomem_gpu.graph import GraphConfig, build_graph, grow_graph

ADDS = 50  # rounds: each adds the next session


@pytest.fixture(scope="module", params=[2500, 25000], ids=lambda n: f"{n}-sessions")
def memory(request):
    n = request.param
    data = synthetic_memory(n + ADDS + 1, 1)
    bank, emb = data.dataset.bank, data.utterances
    clue = centroid_embeddings(bank.offset_array, emb)
    config = GraphConfig()
    built = build_graph(bank.select(np.arange(n)), emb[: bank.offset_array[n]], clue[:n], config)
    return n, bank, emb, clue, config, built


def _adds(benchmark, memory):
    n, bank, emb, clue, config, built = memory
    state = {"graph": built, "sessions": n}

    def setup():
        m = state["sessions"] = state["sessions"] + 1
        return (state["graph"], bank.select(np.arange(m)), emb[: bank.offset_array[m]], clue[:m], config), {}

    def add(g, *rest):
        state["graph"] = grow_graph(g, *rest)

    benchmark.pedantic(add, setup=setup, rounds=ADDS, iterations=1)
    assert state["graph"].n_utt == bank.offset_array[n + ADDS]


@pytest.mark.benchmark(group="graph-add")
def test_add_spliced(benchmark, memory, monkeypatch):
    monkeypatch.setattr(graph, "GARBAGE_SHARE", -1.0)
    _adds(benchmark, memory)


@pytest.mark.benchmark(group="graph-add")
def test_add_appended(benchmark, memory):
    _adds(benchmark, memory)
