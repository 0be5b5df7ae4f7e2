"""Backends: the array module every retrieval stage takes, and for each component of a search the implementation
that runs it, chosen one component at a time with the reason (as xformers dispatches its attention kernels).

Components: ``arrays`` (CuPy on the device, else numpy), ``ppr_step`` (one PPR iteration: the CUDA C++ step, else
cuSPARSE SpMM, else the array library's product; on the CPU the Numba twin runs the whole iteration),
``local_importance`` (H PPR iterations for the candidates: on the CPU each question on its own ball, on the device
the batch on the whole graph),
``fused_topk`` (the Numba CUDA kernel, else its Numba CPU twin) and ``similarity_search`` (the graph build's range
search). Each GPU candidate is probed once per process by a real call on a tiny input; a failure is the reason the
next candidate runs, logged (logger ``assomem_gpu.backend``) and kept in ``Backend.components``, which every
results JSON records. No stage branches on the device: each takes ``backend.xp`` / ``backend.ppr`` /
``backend.fused_topk`` / ``backend.csr``.
"""
from __future__ import annotations

import functools
import logging
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from .rows import spans

log = logging.getLogger(__name__)

PPR_CHECK_EVERY = 4  # on the device, the PPR residual is read back every 4 iterations (each read is a sync)
PAIR_BLOCK = 1 << 16  # pairs whose two rows the device gathers at once (at 384 dimensions 200 MB)


@dataclass(frozen=True)
class Choice:
    """The implementation that runs one component, and why it was chosen."""

    impl: str  # e.g. "cuda: Numba CUDA kernel"
    reason: str  # "preferred", or why the better candidates cannot run

    def to_json(self) -> dict:
        return {"impl": self.impl, "reason": self.reason}


# The graph build's similarity search runs on the CPU: below ``GraphConfig.exact_limit`` utterances a range search over
# all pairs (``graph._range_search``), above it the inverted file of ``ivf.py`` (products per list).
SIMILARITY_SEARCH = Choice("cpu: BLAS products in blocks, IVF above exact_limit",
                           "FAISS's flat range search finds the same pairs 2-4x slower; its GPU indexes have no range "
                           "search")


@dataclass(frozen=True)
class Backend:
    name: str  # "cpu" or "cuda": where the arrays live
    device: str  # human-readable description
    xp: Any  # numpy or cupy
    sparse: Any  # scipy.sparse or cupyx.scipy.sparse
    ppr: Callable  # batched PPR: kernels.ppr_cpu.personalized_pagerank_cpu / signals.importance.personalized_pagerank
    fused_topk: Callable  # kernels.fused_topk.fused_topk_cpu / fused_topk_cuda
    top_k: Callable  # (scores (B, n), k) -> (B, k) column indices, best first, ties to the lower index, NaN last
    max_batch: int  # questions per pass: a CPU pass stays within its cache and its allocator's reused memory
    components: Mapping[str, Choice] = field(default_factory=dict)
    ppr_steps: bool = True  # ppr(..., tol=0, max_iter=H) runs exactly H iterations (local importance needs it)
    ppr_balls: bool = False  # local importance iterates each question on its own ball (kernels/local_ppr.py, the
    # CPU), else the batch on the whole graph (the device: one product per iteration, the batch where it lies)
    _uploads: dict = field(default_factory=dict, compare=False, repr=False)  # (id(owner), name) -> (ref, version, upload)

    def asarray(self, x, dtype=None):
        return self.xp.asarray(x, dtype=dtype)

    def to_host(self, x) -> np.ndarray:
        return x.get() if hasattr(x, "get") else np.asarray(x)

    def group_max(self, values, rows, groups, n_groups: int):
        """Per row of ``values`` (B, S), whose entries belong to ``rows`` (B, S; -1: none): the maximum over each group
        of rows (``groups`` (n,)), (B, n_groups) float64, -inf where a group has none, and the minimum over every
        entry, (B,), inf where none. On the CPU a Numba kernel (``kernels/segments.py``); on the device a scatter
        maximum (``maximum.at``) over the entries' keys."""
        if self.name == "cpu":
            from .kernels.segments import group_max

            return group_max(values, rows, groups, n_groups)
        xp = self.xp
        seen = rows >= 0
        best = xp.full((len(values), n_groups), -np.inf)
        key = xp.arange(len(values))[:, None] * n_groups + groups[xp.maximum(rows, 0)]
        xp.maximum.at(best.reshape(-1), key[seen], values[seen].astype(np.float64))
        return best, xp.where(seen, values, np.inf).min(axis=1)

    def segment_max(self, values, columns, starts):
        """(B, len(starts)): per row of ``values`` (B, n), the maximum of each run of gathered columns
        ``values[:, columns[starts[i]:starts[i + 1]]]`` (``starts`` ascending, the first 0, no run empty). On the CPU
        a Numba kernel (``kernels/segments.py``), numpy's ``maximum.reduceat`` without the gathered copy; CuPy's
        reduceat takes only ``add``, so on the device a scatter maximum (``maximum.at``) over each column's run."""
        if self.name == "cpu":
            from .kernels.segments import segment_max

            return segment_max(values, columns, starts)
        xp = self.xp
        values = values[:, columns]
        run = xp.zeros(values.shape[1], np.int64)
        run[starts[1:]] = 1
        key = xp.arange(len(values))[:, None] * len(starts) + xp.cumsum(run)[None, :]
        out = xp.full((len(values), len(starts)), -np.inf, values.dtype)
        xp.maximum.at(out.reshape(-1), key.ravel(), values.ravel())
        return out

    def zscore(self, x, valid):
        """Each question's signals ``x`` (B, C, S, float64) z-scored over its candidates where ``valid`` (B, C), 0
        elsewhere and for a constant signal. On the CPU a Numba kernel, on the device array operations
        (``kernels/zscore.py``)."""
        from .kernels import zscore

        return zscore.zscore(x, valid) if self.name == "cpu" else zscore.zscore_array(x, valid, self.xp)

    def pair_cosines(self, vectors, q, questions, rows):
        """(n,) float32 ``vectors[rows[i]] · q[questions[i]]``. On the CPU a Numba kernel that reads each row in
        place (``kernels/pair_cosines.py``); on the device both sides gathered, ``PAIR_BLOCK`` pairs at a time."""
        if self.name == "cpu":
            from .kernels.pair_cosines import pair_cosines

            return pair_cosines(vectors, q, questions, rows)
        xp = self.xp
        parts = [xp.einsum("ij,ij->i", vectors[rows[lo : lo + PAIR_BLOCK]], q[questions[lo : lo + PAIR_BLOCK]])
                 for lo in range(0, len(rows), PAIR_BLOCK)]
        return xp.concatenate(parts).astype(np.float32, copy=False) if parts else xp.zeros(0, np.float32)

    def cosines(self, x, q):
        """(len(q), len(x)) float32 ``q @ x.T``. On the CPU each question's row is the same bits in any batch
        (``all_cosines``' kernel: BLAS picks its kernels by the shape, so a question's last bits, and with them its
        near ties, moved with the batch it came in); on the device cuBLAS's product."""
        if self.name == "cpu":
            from .kernels.pair_cosines import all_cosines

            return all_cosines(x, q)
        return q @ x.T

    def list_cosines(self, x, q, order, lo, hi, first, pair_b, pair_at, counts):
        """A probed batch's cosines, list by list (``ivf.probed_cosines``): for list ``g``, members
        ``order[lo[g]:hi[g]]``, and its questions ``pair_b[first[g]:first[g + 1]]``, each member's row and cosine at
        the question's flat position ``pair_at`` plus the member's place; then each question's ``counts[b]``
        members sorted by row: (rows (B, S) int64, -1 after them; cosines (B, S) float32, -inf there), S =
        ``counts.max()``. ``x``, ``q`` and ``order`` are the backend's arrays, the rest host arrays. On the CPU a
        Numba kernel that reads each member once, in place (``kernels/pair_cosines.py``); on the device one product
        per list of its gathered members and its questions."""
        if self.name == "cpu":
            from .kernels.pair_cosines import list_cosines

            return list_cosines(x, q, order, lo, hi, first, pair_b, pair_at, counts)
        xp, blocks, where, held = self.xp, [], [], []
        n_b, width = len(counts), int(counts.max()) if len(counts) else 0
        on_device = xp.asarray(pair_b)
        for g in range(len(lo)):
            b, at = pair_b[first[g] : first[g + 1]], pair_at[first[g] : first[g + 1]]
            blocks.append((q[on_device[first[g] : first[g + 1]]] @ x[order[int(lo[g]) : int(hi[g])]].T).ravel())
            where.append((at[:, None] + np.arange(hi[g] - lo[g])).ravel())
            held.append(np.tile(np.arange(lo[g], hi[g]), len(b)))  # positions in order of the block's members
        rows, cos = xp.full(n_b * width, -1, np.int64), xp.full(n_b * width, -np.inf, np.float32)
        if blocks:
            at = xp.asarray(np.concatenate(where))
            cos[at] = xp.concatenate(blocks)
            rows[at] = order[xp.asarray(np.concatenate(held))]
        rows, cos = rows.reshape(n_b, width), cos.reshape(n_b, width)
        ascending = xp.argsort(xp.where(rows < 0, np.iinfo(np.int64).max, rows), axis=1)  # the padding last
        return xp.take_along_axis(rows, ascending, axis=1), xp.take_along_axis(cos, ascending, axis=1)

    def repeat(self, values, counts):
        """``values[i]`` ``counts[i]`` times, in order: numpy.repeat (CuPy's takes no array of counts, so on the
        device each output position finds its value by a sorted search of the counts' running sum)."""
        if self.name == "cpu":
            return np.repeat(values, counts)
        ends = self.xp.cumsum(counts)
        return values[self.xp.searchsorted(ends, self.xp.arange(int(ends[-1]) if len(ends) else 0), side="right")]

    def spans(self, starts, lengths):
        """The positions ``starts[i] .. starts[i] + lengths[i] − 1`` of every span, span after span (``rows.spans``
        on the CPU)."""
        if self.name == "cpu":
            return spans(starts, lengths)
        ends = self.xp.cumsum(lengths)
        total = int(ends[-1]) if len(lengths) else 0
        return self.repeat(starts - (ends - lengths), lengths) + self.xp.arange(total)

    def row_matches(self, at, indptr, indices, keys, n_terms: int):
        """The nonzeros of the CSR rows ``at`` (B, C) whose key ``b · n_terms + column`` is in the sorted ``keys``:
        (``b · C + c``, the nonzero's position, the key's position), in the order of ``at`` and of each row's
        nonzeros. On the CPU a Numba kernel (``kernels/segments.py``); on the device every nonzero of the rows is
        gathered and looked up by a sorted search."""
        if self.name == "cpu":
            from .kernels.segments import row_matches

            return row_matches(at, indptr, indices, keys, n_terms)
        xp, flat = self.xp, at.ravel()
        n = indptr[flat + 1] - indptr[flat]  # nonzeros of each entry's row
        nz = self.spans(indptr[flat], n)
        row = self.repeat(xp.arange(at.size), n)
        wanted = (row // at.shape[1]) * n_terms + indices[nz]
        pos = xp.minimum(xp.searchsorted(keys, wanted), max(len(keys) - 1, 0))
        hit = xp.nonzero(keys[pos] == wanted)[0] if len(keys) else xp.zeros(0, np.int64)
        return row[hit], nz[hit], pos[hit]

    def resident(self, owner, name: str, version: int, make: Callable[[], Any]):
        """``make()`` (an array, or a scipy CSR matrix) as this backend holds it: itself on the CPU; on the device,
        uploaded once per (owner, name, version) (CSR with int32 indices, as cuSPARSE and the C++ step take) and
        dropped with ``owner``. A memory's graph is a new object per write; its embeddings carry a version."""
        if self.name == "cpu":
            return make()
        key = (id(owner), name)
        found = self._uploads.get(key)
        if found is not None and found[0]() is owner and found[1] == version:
            return found[2]
        upload = self.upload(make())
        if found is None or found[0]() is not owner:
            weakref.finalize(owner, self._uploads.pop, key, None)
        self._uploads[key] = weakref.ref(owner), version, upload
        return upload

    def upload(self, host):
        """An array or a scipy CSR matrix in this backend's arrays (CSR with int32 indices on the device)."""
        if self.name == "cpu":
            return host
        if hasattr(host, "indptr"):
            m = host.tocsr()
            return self.sparse.csr_matrix((self.xp.asarray(m.data), self.xp.asarray(m.indices, dtype=np.int32),
                                           self.xp.asarray(m.indptr, dtype=np.int32)), shape=m.shape)
        return self.xp.asarray(host)

    def csr(self, matrix):
        """A scipy CSR matrix on this backend, uploaded once per matrix object."""
        return self.resident(matrix, "csr", 0, lambda: matrix)

    def describe(self) -> dict:
        """The backend as results files record it: where it runs and what runs each component, with reasons."""
        return {"backend": self.name, "device": self.device,
                "components": {k: v.to_json() for k, v in self.components.items()}}


# ---- probes: None when the candidate runs here, else why not (once per process) ---------------------------------
@functools.lru_cache(maxsize=1)
def cupy_reason() -> str | None:
    """CuPy arrays on a CUDA device."""
    try:
        import cupy
        import cupyx.scipy.sparse  # noqa: F401
    except Exception as exc:  # ImportError, or a CUDA library missing underneath
        return f"cupy is not usable ({exc.__class__.__name__}: {exc}); pip install 'assomem_gpu[gpu]'"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
        if int((cupy.arange(3) ** 2).sum()) != 5:
            return "CuPy computed a wrong sum on the device"
    except Exception as exc:
        return f"no usable CUDA device ({exc.__class__.__name__}: {exc})"
    return None


@functools.lru_cache(maxsize=1)
def spmm_reason() -> str | None:
    """cuSPARSE SpMM into a preallocated buffer (cupyx.cusparse.spmm), checked on a tiny product."""
    if cupy_reason():
        return cupy_reason()
    try:
        import cupy
        import cupyx.scipy.sparse as csp

        a = csp.csr_matrix(cupy.asarray([[0, 2], [1, 0]], dtype=cupy.float32))
        out = cupy.ones((2, 2), cupy.float32, order="F")
        _spmm_into(a, cupy.asarray([[1, 2], [3, 4]], cupy.float32, order="F"), out)
        if out.get().tolist() != [[7.0, 9.0], [2.0, 3.0]]:
            return "cuSPARSE SpMM gave a wrong product on a tiny input"
    except Exception as exc:
        return f"cuSPARSE SpMM does not run ({exc.__class__.__name__}: {exc})"
    return None


@functools.lru_cache(maxsize=1)
def numba_cuda_reason() -> str | None:
    """The Numba CUDA fused top-K kernel, compiled and run on a tiny input against its CPU twin."""
    if cupy_reason():
        return cupy_reason()
    try:
        from numba import cuda

        if not cuda.is_available():
            return "numba cannot use the CUDA device"
        from .kernels.fused_topk import fused_topk_cpu
        from .kernels.fused_topk_cuda import fused_topk_cuda

        args = (np.array([[[0.5], [2.0], [1.0]]], np.float32), np.array([3]), np.ones((1, 1), np.float32), 1.0, 2)
        got, want = fused_topk_cuda(*args), fused_topk_cpu(*args)
        if not (np.array_equal(got[0], want[0]) and all(np.allclose(g, w) for g, w in zip(got[1:], want[1:]))):
            return "the Numba CUDA fused top-K disagrees with its CPU twin on a tiny input"
    except Exception as exc:
        return f"the Numba CUDA kernel does not compile or run ({exc.__class__.__name__}: {exc})"
    return None


def cuda_unavailable_reason() -> str | None:
    """Why the CUDA backend (CuPy arrays on a device) cannot run here, or None when it can."""
    return cupy_reason()


def _spmm_into(scaled, r, out) -> None:
    from cupyx import cusparse

    cusparse.spmm(scaled, r, c=out, alpha=1.0, beta=1.0)  # out = scaled @ r + out, in place


def _cusparse_step(scaled, r, base, out, residual) -> None:
    """A PPR step with cuSPARSE: out = scaled @ r + base without a temporary, then the per-column L1 change."""
    import cupy

    cupy.copyto(out, base)
    _spmm_into(scaled, r, out)
    _l1_change(out, r, residual)


@functools.lru_cache(maxsize=1)
def _l1_kernel():
    import cupy

    return cupy.ReductionKernel("T x, T y", "T z", "abs(x - y)", "a + b", "z = a", "0", "l1_change")


def _l1_change(out, r, residual) -> None:
    _l1_kernel()(out, r, residual, axis=0)


# ---- backends ------------------------------------------------------------------------------------------------------
def cpu_backend(why: str = "device='cpu'") -> Backend:
    import os
    import platform

    import scipy.sparse

    from .kernels.fused_topk import fused_topk_cpu
    from .kernels.ppr_cpu import personalized_pagerank_cpu
    from .retrieve import top_k

    components = {"arrays": Choice("cpu: numpy", why),
                  "ppr_step": Choice("cpu: Numba, the whole iteration fused (kernels/ppr_cpu.py)", why),
                  "local_importance": Choice("cpu: each question's ball, Numba (kernels/local_ppr.py)", why),
                  "fused_topk": Choice("cpu: Numba parallel twin", why),
                  "similarity_search": SIMILARITY_SEARCH}
    return Backend("cpu", f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)", np, scipy.sparse,
                   personalized_pagerank_cpu, fused_topk_cpu, top_k, max_batch=256, components=components,
                   ppr_balls=True)


def cuda_backend() -> Backend:
    reason = cupy_reason()
    if reason is not None:
        raise RuntimeError(f"CUDA backend unavailable: {reason}")
    import cupy
    import cupyx.scipy.sparse

    from .kernels import cuda_lib
    from .kernels.fused_topk import fused_topk_cpu
    from .kernels.fused_topk_cuda import fused_topk_cuda
    from .signals.importance import library_step, personalized_pagerank

    lib = cuda_lib.load()
    if lib is not None:
        step, step_choice = functools.partial(cuda_lib.ppr_step, lib), Choice("cuda: C++ step (kernels/ppr_step.cu)",
                                                                              "preferred")
    elif spmm_reason() is None:
        step, step_choice = _cusparse_step, Choice("cuda: cuSPARSE SpMM (CuPy)", cuda_lib.unavailable_reason())
    else:
        step, step_choice = library_step, Choice("cuda: CuPy sparse product",
                                                 f"{cuda_lib.unavailable_reason()}; {spmm_reason()}")
    topk_reason = numba_cuda_reason()
    topk, topk_choice = (fused_topk_cuda, Choice("cuda: Numba CUDA kernel", "preferred")) if topk_reason is None \
        else (_on_host(fused_topk_cpu), Choice("cpu: Numba parallel twin (the candidates copied to the host)",
                                               topk_reason))
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    components = {"arrays": Choice("cuda: CuPy", "preferred"), "ppr_step": step_choice,
                  "local_importance": Choice("cuda: the whole graph, one product per iteration",
                                             "the batch stays on the device (the balls' kernel runs on the host)"),
                  "fused_topk": topk_choice, "similarity_search": SIMILARITY_SEARCH}
    ppr = functools.partial(personalized_pagerank, xp=cupy, step=step, check_every=PPR_CHECK_EVERY)
    return Backend("cuda", name, cupy, cupyx.scipy.sparse, ppr, topk, _device_top_k, max_batch=4096,
                   components=components)


def _on_host(kernel: Callable) -> Callable:
    """A CPU kernel that takes and gives CuPy arrays: its array inputs copied to the host, its outputs back."""
    import cupy

    def run(*args):
        out = kernel(*(cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else a for a in args))
        return tuple(cupy.asarray(o) for o in out)

    return run


def _device_top_k(scores, k: int):
    """``retrieve.top_k`` on the device: a stable sort of each row (NaN as -inf, tied with it by index, as on the
    host), the first ``k``."""
    import cupy

    return cupy.argsort(-cupy.where(cupy.isnan(scores), -cupy.inf, scores), axis=-1)[..., :k]


def get_backend(device: str = "auto", ppr: str = "batched") -> Backend:
    """``"cpu"``, ``"cuda"`` (an error saying why if CuPy cannot run; other components fall back one by one) or
    ``"auto"`` (CUDA where CuPy runs). Every component's choice is logged.

    ``ppr="cugraph"`` swaps in one-question-at-a-time PageRank on cuGraph (via nx-cugraph) for a single graph too
    large for the batched buffers; an error says why when it is not installed. PageRank there runs to convergence
    over the whole graph, so it serves configs with ``ppr_hops=0`` only.
    """
    if device == "cpu":
        backend = cpu_backend()
    elif device == "cuda":
        backend = cuda_backend()
    elif device == "auto":
        reason = cupy_reason()
        backend = cpu_backend(f"device='auto': {reason}") if reason else cuda_backend()
    else:
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if ppr != "batched":
        if ppr != "cugraph":
            raise ValueError(f"ppr must be 'batched' or 'cugraph', got {ppr!r}")
        from .signals.importance_graph import cugraph_available

        reason = cugraph_available()
        if reason is not None:
            raise RuntimeError(f"ppr='cugraph' unavailable: {reason}")
        from .signals.importance_graph import personalized_pagerank_graph

        backend = replace(backend, ppr=personalized_pagerank_graph, ppr_steps=False, ppr_balls=False,
                          components={**backend.components, "ppr_step": Choice("cuGraph PageRank", "ppr='cugraph'"),
                                      "local_importance": Choice("none: PageRank to convergence (ppr_hops 0)",
                                                                 "ppr='cugraph'")})
    for name, choice in backend.components.items():
        log.info("%s: %s (%s)", name, choice.impl, choice.reason)
    return backend
