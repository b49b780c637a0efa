"""Binary computes with numpy broadcasting (arithmetic, comparisons) and ``where``.
"""
from __future__ import annotations

import builtins
from typing import Callable

from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr, promote_dtype
from .. import tensor as _te
from ..tensor import Tensor
from .common import (
    Operand, as_tensor_or_scalar, broadcast_index, broadcast_shape, cast_value, compute_dtype, is_static_one,
)

__all__ = [
    "add", "broadcast_binary", "broadcast_checks", "divide", "equal", "floor_divide", "floor_mod", "greater", "greater_equal", "less",
    "less_equal", "maximum", "minimum", "multiply", "not_equal", "power", "subtract", "where",
]


def broadcast_binary(a: Operand, b: Operand, fscalar: Callable[[PrimExpr, PrimExpr], PrimExpr],
                     name: str, out_dtype: str | None = None) -> Tensor:
    """``out[i] = fscalar(a[ia], b[ib])`` with numpy broadcasting (module docstring).

    ``a`` / ``b`` are tensors or scalars (Python numbers or PrimExprs, treated as 0-d); at least
    one must be a tensor. Both operands are converted to their common dtype (equal dtypes stay;
    float beats int; the wider wins), with 16-bit floats promoted to float32 for the math.
    ``out_dtype`` defaults to the common dtype, or bool when ``fscalar`` returns a bool.
    Raises ValueError for shapes that do not broadcast; dims of two different symbols (not
    provably equal) must be equal when the code runs (an error otherwise: no run-time
    broadcasting of a symbolic dim that turns out to be 1).
    """
    ta, tb = as_tensor_or_scalar(a), as_tensor_or_scalar(b)
    if not isinstance(ta, Tensor) and not isinstance(tb, Tensor):
        raise TypeError(f"{name}: at least one operand must be a te.Tensor")
    # a Python number adopts the tensor's dtype (a float with an integer tensor stays float32)
    if isinstance(ta, Tensor) and isinstance(b, (int, float)):
        tb = E.convert(b, ta.dtype)
    if isinstance(tb, Tensor) and isinstance(a, (int, float)):
        ta = E.convert(a, tb.dtype)
    common = promote_dtype(ta.dtype, tb.dtype)
    work = compute_dtype(common)
    sa = ta.shape if isinstance(ta, Tensor) else ()
    sb = tb.shape if isinstance(tb, Tensor) else ()
    shape = broadcast_shape(sa, sb, name)

    def load(t, idx):
        v = t[broadcast_index(idx, t.shape)] if isinstance(t, Tensor) else t
        return cast_value(v, work)

    def f(*idx):
        r = E.convert(fscalar(load(ta, idx), load(tb, idx)))
        dt = out_dtype or ("bool" if r.dtype == "bool" else common)
        return cast_value(r, dt)

    checks = broadcast_checks(sa, sb)
    return _te.compute(shape, f, name=name, attrs={"mb.assert_le": checks} if checks else None)


def broadcast_checks(*shapes) -> list[tuple[PrimExpr, PrimExpr]]:
    """The run-time checks (``attrs["mb.assert_le"]`` pairs, see :func:`builder.te.prim_func._read_checks`)
    that numpy broadcasting of ``shapes`` needs: dims aligned from the right that the shapes cannot prove
    equal (two different symbols; neither a static 1) must be equal when the code runs, so both
    ``(da, db)`` and ``(db, da)`` are asked. A symbolic dim that turns out 1 against another that is not is
    then an error, never a result of the wrong shape or a partial read (no run-time broadcasting of
    symbolic dims; the output takes the first operand's dim, :func:`.common.broadcast_shape`)."""
    checks: list[tuple[PrimExpr, PrimExpr]] = []
    for i in range(1, builtins.max((len(s) for s in shapes), default=0) + 1):
        dims = [s[-i] for s in shapes if i <= len(s) and not is_static_one(s[-i])]
        for j, da in enumerate(dims):
            for db in dims[j + 1:]:
                if not E.prove_equal(da, db) and not any(
                        E.prove_equal(da, x) and E.prove_equal(db, y) for x, y in checks):
                    checks += [(da, db), (db, da)]
    return checks


def _same(cls):
    def f(x: PrimExpr, y: PrimExpr) -> PrimExpr:
        return cls(x, y)

    return f


def add(a: Operand, b: Operand) -> Tensor:
    """``a + b`` with broadcasting (``numpy.add``)."""
    return broadcast_binary(a, b, _same(E.Add), "T_add")


def subtract(a: Operand, b: Operand) -> Tensor:
    """``a - b`` with broadcasting (``numpy.subtract``)."""
    return broadcast_binary(a, b, _same(E.Sub), "T_subtract")


def multiply(a: Operand, b: Operand) -> Tensor:
    """``a * b`` with broadcasting (``numpy.multiply``)."""
    return broadcast_binary(a, b, _same(E.Mul), "T_multiply")


def _int_div(cls, x: PrimExpr, y: PrimExpr) -> PrimExpr:
    """Integer division that never traps: a zero divisor gives 0 (numpy's result) instead of
    a hardware exception (the divisor is replaced by 1, then the quotient by 0)."""
    zero = E.const(0, y.dtype)
    is_zero = E.EQ(y, zero)
    q = cls(x, E.Select(is_zero, E.const(1, y.dtype), y))
    return E.Select(is_zero, E.const(0, x.dtype), q)


def divide(a: Operand, b: Operand) -> Tensor:
    """``a / b`` with broadcasting: true division for floats (``numpy.divide``); for integers
    C-style division truncating toward zero (TVM's ``topi.divide``; the dtype is kept), with
    ``x / 0 == 0`` (numpy's integer result) instead of a trap."""
    def f(x, y):
        return E.Div(x, y) if E.is_float_dtype(x.dtype) else _int_div(E.Div, x, y)

    return broadcast_binary(a, b, f, "T_divide")


def floor_divide(a: Operand, b: Operand) -> Tensor:
    """``a // b`` with broadcasting (``numpy.floor_divide``): ``floor(a / b)`` for floats; for
    integers floor division with ``x // 0 == 0``."""
    def f(x, y):
        if E.is_float_dtype(x.dtype):
            return tir.floor(x / y)
        return _int_div(E.FloorDiv, x, y)

    return broadcast_binary(a, b, f, "T_floor_divide")


def floor_mod(a: Operand, b: Operand) -> Tensor:
    """``a % b`` with broadcasting, the sign of ``b`` (``numpy.mod``, ``torch.remainder``): ``a -
    floor(a / b) * b`` for floats; for integers floor modulo with ``x % 0 == 0`` (numpy's result)."""
    def f(x, y):
        if E.is_float_dtype(x.dtype):
            return x - tir.floor(x / y) * y
        return _int_div(E.FloorMod, x, y)

    return broadcast_binary(a, b, f, "T_floor_mod")


def maximum(a: Operand, b: Operand) -> Tensor:
    """Elementwise ``max(a, b)`` with broadcasting (``numpy.maximum``)."""
    return broadcast_binary(a, b, _same(E.Max), "T_maximum")


def minimum(a: Operand, b: Operand) -> Tensor:
    """Elementwise ``min(a, b)`` with broadcasting (``numpy.minimum``)."""
    return broadcast_binary(a, b, _same(E.Min), "T_minimum")


def power(a: Operand, b: Operand) -> Tensor:
    """``a ** b`` with broadcasting (``numpy.power``). Integers are raised in float64 and
    converted back (exact while the result fits in 53 bits)."""
    def f(x, y):
        if E.is_float_dtype(x.dtype):
            return tir.power(x, y)
        r = tir.power(x.astype("float64"), y.astype("float64"))
        return tir.round(r).astype(x.dtype)

    return broadcast_binary(a, b, f, "T_power")


def equal(a: Operand, b: Operand) -> Tensor:
    """``a == b`` (bool) with broadcasting (``numpy.equal``)."""
    return broadcast_binary(a, b, _same(E.EQ), "T_equal", "bool")


def not_equal(a: Operand, b: Operand) -> Tensor:
    """``a != b`` (bool) with broadcasting (``numpy.not_equal``; true for NaN operands)."""
    return broadcast_binary(a, b, _same(E.NE), "T_not_equal", "bool")


def less(a: Operand, b: Operand) -> Tensor:
    """``a < b`` (bool) with broadcasting (``numpy.less``)."""
    return broadcast_binary(a, b, _same(E.LT), "T_less", "bool")


def less_equal(a: Operand, b: Operand) -> Tensor:
    """``a <= b`` (bool) with broadcasting (``numpy.less_equal``)."""
    return broadcast_binary(a, b, _same(E.LE), "T_less_equal", "bool")


def greater(a: Operand, b: Operand) -> Tensor:
    """``a > b`` (bool) with broadcasting (``numpy.greater``)."""
    return broadcast_binary(a, b, _same(E.GT), "T_greater", "bool")


def greater_equal(a: Operand, b: Operand) -> Tensor:
    """``a >= b`` (bool) with broadcasting (``numpy.greater_equal``)."""
    return broadcast_binary(a, b, _same(E.GE), "T_greater_equal", "bool")


def where(cond: Tensor, a: Operand, b: Operand) -> Tensor:
    """``a`` where ``cond`` else ``b`` (``numpy.where``) with numpy broadcasting of all three;
    ``a`` / ``b`` may be scalars. The result dtype is their common dtype; a non-bool ``cond``
    is tested against 0. Raises ValueError for shapes that do not broadcast; symbolic dims that the
    shapes cannot prove equal must be equal when the code runs (:func:`broadcast_checks`: an error
    otherwise, as in :func:`broadcast_binary`)."""
    ta, tb = as_tensor_or_scalar(a), as_tensor_or_scalar(b)
    if isinstance(ta, Tensor) and isinstance(b, (int, float)):
        tb = E.convert(b, ta.dtype)
    if isinstance(tb, Tensor) and isinstance(a, (int, float)):
        ta = E.convert(a, tb.dtype)
    dtype = promote_dtype(ta.dtype, tb.dtype)
    sa = ta.shape if isinstance(ta, Tensor) else ()
    sb = tb.shape if isinstance(tb, Tensor) else ()
    shape = broadcast_shape(cond.shape, broadcast_shape(sa, sb, "where"), "where")
    checks = broadcast_checks(cond.shape, sa, sb)

    def load(t, idx):
        v = t[broadcast_index(idx, t.shape)] if isinstance(t, Tensor) else t
        return cast_value(v, dtype)

    def f(*idx):
        c = cast_value(cond[broadcast_index(idx, cond.shape)], "bool")
        return E.Select(c, load(ta, idx), load(tb, idx))

    return _te.compute(shape, f, name="T_where", attrs={"mb.assert_le": checks} if checks else None)
