"""Helpers the topi families share: dtype rules (float16 / bfloat16 computed in float32, accumulator
and output dtypes), axis normalization, shape products and broadcasting, reduction indices, and the
two-stage (accumulate, then cast) compute.

The family modules import these by name; the package re-exports only :func:`broadcast_shape` (the
rest are building blocks of computes, not operators). Shape formatting and constant dims come from the
graph-level helpers (:func:`builder.ir.op.common.fmt_shape`, :func:`~builder.ir.op.common.static_int`),
so that both levels word their errors alike.
"""
from __future__ import annotations

import builtins
from typing import Callable, Sequence, Union

from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr
from ...ir.op.common import fmt_shape, static_int
from .. import tensor as _te
from ..tensor import Tensor

__all__ = ["broadcast_shape"]


Operand = Union[Tensor, PrimExpr, int, float]


_LOW_FLOATS = ("float16", "bfloat16")


def compute_dtype(dtype: str) -> str:
    """The dtype math runs in for values of ``dtype``: float32 for 16-bit floats, else itself."""
    return "float32" if dtype in _LOW_FLOATS else dtype


def upcast(v: PrimExpr) -> PrimExpr:
    """Convert a loaded 16-bit float to float32 (other dtypes pass through)."""
    return v.astype("float32") if v.dtype in _LOW_FLOATS else v


def cast_value(v: PrimExpr, dtype: str) -> PrimExpr:
    """Convert ``v`` to ``dtype``; 16-bit floats go through float32 first (exact), and a
    conversion to bool is ``v != 0`` (numpy's truth value, not a truncation)."""
    if v.dtype == dtype:
        return v
    v = upcast(v)
    if v.dtype == dtype:
        return v
    if dtype == "bool":
        return E.NE(v, E.const(0, v.dtype))
    return v.astype(dtype)


def is_static_one(d: PrimExpr) -> bool:
    """``d`` is the constant 1 (a dim that broadcasts)."""
    return isinstance(d, E.IntImm) and d.value == 1


def normalize_axis(axis: int, ndim: int, what: str) -> int:
    """``axis`` (negative counts from the end) as an index in ``[0, ndim)``.

    Raises TypeError for a non-int axis and ValueError for one out of range (``what`` names the op).
    """
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{what}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{what}: axis {axis} is out of range for a tensor of ndim {ndim}")
    return axis % ndim


def normalize_axes(axes, ndim: int, what: str) -> list[int]:
    """Normalized, sorted, duplicate-free axes; ``None`` means all axes."""
    if axes is None:
        return list(range(ndim))
    if isinstance(axes, int):
        axes = [axes]
    out = sorted({normalize_axis(a, ndim, what) for a in axes})
    if len(out) != len(list(axes)):
        raise ValueError(f"{what}: repeated axis in {list(axes)}")
    return out


def shape_product(dims: Sequence[PrimExpr]) -> PrimExpr:
    """The product of ``dims`` as a simplified int64 expression (1 for no dims)."""
    out: PrimExpr = E.IntImm(1, "int64")
    for d in dims:
        out = out * d
    return E.simplify(out)


def element_count(dims: Sequence[PrimExpr], dtype: str) -> PrimExpr:
    """The number of elements of ``dims`` as a ``dtype`` (float) scalar."""
    n = shape_product(dims)
    if isinstance(n, E.IntImm):
        return E.const(float(n.value), dtype)
    return n.astype(dtype)


def as_tensor_or_scalar(x: Operand):
    """A tensor as itself, a number as a constant PrimExpr; TypeError for anything else."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (PrimExpr, int, float)):
        return E.convert(x)
    raise TypeError(f"expected a te.Tensor or a scalar, got {type(x).__name__}")


def broadcast_shape(a: Sequence[PrimExpr], b: Sequence[PrimExpr], what: str = "broadcast"
                    ) -> tuple[PrimExpr, ...]:
    """numpy broadcasting of two shapes (see the module docstring).

    Raises ValueError when two static dims differ and neither is 1.
    """
    out = []
    for i in range(1, builtins.max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else E.IntImm(1, "int64")
        db = b[-i] if i <= len(b) else E.IntImm(1, "int64")
        if is_static_one(da):
            out.append(db)
        elif is_static_one(db):
            out.append(da)
        else:
            sa, sb = static_int(da), static_int(db)
            if sa is not None and sb is not None and sa != sb:
                raise ValueError(f"{what}: shapes {fmt_shape(a)} and {fmt_shape(b)} do not broadcast "
                                 f"(dim {sa} vs {sb})")
            out.append(da)
    return tuple(reversed(out))


def broadcast_index(idx: Sequence[PrimExpr], shape: Sequence[PrimExpr]) -> tuple:
    """Index of an operand of ``shape`` for the output index ``idx`` (aligned right; a static
    size-1 dim reads element 0)."""
    lead = len(idx) - len(shape)
    return tuple(E.IntImm(0, "int64") if is_static_one(d) else idx[lead + k]
                 for k, d in enumerate(shape))


def two_stage_compute(shape, fbody: Callable, acc_dtype: str, out_dtype: str, name: str,
               fepilogue: Callable | None = None, attrs: dict | None = None) -> Tensor:
    """A reduction compute in ``acc_dtype`` followed, when needed, by an elementwise stage that
    applies ``fepilogue(acc_value, idx)`` (if given) and converts to ``out_dtype``.

    ``fbody(*idx)`` returns the reduction (a ``Reduce`` in ``acc_dtype``); ``attrs`` go to the
    reduction compute.
    """
    if acc_dtype == out_dtype and fepilogue is None:
        return _te.compute(shape, fbody, name=name, attrs=attrs)
    acc = _te.compute(shape, fbody, name=name + "_acc", attrs=attrs)

    def fout(*idx):
        v = acc[idx]
        if fepilogue is not None:
            v = fepilogue(v, idx)
        return cast_value(v, out_dtype)

    return _te.compute(shape, fout, name=name)


def accumulator_dtype(in_dtype: str, out_dtype: str) -> str:
    """Accumulator of a dot product of ``in_dtype`` values giving ``out_dtype``: float32 for
    16-bit floats (float64 when either side is float64), the output dtype otherwise (numpy
    accumulates integers in the result dtype)."""
    if out_dtype in _LOW_FLOATS or (E.is_float_dtype(in_dtype) and not E.is_float_dtype(out_dtype)):
        return "float64" if in_dtype == "float64" else "float32"
    return out_dtype


def output_dtype(in_dtype: str, out_dtype: str | None) -> str:
    """``out_dtype``, or ``in_dtype`` when it is unset (None, ``""`` or ``"void"``, as the op attrs say)."""
    return in_dtype if out_dtype in (None, "", "void") else out_dtype


def reduce_axes(shape, axes: list[int]) -> list:
    """One reduction axis ``k<a>`` over ``shape[a]`` for each of ``axes``."""
    return [_te.reduce_axis((0, shape[a]), name=f"k{a}") for a in axes]


def full_index(out_idx, axes: list[int], ndim: int, rvars, keepdims: bool) -> tuple:
    """Input index of a reduction: output index for kept dims, reduce vars for ``axes``."""
    full, it, rv = [], iter(out_idx), iter(rvars)
    for d in range(ndim):
        if d in axes:
            full.append(next(rv).var)
            if keepdims:
                next(it)
        else:
            full.append(next(it))
    return tuple(full)


def kept_index(full_idx, axes: list[int]) -> tuple:
    """Index into a ``keepdims=False`` reduction result from a full index."""
    return tuple(i for d, i in enumerate(full_idx) if d not in axes)


def norm_acc_dtype(dtype: str) -> str:
    """The dtype a normalization computes in: float64 for float64, else float32.

    Raises TypeError for a non-float ``dtype``.
    """
    if not E.is_float_dtype(dtype):
        raise TypeError(f"normalization needs a floating-point tensor, got {dtype}")
    return "float64" if dtype == "float64" else "float32"


def zero_index() -> PrimExpr:
    """The int64 constant 0 (an index or offset)."""
    return E.IntImm(0, "int64")


def assert_dims_le(pairs, what: str) -> list:
    """Statements for the top of a hand-written PrimFunc (scatters, recurrences): for each ``(a, b)`` of
    ``pairs`` (dims) a check that ``a <= b`` when the code runs (``T.evaluate(T.assert_le(a, b, what))``:
    the function returns the error ``what`` instead of reading or writing out of bounds), unless it is
    known statically."""
    out = []
    for a, b in pairs:
        sa, sb = static_int(a), static_int(b)
        if (sa is not None and sb is not None and sa <= sb) or E.prove_equal(E.convert(a), E.convert(b)):
            continue
        out.append(tir.Evaluate(E.Call("int64", "assert_le", [E.convert(a).astype("int64"),
                                                              E.convert(b).astype("int64"), E.StringImm(what)])))
    return out
