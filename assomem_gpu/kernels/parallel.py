"""Sharing the cores between the encoder's threads and Numba's parallel kernels.

The OpenMP and TBB threading layers take concurrent calls; Numba's fallback layer, ``workqueue``, aborts the process
on them. Until a layer is known, and under ``workqueue``, concurrent parallel calls take turns (the index serves
parallel searches).
"""
from __future__ import annotations

import os
import sys
import threading

_TURNS = threading.Lock()


def call_parallel(kernel, *args):
    import numba

    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet: the layer is chosen by the first
        layer = None
    if layer in (None, "workqueue"):
        with _TURNS:
            return kernel(*args)
    return kernel(*args)


def prefer_passive_openmp() -> None:
    """Let OpenMP threads (torch's, which encode the questions) sleep instead of spinning once a parallel region ends,
    unless ``OMP_WAIT_POLICY`` is already set. Spinning encoder threads starve the Numba kernels that run right after
    an encode: on 2 cores a free-text search of a 2,500-session memory took 56 ms with them spinning, 36 ms without;
    batch encoding was as fast either way. OpenMP reads the variable when it loads, so this acts only before torch
    is imported (``import assomem_gpu`` first, or set the variable yourself)."""
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
