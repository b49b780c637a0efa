"""Tensor creation: ``full``, ``zeros``, ``ones``, ``empty``, ``arange``."""
from __future__ import annotations

import builtins
from typing import Sequence

import numpy as np

from ...ir import expr as E
from ...ir import relax as rx
from ...ir.relax import DataTypeImm
from ..core import Tensor, wrap_nested
from .common import op_call, prim_value, shape_dims


def full(shape: Sequence, fill_value, dtype: str = "float32", name: str = "full") -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (a Python number, a ``FloatImm`` /
    ``IntImm`` or a 0-d Tensor): ``R.full(R.shape([...]), R.const(v, dtype), dtype=dtype)``."""
    if isinstance(fill_value, (E.IntImm, E.FloatImm)):
        fill = rx.const(fill_value.value, dtype)
    elif isinstance(fill_value, (bool, int, float, np.number)):
        fill = rx.const(fill_value, dtype)
    elif isinstance(fill_value, Tensor):
        fill = fill_value._expr
    else:
        raise TypeError(f"full: fill_value must be a number or a 0-d Tensor, got "
                        f"{type(fill_value).__name__}")
    return wrap_nested(op_call("full", [rx.ShapeExpr(shape_dims(shape, "full")), fill], dtype=dtype), name)


def zeros(shape: Sequence, dtype: str = "float32", name: str = "zeros") -> Tensor:
    """A tensor of zeros: ``R.zeros(R.shape([...]), dtype=dtype)``."""
    return wrap_nested(op_call("zeros", [rx.ShapeExpr(shape_dims(shape, "zeros"))], dtype=dtype), name)


def ones(shape: Sequence, dtype: str = "float32", name: str = "ones") -> Tensor:
    """A tensor of ones: ``R.ones(R.shape([...]), dtype=dtype)``."""
    return wrap_nested(op_call("ones", [rx.ShapeExpr(shape_dims(shape, "ones"))], dtype=dtype), name)


def empty(shape: Sequence, dtype: str = "float32", name: str = "empty") -> Tensor:
    """An uninitialized tensor: ``R.builtin.alloc_tensor(R.shape([...]), R.dtype(dtype),
    R.prim_value(0), R.str("global"))``. Its contents are unspecified (this runtime fills
    zeros)."""
    return wrap_nested(op_call("builtin.alloc_tensor", [rx.ShapeExpr(shape_dims(shape, "empty")),
                                                      DataTypeImm(dtype), rx.PrimValue(0, "int64"),
                                                      rx.StringImm("global")]), name)


def arange(start, end=None, step=1, dtype: str | None = "float32", name: str = "arange") -> Tensor:
    """Evenly spaced values ``start, start + step, ...`` below ``end`` (``numpy.arange``; one
    argument means ``arange(0, start)``): ``R.arange(R.prim_value(start), R.prim_value(end),
    R.prim_value(step), dtype=dtype)``. ``end`` may be a symbolic int64 dim (length
    ``ceil((end - start) / step)``). ``dtype=None`` picks int64 for integer bounds, else float32.
    Raises ValueError for a zero step."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = builtins.all(isinstance(v, (int, np.integer)) or
                            (isinstance(v, E.PrimExpr) and E.is_int_dtype(v.dtype))
                            for v in (start, end, step))
        dtype = "int64" if ints else "float32"
    return wrap_nested(op_call("arange", [prim_value(start), prim_value(end), prim_value(step)], dtype=dtype), name)
