"""PPR for a single huge graph, one question at a time, through networkx's PageRank API: dispatched to cuGraph
(``nx-cugraph``) when that backend is installed, run by networkx itself otherwise (that is how CI tests this path).

Use it when N × B float buffers of the batched power iteration do not fit (a very large memory); it has the batched
functions' signature and results. The graph is converted once per call, and every question is one PageRank call.
"""
from __future__ import annotations

import numpy as np


def cugraph_available() -> str | None:
    """None when networkx can dispatch to cuGraph here, else why not."""
    import networkx as nx

    if "cugraph" not in nx.utils.backends.backends:
        return "the networkx cuGraph backend is not installed (pip install nx-cugraph-cu12)"
    return None


def personalized_pagerank_graph(transition, teleports, damping: float, tol: float, max_iter: int,
                                backend: str = "cugraph") -> tuple[np.ndarray, int]:
    """Eq. 2 per column of ``teleports`` (N, B) with ``nx.pagerank(..., backend=backend)``; ``transition`` is the
    column-stochastic CSR M (scipy, or cupyx on the CUDA backend: networkx takes host copies, and the scores go back
    to the teleports' array module). Returns the scores (N, B) and ``max_iter`` (networkx does not report
    iterations; it raises ``PowerIterationFailedConvergence`` when the cap is reached first).

    M's column j is the walk out of node j, so the graph has an edge j → i weighted M[i, j]; every node has out-edges
    (a node without edges keeps its mass through a self-loop), so networkx's dangling-node rule never applies. Its
    stopping test is ``L1 change < N · tol``, hence ``tol / N`` for ours (``L1 change < tol``).
    """
    import networkx as nx

    on_device = hasattr(teleports, "__cuda_array_interface__")
    t = (teleports.get() if on_device else np.asarray(teleports)).astype(np.float64)
    m = transition.get() if hasattr(transition, "get") else transition
    n = t.shape[0]
    out = np.zeros(t.shape, np.float32)
    if t.size == 0:
        return _like(out, on_device), 0
    graph = nx.from_scipy_sparse_array(m.T.tocsr(), create_using=nx.DiGraph, edge_attribute="weight")
    for j in range(t.shape[1]):
        start = {i: float(v) for i, v in enumerate(t[:, j])}
        scores = nx.pagerank(graph, alpha=damping, personalization=start, nstart=start, tol=tol / n,
                             max_iter=max_iter, weight="weight", backend=backend)
        out[:, j] = [scores[i] for i in range(n)]
    return _like(out, on_device), max_iter


def _like(out: np.ndarray, on_device: bool):
    if not on_device:
        return out
    import cupy

    return cupy.asarray(out)
