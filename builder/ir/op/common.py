"""Helpers the inference rules share: argument access, axis normalization, shape arithmetic."""
from __future__ import annotations

import numbers

from .. import expr as E
from ..relax import Call, PrimValue, ShapeExpr
from ..struct_info import DTYPES, TensorStructInfo, normalize_dim


def tensor_arg(call: Call, i: int, what: str = "") -> TensorStructInfo:
    """The struct info of argument ``i`` of ``call`` (``what`` names it in the message). Raises TypeError
    when the argument is not a tensor, ValueError when its shape (not only its values) is unknown."""
    sinfo = call.args[i].struct_info
    if not isinstance(sinfo, TensorStructInfo):
        raise TypeError(f"{call.op.name}: argument {i}{' (' + what + ')' if what else ''} must be a "
                        f"tensor, got {sinfo!r}")
    if sinfo.shape is None:
        raise ValueError(f"{call.op.name}: argument {i} has an unknown shape")
    return sinfo


def fmt_shape(shape) -> str:
    """``shape`` as a Python tuple is written, for error messages: ``(2, n)``, ``(3,)``, ``()``; symbolic
    dims by their ``str``."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def norm_axis(axis: int, ndim: int, opname: str) -> int:
    """``axis`` (negative counts from the end, numpy's rule) as an index in ``[0, ndim)``; 0 for a 0-d
    tensor (axis -1 or 0). Raises TypeError for a non-int (a bool too) and ValueError for an axis out
    of ``[-ndim, ndim)``, both naming ``opname``."""
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise TypeError(f"{opname}: axis must be an int, got {axis!r}")
    axis = int(axis)
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{opname}: axis {axis} is out of range for a tensor of ndim {ndim}")
    return axis % ndim if ndim else 0


def definitely_different(a, b) -> bool:
    """Both dims known and provably different (ints that differ)."""
    if isinstance(a, int) and isinstance(b, int):
        return a != b
    diff = E.simplify(E.convert(a) - E.convert(b))
    return isinstance(diff, E.IntImm) and diff.value != 0


def product(dims) -> E.PrimExpr | int:
    """The product of ``dims`` (ints and symbolic dims): an int when all are ints, else the simplified
    PrimExpr; 1 for no dims (a 0-d tensor has one element)."""
    out: E.PrimExpr | int = 1
    for d in dims:
        out = out * d
        if isinstance(out, E.PrimExpr):
            out = E.simplify(out)
    return out


def sum_dims(dims) -> int | E.PrimExpr:
    """The sum of ``dims`` (``concat``'s output dim): an int when all are ints, else the simplified and
    normalized PrimExpr (:func:`~builder.ir.struct_info.normalize_dim`); 0 for no dims."""
    total: int | E.PrimExpr = 0
    for d in dims:
        total = total + d
    return total if isinstance(total, int) else normalize_dim(E.simplify(total))


def attr_axes(call: Call, ndim: int, key: str = "axis") -> list[int] | None:
    """The call's list attribute ``key`` normalized to ``[0, ndim)`` (None stays None);
    ValueError for an out-of-range or repeated axis."""
    axes = call.attrs.get(key)
    if axes is None:
        return None
    if isinstance(axes, int):
        axes = [axes]
    out = [norm_axis(int(a), ndim, call.op.name) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"{call.op.name}: repeated axis in {list(axes)}")
    return out


def shape_arg(call: Call, i: int) -> tuple:
    """The dims of argument ``i`` of ``call``, which must be an ``R.shape([...])`` (a :class:`ShapeExpr`):
    a tuple of ints / PrimExprs. Raises TypeError for any other argument."""
    arg = call.args[i]
    if not isinstance(arg, ShapeExpr):
        raise TypeError(f"{call.op.name}: argument {i} must be a shape (R.shape([...])), got "
                        f"{type(arg).__name__}")
    return tuple(arg.values)


def prim_arg(call: Call, i: int, what: str) -> E.PrimExpr:
    """The value (an ``IntImm`` / ``FloatImm`` / symbolic PrimExpr) of argument ``i`` of ``call``, which
    must be an ``R.prim_value`` (``what`` names it in the message). Raises TypeError otherwise."""
    arg = call.args[i]
    if not isinstance(arg, PrimValue):
        raise TypeError(f"{call.op.name}: {what} must be a R.prim_value, got {type(arg).__name__}")
    return arg.value


def static_int(d) -> int | None:
    """``d`` as a Python int when it is a constant dim, else None."""
    if isinstance(d, int):
        return d
    d = E.simplify(E.convert(d))
    return d.value if isinstance(d, E.IntImm) else None


def check_same_dtype(call: Call, a: TensorStructInfo, b: TensorStructInfo, what_a: str,
                      what_b: str) -> None:
    """Raise TypeError naming the op and both operands (``what_a`` / ``what_b``) when the dtypes of ``a``
    and ``b`` differ."""
    if a.dtype != b.dtype:
        raise TypeError(f"{call.op.name}: {what_a} dtype {a.dtype} differs from {what_b} dtype "
                        f"{b.dtype}")


def check_positive_out(call: Call, dim, what: str, x: TensorStructInfo) -> None:
    """Raise ValueError when output dim ``dim`` (``what``: ``"width"``, ...) of a convolution / pooling
    of ``x`` is a constant below 1 (the dilated kernel is larger than the padded input); a symbolic dim
    passes (it is checked where the shape is bound)."""
    s = static_int(dim)
    if s is not None and s < 1:
        raise ValueError(f"{call.op.name}: the output {what} would be {s} for input "
                         f"{fmt_shape(x.shape)}; the kernel (with dilation) is larger than the "
                         f"padded input")


def init_dtype(call: Call, default: str | None = None) -> str:
    """The dtype attribute of a creation op (``R.zeros``, ``R.full``, ``R.arange``...): ``default`` when it
    is absent or ``"void"``. Raises TypeError when it is absent and there is no default, or not one of
    :data:`~builder.ir.struct_info.DTYPES`."""
    dtype = call.attrs.get("dtype")
    if dtype in (None, "void"):
        if default is None:
            raise TypeError(f"{call.op.name}: dtype is required")
        dtype = default
    if dtype not in DTYPES:
        raise TypeError(f"{call.op.name}: unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
    return dtype
