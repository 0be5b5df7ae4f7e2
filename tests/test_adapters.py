"""The LangChain and LlamaIndex retrievers, with the real libraries, over a real index."""
import pytest

from assomem_gpu import MemoryIndex, Session, Utterance
from assomem_gpu.encode import HashingEncoder


@pytest.fixture
def index():
    index = MemoryIndex(HashingEncoder(), device="cpu")
    index.add_sessions([
        Session("trip", "2024-03-01", [Utterance("I booked flights to Lisbon for April.", "Alice"),
                                       Utterance("Lisbon is lovely in spring.", "Bot")], {"channel": "chat"}),
        Session("job", "2024-03-05", [Utterance("My sister Jane starts a new job at the bakery.", "Alice")]),
    ])
    return index


def test_langchain_retriever(index):
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from assomem_gpu.adapters.langchain import AssoMemRetriever

    docs = AssoMemRetriever(index=index, k=2).invoke("flights to Lisbon")
    assert len(docs) == 2 and all(isinstance(d, Document) for d in docs)
    assert docs[0].page_content == "I booked flights to Lisbon for April." and docs[0].id == "trip:0"
    assert docs[0].metadata["session_id"] == "trip" and docs[0].metadata["session_metadata"] == {"channel": "chat"}
    only_job = AssoMemRetriever(index=index, k=5, search_kwargs={"sessions": ["job"]}).invoke("Lisbon")
    assert [d.id for d in only_job] == ["job:0"]
    assert len(AssoMemRetriever(index=index, search_kwargs={"k": 1}).invoke("Lisbon")) == 1  # LangChain's way


def test_llamaindex_retriever(index):
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore

    from assomem_gpu.adapters.llamaindex import AssoMemRetriever

    nodes = AssoMemRetriever(index, k=2).retrieve("flights to Lisbon")
    assert len(nodes) == 2 and all(isinstance(n, NodeWithScore) for n in nodes)
    assert nodes[0].node.get_content() == "I booked flights to Lisbon for April." and nodes[0].node.node_id == "trip:0"
    assert nodes[0].score == pytest.approx(index.search("flights to Lisbon", k=1)[0].score)
    from llama_index.core.schema import MetadataMode

    shown = nodes[0].node.get_content(metadata_mode=MetadataMode.LLM)  # what a query engine's prompt holds
    assert "Alice" in shown and "score" not in shown and "signals" not in shown and "trip:0" not in shown
    assert len(AssoMemRetriever(index, search_kwargs={"k": 1}).retrieve("Lisbon")) == 1
