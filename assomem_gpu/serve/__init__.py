"""The memory service: HTTP over a ``MemoryStore`` (``python -m assomem_gpu.serve``), and its Python client."""
