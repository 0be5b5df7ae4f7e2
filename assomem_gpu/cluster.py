"""Batch retrieval on a Dask cluster (``eval --cluster``): the work sharded by memory, the results those of one process.

1. The client loads and embeds the dataset (``EmbeddedDataset.build``) and derives what every memory's index takes
   from its sessions alone (``AssoMem.prepare``: clue vectors, time marks, term counts) before any task. Encoding is
   a stage of its own because one process already spreads the encoder's matrix products over its cores, and the
   embedding cache is one SQLite file that this process alone writes: no two writers race, and on a multi-node
   cluster no worker needs the file (the vectors travel with the dataset).
2. The embedded dataset goes to every worker once per run, and each method with its derived state once
   (``scatter(broadcast=True)``).
3. One task per memory ranks (or, for cross-validation, scores) that memory's questions in batches, with the same
   function the one-process path runs (``eval.runner.rank_memory``, ``calibrate.memory_features``), so the memory's
   index is built once, on the worker that runs it.
4. Cross-validation: each fold (calibrate on the other folds, rank this one: ``calibrate.fold_rankings``) is a task.

The callers hand their units of work to ``Workers``; this module knows Dask, not retrieval.

Dask runs again the tasks of a worker that died (up to ``distributed.scheduler.allowed-failures`` deaths per task, 3 by
default); results are gathered by question, so a task run twice neither duplicates nor loses one. What was sent lives
on the workers only, and Dask does not make a scattered value again when the workers holding it die
(dask/distributed#3149; it cancels the tasks that need it, "lost dependencies"): the run then sends it again and
runs those tasks again, at most ``RESENDS`` times.
"""
from __future__ import annotations

import asyncio
import os
import re
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .retrieve import EmbeddedDataset, Method, by_memory
from .rss import peak_rss_mb

CONNECT_TIMEOUT_S = 10.0
RESENDS = 3  # times a run sends its data again after a worker's death lost it
# A local worker runs one task at a time on one core, so its Numba pool gets one thread too: N workers share the cores
# instead of each starting a pool as wide as the machine. (Dask's own ``distributed.nanny.pre-spawn-environ`` gives its
# BLAS and OpenMP pools one thread.) Set in the worker before it imports Numba, never in this process, whose Numba
# pool may already run.
LOCAL_WORKER_ENV = {"NUMBA_NUM_THREADS": "1"}


SPEC = re.compile(r"local:[1-9][0-9]{0,3}|local-cuda|tcp://(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):[0-9]{1,5}")


def check_spec(spec: str) -> None:
    """``ValueError`` unless ``spec`` is ``local:N`` (1 ≤ N < 10,000), ``local-cuda`` or ``tcp://HOST:PORT``."""
    if not SPEC.fullmatch(spec):
        raise ValueError(f"cluster must be 'local:N' (1 to 9,999 worker processes), 'local-cuda' or 'tcp://HOST:PORT', "
                         f"got {spec!r}")


@contextmanager
def connect(spec: str, timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[Any]:
    """A ``distributed.Client`` for ``spec`` (see ``check_spec``), closed (with any cluster it started) on exit.

    ``local:N``: a ``LocalCluster`` of N worker processes, one thread each. ``local-cuda``: a ``dask_cuda``
    ``LocalCUDACluster``, one worker per visible GPU. ``tcp://HOST:PORT``: the scheduler of a running cluster, whose
    workers run this package, one thread each; ``ValueError`` when no scheduler answers within ``timeout_s`` seconds.
    """
    check_spec(spec)
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise RuntimeError("cluster: Dask is not installed; pip install 'assomem_gpu[dist]'") from None
    if spec.startswith("tcp://"):
        with _scheduler(Client, spec, timeout_s) as client:
            yield client
        return
    # A nanny writes Dask's pre-spawn variables (one BLAS and OpenMP thread) into this process's environment before it
    # spawns a worker; this process keeps its own, so its encoder still uses every core.
    environ = dict(os.environ)
    try:
        if spec == "local-cuda":
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError:
                raise RuntimeError("cluster: 'local-cuda' needs dask-cuda; pip install 'assomem_gpu[dist-cuda]'") from None
            cluster = LocalCUDACluster(dashboard_address=":0")
        else:
            cluster = LocalCluster(n_workers=int(spec.removeprefix("local:")), threads_per_worker=1, processes=True,
                                   dashboard_address=":0", env=LOCAL_WORKER_ENV)
    finally:
        os.environ.clear()
        os.environ.update(environ)
    with cluster, Client(cluster, set_as_default=False) as client:
        yield client


@contextmanager
def _scheduler(client_class, address: str, timeout_s: float) -> Iterator[Any]:
    """A client of the scheduler at ``address``; ``ValueError`` naming it when none answers within ``timeout_s``
    (Dask's own timeout does not cover a handshake that never ends: another service on that port) or what answers
    is no Dask scheduler. What answers is asked who it is first (``_identity``): a client made of another service
    hung 20 s in its close at the interpreter's exit. The connection is made in a daemon thread, so one that hangs
    holds up nothing."""
    made: list = []

    def make():
        try:
            kind = asyncio.run(_identity(address, timeout_s)).get("type")
            if kind != "Scheduler":
                raise TypeError(f"it says it is a {kind!r}")
            made.append(client_class(address, timeout=f"{timeout_s}s", set_as_default=False))
        except Exception as exc:  # noqa: BLE001 - whatever answered, reported below
            made.append(exc)

    connecting = threading.Thread(target=make, name="dask-connect", daemon=True)
    connecting.start()
    connecting.join(2 * timeout_s + 2)  # (its identity, then the client)
    if not made or isinstance(made[0], (OSError, TimeoutError)):
        raise ValueError(f"cluster: no Dask scheduler answered at {address} within {timeout_s:g} s"
                         + (f" ({str(made[0]) or type(made[0]).__name__})" if made else ""))
    if isinstance(made[0], Exception):
        raise ValueError(f"cluster: what answered at {address} is not a Dask scheduler ({type(made[0]).__name__}: "
                         f"{made[0]})")
    with made[0] as client:
        yield client


async def _identity(address: str, timeout_s: float) -> dict:
    """What the Dask server at ``address`` says it is (its ``identity``: ``{"type": "Scheduler", ...}``), within
    ``timeout_s`` seconds; its connection closed."""
    from distributed.core import rpc

    server = rpc(address, timeout=timeout_s)
    try:
        return await asyncio.wait_for(server.identity(), timeout_s)
    finally:
        await server.close_rpc()


class Workers:
    """A Dask client's workers holding one embedded dataset, sent once (and again if the workers lose it); per method,
    the method and (AssoMem) the derived state of the dataset's bank (``AssoMem.prepare``), so that no worker
    encodes. ``per_memory`` and ``per_fold`` run the callers' units of work as tasks.

    ``ValueError`` when the scheduler has no worker within ``CONNECT_TIMEOUT_S``, when a worker runs more than one
    thread (tasks would share a worker's method and its index cache), or when a worker would run a method's engine
    on another backend than this process (its results could differ).
    """

    def __init__(self, client, data: EmbeddedDataset):
        self.client, self.data = client, data
        if not self._a_worker():
            raise ValueError(f"cluster: the scheduler at {client.scheduler.address} has no workers")
        wide = {addr: n for addr, n in client.nthreads().items() if n != 1}
        if wide:
            raise ValueError(f"cluster: workers must run one thread each (dask worker --nthreads 1), these run more: "
                             f"{wide}")
        self._values: dict[str, Any] = {}  # each sent future's key -> its value, to send again if workers lose it
        self._renamed: dict[str, str] = {}  # a future's key -> the key of the one that replaced it when sent again
        self._data = self.send(data)
        self._methods: dict[int, tuple] = {}  # id(method) -> (method, its derived state, their futures)

    def send(self, value: Any):
        """``value`` on every worker, as one future to pass to a task; kept here, until ``forget``, to send again
        where the workers lose it. A worker that dies while it is sent to: sent again to those left (or restarted),
        up to ``RESENDS`` times; then ``RuntimeError``."""
        for attempt in range(RESENDS + 1):
            try:
                future = self.client.scatter([value], broadcast=True, hash=False)[0]
                break
            except (OSError, TimeoutError) as exc:  # (a closed connection is an OSError)
                if attempt == RESENDS:
                    raise RuntimeError(f"cluster: the workers kept dying while the data was sent to them ({exc})"
                                       ) from exc
                if not self._a_worker():
                    raise RuntimeError("cluster: no worker is left to send the data to") from exc
        self._values[future.key] = value
        return future

    def _a_worker(self) -> bool:
        """Whether the scheduler has a worker, or gets one within ``CONNECT_TIMEOUT_S``."""
        try:
            self.client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        except TimeoutError:
            return False
        return True

    def forget(self, future) -> None:
        """Let go of a value ``send`` sent (or what replaced it when sent again) that no task will pass any more."""
        key = future.key
        while key in self._renamed:
            key = self._renamed.pop(key)
        self._values.pop(key, None)

    def per_memory(self, method: Method, questions: Sequence[int], fn: Callable, *args, progress: bool = True) -> list:
        """``fn(method, data, group, *args)``, one task per memory's ``group`` of ``questions``; one value per
        question, in the order of ``questions``."""
        groups = list(by_memory(self.data.dataset, questions).values())
        sent, derived = self._sent(method)
        out = self._run(method, [(_bound, fn, sent, self._data, derived, g, *args) for g in groups], groups, progress)
        return [out[q] for q in questions]

    def per_fold(self, method: Method, folds: Sequence[np.ndarray], fn: Callable, *args,
                 progress: bool = True) -> dict[int, Any]:
        """``fn(method, data, fold, *args)``, one task per fold of question rows; its values by question."""
        sent, _ = self._sent(method)
        return self._run(method, [(fn, sent, self._data, f, *args) for f in folds], [f.tolist() for f in folds],
                         progress)

    def _sent(self, method: Method) -> tuple:
        if id(method) not in self._methods:
            if getattr(method, "backend", None) is not None:
                ours = _engine_of(method)
                other = {addr: e for addr, e in self.client.run(_engine_of, method, on_error="return").items()
                         if not isinstance(e, Exception) and e != ours}  # (a worker that died meanwhile: none)
                if other:
                    raise ValueError(f"cluster: {method.name} runs {ours} here but {other} on those workers; install "
                                     f"the same engine on every host")
            derived = method.prepare(self.data) if hasattr(method, "prepare") else None
            self._methods[id(method)] = (method, derived, self.send(method), self.send(derived))
        return self._methods[id(method)][2:]

    def _run(self, method: Method, calls: list[tuple], keys: list[list[int]], progress: bool) -> dict[int, Any]:
        """Each call ``(fn, *args)`` as a task returning one value per question of its ``keys`` entry; on an error,
        the tasks left are cancelled. Tasks that Dask cancels because a worker's death lost what was sent
        (dask/distributed#3149: a scattered value is not recomputed) run again once everything is sent again, up to
        ``RESENDS`` times."""
        from concurrent.futures import CancelledError

        from distributed import KilledWorker, as_completed
        from tqdm.auto import tqdm

        out: dict[int, Any] = {}
        todo = list(zip(calls, keys))
        with tqdm(total=len(todo), desc=f"{method.name} on {len(self.client.nthreads())} workers", unit="task",
                  disable=not progress) as bar:
            for resend in range(RESENDS + 1):
                futures = {self.client.submit(*call, pure=False): (call, qs) for call, qs in todo}
                lost = []
                try:
                    for future in as_completed(futures, loop=self.client.loop):
                        call, qs = futures[future]
                        try:
                            out.update(zip(qs, future.result()))
                        except CancelledError as exc:
                            if resend == RESENDS:
                                raise RuntimeError(f"cluster: {method.name}'s tasks were cancelled {RESENDS + 1} "
                                                   f"times (the workers lost what was sent to them?)") from exc
                            lost.append((call, qs))
                            continue
                        except KilledWorker as exc:  # past distributed.scheduler.allowed-failures deaths
                            raise RuntimeError(f"cluster: workers died running a task of {method.name} ({exc}); "
                                               "is a worker short of memory?") from exc
                        future.release()
                        bar.update()
                finally:
                    self.client.cancel([f for f in futures if not f.done()])
                if not lost:
                    break
                todo = self._sent_again(method, lost)
        return out

    def _sent_again(self, method: Method, calls: list[tuple]) -> list[tuple]:
        """What ``calls`` pass as futures (the features of cross-validation's folds, say), the dataset and
        ``method`` with its derived state sent to the workers again, and ``calls`` with the new futures."""
        from distributed import Future

        fresh: dict[str, Any] = {}

        def again(arg):
            if isinstance(arg, Future) and arg.key in self._values:  # first met: sent again
                fresh[arg.key] = self.send(self._values.pop(arg.key))
                self._renamed[arg.key] = fresh[arg.key].key
            return fresh.get(arg.key, arg) if isinstance(arg, Future) else arg

        calls = [(tuple(again(a) for a in call), qs) for call, qs in calls]
        self._data = again(self._data)
        _, derived, *sent = self._methods[id(method)]
        self._methods[id(method)] = (method, derived, *(again(f) for f in sent))
        return calls


def _bound(fn: Callable, method: Method, data: EmbeddedDataset, derived: Any, group: list[int], *args) -> list:
    """A task: ``fn(method, data, group, *args)`` on a worker, the method bound to the client's derived state."""
    if derived is not None:
        method.prepare(data, derived)
    return fn(method, data, group, *args)


def _engine_of(method: Method) -> dict:
    """What runs each component of the method's engine, in this process."""
    return {"backend": method.backend.name, **{k: c.impl for k, c in method.backend.components.items()}}


def worker_peak_rss_mb(client) -> dict[str, float]:
    """Each worker process's peak resident memory so far (MB; a restarted worker's since its restart), by address."""
    return {addr: round(mb, 1) for addr, mb in client.run(peak_rss_mb, on_error="return").items()
            if not isinstance(mb, Exception)}  # (a worker that died meanwhile: none)
