"""User relevance: the question's relevance, read on the turns of the speaker it asks about (the user's, unless it
recalls what the assistant said).

A question about the user's past ("What did I buy for my sister?", "How long have I been learning the piano?") is
answered by what the user said, and in an assistant's memory half the turns are the assistant's: long, fluent and
close to the question in topic, they fill the top of a ranking by relevance alone (on LongMemEval_S dev, 423 of the
446 evidence turns are the user's, and the default ranked 4.6 assistant turns into a question's top 10). The
``user_relevance`` signal of a candidate is its relevance (its best passage's, as the relevance signal reads it)
where one of ``AssoMemConfig.user_speakers`` says it, and the lowest relevance among the question's candidates
elsewhere. A question that recalls what the assistant said (``asks_assistant``: "the trail you recommended", "how
many eggs did you say", "in our previous chat, ...") is answered by the assistant's turns, where the user's own
question about the topic would rank first: its signal reads the other speakers' turns instead. Calibration weighs it
per question type like every signal. A question none of whose candidates the speaker it asks about said, or all of
them, has no such signal (its weight goes to the others): a memory of named speakers (meetings, LoCoMo's pairs of
friends) is ranked as without it, with one type's weights or several (``FusionModel.weights`` renormalises each
type's over a question's signals before it mixes them).

Which turns are the user's is a function of each utterance's speaker alone (``own_turns``), so adds, removals and
loads keep it exactly; which speaker a question asks about, of its text alone.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

# what an assistant does with words, as "did you" asks it ("did you say") and in the past tense ("you recommended")
_SAYS = {"say": "said", "tell": "told", "mention": "mentioned", "suggest": "suggested", "recommend": "recommended",
         "write": "wrote", "give": "gave", "list": "listed", "provide": "provided", "share": "shared",
         "explain": "explained", "describe": "described", "propose": "proposed", "come up with": "came up with",
         "create": "created", "name": "named", "offer": "offered", "advise": "advised", "point out": "pointed out",
         "note": "noted", "include": "included", "cover": "covered", "discuss": "discussed",
         "talk about": "talked about", "show": "showed", "send": "sent", "compose": "composed",
         "generate": "generated", "calculate": "calculated", "answer": "answered", "make": "made"}
_DO, _DONE = "|".join(_SAYS), "|".join(_SAYS.values())
_SAYING = "told|said|mentioned|shared|explained|described|noted|discussed|talked about|wrote"  # what "I" says
_HAVE = r"(?:['’]ve| have| had|['’]d)?\s+(?:\w+ly\s+|just\s+|also\s+|once\s+)?"  # "you've just", "you had once"
_YOU_SAID = re.compile(rf"\byou{_HAVE}(?:{_DONE})\b|\bdid(?:n['’]t| not)? you\s+(?:\w+ly\s+)?(?:{_DO})\b", re.I)
_I_SAID = re.compile(rf"\bI{_HAVE}(?:{_SAYING})\b", re.I)
_OUR_CHAT = re.compile(r"\bour (?:previous|last|earlier|past|prior) (?:chat|conversation|discussion|exchange)s?\b",
                       re.I)


def asks_assistant(question: str) -> bool:
    """Does the question recall what the assistant said? Yes where "you" said, told, recommended (or the like) it,
    or where it refers to "our previous chat" (conversation, discussion) and does not say that the user said it
    ("I mentioned"). Straight and curly apostrophes alike ("you’ve", "didn’t you")."""
    return _YOU_SAID.search(question) is not None or (_OUR_CHAT.search(question) is not None
                                                      and _I_SAID.search(question) is None)


def own_turns(speakers: Sequence[str], user_speakers: Sequence[str]) -> np.ndarray:
    """(len(speakers),) bool: which speakers name the memory's user (compared stripped and case-folded)."""
    names = {s.strip().casefold() for s in user_speakers}  # (a config holds them so already)
    return np.fromiter((s.strip().casefold() in names for s in speakers), bool, len(speakers))


def asked_speaker(own, questions: Sequence[str], xp):
    """(B, C) bool: whether the speaker each question asks about said each of its candidates, from ``own`` (B, C),
    whether the user said each (``own_turns`` of its row): the user, or the other speakers where the question
    ``asks_assistant``."""
    asks = np.fromiter((asks_assistant(q) for q in questions), bool, len(questions))
    return own ^ xp.asarray(asks)[:, None]


def user_relevance_scores(best, mine, valid, xp):
    """(B, C) the signal of each question's candidates from their relevance ``best`` (B, C), ``mine`` (B, C) bool,
    whether the speaker the question asks about said each (``asked_speaker``), and ``valid`` (B, C) marking the
    candidates (padding after them), on the backend's arrays (``xp``): ``best`` where that speaker said the
    candidate, else the lowest ``best`` of the question's candidates; 0 at padding."""
    b, c = best.shape
    if b * c == 0:
        return xp.zeros((b, c))
    low = xp.min(xp.where(valid, best, xp.inf), axis=1, keepdims=True)
    return xp.where(valid, xp.where(mine, best, low), 0.0)
