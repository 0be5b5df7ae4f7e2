"""Persistent, multi-tenant memories (``MemoryStore``): SQLite is the source of truth, indexes are derived."""
from .schema import StoreError, UnknownTenant
from .store import MemoryStore, Tenant

__all__ = ["MemoryStore", "StoreError", "Tenant", "UnknownTenant"]
