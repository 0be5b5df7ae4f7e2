"""Retrievers for LLM frameworks over a ``MemoryIndex`` (extra ``adapters``): ``langchain.AssoMemRetriever`` and
``llamaindex.AssoMemRetriever``. Each module imports its framework, so import the one you use."""
