"""Struct-info inference of elementwise ops: unary, binary (numpy broadcasting), comparisons, casts, where."""
from __future__ import annotations

from .. import expr as E
from ..relax import Call
from ..struct_info import DTYPES, StructInfo, TensorStructInfo, dims_equal
from .common import definitely_different, fmt_shape, tensor_arg


def broadcast_shapes(a: tuple, b: tuple, opname: str) -> tuple:
    """numpy broadcasting of two shapes with symbolic dims; ValueError naming both shapes."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if isinstance(da, int) and da == 1:
            out.append(db)
        elif isinstance(db, int) and db == 1:
            out.append(da)
        elif dims_equal(da, db):
            out.append(da)
        elif definitely_different(da, db):
            raise ValueError(f"{opname}: shapes {fmt_shape(a)} and {fmt_shape(b)} do not broadcast "
                             f"(dim {da} vs {db})")
        else:
            # symbolic dims that cannot be proven equal: TVM keeps the left one and checks at run time
            out.append(da)
    return tuple(reversed(out))


def infer_unary(call: Call) -> StructInfo:
    """Struct info of a one-tensor elementwise op (``R.abs``, ``R.negative``, ...): the input's shape and
    dtype. Raises TypeError for a non-tensor argument (:func:`.common.tensor_arg`)."""
    x = tensor_arg(call, 0)
    return TensorStructInfo(x.shape, x.dtype)


def infer_unary_float(call: Call) -> StructInfo:
    """As :func:`infer_unary`, for the math ops defined on floats only (``R.exp``, ``R.sqrt``,
    ``R.nn.silu``, ...): raises TypeError for an integer or bool tensor."""
    x = tensor_arg(call, 0)
    if not E.is_float_dtype(x.dtype):
        raise TypeError(f"{call.op.name}: needs a floating-point tensor, got {x.dtype}")
    return TensorStructInfo(x.shape, x.dtype)


def infer_binary(call: Call) -> StructInfo:
    """Struct info of a broadcast binary op (``R.add``, ``R.multiply``, ...): the numpy broadcast of both
    shapes (:func:`broadcast_shapes`) in their common dtype. Raises TypeError when the dtypes differ
    (no implicit promotion, as TVM), ValueError when the shapes do not broadcast."""
    a, b = tensor_arg(call, 0, "lhs"), tensor_arg(call, 1, "rhs")
    if a.dtype != b.dtype:
        raise TypeError(f"{call.op.name}: dtypes differ: lhs {a.dtype} vs rhs {b.dtype}")
    return TensorStructInfo(broadcast_shapes(a.shape, b.shape, call.op.name), a.dtype)


def infer_compare(call: Call) -> StructInfo:
    """Struct info of a comparison (``R.less``, ``R.equal``, ...): as :func:`infer_binary` (same dtypes,
    broadcast shapes; same errors) with dtype ``bool``."""
    sinfo = infer_binary(call)
    return TensorStructInfo(sinfo.shape, "bool")


def infer_astype(call: Call) -> StructInfo:
    """Struct info of ``R.astype(x, dtype=...)``: ``x``'s shape in the ``dtype`` attribute. Raises
    TypeError for a dtype not in :data:`~builder.ir.struct_info.DTYPES`, KeyError when the attribute is
    missing."""
    x = tensor_arg(call, 0)
    dtype = call.attrs["dtype"]
    if dtype not in DTYPES:
        raise TypeError(f"R.astype: unknown dtype '{dtype}'")
    return TensorStructInfo(x.shape, dtype)


def infer_where(call: Call) -> StructInfo:
    """Struct info of ``R.where(condition, x1, x2)`` (``numpy.where``): the broadcast of all three shapes
    in the dtype of ``x1``. Raises TypeError for a non-bool condition or when ``x1`` and ``x2`` dtypes
    differ, ValueError when the shapes do not broadcast."""
    c = tensor_arg(call, 0, "condition")
    a, b = tensor_arg(call, 1, "x1"), tensor_arg(call, 2, "x2")
    if c.dtype != "bool":
        raise TypeError(f"R.where: condition must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise TypeError(f"R.where: dtypes differ: x1 {a.dtype} vs x2 {b.dtype}")
    shape = broadcast_shapes(a.shape, b.shape, "R.where")
    return TensorStructInfo(broadcast_shapes(c.shape, shape, "R.where"), a.dtype)
