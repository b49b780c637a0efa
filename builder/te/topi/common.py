"""Helpers the topi families share: dtype rules (float16 / bfloat16 computed in float32, promotion,
accumulator dtypes), axis normalization, shape products and broadcasting, reduction indices, and the
two-stage (accumulate, then cast) compute.
"""
from __future__ import annotations

import builtins
from typing import Callable, Sequence, Union

from ...ir import expr as E
from ...ir.expr import PrimExpr
from .. import tensor as _te
from ..tensor import Tensor

__all__ = ["broadcast_shape"]


Operand = Union[Tensor, PrimExpr, int, float]


_LOW_FLOATS = ("float16", "bfloat16")


def _is_float(dtype: str) -> bool:
    return E.is_float_dtype(dtype)


def _compute_dtype(dtype: str) -> str:
    """The dtype math runs in for values of ``dtype``: float32 for 16-bit floats, else itself."""
    return "float32" if dtype in _LOW_FLOATS else dtype


def _up(v: PrimExpr) -> PrimExpr:
    """Convert a loaded 16-bit float to float32 (other dtypes pass through)."""
    return v.astype("float32") if v.dtype in _LOW_FLOATS else v


def _cast(v: PrimExpr, dtype: str) -> PrimExpr:
    """Convert ``v`` to ``dtype``; 16-bit floats go through float32 first (exact), and a
    conversion to bool is ``v != 0`` (numpy's truth value, not a truncation)."""
    if v.dtype == dtype:
        return v
    v = _up(v)
    if v.dtype == dtype:
        return v
    if dtype == "bool":
        return E.NE(v, E.const(0, v.dtype))
    return v.astype(dtype)


def _is_static_one(d: PrimExpr) -> bool:
    return isinstance(d, E.IntImm) and d.value == 1


def _static(d: PrimExpr) -> int | None:
    d = E.simplify(d)
    return d.value if isinstance(d, E.IntImm) else None


def _dim_str(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _norm_axis(axis: int, ndim: int, what: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{what}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{what}: axis {axis} is out of range for a tensor of ndim {ndim}")
    return axis % ndim


def _norm_axes(axes, ndim: int, what: str) -> list[int]:
    """Normalized, sorted, duplicate-free axes; ``None`` means all axes."""
    if axes is None:
        return list(range(ndim))
    if isinstance(axes, int):
        axes = [axes]
    out = sorted({_norm_axis(a, ndim, what) for a in axes})
    if len(out) != len(list(axes)):
        raise ValueError(f"{what}: repeated axis in {list(axes)}")
    return out


def _product(dims: Sequence[PrimExpr]) -> PrimExpr:
    out: PrimExpr = E.IntImm(1, "int64")
    for d in dims:
        out = out * d
    return E.simplify(out)


def _count(dims: Sequence[PrimExpr], dtype: str) -> PrimExpr:
    """The number of elements of ``dims`` as a ``dtype`` (float) scalar."""
    n = _product(dims)
    if isinstance(n, E.IntImm):
        return E.const(float(n.value), dtype)
    return n.astype(dtype)


def _as_tensor_or_scalar(x: Operand):
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
        if _is_static_one(da):
            out.append(db)
        elif _is_static_one(db):
            out.append(da)
        else:
            sa, sb = _static(da), _static(db)
            if sa is not None and sb is not None and sa != sb:
                raise ValueError(f"{what}: shapes {_dim_str(a)} and {_dim_str(b)} do not broadcast "
                                 f"(dim {sa} vs {sb})")
            out.append(da)
    return tuple(reversed(out))


def _broadcast_index(idx: Sequence[PrimExpr], shape: Sequence[PrimExpr]) -> tuple:
    """Index of an operand of ``shape`` for the output index ``idx`` (aligned right; a static
    size-1 dim reads element 0)."""
    lead = len(idx) - len(shape)
    return tuple(E.IntImm(0, "int64") if _is_static_one(d) else idx[lead + k]
                 for k, d in enumerate(shape))


def _two_stage(shape, fbody: Callable, acc_dtype: str, out_dtype: str, name: str,
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
        return _cast(v, out_dtype)

    return _te.compute(shape, fout, name=name)


def _acc_dtype(in_dtype: str, out_dtype: str) -> str:
    """Accumulator of a dot product of ``in_dtype`` values giving ``out_dtype``: float32 for
    16-bit floats (float64 when either side is float64), the output dtype otherwise (numpy
    accumulates integers in the result dtype)."""
    if out_dtype in _LOW_FLOATS or (_is_float(in_dtype) and not _is_float(out_dtype)):
        return "float64" if in_dtype == "float64" else "float32"
    return out_dtype


def _out_dtype(in_dtype: str, out_dtype: str | None) -> str:
    return in_dtype if out_dtype in (None, "", "void") else out_dtype


def _reduced_shape(shape, axes: list[int], keepdims: bool) -> list[PrimExpr]:
    if keepdims:
        return [E.IntImm(1, "int64") if d in axes else s for d, s in enumerate(shape)]
    return [s for d, s in enumerate(shape) if d not in axes]


def _reduce_axes(shape, axes: list[int]) -> list:
    return [_te.reduce_axis((0, shape[a]), name=f"k{a}") for a in axes]


def _full_index(out_idx, axes: list[int], ndim: int, rvars, keepdims: bool) -> tuple:
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


def _kept_index(full_idx, axes: list[int]) -> tuple:
    """Index into a ``keepdims=False`` reduction result from a full index."""
    return tuple(i for d, i in enumerate(full_idx) if d not in axes)


def _norm_acc(dtype: str) -> str:
    if not _is_float(dtype):
        raise TypeError(f"normalization needs a floating-point tensor, got {dtype}")
    return "float64" if dtype == "float64" else "float32"


def _zero() -> PrimExpr:
    return E.IntImm(0, "int64")
