"""A LlamaIndex retriever over a ``MemoryIndex``: ``retriever.retrieve("question")`` → ``NodeWithScore``s."""
from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from ..index import MemoryIndex


class AssoMemRetriever(BaseRetriever):
    """``index``: the memory searched; ``k``: nodes returned (default 10); ``search_kwargs``: more arguments of
    ``MemoryIndex.search``. A node's score is the hit's fused score (None past the fused candidates)."""

    def __init__(self, index: MemoryIndex, k: int = 10, search_kwargs: dict[str, Any] | None = None, **kwargs: Any):
        self.index, self.k, self.search_kwargs = index, k, dict(search_kwargs or {})
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.index.search(query_bundle.query_str, k=self.k, **self.search_kwargs)
        return [NodeWithScore(node=TextNode(text=h.text, id_=h.utterance_id, metadata=h.fields()), score=h.score)
                for h in hits]
