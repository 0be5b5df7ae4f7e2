"""Dot products of float32 rows in one fixed order, so that every kernel gets the same bits for a (row, question)
pair however many pairs it sums together.

``dots(x, q, rows, questions)`` is ``x[rows[a]] · q[questions[b]]`` for a tuple of rows and a tuple of questions;
``paired_dots`` the same for pairs ``(rows[k], questions[k])``. Each pair is summed the same way: lane ``l`` of
``LANES`` accumulates the products of the dimensions ``d ≡ l (mod LANES)`` below the last full group of lanes, by
fused multiply-add in the order of ``d``; the lanes are added in halves (lane ``l`` and ``l + LANES / 2``, then the
same again, down to one); the products past the last full group (by fused multiply-add, in order, from 0) are added
last. The order is written out in LLVM vector code (``llvm.fma`` on ``<LANES x float>``), which the compiler may not
reorder. A Numba loop vectorises a sum only with ``fastmath`` reassociation, and then sums in an order the compiler
chooses anew for each loop it sits in (a kernel that summed four questions in one pass over a row lost the bits of
the kernel that summed one); without it, nothing was vectorised (docs/scale-history.md, December 6).

Pairs summed together share their loads: a tile of ``R`` rows by ``Q`` questions loads ``R + Q`` vectors for
``R·Q`` multiply-adds, and independent sums keep the multiply-add units busy where one pair alone is a chain of
dependent ones. ``LANES`` = 8 (one AVX2 register) keeps a tile of 3 rows × 4 questions in the 16 registers of AVX2
and the 32 of NEON and AVX-512. On this project's 2-core AVX-512 machine, 256 questions against 25,032 rows of 384
dimensions: 30 ms in such tiles against 78 ms for the reassociated loop one pair at a time and 27 ms for numpy's
BLAS (``benchmarks/results/kernels_cpu_cosines_lanes_{before,after}.json``; 16 lanes read about the same as 8).

Numba caches each kernel on disk keyed on its own file, not on this one: after editing this module, clear the
callers' caches (their ``__pycache__``); ``tests/test_lanes.py`` compares a cached kernel with a fresh compile.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8
_F32 = ir.FloatType()
_VEC = ir.VectorType(_F32, LANES)


def _fma(builder: ir.IRBuilder, a, b, c):
    """``a * b + c`` rounded once (``llvm.fma``: exact on any target, a libm call where the CPU has no FMA)."""
    name = f"llvm.fma.v{LANES}f32" if isinstance(a.type, ir.VectorType) else "llvm.fma.f32"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(a.type, [a.type] * 3), name)
    return builder.call(fn, [a, b, c])


def _halves(builder: ir.IRBuilder, v):
    """The lanes of ``v`` added in halves: lane l + lane l + n/2, until one is left."""
    n = LANES
    while n > 1:
        h = n // 2
        lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), h), list(range(h))))
        hi = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), h), list(range(h, n))))
        v = builder.fadd(lo, hi)
        n = h
    return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))


def _matrix(t) -> bool:
    return isinstance(t, types.Array) and t.ndim == 2 and t.layout == "C" and t.dtype == types.float32


def _indices(t) -> bool:
    return isinstance(t, types.UniTuple) and isinstance(t.dtype, types.Integer) and 1 <= t.count <= 16


def _summed(name: str, pairs_of):
    """The intrinsic ``name`` that sums the pairs ``pairs_of(n_rows, n_questions)`` lists, as (row slot, question
    slot)."""

    def typer(typingctx, x, q, rows, questions):
        if not (_matrix(x) and _matrix(q) and _indices(rows) and _indices(questions)):
            return None
        pairs = pairs_of(rows.count, questions.count)
        if pairs is None:
            return None
        sig = types.UniTuple(types.float32, len(pairs))(x, q, rows, questions)

        def codegen(context, builder, signature, args):
            x_ty, q_ty, r_ty, b_ty = signature.args
            x_arr = context.make_array(x_ty)(context, builder, args[0])
            q_arr = context.make_array(q_ty)(context, builder, args[1])
            n = builder.extract_value(x_arr.shape, 1)
            zero_i = context.get_constant(types.intp, 0)

            def row_ptr(ty, arr, tup, tup_ty, k):
                i = context.cast(builder, builder.extract_value(tup, k), tup_ty.dtype, types.intp)
                return cgutils.get_item_pointer(context, builder, ty, arr, [i, zero_i], wraparound=False)

            pa = [row_ptr(x_ty, x_arr, args[2], r_ty, k) for k in range(r_ty.count)]
            pb = [row_ptr(q_ty, q_arr, args[3], b_ty, k) for k in range(b_ty.count)]
            acc = [cgutils.alloca_once_value(builder, ir.Constant(_VEC, [0.0] * LANES)) for _ in pairs]
            groups = builder.sdiv(n, ir.Constant(n.type, LANES))
            with cgutils.for_range(builder, groups) as loop:
                at = builder.mul(loop.index, ir.Constant(n.type, LANES))
                va = [builder.load(builder.bitcast(builder.gep(p, [at]), _VEC.as_pointer()), align=4) for p in pa]
                vb = [builder.load(builder.bitcast(builder.gep(p, [at]), _VEC.as_pointer()), align=4) for p in pb]
                for (a, b), sum_ in zip(pairs, acc):
                    builder.store(_fma(builder, va[a], vb[b], builder.load(sum_)), sum_)
            rest = [cgutils.alloca_once_value(builder, ir.Constant(_F32, 0.0)) for _ in pairs]
            start = builder.mul(groups, ir.Constant(n.type, LANES))
            with cgutils.for_range_slice(builder, start, n, ir.Constant(n.type, 1), inc=True) as (d, _):
                fa = [builder.load(builder.gep(p, [d])) for p in pa]
                fb = [builder.load(builder.gep(p, [d])) for p in pb]
                for (a, b), sum_ in zip(pairs, rest):
                    builder.store(_fma(builder, fa[a], fb[b], builder.load(sum_)), sum_)
            out = [builder.fadd(_halves(builder, builder.load(v)), builder.load(r)) for v, r in zip(acc, rest)]
            return context.make_tuple(builder, signature.return_type, out)

        return sig, codegen

    typer.__name__ = typer.__qualname__ = name  # Numba's name for the intrinsic (its errors and its registry)
    return intrinsic(typer)


dots = _summed("dots", lambda n_r, n_q: [(a, b) for a in range(n_r) for b in range(n_q)])
dots.__doc__ = """(float32 × len(rows)·len(questions)): ``x[rows[a]] · q[questions[b]]`` at
``a · len(questions) + b``, in the module's order. ``x`` and ``q``: C-ordered float32 matrices of one width; ``rows``
and ``questions``: tuples of 1 to 16 integers, not checked against the matrices' bounds (the caller's)."""

paired_dots = _summed("paired_dots", lambda n_r, n_q: [(k, k) for k in range(n_r)] if n_r == n_q else None)
paired_dots.__doc__ = """(float32 × len(rows)): ``x[rows[k]] · q[questions[k]]`` for tuples of one length, each
summed as ``dots`` sums it: pairs that share nothing, side by side."""
