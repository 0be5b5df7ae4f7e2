"""The paper's prompts (Appendix "Prompts"): session topics (LLM clues), answer generation over retrieved memories,
the LLM judge, and the multi-task target of fine-tuning (§3.3).

A memory is one line per retrieved utterance, best first: ``[<date>] <speaker>: <text>`` (date and speaker left out
when unknown, text cut at ``MAX_UTTERANCE_CHARS``). Where the question's date is known the query line says it, as
LongMemEval's own answer prompt does: temporal questions ("how many days ago") cannot be answered without it.
"""
from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Callable, Iterable

TOPIC_PROMPT = """### TASK DESCRIPTION

You are a helpful assistant that helps users to organize their memory records. Next, you'll help me in organzing a user's memory records.

Given a user historical dialogue session, please summarize the session into a concise topic summary without key information lost.

Output the topic summary sentence.

### INPUT

Dialogue session: {session}

### OUTPUT REQUIREMENT

Generate a topic summary for the given session.

Please only output the topic summary and nothing else."""

GENERATION_PROMPT = """### TASK DESCRIPTION

You are a helpful assistant that answers user's question. In this sense, you will have access to user's memory records which contain user's historical information.

Please note you will need to identify if the memories are useful or not for you to respond to the query.

If the memories are useful then answer the question based on the memories, otherwise answer the question based on your knowledge or answer "IDK".

### INPUT

User memory: {memory}

User query: {question}

### OUTPUT REQUIREMENT

Output the answer to the question only. Not matter you use the memory or not, please only output the answer and nothing else."""

JUDGE_PROMPT = """### TASK DESCRIPTION

You are a helpful judge to evaluate the quality of the response to a user question.

You will be given a user question and two responses: one is the golden response, one is the generated response.

Please evaluate the quality of the generated response based on the following criteria:

a) If the response is relevant to the user question.

b) If the response answers the question or not.

c) If the response is consistent and coherent.

If you think the generated response meet these criterias or semantically responds user as the golden response does, you should output "Win", otherwise "Lose".

### INPUT

User query: {question}

Golden Response: {response_1}

Generated Response: {response_2}

### OUTPUT REQUIREMENT

Output "Win" or "Lose" only. Do not output anything else."""

# the paper's multi-task target (§3.3): the question's type, then the answer; a model fine-tuned on it replies so
TARGET_FORMAT = "### The question type is: {type}\n### The answer is: {answer}"
_ANSWER_MARK = "### The answer is:"

MAX_UTTERANCE_CHARS = 1_500  # an utterance's text in a prompt is cut here (LongMemEval assistant turns run long)
ANSWER_TOKENS = 64  # default token limit of an answer
JUDGE_TOKENS = 4  # "Win" / "Lose" and a little room to see what else a judge says


def day(ts: float | None) -> str | None:
    """``YYYY-MM-DD`` (UTC) of POSIX seconds; None when unknown (None or NaN)."""
    if ts is None or math.isnan(ts):
        return None
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d")


def memory_lines(utterances: Iterable[tuple[str | None, str, str]]) -> str:
    """The memory block of a prompt from (day or None, speaker, text) per utterance, best first."""
    lines = []
    for when, speaker, text in utterances:
        text = " ".join(text.split())[:MAX_UTTERANCE_CHARS]
        lines.append(f"{f'[{when}] ' if when else ''}{f'{speaker}: ' if speaker else ''}{text}")
    return "\n" + "\n".join(lines) if lines else "(none)"


def generation_prompt(question: str, utterances: Iterable[tuple[str | None, str, str]], asked: str | None = None
                      ) -> str:
    """The generation prompt for ``question`` (asked on the day ``asked``, when known) over ``memory_lines``."""
    query = f"{question} (asked on {asked})" if asked else question
    return GENERATION_PROMPT.format(memory=memory_lines(utterances), question=query)


def most_that_fit(prompt_of: Callable[[int], str], n: int, fits: Callable[[str], bool], over: bool = False
                  ) -> tuple[int, str]:
    """The most of ``n`` utterances (best first) whose prompt ``prompt_of(m)`` (over the first m) ``fits`` an LLM's
    context, by bisection (a prompt grows with its utterances), and that prompt; ``over``: ``prompt_of(n)`` is known
    not to fit (it is not tried again). ``ValueError`` when not even the one over none fits."""
    best = None if over else prompt_of(n)
    if best is not None and fits(best):
        return n, best
    lo, hi = -1, n  # prompt_of(lo) fits (best; or lo = -1), prompt_of(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        prompt = prompt_of(mid)
        if fits(prompt):
            lo, best = mid, prompt
        else:
            hi = mid
    if lo < 0:
        raise ValueError("question: its prompt exceeds the LLM's context without any utterance")
    return lo, best


def final_answer(reply: str) -> str:
    """The answer in a reply: after the last ``### The answer is:`` when a fine-tuned model wrote the multi-task
    target (``TARGET_FORMAT``), else the whole reply, stripped."""
    return reply.rsplit(_ANSWER_MARK, 1)[-1].strip()


def judge_prompt(question: str, golden: str, generated: str) -> str:
    return JUDGE_PROMPT.format(question=question, response_1=golden, response_2=generated)
