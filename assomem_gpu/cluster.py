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

The callers hand their units of work to ``Workers``; this module knows Dask, not retrieval.

Dask runs again the tasks of a worker that died (up to ``distributed.scheduler.allowed-failures`` deaths per task, 3 by
default); results are gathered by question, so a task run twice neither duplicates nor loses one.
"""
from __future__ import annotations

import resource
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np

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


class Workers:
    """A Dask client with one method and one embedded dataset sent to every worker once, and for AssoMem the derived
    state of the dataset's bank (``AssoMem.prepare``), so that no worker encodes. Its ``per_memory`` and ``per_fold``
    run the callers' units of work as tasks."""

    def __init__(self, client, method: Method, data: EmbeddedDataset):
        self.client, self.data = client, data
        derived = method.prepare(data) if hasattr(method, "prepare") else None
        self._shared = client.scatter([method, data, derived], broadcast=True, hash=False)
        self.desc = f"{method.name} on {len(client.scheduler_info()['workers'])} workers"

    def send(self, value: Any):
        """``value`` on every worker, as one future to pass to a task."""
        return self.client.scatter([value], broadcast=True, hash=False)[0]

    def per_memory(self, questions: Sequence[int], fn: Callable, *args, progress: bool = True) -> list:
        """``fn(method, data, group, *args)``, one task per memory's ``group`` of ``questions``; one value per
        question, in the order of ``questions``."""
        groups = list(by_memory(self.data.dataset, questions).values())
        out = self._run([(_bound, fn, *self._shared, g, *args) for g in groups], groups, progress)
        return [out[q] for q in questions]

    def per_fold(self, folds: Sequence[np.ndarray], fn: Callable, *args, progress: bool = True) -> dict[int, Any]:
        """``fn(method, data, fold, *args)``, one task per fold of question rows; its values by question."""
        return self._run([(fn, *self._shared[:2], f, *args) for f in folds], [f.tolist() for f in folds], progress)

    def _run(self, calls: list[tuple], keys: list[list[int]], progress: bool) -> dict[int, Any]:
        """Each call ``(fn, *args)`` as a task returning one value per question of its ``keys`` entry."""
        from distributed import as_completed
        from tqdm.auto import tqdm

        futures = {self.client.submit(*call, pure=False): qs for call, qs in zip(calls, keys)}
        out: dict[int, Any] = {}
        for future in tqdm(as_completed(futures, loop=self.client.loop), total=len(futures), desc=self.desc,
                           unit="task", disable=not progress):
            out.update(zip(futures[future], future.result()))
            future.release()
        return out


def _bound(fn: Callable, method: Method, data: EmbeddedDataset, derived, group: list[int], *args) -> list:
    """A task: ``fn(method, data, group, *args)`` on a worker, the method bound to the client's derived state."""
    if derived is not None:
        method.prepare(data, derived)
    return fn(method, data, group, *args)


def worker_peak_rss_mb(client) -> dict[str, float]:
    """Each worker process's peak resident memory so far (MB), by worker address."""
    return {addr: round(kb / 1024, 1) for addr, kb in client.run(_peak_rss_kb).items()}


def _peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
