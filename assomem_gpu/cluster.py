"""Batch retrieval on a Dask cluster (``eval --cluster``): the work sharded by memory, the results those of one process.

1. The client loads and embeds the dataset (``EmbeddedDataset.build``) and derives what every memory's index takes
   from its sessions alone (``AssoMem.prepare``: clue vectors, time flags, term counts) before any task. Encoding is
   a stage of its own because one process already spreads the encoder's matrix products over its cores, and the
   embedding cache is one SQLite file that this process alone writes: no two writers race, and on a multi-node
   cluster no worker needs the file (the vectors travel with the dataset).
2. The method, the embedded dataset and the derived state go to every worker once (``scatter(broadcast=True)``).
3. One task per memory ranks (or, for cross-validation, scores) that memory's questions in batches, with the same
   function the one-process path runs (``eval.runner.rank_memory``, ``calibrate.memory_features``), so the memory's
   index is built once, on the worker that runs it.
4. Cross-validation: each fold (calibrate on the other folds, rank this one: ``calibrate.fold_rankings``) is a task.

Dask runs again the tasks of a worker that died (up to ``distributed.scheduler.allowed-failures`` deaths per task, 3 by
default); results are gathered by question, so a task run twice neither duplicates nor loses one.
"""
from __future__ import annotations

import resource
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .assomem import AssoMem
from .calibrate import fold_rankings, folds_of, memory_features
from .eval.runner import rank_memory
from .retrieve import EmbeddedDataset, Method, by_memory

CONNECT_TIMEOUT_S = 10.0
# A local worker runs one task at a time on one core: its BLAS and Numba pools get one thread too, so N workers share
# the cores instead of each spinning up a pool as wide as the machine.
LOCAL_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                    "NUMBA_NUM_THREADS": "1"}


@contextmanager
def connect(spec: str, timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[Any]:
    """A ``distributed.Client`` for ``spec``, closed (with any cluster it started) on exit.

    ``local:N``: a ``LocalCluster`` of N worker processes, one thread each. ``local-cuda``: a ``dask_cuda``
    ``LocalCUDACluster``, one worker per visible GPU. ``tcp://HOST:PORT``: the scheduler of a running cluster (its
    workers need this package installed); ``ValueError`` when none answers within ``timeout_s`` seconds.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise RuntimeError("cluster: Dask is not installed; pip install 'assomem_gpu[dist]'") from None
    if spec.startswith("tcp://"):
        try:
            client = Client(spec, timeout=f"{timeout_s}s", set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ValueError(f"cluster: no Dask scheduler answered at {spec} within {timeout_s:g} s ({exc})") from None
        with client:
            yield client
        return
    if spec == "local-cuda":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise RuntimeError("cluster: 'local-cuda' needs dask-cuda; pip install 'assomem_gpu[dist-cuda]'") from None
        cluster = LocalCUDACluster(dashboard_address=":0")
    else:
        n = spec.removeprefix("local:")
        if not spec.startswith("local:") or not n.isdigit() or int(n) < 1:
            raise ValueError(f"cluster must be 'local:N' (N ≥ 1 worker processes), 'local-cuda' or 'tcp://HOST:PORT', "
                             f"got {spec!r}")
        cluster = LocalCluster(n_workers=int(n), threads_per_worker=1, processes=True, dashboard_address=":0",
                               env=LOCAL_WORKER_ENV)
    with cluster, Client(cluster, set_as_default=False) as client:
        yield client


def evaluate_rankings(client, method: Method, data: EmbeddedDataset, questions: Sequence[int], depth: int,
                      batch_size: int, progress: bool, folds: int | None, seed: int = 0) -> list[np.ndarray]:
    """Rankings of ``questions`` (in their order), one task per memory; with ``folds``, cross-validated with one
    task per fold (as ``calibrate.cross_validated_rankings`` does in one process)."""
    shared, desc = _share(client, method, data), f"{method.name} on {len(client.scheduler_info()['workers'])} workers"
    if folds is None:
        return _per_memory(client, shared, data, questions, progress, desc, rank_memory, depth, batch_size)
    feats = _per_memory(client, shared, data, questions, progress, f"{desc}: signals", memory_features, batch_size)
    feats = client.scatter([feats], broadcast=True, hash=False)[0]  # one object, not a future per question
    splits = folds_of(data, questions, folds, seed)
    ranked = _gather(client, [(fold_rankings, *shared[:2], list(questions), feats, f, depth) for f in splits],
                     [f.tolist() for f in splits], progress, f"{desc}: folds")
    return [ranked[q] for q in questions]


def features(client, method: AssoMem, data: EmbeddedDataset, questions: Sequence[int], batch_size: int = 64,
             progress: bool = True) -> list:
    """``calibrate.compute_features``, one task per memory."""
    return _per_memory(client, _share(client, method, data), data, questions, progress, f"{method.name} signals",
                       memory_features, batch_size)


def _share(client, method: Method, data: EmbeddedDataset) -> list:
    """The method, the dataset and (for AssoMem) its bank's derived state, sent to every worker once."""
    derived = method.prepare(data) if isinstance(method, AssoMem) else None
    return client.scatter([method, data, derived], broadcast=True, hash=False)


def _per_memory(client, shared: list, data: EmbeddedDataset, questions: Sequence[int], progress: bool, desc: str,
                fn: Callable, *args) -> list:
    """``fn(method, data, group, *args)``, one task per memory's ``group`` of questions: one value per question, in
    the order of ``questions``."""
    groups = list(by_memory(data.dataset, questions).values())
    calls = [(_bound, fn, *shared, g, *args) for g in groups]
    out = _gather(client, calls, groups, progress, desc)
    return [out[q] for q in questions]


def _bound(fn: Callable, method: Method, data: EmbeddedDataset, derived, group: list[int], *args) -> list:
    """A task: ``fn(method, data, group, *args)`` on a worker, the method bound to the client's derived state."""
    if derived is not None:
        method.prepare(data, derived)
    return fn(method, data, group, *args)


def _gather(client, calls: list[tuple], keys: list[list[int]], progress: bool, desc: str) -> dict:
    """Run each call ``(fn, *args)`` as a task; each returns one value per question of its ``keys`` entry."""
    from distributed import as_completed
    from tqdm.auto import tqdm

    futures = {client.submit(*call, pure=False): qs for call, qs in zip(calls, keys)}
    out: dict[int, Any] = {}
    for future in tqdm(as_completed(futures, loop=client.loop), total=len(futures), desc=desc, unit="task",
                       disable=not progress):
        out.update(zip(futures[future], future.result()))
        future.release()
    return out


def worker_peak_rss_mb(client) -> dict[str, float]:
    """Each worker process's peak resident memory so far (MB), by worker address."""
    return {addr: round(kb / 1024, 1) for addr, kb in client.run(_peak_rss_kb).items()}


def _peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
