"""Scalar intrinsics of loop-level code (``tvm.tir.exp``, ``T.if_then_else``, ``T.max_value`` ...):
the :data:`INTRINSICS` table (one :class:`Intrinsic` record per call op: its arity and how the code
generator lowers it), and the helpers that build the calls."""
from __future__ import annotations

import builtins
from dataclasses import dataclass

from .. import expr as E
from ..expr import PrimExpr

__all__ = [
    "Intrinsic", "INTRINSICS", "exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
    "abs", "floor", "ceil", "round", "trunc", "power", "sin", "cos", "tan", "atan", "asin", "acos", "if_then_else",
    "equal", "not_equal",
    "maximum", "minimum", "max_value", "min_value", "all", "any",
]


@dataclass(frozen=True)
class Intrinsic:
    """A scalar call op of loop-level code (``E.Call(dtype, name, args)``) and its lowering, the first
    that is set of: ``emit``, the name of a function of :mod:`builder.codegen.fastmath` that writes it
    as plain arithmetic (vectorizable; float64 may call ``libm``); ``llvm``, the LLVM intrinsic
    ``llvm.<llvm>.<type>`` (its vector forms exist); ``libm``, the C library's (float32, float64)
    functions, one call per element (float16 through float32). None set: the code generator emits
    it by hand (``if_then_else``: a branch). ``libm`` names are reserved: no kernel symbol takes them
    (:data:`builder.codegen.abi.RESERVED_SYMBOLS`)."""

    name: str
    num_args: int = 1
    emit: str | None = None
    llvm: str | None = None
    libm: tuple[str, str] | None = None


#: Call op name -> :class:`Intrinsic`: what loop-level code may call and the verifier checks.
INTRINSICS: dict[str, Intrinsic] = {i.name: i for i in (
    Intrinsic("exp", llvm="exp"), Intrinsic("exp2", llvm="exp2"), Intrinsic("log", llvm="log"),
    Intrinsic("log2", llvm="log2"), Intrinsic("log10", llvm="log10"), Intrinsic("sqrt", llvm="sqrt"),
    Intrinsic("rsqrt", emit="rsqrt"), Intrinsic("tanh", emit="tanh", libm=("tanhf", "tanh")),
    Intrinsic("sigmoid", emit="sigmoid"), Intrinsic("erf", emit="erf", libm=("erff", "erf")),
    Intrinsic("fabs", llvm="fabs"), Intrinsic("floor", llvm="floor"),
    Intrinsic("ceil", llvm="ceil"), Intrinsic("round", llvm="roundeven"), Intrinsic("trunc", llvm="trunc"),
    Intrinsic("pow", 2, llvm="pow"), Intrinsic("sin", llvm="sin"), Intrinsic("cos", llvm="cos"),
    Intrinsic("tan", libm=("tanf", "tan")), Intrinsic("atan", libm=("atanf", "atan")),
    Intrinsic("asin", libm=("asinf", "asin")), Intrinsic("acos", libm=("acosf", "acos")),
    Intrinsic("if_then_else", 3),
)}


def _float_arg(op: str, x) -> PrimExpr:
    e = E.convert(x)
    if not E.is_float_dtype(e.dtype):
        raise TypeError(f"{op} expects a floating-point operand, got {e} of dtype {e.dtype}")
    return e


def _unary(op: str, name: str | None = None):
    def f(x) -> PrimExpr:
        e = _float_arg(name or op, x)
        return E.Call(e.dtype, op, [e])

    f.__name__ = name or op
    f.__doc__ = (f"``T.{op}(x)`` for a float ``x`` (same dtype as ``x``). "
                 "Raises TypeError for an integer operand.")
    return f


exp = _unary("exp")
exp2 = _unary("exp2")
log = _unary("log")
log2 = _unary("log2")
log10 = _unary("log10")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
erf = _unary("erf")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001 - TVM's name
trunc = _unary("trunc")
sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
atan = _unary("atan")
asin = _unary("asin")
acos = _unary("acos")


def abs(x) -> PrimExpr:  # noqa: A001 - TVM's name
    """Absolute value: ``T.fabs(x)`` for floats, ``T.Select(x >= 0, x, -x)`` for signed ints,
    ``x`` itself for unsigned ints and bools."""
    e = E.convert(x)
    if E.is_float_dtype(e.dtype):
        return E.Call(e.dtype, "fabs", [e])
    if e.dtype.startswith("uint") or e.dtype == "bool":
        return e
    if isinstance(e, E.IntImm):
        return E.IntImm(builtins.abs(e.value), e.dtype)
    return E.Select(e >= 0, e, -e)


def power(x, y) -> PrimExpr:
    """``T.pow(x, y)`` for floats (``y`` converted to ``x``'s dtype). Raises TypeError for ints."""
    a = _float_arg("power", x)
    b = E.convert(y, a.dtype)
    if b.dtype != a.dtype:
        b = b.astype(a.dtype)
    return E.Call(a.dtype, "pow", [a, b])


def if_then_else(cond, t, f) -> PrimExpr:
    """``T.if_then_else(cond, t, f)``: only the chosen branch is evaluated, so ``t`` may read out of
    bounds when ``cond`` is false (padding). The branches are converted to a common dtype.
    Raises TypeError when ``cond`` is not a bool expression."""
    if isinstance(cond, bool):
        raise TypeError(
            "if_then_else got a Python bool as condition; `a == b` on expressions compares them "
            "structurally, so build the comparison with tir.equal(a, b) / tir.not_equal(a, b)")
    c = E.convert(cond)
    if c.dtype != "bool":
        raise TypeError(f"if_then_else condition must be bool, got {c} ({c.dtype})")
    if isinstance(c, E.IntImm):
        return E.convert(t) if c.value else E.convert(f)
    if isinstance(t, PrimExpr) or not isinstance(f, PrimExpr):
        a = E.convert(t)
        b = E.convert(f, a.dtype)
    else:
        b = E.convert(f)
        a = E.convert(t, b.dtype)
    dtype = E.promote_dtype(a.dtype, b.dtype)
    return E.Call(dtype, "if_then_else", [c, a.astype(dtype), b.astype(dtype)])


def equal(a, b) -> PrimExpr:
    """The bool expression ``a == b`` (``==`` on PrimExprs is structural equality, as for
    dict keys, so comparisons are built with this helper, like ``tvm.tir.EQ``)."""
    return E._binary(E.EQ, a, b)


def not_equal(a, b) -> PrimExpr:
    """The bool expression ``a != b`` (see :func:`equal`)."""
    return E._binary(E.NE, a, b)


def maximum(a, b) -> PrimExpr:
    """Elementwise ``T.max(a, b)`` (TVM's ``tir.max``)."""
    return E._binary(E.Max, a, b)


def minimum(a, b) -> PrimExpr:
    """Elementwise ``T.min(a, b)`` (TVM's ``tir.min``)."""
    return E._binary(E.Min, a, b)


def max_value(dtype: str) -> PrimExpr:
    """The largest finite value of ``dtype`` as a constant (TVM's ``tvm.te.max_value``).

    Raises ValueError for an unknown dtype."""
    if dtype == "bool":
        return E.IntImm(1, "bool")
    floats = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
              "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}
    if dtype in floats:
        return E.FloatImm(floats[dtype], dtype)
    if E.is_int_dtype(dtype):
        bits = E._bits(dtype)
        return E.IntImm((1 << bits) - 1 if dtype.startswith("uint") else (1 << (bits - 1)) - 1,
                        dtype)
    raise ValueError(f"unknown dtype {dtype!r}")


def min_value(dtype: str) -> PrimExpr:
    """The lowest finite value of ``dtype`` (TVM's ``tvm.te.min_value``; ``-max`` for floats).

    Raises ValueError for an unknown dtype."""
    if dtype == "bool":
        return E.IntImm(0, "bool")
    if E.is_float_dtype(dtype):
        return E.FloatImm(-max_value(dtype).value, dtype)  # type: ignore[attr-defined]
    if E.is_int_dtype(dtype):
        bits = E._bits(dtype)
        return E.IntImm(0 if dtype.startswith("uint") else -(1 << (bits - 1)), dtype)
    raise ValueError(f"unknown dtype {dtype!r}")


def _fold(node: type, identity: int, conds) -> PrimExpr:
    """``conds`` joined by ``node`` (And / Or), starting from the bool constant ``identity``, which
    is dropped once a condition follows it."""
    out: PrimExpr = E.IntImm(identity, "bool")
    for c in conds:
        if isinstance(out, E.IntImm) and out.value == identity:
            out = E.convert(c)
        else:
            out = E._binary(node, out, E.convert(c))
    return out


def all(*conds) -> PrimExpr:  # noqa: A001 - TVM's name
    """Logical and of bool expressions (``tvm.tir.all``); ``T.bool(True)`` for none."""
    return _fold(E.And, 1, conds)


def any(*conds) -> PrimExpr:  # noqa: A001 - TVM's name
    """Logical or of bool expressions (``tvm.tir.any``); ``T.bool(False)`` for none."""
    return _fold(E.Or, 0, conds)
