"""The process's peak resident memory, as the bench, the eval report and each Dask worker record it."""
from __future__ import annotations

import resource


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (``ru_maxrss`` counts KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
