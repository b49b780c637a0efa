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
Elementwise helpers and intrinsics (``exp``, ``log``, ``sqrt``, ``rsqrt``, ``tanh``, ``sigmoid``,
``erf``, ``abs``, ``floor``, ``ceil``, ``round``, ``trunc``, ``power``, ``sin``, ``cos``,
``if_then_else``, ``equal``, ``not_equal``, ``max_value``, ``min_value``, ``all``, ``any``) come from
:mod:`builder.ir.tir`. ``PrimExpr.astype(dtype)`` converts.
"""
from ..ir.tir import (  # noqa: F401 - re-exported intrinsics
    abs, all, any, ceil, cos, equal, erf, exp, exp2, floor, if_then_else, log, log2, log10,
    max_value, maximum, min_value, minimum, not_equal, power, round, rsqrt, sigmoid, sin, sqrt,
    tanh, trunc,
)
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
    "prod", "var", "size_var", "const", "create_prim_func", "call_te", "abs", "all", "any", "ceil", "cos",
    "equal", "not_equal", "erf", "exp", "exp2", "floor", "if_then_else", "log", "log2", "log10",
    "max_value", "maximum",
    "min_value", "minimum", "power", "round", "rsqrt", "sigmoid", "sin", "sqrt", "tanh", "trunc",
]
