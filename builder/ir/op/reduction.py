"""Struct-info inference of reductions: sum / mean / max / min / prod, argmax / argmin, cumsum, softmax."""
from __future__ import annotations

from ..relax import Call
from ..struct_info import StructInfo, TensorStructInfo, normalize_dim
from .common import attr_axes, init_dtype, norm_axis, product, tensor_arg
from .elementwise import infer_unary_float


def reduced_shape(shape: tuple, axes: list[int] | None, keepdims: bool) -> list:
    """The shape of a reduction of ``shape`` over ``axes`` (normalized indices; None: all dims): the
    reduced dims become 1 with ``keepdims``, else are dropped (a full reduction gives ``[]``, 0-d)."""
    axes = list(range(len(shape))) if axes is None else axes
    if keepdims:
        return [1 if i in axes else d for i, d in enumerate(shape)]
    return [d for i, d in enumerate(shape) if i not in axes]


def infer_statistical(call: Call) -> StructInfo:
    """Struct info of ``R.sum`` / ``R.mean`` / ``R.max`` / ``R.min`` / ``R.prod(x, axis, keepdims)``:
    :func:`reduced_shape` in ``x``'s dtype. Raises TypeError / ValueError for a non-int, out-of-range
    or repeated axis."""
    x = tensor_arg(call, 0)
    axes = attr_axes(call, x.ndim)
    return TensorStructInfo(reduced_shape(x.shape, axes, bool(call.attrs.get("keepdims"))), x.dtype)


def infer_arg_reduce(call: Call) -> StructInfo:
    """Struct info of ``R.argmax`` / ``R.argmin(x, axis, keepdims)``: int64 indices of the shape
    :func:`reduced_shape` gives (no axis: over the flattened tensor, 0-d). Raises ValueError for an axis
    out of range or an axis given for a 0-d tensor."""
    x = tensor_arg(call, 0)
    axis = call.attrs.get("axis")
    axes = None if axis is None else [norm_axis(int(axis), x.ndim, call.op.name)]
    if x.ndim == 0 and axis is not None:
        raise ValueError(f"{call.op.name}: axis {axis} given for a 0-d tensor")
    return TensorStructInfo(reduced_shape(x.shape, axes, bool(call.attrs.get("keepdims"))), "int64")


def infer_cumsum(call: Call) -> StructInfo:
    """Struct info of ``R.cumsum`` / ``R.cumprod(x, axis, dtype, exclusive)`` (``numpy.cumsum`` /
    ``numpy.cumprod``): ``x``'s shape, or
    ``(numel,)`` with no axis (over the flattened tensor), in ``dtype`` (``x``'s when absent or
    ``"void"``). Raises TypeError for an unknown dtype, TypeError / ValueError for a bad axis."""
    x = tensor_arg(call, 0)
    dtype = init_dtype(call, x.dtype)
    axis = call.attrs.get("axis")
    if axis is None:
        total = product(x.shape)
        return TensorStructInfo([total if isinstance(total, int) else normalize_dim(total)], dtype)
    norm_axis(int(axis), x.ndim, "R.cumsum")
    return TensorStructInfo(x.shape, dtype)


def infer_softmax(call: Call) -> StructInfo:
    """Struct info of ``R.nn.softmax(x, axis)``: ``x``'s shape and dtype (axis -1 by
    default). Raises TypeError for a non-float tensor, TypeError / ValueError for a bad axis."""
    x = tensor_arg(call, 0)
    norm_axis(call.attrs.get("axis", -1), x.ndim, call.op.name)
    return infer_unary_float(call)
