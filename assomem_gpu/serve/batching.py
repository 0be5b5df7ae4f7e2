"""Micro-batching: concurrent searches of one tenant answered by one batched engine call.

Requests of a group (same tenant, same filters) gather while the tenant's previous batch runs (so batches grow with
the load, and a lone request waits for nothing), and ``wait_s`` seconds more where set; then one engine call, in a
worker thread, runs every gathered question in one ``MemoryStore.search`` (k the largest asked, each question with
its own date) and each request gets its own hits, cut to its k. A batch is what makes a GPU pay off under load; on
the CPU it shares one relevance product and one PPR iteration among the requests. Requests wait on the event loop,
so only the engine call takes a worker thread: a burst of requests is not a burst of blocked threads. If the
batched call fails, each request runs alone, so an error reaches only the request that caused it.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from ..index import positive_k
from ..store import Tenant


class Busy(Exception):
    """More questions wait than the batcher takes (``max_waiting``): the request is refused, to be retried later."""


@dataclass
class _Request:
    questions: list[str]
    k: int
    question_date: Any
    done: asyncio.Event = field(default_factory=asyncio.Event)
    hits: list | None = None
    error: BaseException | None = None
    cancelled: bool = False  # its client left while it waited: its batch skips it


class SearchBatcher:
    """Gathers concurrent searches (coroutines on one event loop) while the tenant's previous batch runs, and
    ``wait_s`` seconds more (default 0: a fixed wait only delays a lone request; under load the engine's own time
    gathers the next batch), at most ``max_questions`` questions an engine call. A request that would bring the
    questions waiting past ``max_waiting`` (default 4,096: about half a minute of a 2-core CPU's work) raises
    ``Busy``, so that a burst is refused rather than left to time out. ``requests`` and ``batches`` count what came
    in and what the engine ran; ``waiting``, the questions received and not yet answered."""

    def __init__(self, store, wait_s: float = 0.0, max_questions: int = 256, max_waiting: int = 4096):
        if not (wait_s >= 0 and isinstance(max_questions, int) and max_questions >= 1
                and isinstance(max_waiting, int) and max_waiting >= 1):
            raise ValueError(f"wait_s >= 0, max_questions >= 1 and max_waiting >= 1, got {wait_s!r}, "
                             f"{max_questions!r} and {max_waiting!r}")
        self.store, self.wait_s, self.max_questions, self.max_waiting = store, wait_s, max_questions, max_waiting
        self.requests = self.batches = self.waiting = 0
        self._groups: dict[tuple, list[_Request]] = {}
        self._engine: dict[str | Tenant, asyncio.Lock] = {}  # tenants with batches in flight: one at a time, the
        # next gathers
        self._running: set[asyncio.Task] = set()  # batches in flight (the loop keeps only weak references)

    async def search(self, tenant: str | Tenant, questions: list[str], k: int, question_date: Any = None,
                     sessions: list[str] | None = None, since: Any = None, until: Any = None) -> list[list]:
        """``MemoryStore.search`` for a batch of questions, answered with whatever else arrives meanwhile. The batch
        runs in a task of its own: a request cancelled while it waits (its client gone) takes nobody's answer with
        it."""
        positive_k(k)  # here: the batch's engine call takes the largest k of its requests
        key = (tenant, None if sessions is None else tuple(sessions), repr(since), repr(until))
        request = _Request(list(questions), k, question_date)
        self.requests += 1
        if self.waiting + len(request.questions) > self.max_waiting:
            raise Busy(f"search: {self.waiting} questions are waiting, at most {self.max_waiting}; retry later")
        group = self._groups.setdefault(key, [])
        group.append(request)
        if len(group) == 1:
            task = asyncio.create_task(self._batch(tenant, key, {"sessions": sessions, "since": since,
                                                                 "until": until}))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        self.waiting += len(request.questions)
        try:
            await request.done.wait()
        except asyncio.CancelledError:
            request.cancelled = True
            raise
        finally:
            self.waiting -= len(request.questions)
        if request.error is not None:
            raise request.error
        return request.hits

    async def _batch(self, tenant: str | Tenant, key: tuple, filters: dict) -> None:
        batch: list[_Request] = []
        try:
            if self.wait_s:
                await asyncio.sleep(self.wait_s)
            async with self._engine.setdefault(tenant, asyncio.Lock()):  # the group gathers while the previous runs
                batch = self._groups.pop(key)
                calls = await run_in_threadpool(self._answer, tenant, batch, filters)
                self.batches += calls
        finally:  # whatever happened, every request of the group gets its answer or an error
            batch = batch or self._groups.pop(key, [])
            for r in batch:
                if r.hits is None and r.error is None:
                    r.error = RuntimeError("search: the batch it was in did not finish")
                r.done.set()
            lock = self._engine.get(tenant)
            if lock is not None and not lock.locked() and not any(k[0] == tenant for k in self._groups):
                del self._engine[tenant]  # nothing of the tenant's in flight, so nothing of it is kept

    def _answer(self, tenant: str | Tenant, batch: list[_Request], filters: dict) -> int:
        """Answers ``batch`` (but the requests cancelled meanwhile) in engine calls of consecutive requests, up to
        ``max_questions`` questions each; returns how many calls it made."""
        chunks: list[list[_Request]] = []
        for r in batch:
            if r.cancelled:
                continue
            if not chunks or sum(len(c.questions) for c in chunks[-1]) + len(r.questions) > self.max_questions:
                chunks.append([])
            chunks[-1].append(r)
        for chunk in chunks:
            self._run(tenant, chunk, filters)
        return len(chunks)

    def _run(self, tenant: str | Tenant, batch: list[_Request], filters: dict) -> None:
        try:
            hits = self.store.search(tenant, [q for r in batch for q in r.questions], k=max(r.k for r in batch),
                                     question_date=[r.question_date for r in batch for _ in r.questions], **filters)
            at = 0
            for r in batch:
                r.hits = [h[: r.k] for h in hits[at : at + len(r.questions)]]
                at += len(r.questions)
        except Exception:  # one request's bad input: each runs alone and gets its own answer or error
            for r in batch:
                try:
                    r.hits = self.store.search(tenant, r.questions, k=r.k, question_date=r.question_date, **filters)
                except Exception as exc:
                    r.error = exc
