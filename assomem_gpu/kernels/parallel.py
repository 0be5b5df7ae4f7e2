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


def drive(parallel, serial, pool: bool, *args) -> None:
    """A kernel's parallel driver (through ``call_parallel``) when ``pool``, else its serial one in this thread: each
    kernel module decides by its own measure of work, since waking the pool costs ~80 us a launch."""
    if pool:
        call_parallel(parallel, *args)
    else:
        serial(*args)


def quiet_idle_threads() -> None:
    """Let idle worker threads sleep instead of spinning, unless the user set the variables: OpenMP's (torch's, which
    encode the questions: ``OMP_WAIT_POLICY=PASSIVE``) and OpenBLAS's (numpy's:
    ``OPENBLAS_THREAD_TIMEOUT=4``, 2^4 cycles). On 2 cores each library's spinning threads starve the next one's:
    a free-text search of a 2,500-session memory took 56 ms with torch's spinning, 36 ms without; then an encode plus
    a search of 300 sessions took 45 ms with OpenBLAS's spinning, 33 ms without. Batch throughput is unchanged. The
    libraries read the variables when they load, so this acts only before numpy and torch are imported
    (``import assomem_gpu`` first, or set the variables yourself)."""
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
