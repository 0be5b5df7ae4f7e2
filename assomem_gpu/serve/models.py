"""The HTTP API's request and response shapes (pydantic), with the limits a request is held to (422 names the field
and the limit; a body over ``MAX_BODY_BYTES`` is refused with 413 before it is read)."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictStr

from ..prompts import ANSWER_TOKENS

MAX_BODY_BYTES = 16 * 2**20  # default of --max-body-mb
MAX_SESSIONS = 500  # per request
MAX_REMOVED = 10_000  # session ids per removal
MAX_UTTERANCES = 2_000  # per session
MAX_TEXT = 20_000  # characters per utterance or question
MAX_QUESTIONS = 256  # per search
MAX_K = 1_000
MAX_ANSWER_K = 20  # utterances in an answer's prompt
MAX_ANSWER_TOKENS = 512
MAX_ANSWER_QUESTION = 2_000  # characters: the question shares the LLM's context with k utterances


When = StrictStr | StrictFloat | None  # a date: ISO 8601 text or POSIX seconds (an integer too), never a boolean
# (which lax mode would take for 0 or 1)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class UtteranceIn(Strict):
    id: str | None = Field(None, min_length=1, max_length=256, description="default <session id>:<position>")
    speaker: str = Field("", max_length=256)
    text: str = Field(min_length=1, max_length=MAX_TEXT)


class SessionIn(Strict):
    id: str = Field(min_length=1, max_length=256)
    date: When = Field(None, description="ISO date/time, or POSIX seconds; required unless the "
                                                       "server runs --undated")
    utterances: list[UtteranceIn] = Field(min_length=1, max_length=MAX_UTTERANCES)
    metadata: dict[str, Any] = Field(default_factory=dict)


class AddSessions(Strict):
    sessions: list[SessionIn] = Field(min_length=1, max_length=MAX_SESSIONS)


class RemoveSessions(Strict):
    session_ids: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1, max_length=MAX_REMOVED)


class Search(Strict):
    questions: list[Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]] = Field(min_length=1,
                                                                                     max_length=MAX_QUESTIONS)
    k: int = Field(10, ge=1, le=MAX_K, strict=True)
    question_date: When = None
    sessions: list[str] | None = Field(None, description="only these session ids")
    since: When = None
    until: When = None


class Ask(Strict):
    question: str = Field(min_length=1, max_length=MAX_ANSWER_QUESTION)
    k: int = Field(6, ge=1, le=MAX_ANSWER_K, strict=True, description="retrieved utterances the LLM is shown (at most: "
                   "the best that fit the LLM's context)")
    question_date: When = None
    sessions: list[str] | None = Field(None, description="only these session ids")
    since: When = None
    until: When = None
    max_new_tokens: int = Field(ANSWER_TOKENS, ge=1, le=MAX_ANSWER_TOKENS, strict=True)


class NewTenant(Strict):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")


class TenantKey(BaseModel):
    tenant: str
    api_key: str = Field(description="shown once; only its hash is stored")


class HitOut(BaseModel):
    utterance_id: str
    session_id: str
    speaker: str
    text: str
    date: str | None
    score: float | None
    signals: dict[str, float]
    metadata: dict[str, Any]


class SearchOut(BaseModel):
    results: list[list[HitOut]]


class AnswerOut(BaseModel):
    answer: str
    hits: list[HitOut] = Field(description="the utterances the LLM was shown, best first")
    prompt: str = Field(description="what the LLM was asked")


class UtteranceOut(BaseModel):
    id: str
    speaker: str
    text: str


class SessionOut(BaseModel):
    id: str
    date: float | None = Field(description="POSIX seconds, as stored (an exact round trip); None when undated")
    utterances: list[UtteranceOut]
    metadata: dict[str, Any]


class SessionPage(BaseModel):
    sessions: list[str]
    offset: int
    limit: int


class Added(BaseModel):
    added: list[str]
