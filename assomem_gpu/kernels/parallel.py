"""Calling Numba's parallel kernels from several threads at once (the index serves parallel searches).

The OpenMP and TBB threading layers take concurrent calls; Numba's fallback layer, ``workqueue``, aborts the process
on them. Until a layer is known, and under ``workqueue``, concurrent parallel calls take turns.
"""
from __future__ import annotations

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
