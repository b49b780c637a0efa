"""Tensor creation: ``full``, ``zeros``, ``ones``, ``empty``, ``arange``."""
from __future__ import annotations

import builtins
from typing import Sequence

import numpy as np

from ...ir import expr as E
from ...ir import relax as rx
from ...ir.op import arange_length
from ...ir.relax import DataTypeImm
from ...ir.struct_info import DTYPES
from ..core import Tensor, wrap_nested
from .common import describe, op_call, prim_value, shape_dims, symbolic_scalar


def full(shape: Sequence, fill_value, dtype: str = "float32", name: str = "full") -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (``numpy.full``):
    ``R.full(R.shape([...]), fill, dtype=dtype)``.

    ``shape``: ints and symbolic int64 dims. ``fill_value``: a Python number, a ``FloatImm`` /
    ``IntImm`` (a constant of ``dtype``), a 0-d Tensor, or a symbolic int expression of the
    shape variables (``seq - 1``; a 0-d tensor made by
    :func:`~builder.nn.op.common.symbolic_scalar`; any int64 value). Raises TypeError
    for other fill values or an unknown dtype and ValueError for a negative static dim."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise TypeError(f"full: unknown dtype {describe(dtype)}; valid dtypes: {', '.join(DTYPES)}")
    if isinstance(fill_value, (E.IntImm, E.FloatImm)):
        fill = rx.const(fill_value.value, dtype)
    elif isinstance(fill_value, E.PrimExpr):
        fill = symbolic_scalar(fill_value, dtype)
    elif isinstance(fill_value, (bool, int, float, np.number)):
        fill = rx.const(fill_value, dtype)
    elif isinstance(fill_value, Tensor):
        fill = fill_value._expr
    else:
        raise TypeError(f"full: fill_value must be a number, a symbolic int or a 0-d Tensor, got "
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


def _int_value(v) -> bool:
    return (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) or \
        (isinstance(v, E.PrimExpr) and E.is_int_dtype(v.dtype) and v.dtype != "bool")


def arange(start, end=None, step=1, dtype: str | None = "float32", name: str = "arange") -> Tensor:
    """Evenly spaced values ``start, start + step, ...`` below ``end`` (``numpy.arange``; one
    argument means ``arange(0, start)``): ``R.arange(R.prim_value(start), R.prim_value(end),
    R.prim_value(step), dtype=dtype)``, length ``max(0, ceil((end - start) / step))``.
    ``dtype=None`` picks int64 for integer bounds, else float32.

    ``end`` may be a symbolic int64 expression of the shape variables. A symbolic ``start``
    (``arange(total - seq, total)``, positions of new tokens after a cache) needs integer bounds
    and a static int ``step``; it is emitted as ``arange(0, length) * step + start`` in int64
    (then ``astype``), ``start`` being a 0-d int64 tensor that the VM makes from the symbolic
    dims it has bound (:func:`~builder.nn.op.common.symbolic_scalar`: the runtime passes kernels
    tensors only), so a step costs O(length), not O(start), and a negative ``start`` gives
    negative values, as ``numpy.arange`` does. Returns a 1-D tensor of ``dtype``, length
    ``max(0, ceil((end - start) / step))`` (symbolic: ``(end - start + step - 1) // step``, a
    negative value of which is a ValueError from the VM when the code runs). Raises ValueError for
    a zero step, a symbolic step, or a symbolic start with a float bound; TypeError for
    non-number bounds.
    """
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = builtins.all(_int_value(v) for v in (start, end, step))
        dtype = "int64" if ints else "float32"
    if isinstance(start, E.PrimExpr) and not isinstance(start, (E.IntImm, E.FloatImm)):
        if isinstance(step, E.PrimExpr) and not isinstance(step, E.IntImm):
            raise ValueError(f"arange: a symbolic step ({step}) is not supported")
        st = step.value if isinstance(step, E.IntImm) else step
        if not (_int_value(start) and _int_value(end) and isinstance(st, (int, np.integer))):
            raise ValueError(f"arange: a symbolic start ({start}) needs integer bounds and an int step, got "
                             f"end {describe(end)}, step {describe(step)}")
        length = arange_length(start, end, int(st))
        idx: rx.Expr = op_call("arange", [prim_value(0), prim_value(length), prim_value(1)], dtype="int64")
        if st != 1:
            idx = op_call("multiply", [idx, rx.const(int(st), "int64")])
        out: rx.Expr = op_call("add", [idx, symbolic_scalar(start, "int64")])
        if dtype != "int64":
            out = op_call("astype", [out], dtype=dtype)
        return wrap_nested(out, name)
    return wrap_nested(op_call("arange", [prim_value(start), prim_value(end), prim_value(step)], dtype=dtype), name)
