"""Translations of torch's tensor creation (``arange``, ``full``, ``zeros_like``, ``new_ones``, ...) and
conversions (``to``, ``type_as``, ``.float()``, ``copy_``).
"""
from __future__ import annotations

import numpy as np

from ...ir import expr as E
from ...ir.struct_info import DTYPES
from ...nn import op
from ..dtypes import as_dtype, dtype_or, is_dtype, torch_dtype
from .operands import is_tensor, sizes, to_tensor


def new_tensor(t, x, data, *, dtype=None, **_):
    """``Tensor.new_tensor(data)``: a constant of ``data`` in ``x``'s dtype (or ``dtype``)."""
    return to_tensor(np.asarray(data), dtype_or(dtype, x.dtype))


def copy_(t, dst, src, non_blocking=False):
    """``Tensor.copy_`` / ``aten.copy_``: ``src`` broadcast to ``dst``'s shape, in ``dst``'s dtype."""
    src = to_tensor(src, dst.dtype)
    return op.broadcast_to(src, list(dst.shape)) if list(src.shape) != list(dst.shape) else src


def arange(t, start, end=None, step=1, *, dtype=None, layout=None, device=None, pin_memory=None,
           requires_grad=False, out=None):
    """``torch.arange(start, end=None, step=1, dtype=None)``: the 1-D range ``[start, end)`` by ``step`` (``end`` alone
    counts from 0); bounds may be symbolic sizes. The dtype is ``dtype`` a torch dtype
    (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError for one we do not have), else float32 when a bound is
    a float, int64 otherwise (PyTorch's rule)."""
    if end is None:
        start, end = 0, start
    nums = [v for v in (start, end, step) if not isinstance(v, E.PrimExpr)]
    default = "float32" if any(isinstance(v, float) for v in nums) else "int64"
    return op.arange(start, end, step, dtype=dtype_or(dtype, default))


def full(t, size_, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False,
         out=None):
    """``torch.full(size, fill_value, dtype=None)``: a tensor of shape ``size`` filled with ``fill_value`` (a number,
    or a 0-d tensor broadcast); ``dtype`` a torch dtype (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError
    for one we do not have), else bool / float32 / int64 after the value's Python type."""
    default = "bool" if isinstance(fill_value, bool) else ("float32" if isinstance(fill_value, float) else
                                                           "int64")
    if not isinstance(fill_value, bool) and isinstance(fill_value, int) and dtype is None:
        default = "int64"
    dt = dtype_or(dtype, default)
    if is_tensor(fill_value):
        return op.broadcast_to(as_dtype(fill_value, dt), list(size_))
    return op.full(list(size_), fill_value, dtype=dt)


def ones(t, *size_, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, out=None):
    """``torch.ones(*size, dtype=None)``: shape ``size``, ``dtype`` a torch dtype
    (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError for one we do not have), float32 by default."""
    return op.ones(sizes(size_), dtype=dtype_or(dtype, "float32"))


def zeros(t, *size_, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, out=None):
    """``torch.zeros(*size, dtype=None)``: shape ``size``, ``dtype`` a torch dtype
    (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError for one we do not have), float32 by default
    (``torch.empty`` is this too)."""
    return op.zeros(sizes(size_), dtype=dtype_or(dtype, "float32"))


def full_like(t, x, fill_value, *, dtype=None, **_):
    """``torch.full_like(x, fill_value, dtype=None)``: ``x``'s shape filled with ``fill_value``, ``x``'s dtype unless
    ``dtype`` a torch dtype (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError for one we do not have)."""
    return op.full(list(x.shape), fill_value, dtype=dtype_or(dtype, x.dtype))


def ones_like(t, x, *, dtype=None, **_):
    """``torch.ones_like(x, dtype=None)``: ``x``'s shape, ``x``'s dtype unless ``dtype`` a torch dtype
    (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError for one we do not have)."""
    return op.ones(list(x.shape), dtype=dtype_or(dtype, x.dtype))


def zeros_like(t, x, *, dtype=None, **_):
    """``torch.zeros_like(x, dtype=None)``: ``x``'s shape, ``x``'s dtype unless ``dtype`` a torch dtype
    (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError for one we do not have)."""
    return op.zeros(list(x.shape), dtype=dtype_or(dtype, x.dtype))


def new_full(t, x, size_, fill_value, *, dtype=None, **_):
    """``Tensor.new_full(size, fill_value, dtype=None)``: shape ``size``, ``x``'s dtype unless ``dtype`` a torch dtype
    (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError for one we do not have)."""
    return op.full(list(size_), fill_value, dtype=dtype_or(dtype, x.dtype))


def new_ones(t, x, *size_, dtype=None, **_):
    """``Tensor.new_ones(*size, dtype=None)``: shape ``size``, ``x``'s dtype unless ``dtype`` a torch dtype
    (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError for one we do not have)."""
    return op.ones(sizes(size_), dtype=dtype_or(dtype, x.dtype))


def new_zeros(t, x, *size_, dtype=None, **_):
    """``Tensor.new_zeros(*size, dtype=None)``: shape ``size``, ``x``'s dtype unless ``dtype`` a torch dtype
    (:func:`~builder.frontend.dtypes.dtype_or`; FrontendError for one we do not have)."""
    return op.zeros(sizes(size_), dtype=dtype_or(dtype, x.dtype))


def to(t, x, *args, dtype=None, **kwargs):
    """``x.to(dtype)`` / ``x.to(device)`` / ``x.to(other)`` / ``x.to(device, dtype)``: only the dtype
    matters here (one device)."""
    for a in args:
        if is_dtype(a):
            dtype = a
        elif is_tensor(a):
            dtype = a.dtype
    if dtype is None:
        return x
    return as_dtype(x, dtype if isinstance(dtype, str) and dtype in DTYPES else torch_dtype(dtype))


def type_as(t, x, other):
    """``Tensor.type_as(other)``: ``x`` cast to ``other``'s dtype; same shape."""
    return as_dtype(x, other.dtype)


def cast_to(dtype: str):
    """The translation of a dtype method (``Tensor.float()``, ``.half()``, ``.long()``, ...): ``fn(t, x)``, ``x`` cast
    to ``dtype`` (our name); same shape."""
    def fn(t, x, *args, **kwargs):
        return as_dtype(x, dtype)
    fn.__name__ = dtype
    return fn
