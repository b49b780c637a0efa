"""Reductions along axes: ``sum``, ``mean``, ``max``, ``min`` (``prod``), ``argmax``, ``argmin``,
``cumsum``, and the composite ``logsumexp``."""
from __future__ import annotations

from typing import Sequence


from ...ir.struct_info import DTYPES
from ..core import Tensor, wrap_nested
from .common import axis_list, op_call


def _statistical(opname: str, x: Tensor, axis, keepdims: bool, name: str) -> Tensor:
    return wrap_nested(op_call(opname, [x._expr], axis=axis_list(axis), keepdims=bool(keepdims)),
                       name)


def sum(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False,  # noqa: A001
        name: str = "sum") -> Tensor:
    """Sum over ``axis`` (int, list or None = all; ``numpy.sum`` but keeping the dtype; 16-bit
    floats accumulate in float32): ``R.sum(x, axis=[...], keepdims=...)``."""
    return _statistical("sum", x, axis, keepdims, name)


def prod(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False,
         name: str = "prod") -> Tensor:
    """Product over ``axis`` (int, list or None = all; ``numpy.prod`` but keeping the dtype; 16-bit
    floats accumulate in float32): ``R.prod(x, axis=[...], keepdims=...)``."""
    return _statistical("prod", x, axis, keepdims, name)


def mean(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False,
         name: str = "mean") -> Tensor:
    """Arithmetic mean over ``axis`` (``numpy.mean``, keeping the dtype; 16-bit floats
    accumulate in float32): ``R.mean(x, axis=[...], keepdims=...)``."""
    return _statistical("mean", x, axis, keepdims, name)


def max(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False,  # noqa: A001
        name: str = "max") -> Tensor:
    """Maximum over ``axis`` (``numpy.max``, NaN propagates): ``R.max(x, axis=[...],
    keepdims=...)``."""
    return _statistical("max", x, axis, keepdims, name)


def min(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False,  # noqa: A001
        name: str = "min") -> Tensor:
    """Minimum over ``axis`` (``numpy.min``, NaN propagates): ``R.min(x, axis=[...],
    keepdims=...)``."""
    return _statistical("min", x, axis, keepdims, name)


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False, name: str = "argmax") -> Tensor:
    """Index (int64) of the maximum along ``axis`` (``numpy.argmax``: the first one on ties;
    ``axis=None`` indexes the flattened tensor): ``R.argmax(x, axis=a, keepdims=...)``."""
    return wrap_nested(op_call("argmax", [x._expr], axis=None if axis is None else int(axis),
                             keepdims=bool(keepdims)), name)


def argmin(x: Tensor, axis: int | None = None, keepdims: bool = False, name: str = "argmin") -> Tensor:
    """Index (int64) of the minimum along ``axis`` (``numpy.argmin``, first on ties):
    ``R.argmin(x, axis=a, keepdims=...)``."""
    return wrap_nested(op_call("argmin", [x._expr], axis=None if axis is None else int(axis),
                             keepdims=bool(keepdims)), name)


def _scan(kind: str, data: Tensor, axis, dtype, exclusive, name: str) -> Tensor:
    if dtype is not None and dtype not in DTYPES:
        raise TypeError(f"cum{kind}: unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
    return wrap_nested(op_call(f"cum{kind}", [data._expr], axis=None if axis is None else int(axis),
                               dtype=dtype or "void", exclusive=exclusive), name)


def cumsum(data: Tensor, axis: int | None = None, dtype: str | None = None,
           exclusive: bool | None = None, name: str = "cumsum") -> Tensor:
    """Inclusive cumulative sum along ``axis`` (``numpy.cumsum``; ``axis=None`` flattens;
    ``exclusive=True`` starts from 0 and leaves out the current element). ``dtype`` (default:
    the input's) is the result and accumulator dtype; 16-bit floats accumulate in float32:
    ``R.cumsum(x, axis=a, dtype="void", exclusive=None)``. Raises TypeError for an unknown dtype."""
    return _scan("sum", data, axis, dtype, exclusive, name)


def cumprod(data: Tensor, axis: int | None = None, dtype: str | None = None,
            exclusive: bool | None = None, name: str = "cumprod") -> Tensor:
    """Inclusive cumulative product along ``axis`` (``numpy.cumprod``, ``torch.cumprod``; ``axis=None``
    flattens; ``exclusive=True`` starts from 1 and leaves out the current element), accumulated as
    :func:`cumsum`: ``R.cumprod(x, axis=a, dtype="void", exclusive=None)``. Raises TypeError for an
    unknown dtype."""
    return _scan("prod", data, axis, dtype, exclusive, name)


def logsumexp(x: Tensor, axis: int | Sequence[int], keepdims: bool = False, name: str = "logsumexp") -> Tensor:
    """``log(sum(exp(x), axis))`` shifted by the maximum (``torch.logsumexp``, ONNX ``ReduceLogSumExp``):
    ``m + log(sum(exp(x - m)))`` with ``m = max(x, axis)``, finite where ``exp`` overflows (all ``-inf``
    gives NaN, as ``m - m``). Float ``x``; raises ValueError for an axis out of range."""
    m = max(x, axis=axis, keepdims=True)
    shifted = wrap_nested(op_call("subtract", [x._expr, m._expr]), "shifted")
    s = sum(wrap_nested(op_call("exp", [shifted._expr]), "exp"), axis=axis, keepdims=True)
    out = wrap_nested(op_call("add", [op_call("log", [s._expr]), m._expr]), name)
    if keepdims:
        return out
    return wrap_nested(op_call("squeeze", [out._expr], axis=axis_list(axis)), name)
