"""A Python client of the memory service (httpx), with the in-process ``MemoryStore``'s verbs for one tenant.

Errors come back as the in-process API raises them: bad sessions raise before any request, as ``MemoryIndex``
raises them (``ValueError`` / ``TypeError`` naming the field); 400/413/422 → ``ValueError`` (the server's message
names the field or the limit), 404 → ``KeyError``, 401/403 → ``PermissionError``, and what the server could not do
then (429: too busy; 503: no LLM for ``answer``; 5xx) → ``RuntimeError``.
"""
from __future__ import annotations

from datetime import date
from typing import Any, Iterable, Mapping
from urllib.parse import quote

import httpx

from ..index import Answer, Hit, Session, Utterance, session_records


class MemoryClient:
    """``MemoryClient("http://127.0.0.1:8000", key)``: a tenant's memory over HTTP (or the admin's, for
    ``create_tenant`` / ``delete_tenant`` / ``issue_key``)."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 60.0):
        self._http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "MemoryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs) -> Any:
        r = self._http.request(method, path, **kwargs)
        if r.status_code < 400:
            return r.json() if r.content else None
        detail = r.json().get("detail", r.text) if r.headers.get("content-type", "").startswith("application/json") \
            else r.text
        error = {400: ValueError, 401: PermissionError, 403: PermissionError, 404: KeyError, 413: ValueError,
                 422: ValueError}.get(r.status_code, RuntimeError)
        raise error(f"{r.status_code}: {detail}")

    # ---- admin ---------------------------------------------------------------------------------------------------
    def create_tenant(self, name: str) -> str:
        """Create a tenant; returns its first API key."""
        return self._call("POST", "/v1/tenants", json={"name": name})["api_key"]

    def issue_key(self, name: str) -> str:
        return self._call("POST", f"/v1/tenants/{segment(name)}/keys")["api_key"]

    def delete_tenant(self, name: str) -> None:
        self._call("DELETE", f"/v1/tenants/{segment(name)}")

    # ---- a tenant's memory ---------------------------------------------------------------------------------------
    def add_sessions(self, sessions: Iterable[Session | Mapping]) -> list[str]:
        return self._call("POST", "/v1/sessions", json={"sessions": session_records(sessions)})["added"]

    def remove_sessions(self, session_ids: Iterable[str]) -> None:
        """All of them or, where one is not the tenant's (``KeyError``), none; at most ``models.MAX_REMOVED`` (10,000)
        ids a call (more: ``ValueError``)."""
        ids = list(session_ids)
        if ids:
            self._call("POST", "/v1/sessions/remove", json={"session_ids": ids})

    def get_session(self, session_id: str) -> Session:
        s = self._call("GET", f"/v1/sessions/{segment(session_id)}")
        return Session(s["id"], s["date"], [Utterance(u["text"], u["speaker"], u["id"]) for u in s["utterances"]],
                       s["metadata"])

    def session_ids(self, offset: int = 0, limit: int = 100) -> list[str]:
        return self._call("GET", "/v1/sessions", params={"offset": offset, "limit": limit})["sessions"]

    def search(self, questions: str | list[str], k: int = 10, **filters) -> list:
        """As ``MemoryIndex.search``: hits for one question, or a list of them for several."""
        single = isinstance(questions, str)
        body = {"questions": [questions] if single else list(questions), "k": k, **_dates_as_text(filters)}
        results = [[Hit(**h) for h in hits] for hits in self._call("POST", "/v1/search", json=body)["results"]]
        return results[0] if single else results

    def answer(self, question: str, k: int = 6, **options) -> Answer:
        """As ``MemoryIndex.answer`` with the server's LLM (``question_date``, ``sessions``, ``since``, ``until``,
        ``max_new_tokens``)."""
        out = self._call("POST", "/v1/answer", json={"question": question, "k": k, **_dates_as_text(options)})
        return Answer(out["answer"], [Hit(**h) for h in out["hits"]], out["prompt"])


def segment(text: str) -> str:
    """``text`` as one segment of a URL path: percent-encoded, "/" too, and "." and ".." as "%2E" and "%2E%2E" (which a
    client would otherwise resolve as the folder or its parent)."""
    return quote(text, safe="") if text.strip(".") else "%2E" * len(text)


def _dates_as_text(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with each ``datetime`` or ``date`` in ISO 8601, as ``MemoryIndex`` reads both (a naive datetime
    is then refused, naming its field, as in process)."""
    return {name: value.isoformat() if isinstance(value, date) else value  # (a datetime is a date)
            for name, value in options.items()}
