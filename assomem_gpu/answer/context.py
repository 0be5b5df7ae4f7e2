"""What the answering LLM is shown for a question of a dataset: its top-k retrieved utterances, each with its date in
the question's memory and its speaker, in the paper's generation prompt."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..memory import Dataset
from ..prompts import day, generation_prompt, most_that_fit


class PromptMaker:
    """Generation prompts over rows of ``ds``'s bank: each utterance with its speaker and its session's date in the
    asking question's memory."""

    def __init__(self, ds: Dataset):
        self.ds, self._utt_session = ds, ds.bank.utt_session()
        self._dates = [dict(zip(m.sessions.tolist(), m.dates.tolist())) for m in ds.memories]

    def __call__(self, question: int, rows: Sequence[int]) -> str:
        q, bank = self.ds.questions[question], self.ds.bank
        when = self._dates[q.memory]
        shown = [(day(when.get(int(self._utt_session[r]))), bank.utt_speakers[r], bank.utt_texts[r]) for r in rows]
        return generation_prompt(q.text, shown, day(q.date))

    def top_k(self, rankings: Sequence[np.ndarray], k: int, fits: Callable[[Sequence[str]], list[bool]] | None = None
              ) -> list[tuple[str, list[str]]]:
        """Per question (dataset order): the prompt over its ranking's first ``k`` utterances (bank rows), and their
        ids. ``fits`` (which prompts fit the LLM, ``llm.fitting``): a prompt that does not is over as many of them as
        fit (``prompts.most_that_fit``), and the ids are of those."""
        tops = [[int(r) for r in ranked[:k]] for ranked in rankings]
        prompts = [self(i, top) for i, top in enumerate(tops)]
        for i, ok in enumerate(fits(prompts) if fits else []):
            if not ok:
                try:
                    m, prompts[i] = most_that_fit(lambda m: self(i, tops[i][:m]), len(tops[i]),
                                                  lambda p: fits([p])[0], over=True)
                except ValueError:
                    raise ValueError(f"question {self.ds.questions[i].id!r}: its prompt exceeds the LLM's context "
                                     "without any utterance") from None
                tops[i] = tops[i][:m]
        return [(p, [self.ds.bank.utt_ids[r] for r in top]) for p, top in zip(prompts, tops)]


def question_prompts(ds: Dataset, rankings: Sequence[np.ndarray], k: int) -> list[tuple[str, list[str]]]:
    """``PromptMaker(ds).top_k(rankings, k)``."""
    return PromptMaker(ds).top_k(rankings, k)
