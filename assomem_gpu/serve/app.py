"""The HTTP service over a ``MemoryStore`` (FastAPI): tenants by API key, sessions, search, answers, health and
metrics.

Every route but the health checks, the metrics and the docs takes ``Authorization: Bearer <key>``: a tenant's key
for its sessions and searches (the key names the tenant, so no route can reach another tenant's rows: another
tenant's ids are simply not found, 404), the admin key for tenants and keys. Missing key: 401; a key of the wrong
kind or unknown: 403. Bad input: 422 naming the field; a body over the limit: 413; an answer when the LLM cannot be
loaded or reached: 503, and past ``max_answers`` at once: 429. A 2xx on a write means the write is on disk, whole.
Routes are plain functions, so writing, generating and reading SQLite run in FastAPI's worker threads, off the event
loop; a key is checked on the loop (the store holds the keys' digests in memory); a search awaits its batch on the
loop, and the batch's engine call (encoding and ranking) runs in a worker thread (``batching.SearchBatcher``); its
hits are written out as JSON on the loop, without pydantic models (about 10 small objects a question).
"""
from __future__ import annotations

import gc
import hmac
import math
import threading
import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Histogram, generate_latest
from pydantic_core import to_json

from ..index import Hit
from ..llm import make_llm
from ..store import MemoryStore, Tenant, UnknownTenant
from .batching import Busy, SearchBatcher
from .models import (MAX_BODY_BYTES, Added, AddSessions, AnswerOut, Ask, NewTenant, RemoveSessions, Search,
                     SearchOut, SessionOut, SessionPage, TenantKey)

bearer = HTTPBearer(auto_error=False)


def hit_out(hit: Hit) -> dict:
    """A hit as ``models.HitOut``'s plain data."""
    return {"utterance_id": hit.utterance_id, "session_id": hit.session_id, "speaker": hit.speaker, "text": hit.text,
            "date": hit.date, "score": hit.score, "signals": dict(hit.signals), "metadata": dict(hit.metadata)}


class _LimitAndTime:
    """ASGI middleware: a body declared over ``max_body_bytes`` gets 413 before it is read, one sent in chunks (no
    declared length) as soon as what arrived passes the limit; and every HTTP request's latency, to the end of its
    response, goes to ``latency`` by route, method and status. Plain ASGI rather than Starlette's
    ``BaseHTTPMiddleware``, which runs each request in a task of its own with its body streamed through queues."""

    def __init__(self, app, max_body_bytes: int, latency: Histogram):
        self.app, self.max_body_bytes, self.latency = app, max_body_bytes, latency

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        size = dict(scope["headers"]).get(b"content-length")
        try:
            if size is not None and (not size.isdigit() or int(size) > self.max_body_bytes):
                await JSONResponse({"detail": f"body: over the limit of {self.max_body_bytes} bytes"},
                                   status_code=413)(scope, receive, sending)
            else:
                await self.app(scope, self._limited(receive), sending)
        finally:
            route = scope.get("route")
            self.latency.labels(getattr(route, "path", "unmatched"), scope["method"],
                                str(status[0])).observe(time.perf_counter() - start)

    def _limited(self, receive):
        """``receive`` that raises 413 once the body's parts passed the limit (FastAPI, reading the body, passes an
        ``HTTPException`` on: its handler answers it)."""
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise HTTPException(413, f"body: over the limit of {self.max_body_bytes} bytes")
            return message

        return limited


def create_app(store: MemoryStore, admin_key: str, max_body_bytes: int = MAX_BODY_BYTES,
               batch_wait_s: float = 0.0, llm: str = "smollm2", max_answers: int = 4,
               max_waiting: int = 4096) -> FastAPI:
    """The service for ``store``; ``admin_key`` guards tenant and key management; concurrent searches of a tenant
    gather into one engine call while the tenant's previous one runs, and for ``batch_wait_s`` seconds more (default
    0), at most ``max_waiting`` questions waiting (more: 429; ``batching.SearchBatcher``); ``/v1/answer`` answers
    with ``llm`` (a ``llm.make_llm`` spec, its weights loaded on the first answer), at most ``max_answers`` at once
    (more: 429), so that answers never hold every worker thread. The app owns the store: it warms it up
    (``MemoryStore.warm_up``) before it takes requests and closes it (snapshots written) when the server stops."""
    if not admin_key:
        raise ValueError("admin_key: must be a non-empty string")
    batcher = SearchBatcher(store, batch_wait_s, max_waiting=max_waiting)
    if max_answers < 1:
        raise ValueError(f"max_answers: at least 1, got {max_answers}")
    answer_slots = threading.BoundedSemaphore(max_answers)
    try:
        answerer, unavailable = make_llm(llm), ""
    except RuntimeError as exc:  # its package is not installed: every other route still works
        answerer, unavailable = None, str(exc)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await run_in_threadpool(store.warm_up)  # the first request does not wait for the model to load
        # the libraries now loaded (torch, transformers, Numba: ~500,000 objects) leave the collector's sight: a full
        # collection walked them all, ~0.3 s on a 2-core CPU, and stalled every request in flight
        gc.freeze()
        yield
        await run_in_threadpool(store.close)

    app = FastAPI(title="assomem_gpu memory service", version="1", lifespan=lifespan)
    registry = CollectorRegistry()
    latency = Histogram("assomem_request_seconds", "request latency", ["route", "method", "status"],
                        registry=registry)
    tenants = Gauge("assomem_tenants", "tenants in the store", registry=registry)
    loaded = Gauge("assomem_loaded_indexes", "tenant indexes held in memory", registry=registry)
    searches = Gauge("assomem_search_requests", "search requests received", registry=registry)
    batches = Gauge("assomem_search_batches", "batched engine calls that answered them", registry=registry)
    frozen = Gauge("assomem_gc_frozen_objects", "objects kept out of the garbage collector's sight at start",
                   registry=registry)

    app.add_middleware(_LimitAndTime, max_body_bytes=max_body_bytes, latency=latency)

    def credentials(creds: HTTPAuthorizationCredentials | None) -> str:
        if creds is None or not creds.credentials:
            raise HTTPException(401, "authorization: a bearer key is required", {"WWW-Authenticate": "Bearer"})
        return creds.credentials

    # the key checks are async: they run on the event loop (a lookup in memory), not in a worker thread each
    async def tenant(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Tenant:
        """The key's tenant, by name and id: if the name is deleted (and made again) while the request waits, the
        store refuses it (``UnknownTenant``, 404) rather than serve the new tenant's rows to the old key."""
        who = store.tenant_of_key(credentials(creds))
        if who is None:
            raise HTTPException(403, "authorization: not a tenant's key")
        return who

    async def admin(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if not hmac.compare_digest(credentials(creds).encode(), admin_key.encode()):
            raise HTTPException(403, "authorization: not the admin key")

    def bad_input(exc: Exception) -> HTTPException:
        return HTTPException(422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        """422 naming each field and what is wrong, without the input FastAPI's own handler echoes: a text with a lone
        surrogate could not be written back (a 500, the text in the server's log)."""
        errors = [{k: v for k, v in e.items() if k != "input"} for e in exc.errors()]
        return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)

    @app.exception_handler(UnknownTenant)
    async def unknown_tenant(_: Request, exc: UnknownTenant) -> JSONResponse:  # deleted while the request ran
        return JSONResponse({"detail": f"{exc.args[0]} not found"}, status_code=404)

    # ---- health and metrics --------------------------------------------------------------------------------------
    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> dict:
        return {"status": "ready", "tenants": len(store.tenants())}

    @app.get("/metrics")
    def metrics() -> Response:
        tenants.set(len(store.tenants()))
        loaded.set(store.loaded())
        searches.set(batcher.requests)
        batches.set(batcher.batches)
        frozen.set(gc.get_freeze_count())
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    # ---- tenants (admin) -----------------------------------------------------------------------------------------
    @app.post("/v1/tenants", status_code=201, response_model=TenantKey, dependencies=[Depends(admin)])
    def create_tenant(body: NewTenant) -> TenantKey:
        try:
            store.create_tenant(body.name)
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from exc
        return TenantKey(tenant=body.name, api_key=store.issue_key(body.name))

    @app.post("/v1/tenants/{name}/keys", status_code=201, response_model=TenantKey, dependencies=[Depends(admin)])
    def new_key(name: str) -> TenantKey:
        try:
            return TenantKey(tenant=name, api_key=store.issue_key(name))
        except KeyError as exc:
            raise HTTPException(404, f"tenant {name!r} not found") from exc
        except ValueError as exc:  # not a name (blank): any other a store holds, made in process or by import
            raise bad_input(exc) from exc

    @app.delete("/v1/tenants/{name}", status_code=204, dependencies=[Depends(admin)])
    def delete_tenant(name: str) -> Response:
        try:
            store.delete_tenant(name)
        except KeyError as exc:
            raise HTTPException(404, f"tenant {name!r} not found") from exc
        except ValueError as exc:
            raise bad_input(exc) from exc
        return Response(status_code=204)

    # ---- sessions and search (a tenant's key) --------------------------------------------------------------------
    @app.post("/v1/sessions", status_code=201, response_model=Added)
    def add_sessions(body: AddSessions, who: Tenant = Depends(tenant)) -> Added:
        sessions = [s.model_dump() for s in body.sessions]
        try:
            store.add_sessions(who, sessions)
        except (ValueError, TypeError) as exc:
            raise bad_input(exc) from exc
        return Added(added=[s["id"] for s in sessions])

    @app.get("/v1/sessions", response_model=SessionPage)
    def list_sessions(offset: int = Query(0, ge=0, le=2**62), limit: int = Query(100, ge=1, le=1000),
                      who: Tenant = Depends(tenant)) -> SessionPage:
        return SessionPage(sessions=store.session_ids(who, offset, limit), offset=offset, limit=limit)

    @app.post("/v1/sessions/remove", status_code=204,
              responses={404: {"description": "ids the tenant does not hold (the first five named); none removed"}})
    def remove_sessions(body: RemoveSessions, who: Tenant = Depends(tenant)) -> Response:
        """Remove these sessions, all or none: ids the tenant does not hold are a 404 naming them (the first five),
        and nothing is removed."""
        try:
            store.remove_sessions(who, body.session_ids)
        except ValueError as exc:  # (the only one: ids not in the index)
            raise HTTPException(404, str(exc)) from exc
        return Response(status_code=204)

    @app.get("/v1/sessions/{session_id:path}", response_model=SessionOut)  # (an id may hold "/")
    def get_session(session_id: str, who: Tenant = Depends(tenant)) -> SessionOut:
        try:
            s = store.get_session(who, session_id)
        except KeyError as exc:
            raise HTTPException(404, f"session {session_id!r} not found") from exc
        return SessionOut(id=s.id, date=None if math.isnan(s.date) else s.date, metadata=dict(s.metadata),
                          utterances=[{"id": u.id, "speaker": u.speaker, "text": u.text} for u in s.utterances])

    @app.delete("/v1/sessions/{session_id:path}", status_code=204)
    def delete_session(session_id: str, who: Tenant = Depends(tenant)) -> Response:
        try:
            store.remove_sessions(who, [session_id])
        except ValueError as exc:
            raise HTTPException(404, f"session {session_id!r} not found") from exc
        return Response(status_code=204)

    @app.post("/v1/search", response_model=SearchOut)
    async def search(body: Search, who: Tenant = Depends(tenant)) -> Response:
        try:  # awaits its batch on the event loop; the batch's engine call runs in a worker thread
            found = await batcher.search(who, body.questions, k=body.k, question_date=body.question_date,
                                         sessions=body.sessions, since=body.since, until=body.until)
        except (ValueError, TypeError) as exc:
            raise bad_input(exc) from exc
        except KeyError as exc:  # the tenant was deleted while the search waited
            raise HTTPException(404, f"tenant {who.name!r} not found") from exc
        except Busy as exc:
            raise HTTPException(429, str(exc), {"Retry-After": "1"}) from exc
        # written as SearchOut's JSON without building its models (the engine made the hits; ~10 a question)
        return Response(to_json({"results": [[hit_out(h) for h in hits] for hits in found]}, inf_nan_mode="null"),
                        media_type="application/json")

    @app.post("/v1/answer", response_model=AnswerOut)
    def answer(body: Ask, who: Tenant = Depends(tenant)) -> AnswerOut:
        if answerer is None:
            raise HTTPException(503, f"llm: {unavailable}")
        if not answer_slots.acquire(blocking=False):  # a generation holds a worker thread for seconds
            raise HTTPException(429, f"answers: {max_answers} in progress, the most at once; retry later",
                                {"Retry-After": "1"})
        try:
            found = store.answer(who, body.question, answerer, **body.model_dump(exclude={"question"}))
        except (ValueError, TypeError) as exc:
            raise bad_input(exc) from exc
        except RuntimeError as exc:  # the LLM cannot be loaded, or its endpoint failed
            raise HTTPException(503, f"llm: {exc}") from exc
        finally:
            answer_slots.release()
        return AnswerOut(answer=found.text, hits=[hit_out(h) for h in found.hits], prompt=found.prompt)

    return app
