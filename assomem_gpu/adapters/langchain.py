"""A LangChain retriever over a ``MemoryIndex``: ``retriever.invoke("question")`` → ``Document``s, best first."""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from ..index import MemoryIndex


class AssoMemRetriever(BaseRetriever):
    """``index``: the memory searched; ``k``: documents returned (default 10); ``search_kwargs``: more arguments of
    ``MemoryIndex.search`` (``question_date``, ``sessions``, ``since``, ``until``, and ``k`` over the field, as
    LangChain's retrievers take it)."""

    index: MemoryIndex
    k: int = 10
    search_kwargs: dict[str, Any] = {}

    model_config = {"arbitrary_types_allowed": True}

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        hits = self.index.search(query, **{"k": self.k, **self.search_kwargs})
        return [Document(page_content=h.text, metadata=h.fields(), id=h.utterance_id) for h in hits]
