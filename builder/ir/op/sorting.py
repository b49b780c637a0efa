"""Struct-info inference of the sorting ops: sort, argsort, topk (TVM's ``relax.op.sort`` / ``argsort`` /
``topk``)."""
from __future__ import annotations

from .. import expr as E
from ..relax import Call
from ..struct_info import StructInfo, TensorStructInfo, TupleStructInfo
from .common import norm_axis, static_int, tensor_arg

#: What ``R.topk`` returns: both tensors (a tuple), the values or the indices.
TOPK_RETURNS = ("both", "values", "indices")


def _index_dtype(call: Call) -> str:
    dtype = call.attrs.get("dtype", "int32")
    if dtype not in ("int32", "int64"):
        raise TypeError(f"{call.op.name}: the indices' dtype must be int32 or int64, got {dtype!r}")
    return dtype


def _sortable(call: Call) -> TensorStructInfo:
    x = tensor_arg(call, 0)
    if x.ndim == 0:
        raise ValueError(f"{call.op.name}: needs at least one dim")
    if x.dtype == "bool":
        raise TypeError(f"{call.op.name}: cannot sort bool")
    norm_axis(call.attrs.get("axis", -1), x.ndim, call.op.name)
    return x


def infer_sort(call: Call) -> StructInfo:
    """``R.sort(x, axis, descending)``: ``x``'s shape and dtype. Raises ValueError for a 0-d tensor or a bad
    axis, TypeError for a bool tensor."""
    x = _sortable(call)
    return TensorStructInfo(x.shape, x.dtype)


def infer_argsort(call: Call) -> StructInfo:
    """``R.argsort(x, axis, descending, dtype)``: ``x``'s shape, int32 / int64. Raises ValueError for a 0-d
    tensor or a bad axis, TypeError for a bool tensor or an index dtype other than int32 / int64."""
    x = _sortable(call)
    return TensorStructInfo(x.shape, _index_dtype(call))


def infer_topk(call: Call) -> StructInfo:
    """``R.topk(x, k, axis, ret_type, largest, dtype)``: ``x``'s shape with ``k`` along ``axis``; a tuple
    (values, indices) for ``ret_type="both"``. ``k`` is a non-negative int, no larger than a static axis.
    Raises TypeError for a ``k`` that is not an int or a bool tensor, ValueError for a 0-d tensor, a static
    ``k`` out of range, an unknown ``ret_type`` or a bad axis."""
    x = _sortable(call)
    axis = norm_axis(call.attrs.get("axis", -1), x.ndim, "R.topk")
    k = call.attrs.get("k", 1)
    if isinstance(k, bool) or not isinstance(k, (int, E.PrimExpr)):
        raise TypeError(f"R.topk: k must be an int, got {k!r}")
    sk, sn = static_int(k), static_int(x.shape[axis])
    if sk is not None and (sk < 0 or (sn is not None and sk > sn)):
        raise ValueError(f"R.topk: k = {sk} is out of range for an axis of {x.shape[axis]}")
    ret = call.attrs.get("ret_type", "both")
    if ret not in TOPK_RETURNS:
        raise ValueError(f"R.topk: ret_type must be one of {TOPK_RETURNS}, got {ret!r}")
    shape = list(x.shape)
    shape[axis] = k
    values, indices = TensorStructInfo(shape, x.dtype), TensorStructInfo(shape, _index_dtype(call))
    return {"both": TupleStructInfo([values, indices]), "values": values, "indices": indices}[ret]
