"""A LlamaIndex retriever over a ``MemoryIndex``: ``retriever.retrieve("question")`` → ``NodeWithScore``s."""
from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from ..index import MemoryIndex


class AssoMemRetriever(BaseRetriever):
    """``index``: the memory searched; ``k``: nodes returned (default 10); ``search_kwargs``: more arguments of
    ``MemoryIndex.search`` (``k`` among them over the field). A node's score is the hit's fused score (None past the
    fused candidates); its metadata are the hit's fields, of which an LLM or an embedding sees the speaker, the date
    and the session's own (``LLM_SEES``), not the ids, score and signals."""

    def __init__(self, index: MemoryIndex, k: int = 10, search_kwargs: dict[str, Any] | None = None, **kwargs: Any):
        self.index, self.k, self.search_kwargs = index, k, dict(search_kwargs or {})
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.index.search(query_bundle.query_str, **{"k": self.k, **self.search_kwargs})
        return [NodeWithScore(node=TextNode(text=h.text, id_=h.utterance_id, metadata=(fields := h.fields()),
                                            excluded_llm_metadata_keys=[f for f in fields if f not in LLM_SEES],
                                            excluded_embed_metadata_keys=[f for f in fields if f not in LLM_SEES]),
                              score=h.score) for h in hits]


LLM_SEES = ("speaker", "date", "session_metadata")  # the hit fields a node shows an LLM (and an embedding)
