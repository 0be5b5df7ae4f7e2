"""Micro-batching: concurrent searches of one tenant answered by one batched engine call.

The first request of a group (same tenant, same filters) waits for the tenant's previous batch to finish, while
others join (so batches grow with the load, and a lone request waits for nothing), and ``wait_s`` seconds more
where set; then it runs every gathered question in one ``MemoryStore.search`` (k the largest asked, each question
with its own date) and hands each request its own hits, cut to its k. A batch is what makes a GPU pay off under load; on the CPU it shares
one relevance product and one PPR iteration among the requests. If the batched call fails, each request runs alone,
so an error reaches only the request that caused it.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Request:
    questions: list[str]
    k: int
    question_date: Any
    done: threading.Event = field(default_factory=threading.Event)
    hits: list | None = None
    error: BaseException | None = None


class SearchBatcher:
    """Gathers concurrent searches while the tenant's previous batch runs, and ``wait_s`` seconds more (default 0: a
    fixed wait only delays a lone request; under load the engine's own time gathers the next batch), at most
    ``max_questions`` questions a batch. ``requests`` and ``batches`` count what came in and what the engine ran."""

    def __init__(self, store, wait_s: float = 0.0, max_questions: int = 256):
        if not (wait_s >= 0 and isinstance(max_questions, int) and max_questions >= 1):
            raise ValueError(f"wait_s >= 0 and max_questions >= 1, got {wait_s!r} and {max_questions!r}")
        self.store, self.wait_s, self.max_questions = store, wait_s, max_questions
        self.requests = self.batches = 0
        self._lock = threading.Lock()
        self._groups: dict[tuple, list[_Request]] = {}
        self._engine: dict[str, threading.Lock] = {}  # per tenant: one batch at a time, the next one gathers meanwhile

    def search(self, tenant: str, questions: list[str], k: int, question_date: Any = None,
               sessions: list[str] | None = None, since: Any = None, until: Any = None) -> list[list]:
        """``MemoryStore.search`` for a batch of questions, answered with whatever else arrives meanwhile."""
        key = (tenant, None if sessions is None else tuple(sessions), repr(since), repr(until))
        request = _Request(list(questions), k, question_date)
        with self._lock:
            self.requests += 1
            group = self._groups.setdefault(key, [])
            group.append(request)
            leader = len(group) == 1
        if leader:
            if self.wait_s:
                time.sleep(self.wait_s)
            with self._lock:
                engine = self._engine.setdefault(tenant, threading.Lock())
            with engine:  # while the tenant's previous batch runs, this group keeps gathering
                with self._lock:
                    batch = self._groups.pop(key)
                self._answer(tenant, batch, {"sessions": sessions, "since": since, "until": until})
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.hits

    def forget(self, tenant: str) -> None:
        """Drop what the batcher keeps for a tenant (once it is deleted)."""
        with self._lock:
            self._engine.pop(tenant, None)

    def _answer(self, tenant: str, batch: list[_Request], filters: dict) -> None:
        chunk: list[_Request] = []
        for r in batch:  # consecutive requests, up to max_questions questions a call
            if chunk and sum(len(c.questions) for c in chunk) + len(r.questions) > self.max_questions:
                self._run(tenant, chunk, filters)
                chunk = []
            chunk.append(r)
        self._run(tenant, chunk, filters)

    def _run(self, tenant: str, batch: list[_Request], filters: dict) -> None:
        with self._lock:
            self.batches += 1
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
        for r in batch:
            r.done.set()
