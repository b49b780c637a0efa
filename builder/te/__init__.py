"""Tensor expressions, TVM's ``tvm.te`` API as the MLC course uses it.

Example (the course's matmul)::

    from builder import te
    A = te.placeholder((128, 128), "float32", name="A")
    B = te.placeholder((128, 128), "float32", name="B")
    k = te.reduce_axis((0, 128), name="k")
    C = te.compute((128, 128), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    te.create_prim_func([A, B, C]).show()

Reductions: ``te.sum / te.max / te.min / te.prod(expr, axis=..., where=None, init=None)``; called
on two expressions ``te.max(a, b)`` / ``te.min(a, b)`` combine elementwise (as in TVM).
Elementwise helpers and intrinsics (``exp``, ``erf``, ``if_then_else``, ``max_value``, ``all``, ...:
every constructor of :mod:`builder.ir.tir.intrinsics`) come from there. ``PrimExpr.astype(dtype)`` converts.
"""
from ..ir.tir import intrinsics as _intrinsics
from ..ir.tir.intrinsics import *  # noqa: F401,F403 - the scalar intrinsics (te.exp, te.erf, ...)
from ..ir.tir import IterVar, PrimFunc  # noqa: F401
from .call_te import call_te  # noqa: F401 - also makes BlockBuilder.call_te work
from .prim_func import create_prim_func  # noqa: F401
from .tensor import (  # noqa: F401
    CommReducer, ComputeOp, Operation, PlaceholderOp, Reduce, Tensor, comm_reducer, compute,
    const, max, min, placeholder, prod, reduce_axis, size_var, sum, var,
)

__all__ = [
    "Tensor", "Operation", "PlaceholderOp", "ComputeOp", "CommReducer", "Reduce", "IterVar",
    "PrimFunc", "placeholder", "compute", "reduce_axis", "comm_reducer", "sum", "max", "min",
    "prod", "var", "size_var", "const", "create_prim_func", "call_te",
    *(name for name in _intrinsics.__all__ if name not in ("Intrinsic", "INTRINSICS")),
]
