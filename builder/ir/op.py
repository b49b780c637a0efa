"""Operator registry and graph-level operator constructors (``R.*`` in TVMScript).

Each op is registered once with its TVM name (``relax.matmul``, ``relax.nn.silu``), the order in
which its attributes print, and a struct-info inference rule that runs eagerly when the
``Call`` is built. Inference raises ``ValueError`` (shape) or ``TypeError`` (dtype) naming the op
and both sides. Legalization rules (op -> loop-level PrimFunc) are attached by
``builder.transform.legalize``.

Shape semantics follow TVM Relax / numpy: binary elementwise ops broadcast numpy-style and
require equal dtypes; ``matmul`` follows ``numpy.matmul`` (batch dims broadcast).
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, Sequence

from . import expr as E
from .relax import Call, ExternFunc, GlobalVar, Op, ShapeExpr, Tuple
from .struct_info import (
    ObjectStructInfo, StructInfo, TensorStructInfo, TupleStructInfo, dims_equal,
    normalize_dim, DTYPES,
)

__all__ = ["register_op", "OP_NAMES"]

OP_NAMES: list[str] = []


def register_op(name: str, infer: Callable[[Call], StructInfo], attr_names: Sequence[str] = (),
                pure: bool = True) -> Op:
    """Register ``relax.<name>`` with its inference rule and printed attribute order."""
    full = "relax." + name
    op = Op._registry.get(full) or Op(full)
    op.infer = infer
    op.attr_names = tuple(attr_names)
    op.purity = pure
    Op._registry[full] = op
    if full not in OP_NAMES:
        OP_NAMES.append(full)
    return op


# ---------------------------------------------------------------------------------------------
# helpers


def _tensor(call: Call, i: int, what: str = "") -> TensorStructInfo:
    sinfo = call.args[i].struct_info
    if not isinstance(sinfo, TensorStructInfo):
        raise TypeError(f"{call.op.name}: argument {i}{' (' + what + ')' if what else ''} must be a "
                        f"tensor, got {sinfo!r}")
    if sinfo.shape is None:
        raise ValueError(f"{call.op.name}: argument {i} has an unknown shape")
    return sinfo


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _norm_axis(axis: int, ndim: int, opname: str) -> int:
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise TypeError(f"{opname}: axis must be an int, got {axis!r}")
    axis = int(axis)
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{opname}: axis {axis} is out of range for a tensor of ndim {ndim}")
    return axis % ndim if ndim else 0


def _definitely_different(a, b) -> bool:
    """Both dims known and provably different (ints that differ)."""
    if isinstance(a, int) and isinstance(b, int):
        return a != b
    diff = E.simplify(E.convert(a) - E.convert(b))
    return isinstance(diff, E.IntImm) and diff.value != 0


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
        elif _definitely_different(da, db):
            raise ValueError(f"{opname}: shapes {_fmt_shape(a)} and {_fmt_shape(b)} do not broadcast "
                             f"(dim {da} vs {db})")
        else:
            # symbolic dims that cannot be proven equal: TVM keeps the left one and checks at run time
            out.append(da)
    return tuple(reversed(out))


# ---------------------------------------------------------------------------------------------
# inference rules


def _infer_unary(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    return TensorStructInfo(x.shape, x.dtype)


def _infer_unary_float(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    if not E.is_float_dtype(x.dtype):
        raise TypeError(f"{call.op.name}: needs a floating-point tensor, got {x.dtype}")
    return TensorStructInfo(x.shape, x.dtype)


def _infer_binary(call: Call) -> StructInfo:
    a, b = _tensor(call, 0, "lhs"), _tensor(call, 1, "rhs")
    if a.dtype != b.dtype:
        raise TypeError(f"{call.op.name}: dtypes differ: lhs {a.dtype} vs rhs {b.dtype}")
    return TensorStructInfo(broadcast_shapes(a.shape, b.shape, call.op.name), a.dtype)


def _infer_compare(call: Call) -> StructInfo:
    sinfo = _infer_binary(call)
    return TensorStructInfo(sinfo.shape, "bool")


def _infer_matmul(call: Call) -> StructInfo:
    a, b = _tensor(call, 0, "lhs"), _tensor(call, 1, "rhs")
    out_dtype = call.attrs.get("out_dtype", "void")
    if a.dtype != b.dtype:
        raise TypeError(f"R.matmul: dtypes differ: lhs {a.dtype} vs rhs {b.dtype}")
    sa, sb = a.shape, b.shape
    if len(sa) == 0 or len(sb) == 0:
        raise ValueError("R.matmul: operands must have ndim >= 1")
    a2 = sa if len(sa) > 1 else (1,) + sa
    b2 = sb if len(sb) > 1 else sb + (1,)
    ka, kb = a2[-1], b2[-2]
    if _definitely_different(ka, kb):
        raise ValueError(f"R.matmul: reduction dims differ: lhs {_fmt_shape(sa)} has {ka}, "
                         f"rhs {_fmt_shape(sb)} has {kb}")
    batch = broadcast_shapes(a2[:-2], b2[:-2], "R.matmul")
    out = list(batch)
    if len(sa) > 1:
        out.append(a2[-2])
    if len(sb) > 1:
        out.append(b2[-1])
    return TensorStructInfo(out, a.dtype if out_dtype in ("void", None) else out_dtype)


def _infer_permute_dims(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    axes = call.attrs.get("axes")
    if axes is None:
        axes = list(range(x.ndim))[::-1]
    axes = [_norm_axis(a, x.ndim, "R.permute_dims") for a in axes]
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"R.permute_dims: axes {call.attrs.get('axes')} are not a permutation of "
                         f"{x.ndim} dims")
    return TensorStructInfo([x.shape[a] for a in axes], x.dtype)


def _product(dims) -> E.PrimExpr | int:
    out: E.PrimExpr | int = 1
    for d in dims:
        out = out * d
        if isinstance(out, E.PrimExpr):
            out = E.simplify(out)
    return out


def _infer_reshape(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    new = call.args[1]
    if not isinstance(new, ShapeExpr):
        raise TypeError("R.reshape: the new shape must be a shape expression")
    total = _product(x.shape)
    dims = list(new.values)
    if isinstance(total, int) and all(isinstance(d, int) for d in dims):
        if math.prod(dims) != total:
            raise ValueError(f"R.reshape: cannot reshape {_fmt_shape(x.shape)} ({total} elements) "
                             f"to {_fmt_shape(tuple(dims))} ({math.prod(dims)} elements)")
    elif not dims_equal(total, _product(dims)):
        if _definitely_different(total, _product(dims)):
            raise ValueError(f"R.reshape: cannot reshape {_fmt_shape(x.shape)} to {_fmt_shape(tuple(dims))}")
    return TensorStructInfo(dims, x.dtype)


def resolve_reshape(shape: tuple, new_shape: Sequence) -> list:
    """Resolve one ``-1`` in ``new_shape`` against ``shape`` (symbolic dims allowed).

    Raises ValueError when the element counts cannot match or more than one ``-1`` is given.
    """
    new = [d if not isinstance(d, E.IntImm) else d.value for d in new_shape]
    holes = [i for i, d in enumerate(new) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ValueError(f"reshape: at most one -1 allowed in {new}")
    if not holes:
        return new
    known = [d for i, d in enumerate(new) if i != holes[0]]
    total, part = _product(shape), _product(known)
    if isinstance(total, int) and isinstance(part, int):
        if part == 0 or total % part:
            raise ValueError(f"reshape: cannot reshape {_fmt_shape(tuple(shape))} to {new}")
        new[holes[0]] = total // part
        return new
    if isinstance(part, int):
        quotient = E.divide_exact(total, part)
        if quotient is None:
            raise ValueError(f"reshape: cannot infer -1 reshaping {_fmt_shape(tuple(shape))} to {new}")
        new[holes[0]] = normalize_dim(quotient)
        return new
    # symbolic: cancel the known dims one by one from the list of dims of `shape`
    remaining = list(shape)
    for d in known:
        for j, s in enumerate(remaining):
            if dims_equal(s, d):
                del remaining[j]
                break
        else:
            raise ValueError(f"reshape: cannot infer -1 reshaping {_fmt_shape(tuple(shape))} to {new}")
    new[holes[0]] = _product(remaining)
    return new


def _infer_astype(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    dtype = call.attrs["dtype"]
    if dtype not in DTYPES:
        raise TypeError(f"R.astype: unknown dtype '{dtype}'")
    return TensorStructInfo(x.shape, dtype)


def _infer_take(call: Call) -> StructInfo:
    x, idx = _tensor(call, 0, "data"), _tensor(call, 1, "indices")
    if not E.is_int_dtype(idx.dtype) or idx.dtype == "bool":
        raise TypeError(f"R.take: indices must be integers, got {idx.dtype}")
    axis = _norm_axis(call.attrs.get("axis", 0), x.ndim, "R.take")
    return TensorStructInfo(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


def _check_norm_params(call: Call, x: TensorStructInfo, axes, names: Sequence[str]) -> None:
    if len(set(axes)) != len(axes):
        raise ValueError(f"{call.op.name}: axes {list(call.attrs['axes'])} repeat a dim of input "
                         f"{_fmt_shape(x.shape)}")
    expected = tuple(x.shape[a] for a in axes)
    for i, what in enumerate(names, start=1):
        p = _tensor(call, i, what)
        if p.dtype != x.dtype:
            raise TypeError(f"{call.op.name}: {what} dtype {p.dtype} differs from input dtype {x.dtype}")
        if len(p.shape) != len(expected) or any(_definitely_different(a, b) for a, b in zip(p.shape, expected)):
            raise ValueError(f"{call.op.name}: {what} shape {_fmt_shape(p.shape)} does not match the "
                             f"normalized dims {_fmt_shape(expected)} of input {_fmt_shape(x.shape)}")


def _infer_layer_norm(call: Call) -> StructInfo:
    x = _tensor(call, 0, "data")
    axes = [_norm_axis(a, x.ndim, call.op.name) for a in call.attrs["axes"]]
    _check_norm_params(call, x, axes, ("gamma", "beta"))
    return TensorStructInfo(x.shape, x.dtype)


def _infer_rms_norm(call: Call) -> StructInfo:
    x = _tensor(call, 0, "data")
    axes = [_norm_axis(a, x.ndim, call.op.name) for a in call.attrs["axes"]]
    _check_norm_params(call, x, axes, ("weight",))
    return TensorStructInfo(x.shape, x.dtype)


def conv_out_dim(size, kernel, stride: int, pad_lo: int, pad_hi: int, dilation: int):
    """Output length of a convolution: ``(size + pads - dilation*(kernel-1) - 1) // stride + 1``
    (PyTorch ``Conv1d`` docs)."""
    if isinstance(size, int) and isinstance(kernel, int):
        return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1
    num = E.convert(size) + (pad_lo + pad_hi - 1) - (E.convert(kernel) - 1) * dilation
    return E.simplify(num // stride + 1)


def _infer_conv1d(call: Call) -> StructInfo:
    x, w = _tensor(call, 0, "data"), _tensor(call, 1, "weight")
    if x.ndim != 3 or w.ndim != 3:
        raise ValueError(f"R.nn.conv1d: data and weight must be 3-D (NCW / OIW), got "
                         f"{_fmt_shape(x.shape)} and {_fmt_shape(w.shape)}")
    if x.dtype != w.dtype:
        raise TypeError(f"R.nn.conv1d: data dtype {x.dtype} differs from weight dtype {w.dtype}")
    a = call.attrs
    groups = a["groups"]
    n, c, width = x.shape
    o, cg, k = w.shape
    if _definitely_different(E.simplify(E.convert(c)), E.simplify(E.convert(cg) * groups)):
        raise ValueError(f"R.nn.conv1d: data has {c} channels but weight {_fmt_shape(w.shape)} with "
                         f"groups={groups} expects {cg} x {groups}")
    out_w = conv_out_dim(width, k, a["strides"][0], a["padding"][0], a["padding"][1], a["dilation"][0])
    span = a["dilation"][0] * (k - 1) + 1 if isinstance(k, int) else None
    if isinstance(width, int) and span is not None and width + a["padding"][0] + a["padding"][1] < span:
        raise ValueError(f"the input of length {width} (padded to "
                         f"{width + a['padding'][0] + a['padding'][1]}) is shorter than the dilated kernel "
                         f"({span} = dilation {a['dilation'][0]} x (kernel {k} - 1) + 1)")
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo((n, o, out_w), x.dtype if out_dtype in ("void", None) else out_dtype)


def _infer_null(call: Call) -> StructInfo:
    return ObjectStructInfo()


def _infer_call_tir(call: Call) -> StructInfo:
    if not isinstance(call.args[0], GlobalVar) or not isinstance(call.args[1], Tuple):
        raise TypeError("R.call_tir(func, (args...), out_sinfo=...) expects a GlobalVar and a tuple")
    outs = call.sinfo_args
    return outs[0] if len(outs) == 1 else TupleStructInfo(outs)


def _infer_softmax(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    _norm_axis(call.attrs.get("axis", -1), x.ndim, call.op.name)
    return _infer_unary_float(call)


# ---------------------------------------------------------------------------------------------
# registration

for _name in ("nn.relu", "nn.silu", "nn.gelu", "nn.gelu_tanh", "exp", "log", "sqrt", "rsqrt", "tanh",
              "sigmoid", "sin", "cos", "erf"):
    register_op(_name, _infer_unary_float)
for _name in ("negative", "abs"):
    register_op(_name, _infer_unary)
for _name in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power"):
    register_op(_name, _infer_binary)
for _name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
    register_op(_name, _infer_compare)
register_op("matmul", _infer_matmul, ("out_dtype",))
register_op("permute_dims", _infer_permute_dims, ("axes",))
register_op("reshape", _infer_reshape)
register_op("astype", _infer_astype, ("dtype",))
register_op("take", _infer_take, ("axis", "mode"))
register_op("nn.layer_norm", _infer_layer_norm, ("axes", "epsilon", "center", "scale"))
register_op("nn.rms_norm", _infer_rms_norm, ("axes", "epsilon"))
register_op("nn.conv1d", _infer_conv1d, ("strides", "padding", "dilation", "groups", "data_layout",
                                         "kernel_layout", "out_layout", "out_dtype"))
register_op("nn.softmax", _infer_softmax, ("axis",))
register_op("null_value", _infer_null)
register_op("call_tir", _infer_call_tir)


# === section A: tensor creation / manipulation / reduction ops (issue 3) ===
# Graph-level ops of issue 3, part A (TVM names and printed attribute order):
#   R.concat((a, b), axis=0)                       R.split(x, indices_or_sections=2, axis=-1)
#   R.expand_dims(x, axis=[1])                     R.squeeze(x, axis=[1])
#   R.broadcast_to(x, R.shape([..]))               R.repeat(x, repeats=2, axis=1)
#   R.nn.pad(x, pad_width=[..], pad_value=0, pad_mode="constant")
#   R.triu(x, R.prim_value(0)) / R.tril(...)       R.where(cond, a, b)
#   R.full(R.shape([..]), R.const(1, "float32"), dtype="float32")
#   R.zeros(R.shape([..]), dtype="float32") / R.ones(...)
#   R.arange(R.prim_value(0), R.prim_value(n), R.prim_value(1), dtype="int64")
#   R.builtin.alloc_tensor(R.shape([..]), R.dtype("float32"), R.prim_value(0), R.str("global"))
#   R.sum / R.mean / R.max / R.min(x, axis=[..], keepdims=False)
#   R.argmax / R.argmin(x, axis=1, keepdims=False)  R.cumsum(x, axis=1, dtype="void", exclusive=None)


from .relax import PrimValue, StringImm  # noqa: E402


class DataTypeImm(StringImm):
    """A dtype as a graph-level value (TVM's ``relax.DataTypeImm``, printed ``R.dtype("float32")``
    by TVM). Used as the dtype argument of ``R.builtin.alloc_tensor``; ``value`` is the dtype
    string. Raises ValueError for an unknown dtype."""

    def __init__(self, value: str) -> None:
        if value not in DTYPES:
            raise ValueError(f"unknown dtype '{value}'; valid dtypes: {', '.join(DTYPES)}")
        super().__init__(value)


__all__ += ["DataTypeImm", "split_sizes", "arange_length"]


def _sum_dims(dims) -> int | E.PrimExpr:
    total: int | E.PrimExpr = 0
    for d in dims:
        total = total + d
    return total if isinstance(total, int) else normalize_dim(E.simplify(total))


def _attr_axes(call: Call, ndim: int, key: str = "axis") -> list[int] | None:
    """The call's list attribute ``key`` normalized to ``[0, ndim)`` (None stays None);
    ValueError for an out-of-range or repeated axis."""
    axes = call.attrs.get(key)
    if axes is None:
        return None
    if isinstance(axes, int):
        axes = [axes]
    out = [_norm_axis(int(a), ndim, call.op.name) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"{call.op.name}: repeated axis in {list(axes)}")
    return out


def _shape_arg(call: Call, i: int) -> tuple:
    arg = call.args[i]
    if not isinstance(arg, ShapeExpr):
        raise TypeError(f"{call.op.name}: argument {i} must be a shape (R.shape([...])), got "
                        f"{type(arg).__name__}")
    return tuple(arg.values)


def _prim_arg(call: Call, i: int, what: str) -> E.PrimExpr:
    arg = call.args[i]
    if not isinstance(arg, PrimValue):
        raise TypeError(f"{call.op.name}: {what} must be a R.prim_value, got {type(arg).__name__}")
    return arg.value


def _infer_concat(call: Call) -> StructInfo:
    sinfo = call.args[0].struct_info
    if not isinstance(sinfo, TupleStructInfo):
        raise TypeError(f"R.concat: expects a tuple of tensors, got {sinfo!r}")
    if not sinfo.fields:
        raise ValueError("R.concat: needs at least one tensor")
    fields = []
    for i, f in enumerate(sinfo.fields):
        if not isinstance(f, TensorStructInfo) or f.shape is None:
            raise TypeError(f"R.concat: element {i} must be a tensor with a known shape, got {f!r}")
        fields.append(f)
    first = fields[0]
    axis = call.attrs.get("axis", 0)
    if axis is None:
        raise ValueError("R.concat: axis=None (flattening) is not supported; give an axis")
    for i, f in enumerate(fields[1:], start=1):
        if f.dtype != first.dtype:
            raise TypeError(f"R.concat: dtypes differ: element 0 is {first.dtype}, element {i} is "
                            f"{f.dtype}")
        if f.ndim != first.ndim:
            raise ValueError(f"R.concat: ranks differ: element 0 {_fmt_shape(first.shape)} vs "
                             f"element {i} {_fmt_shape(f.shape)}")
    ax = _norm_axis(axis, first.ndim, "R.concat")
    out = list(first.shape)
    for i, f in enumerate(fields[1:], start=1):
        for d in range(first.ndim):
            if d != ax and _definitely_different(first.shape[d], f.shape[d]):
                raise ValueError(f"R.concat: shapes differ outside axis {axis}: element 0 "
                                 f"{_fmt_shape(first.shape)} vs element {i} {_fmt_shape(f.shape)}")
    out[ax] = _sum_dims(f.shape[ax] for f in fields)
    return TensorStructInfo(out, first.dtype)


def split_sizes(length, indices_or_sections, opname: str = "split") -> list:
    """Sizes of the pieces that ``split`` cuts a dim of ``length`` into (TVM's rule).

    An int ``n``: ``n - 1`` pieces of ``ceil(length / n)`` and a last piece with the rest
    (``length - ceil(length / n) * (n - 1)``; ValueError when that is negative). A list of
    indices: the pieces between consecutive indices, clamped to ``[0, length]`` for a static
    ``length`` (for a symbolic ``length`` the indices are assumed to lie within it).
    Returns ints or simplified int64 PrimExprs. Raises ValueError for ``n < 1``.
    """
    if isinstance(indices_or_sections, (list, tuple)):
        idx = [int(i) for i in indices_or_sections]
        if isinstance(length, int):
            bounds = [0] + [min(max(i, 0), length) for i in idx] + [length]
            return [max(b - a, 0) for a, b in zip(bounds, bounds[1:])]
        sizes: list = []
        prev = 0
        for i in idx:
            sizes.append(max(max(i, 0) - prev, 0))
            prev = max(i, prev)
        sizes.append(normalize_dim(E.simplify(length - prev)))
        return sizes
    n = int(indices_or_sections)
    if n < 1:
        raise ValueError(f"{opname}: the number of sections must be >= 1, got {n}")
    if n == 1:
        return [length]
    if isinstance(length, int):
        size = -(-length // n)
        last = length - size * (n - 1)
        if last < 0:
            raise ValueError(f"{opname}: cannot split a dim of {length} into {n} sections of "
                             f"{size} (the last one would have {last} elements)")
        return [size] * (n - 1) + [last]
    size = normalize_dim(E.simplify((length + (n - 1)) // n))
    last = normalize_dim(E.simplify(length - size * (n - 1)))
    return [size] * (n - 1) + [last]


def _infer_split(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    ios = call.attrs.get("indices_or_sections")
    if ios is None or isinstance(ios, bool):
        raise TypeError("R.split: indices_or_sections must be an int or a list of ints")
    axis = _norm_axis(call.attrs.get("axis", 0), x.ndim, "R.split")
    sizes = split_sizes(x.shape[axis], ios, "R.split")
    fields = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        fields.append(TensorStructInfo(shape, x.dtype))
    return TupleStructInfo(fields)


def _infer_expand_dims(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    axes = call.attrs.get("axis")
    axes = [axes] if isinstance(axes, int) else list(axes or [])
    out_ndim = x.ndim + len(axes)
    norm = []
    for a in axes:
        if not -out_ndim <= a < out_ndim:
            raise ValueError(f"R.expand_dims: axis {a} is out of range for an output of ndim "
                             f"{out_ndim} (input {_fmt_shape(x.shape)})")
        norm.append(a % out_ndim)
    if len(set(norm)) != len(norm):
        raise ValueError(f"R.expand_dims: repeated axis in {axes}")
    dims = iter(x.shape)
    return TensorStructInfo([1 if d in norm else next(dims) for d in range(out_ndim)], x.dtype)


def _infer_squeeze(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    axes = _attr_axes(call, x.ndim)
    if axes is None:
        # static 1-dims go; symbolic dims cannot be proven to be 1 and stay
        return TensorStructInfo([d for d in x.shape if not (isinstance(d, int) and d == 1)], x.dtype)
    for a in axes:
        d = x.shape[a]
        if isinstance(d, int) and d != 1:
            raise ValueError(f"R.squeeze: dim {a} of {_fmt_shape(x.shape)} is {d}, not 1")
    return TensorStructInfo([d for i, d in enumerate(x.shape) if i not in axes], x.dtype)


def _infer_broadcast_to(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    target = _shape_arg(call, 1)
    if len(target) < x.ndim:
        raise ValueError(f"R.broadcast_to: cannot broadcast {_fmt_shape(x.shape)} to the "
                         f"lower-rank shape {_fmt_shape(target)}")
    lead = len(target) - x.ndim
    for i, d in enumerate(x.shape):
        t = target[lead + i]
        if not (isinstance(d, int) and d == 1) and _definitely_different(d, t):
            raise ValueError(f"R.broadcast_to: cannot broadcast {_fmt_shape(x.shape)} to "
                             f"{_fmt_shape(target)} (dim {d} vs {t})")
    return TensorStructInfo(target, x.dtype)


def _infer_repeat(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    repeats = call.attrs.get("repeats")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 0:
        raise ValueError(f"R.repeat: repeats must be an int >= 0, got {repeats!r}")
    axis = call.attrs.get("axis")
    if axis is None:
        total = _product(x.shape)
        total = total * repeats if isinstance(total, int) else normalize_dim(E.simplify(total * repeats))
        return TensorStructInfo([total], x.dtype)
    ax = _norm_axis(axis, x.ndim, "R.repeat")
    shape = list(x.shape)
    d = shape[ax]
    shape[ax] = d * repeats if isinstance(d, int) else normalize_dim(E.simplify(d * repeats))
    return TensorStructInfo(shape, x.dtype)


PAD_MODES = ("constant", "edge", "reflect")


def _infer_pad(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    width = list(call.attrs.get("pad_width") or [])
    if len(width) != 2 * x.ndim:
        raise ValueError(f"R.nn.pad: pad_width needs 2 values per axis ({2 * x.ndim} for "
                         f"{_fmt_shape(x.shape)}), got {len(width)}: {width}")
    if any(not isinstance(w, int) or isinstance(w, bool) or w < 0 for w in width):
        raise ValueError(f"R.nn.pad: pad_width values must be ints >= 0, got {width}")
    mode = call.attrs.get("pad_mode", "constant")
    if mode not in PAD_MODES:
        raise ValueError(f"R.nn.pad: pad_mode must be one of {PAD_MODES}, got {mode!r}")
    shape = []
    for i, d in enumerate(x.shape):
        lo, hi = width[2 * i], width[2 * i + 1]
        if mode == "reflect" and isinstance(d, int) and (lo > d - 1 or hi > d - 1):
            raise ValueError(f"R.nn.pad: reflect padding ({lo}, {hi}) of dim {i} must be smaller "
                             f"than its size {d} (input {_fmt_shape(x.shape)})")
        if mode == "edge" and isinstance(d, int) and d == 0 and (lo or hi):
            raise ValueError(f"R.nn.pad: edge padding of the empty dim {i}")
        shape.append(d + lo + hi if isinstance(d, int) else normalize_dim(E.simplify(d + (lo + hi))))
    return TensorStructInfo(shape, x.dtype)


def _infer_trilu(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    if x.ndim < 2:
        raise ValueError(f"{call.op.name}: needs a tensor of ndim >= 2, got {_fmt_shape(x.shape)}")
    k = _prim_arg(call, 1, "k")
    if not E.is_int_dtype(k.dtype):
        raise TypeError(f"{call.op.name}: k must be an integer, got {k.dtype}")
    return TensorStructInfo(x.shape, x.dtype)


def _init_dtype(call: Call, default: str | None = None) -> str:
    dtype = call.attrs.get("dtype")
    if dtype in (None, "void"):
        if default is None:
            raise TypeError(f"{call.op.name}: dtype is required")
        dtype = default
    if dtype not in DTYPES:
        raise TypeError(f"{call.op.name}: unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
    return dtype


def _infer_full(call: Call) -> StructInfo:
    shape = _shape_arg(call, 0)
    fill = _tensor(call, 1, "fill_value")
    if fill.ndim != 0:
        raise ValueError(f"R.full: fill_value must be a scalar (0-d) tensor, got shape "
                         f"{_fmt_shape(fill.shape)}")
    return TensorStructInfo(shape, _init_dtype(call, fill.dtype))


def _infer_zeros_ones(call: Call) -> StructInfo:
    return TensorStructInfo(_shape_arg(call, 0), _init_dtype(call))


def arange_length(start, end, step) -> int | E.PrimExpr:
    """Number of elements of ``arange(start, end, step)``: ``max(0, ceil((end - start) / step))``.

    Python numbers give an int. Integer PrimExprs need a static ``step`` and give
    ``(end - start + step - 1) // step`` (``step > 0``; mirrored for ``step < 0``), simplified.
    Raises ValueError for a zero step and a symbolic step or float bound.
    """
    vals = []
    for v in (start, end, step):
        if isinstance(v, E.IntImm):
            v = v.value
        elif isinstance(v, E.FloatImm):
            v = v.value
        vals.append(v)
    start, end, step = vals
    if isinstance(step, (int, float)) and step == 0:
        raise ValueError("arange: step must not be zero")
    if all(isinstance(v, (int, float)) for v in vals):
        if all(isinstance(v, int) for v in vals):
            return max(0, -((start - end) // step))
        return max(0, math.ceil((end - start) / step))
    if not isinstance(step, int):
        raise ValueError(f"arange: a symbolic bound needs a static integer step, got {step}")
    for v in (start, end):
        if isinstance(v, float) or (isinstance(v, E.PrimExpr) and not E.is_int_dtype(v.dtype)):
            raise ValueError("arange: symbolic bounds must be integers")
    if step > 0:
        n = (E.convert(end) - start + (step - 1)) // step
    else:
        n = (E.convert(start) - end + (-step - 1)) // (-step)
    return normalize_dim(E.simplify(n))


def _infer_arange(call: Call) -> StructInfo:
    start, end, step = (_prim_arg(call, i, w) for i, w in enumerate(("start", "end", "step")))
    return TensorStructInfo([arange_length(start, end, step)], _init_dtype(call))


def _infer_alloc_tensor(call: Call) -> StructInfo:
    shape = _shape_arg(call, 0)
    dtype = call.args[1]
    if not isinstance(dtype, DataTypeImm):
        raise TypeError(f"R.builtin.alloc_tensor: argument 1 must be a dtype (R.dtype(...)), got "
                        f"{type(dtype).__name__}")
    return TensorStructInfo(shape, dtype.value)


def _infer_where(call: Call) -> StructInfo:
    c = _tensor(call, 0, "condition")
    a, b = _tensor(call, 1, "x1"), _tensor(call, 2, "x2")
    if c.dtype != "bool":
        raise TypeError(f"R.where: condition must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise TypeError(f"R.where: dtypes differ: x1 {a.dtype} vs x2 {b.dtype}")
    shape = broadcast_shapes(a.shape, b.shape, "R.where")
    return TensorStructInfo(broadcast_shapes(c.shape, shape, "R.where"), a.dtype)


def _reduced_shape(shape: tuple, axes: list[int] | None, keepdims: bool) -> list:
    axes = list(range(len(shape))) if axes is None else axes
    if keepdims:
        return [1 if i in axes else d for i, d in enumerate(shape)]
    return [d for i, d in enumerate(shape) if i not in axes]


def _infer_statistical(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    axes = _attr_axes(call, x.ndim)
    return TensorStructInfo(_reduced_shape(x.shape, axes, bool(call.attrs.get("keepdims"))), x.dtype)


def _infer_arg_reduce(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    axis = call.attrs.get("axis")
    axes = None if axis is None else [_norm_axis(int(axis), x.ndim, call.op.name)]
    if x.ndim == 0 and axis is not None:
        raise ValueError(f"{call.op.name}: axis {axis} given for a 0-d tensor")
    return TensorStructInfo(_reduced_shape(x.shape, axes, bool(call.attrs.get("keepdims"))), "int64")


def _infer_cumsum(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    dtype = _init_dtype(call, x.dtype)
    axis = call.attrs.get("axis")
    if axis is None:
        total = _product(x.shape)
        return TensorStructInfo([total if isinstance(total, int) else normalize_dim(total)], dtype)
    _norm_axis(int(axis), x.ndim, "R.cumsum")
    return TensorStructInfo(x.shape, dtype)


register_op("concat", _infer_concat, ("axis",))
register_op("split", _infer_split, ("indices_or_sections", "axis"))
register_op("expand_dims", _infer_expand_dims, ("axis",))
register_op("squeeze", _infer_squeeze, ("axis",))
register_op("broadcast_to", _infer_broadcast_to)
register_op("repeat", _infer_repeat, ("repeats", "axis"))
register_op("nn.pad", _infer_pad, ("pad_width", "pad_value", "pad_mode"))
register_op("triu", _infer_trilu)
register_op("tril", _infer_trilu)
register_op("full", _infer_full, ("dtype",))
register_op("zeros", _infer_zeros_ones, ("dtype",))
register_op("ones", _infer_zeros_ones, ("dtype",))
register_op("arange", _infer_arange, ("dtype",))
register_op("builtin.alloc_tensor", _infer_alloc_tensor)
register_op("where", _infer_where)
for _name in ("sum", "mean", "max", "min", "prod"):
    register_op(_name, _infer_statistical, ("axis", "keepdims"))
for _name in ("argmax", "argmin"):
    register_op(_name, _infer_arg_reduce, ("axis", "keepdims"))
register_op("cumsum", _infer_cumsum, ("axis", "dtype", "exclusive"))


# === section B: neural-network ops, extern and TE/TIR ops (issue 3) ===


def _static_int(d) -> int | None:
    """``d`` as a Python int when it is a constant dim, else None."""
    if isinstance(d, int):
        return d
    d = E.simplify(E.convert(d))
    return d.value if isinstance(d, E.IntImm) else None


def _check_same_dtype(call: Call, a: TensorStructInfo, b: TensorStructInfo, what_a: str,
                      what_b: str) -> None:
    if a.dtype != b.dtype:
        raise TypeError(f"{call.op.name}: {what_a} dtype {a.dtype} differs from {what_b} dtype "
                        f"{b.dtype}")


def _check_positive_out(call: Call, dim, what: str, x: TensorStructInfo) -> None:
    s = _static_int(dim)
    if s is not None and s < 1:
        raise ValueError(f"{call.op.name}: the output {what} would be {s} for input "
                         f"{_fmt_shape(x.shape)}; the kernel (with dilation) is larger than the "
                         f"padded input")


def _infer_conv2d(call: Call) -> StructInfo:
    x, w = _tensor(call, 0, "data"), _tensor(call, 1, "weight")
    a = call.attrs
    layouts = (a.get("data_layout"), a.get("kernel_layout"), a.get("out_layout"))
    if layouts != ("NCHW", "OIHW", "NCHW"):
        raise ValueError(f"R.nn.conv2d: only data_layout='NCHW', kernel_layout='OIHW', "
                         f"out_layout='NCHW' are supported, got {layouts}")
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"R.nn.conv2d: data and weight must be 4-D (NCHW / OIHW), got "
                         f"{_fmt_shape(x.shape)} and {_fmt_shape(w.shape)}")
    _check_same_dtype(call, x, w, "data", "weight")
    groups = a["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if _definitely_different(E.simplify(E.convert(c)), E.simplify(E.convert(cg) * groups)):
        raise ValueError(f"R.nn.conv2d: data {_fmt_shape(x.shape)} has {c} channels but weight "
                         f"{_fmt_shape(w.shape)} with groups={groups} expects {cg} x {groups}")
    so = _static_int(o)
    if so is not None and so % groups:
        raise ValueError(f"R.nn.conv2d: weight {_fmt_shape(w.shape)} has {so} output channels, "
                         f"not divisible by groups={groups}")
    s, p, d = a["strides"], a["padding"], a["dilation"]
    oh = conv_out_dim(h, kh, s[0], p[0], p[2], d[0])
    ow = conv_out_dim(wd, kw, s[1], p[1], p[3], d[1])
    _check_positive_out(call, oh, "height", x)
    _check_positive_out(call, ow, "width", x)
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo((n, o, oh, ow), x.dtype if out_dtype in ("void", None) else out_dtype)


def conv_transpose_out_dim(size, kernel, stride: int, pad_lo: int, pad_hi: int, dilation: int,
                           output_padding: int):
    """Output length of a transposed convolution (PyTorch ``ConvTranspose1d`` docs):
    ``(size - 1) * stride - pad_lo - pad_hi + dilation * (kernel - 1) + output_padding + 1``."""
    if isinstance(size, int) and isinstance(kernel, int):
        return ((size - 1) * stride - pad_lo - pad_hi + dilation * (kernel - 1)
                + output_padding + 1)
    e = ((E.convert(size) - 1) * stride + (E.convert(kernel) - 1) * dilation
         + (output_padding + 1 - pad_lo - pad_hi))
    return normalize_dim(E.simplify(e))


def _infer_conv1d_transpose(call: Call) -> StructInfo:
    x, w = _tensor(call, 0, "data"), _tensor(call, 1, "weight")
    a = call.attrs
    layouts = (a.get("data_layout"), a.get("kernel_layout"), a.get("out_layout"))
    if layouts != ("NCW", "IOW", "NCW"):
        raise ValueError(f"R.nn.conv1d_transpose: only data_layout='NCW', kernel_layout='IOW', "
                         f"out_layout='NCW' are supported, got {layouts}")
    if x.ndim != 3 or w.ndim != 3:
        raise ValueError(f"R.nn.conv1d_transpose: data and weight must be 3-D (NCW / IOW), got "
                         f"{_fmt_shape(x.shape)} and {_fmt_shape(w.shape)}")
    _check_same_dtype(call, x, w, "data", "weight")
    groups = a["groups"]
    n, c, width = x.shape
    ci, og, k = w.shape
    if _definitely_different(c, ci):
        raise ValueError(f"R.nn.conv1d_transpose: data {_fmt_shape(x.shape)} has {c} channels but "
                         f"weight {_fmt_shape(w.shape)} (in, out / groups, k) expects {ci}")
    sc = _static_int(c)
    if sc is not None and sc % groups:
        raise ValueError(f"R.nn.conv1d_transpose: {sc} input channels of data "
                         f"{_fmt_shape(x.shape)} are not divisible by groups={groups}")
    (s,), (d,), (op_,) = a["strides"], a["dilation"], a["output_padding"]
    if not (op_ < s or op_ < d):
        raise ValueError(f"R.nn.conv1d_transpose: output_padding {op_} must be smaller than the "
                         f"stride {s} or the dilation {d}")
    out_w = conv_transpose_out_dim(width, k, s, a["padding"][0], a["padding"][1], d, op_)
    _check_positive_out(call, out_w, "width", x)
    out_c = normalize_dim(E.simplify(E.convert(og) * groups)) if not isinstance(og, int) else og * groups
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo((n, out_c, out_w), x.dtype if out_dtype in ("void", None) else out_dtype)


def _infer_group_norm(call: Call) -> StructInfo:
    x = _tensor(call, 0, "data")
    if not E.is_float_dtype(x.dtype):
        raise TypeError(f"R.nn.group_norm: needs a floating-point tensor, got {x.dtype}")
    a = call.attrs
    c_ax = _norm_axis(a["channel_axis"], x.ndim, "R.nn.group_norm")
    axes = [_norm_axis(ax, x.ndim, "R.nn.group_norm") for ax in a["axes"]]
    if c_ax in axes:
        raise ValueError(f"R.nn.group_norm: axes {a['axes']} must not contain the channel axis "
                         f"{a['channel_axis']}")
    if len(set(axes)) != len(axes):
        raise ValueError(f"R.nn.group_norm: repeated axis in {a['axes']}")
    groups = a["num_groups"]
    chans = x.shape[c_ax]
    sc = _static_int(chans)
    if groups < 1 or (sc is not None and sc % groups):
        raise ValueError(f"R.nn.group_norm: {chans} channels (axis {a['channel_axis']} of "
                         f"{_fmt_shape(x.shape)}) are not divisible by num_groups={groups}")
    _check_norm_params(call, x, [c_ax], ("gamma", "beta"))
    return TensorStructInfo(x.shape, x.dtype)


RESIZE_METHODS = ("nearest_neighbor", "linear")
RESIZE_COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric")
RESIZE_ROUNDING_METHODS = ("round", "floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def _infer_resize2d(call: Call) -> StructInfo:
    x = _tensor(call, 0, "data")
    size = call.args[1]
    if not isinstance(size, ShapeExpr) or len(size.values) != 2:
        raise TypeError("R.image.resize2d: size must be a shape expression of 2 values (height, "
                        "width)")
    a = call.attrs
    layout = a.get("layout", "NCHW")
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"R.image.resize2d: layout must be 'NCHW' or 'NHWC', got {layout!r}")
    if x.ndim != 4:
        raise ValueError(f"R.image.resize2d: data must be 4-D ({layout}), got {_fmt_shape(x.shape)}")
    if a.get("method") not in RESIZE_METHODS + ("cubic",):
        raise ValueError(f"R.image.resize2d: unknown method {a.get('method')!r}")
    oh, ow = size.values
    if layout == "NCHW":
        shape = (x.shape[0], x.shape[1], oh, ow)
    else:
        shape = (x.shape[0], oh, ow, x.shape[3])
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo(shape, x.dtype if out_dtype in ("void", None) else out_dtype)


def _infer_attention(call: Call) -> StructInfo:
    q, k, v = _tensor(call, 0, "query"), _tensor(call, 1, "key"), _tensor(call, 2, "value")
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        if t.ndim != 4:
            raise ValueError(f"R.nn.attention: {what} must be 4-D (batch, seq_len, num_heads, "
                             f"head_dim), got {_fmt_shape(t.shape)}")
    if not E.is_float_dtype(q.dtype):
        raise TypeError(f"R.nn.attention: needs floating-point tensors, got {q.dtype}")
    _check_same_dtype(call, q, k, "query", "key")
    _check_same_dtype(call, q, v, "query", "value")

    def same(da, db, wa: str, wb: str, what: str, ta, tb) -> None:
        if _definitely_different(da, db):
            raise ValueError(f"R.nn.attention: the {what} of {wa} {_fmt_shape(ta.shape)} is {da} "
                             f"but the {what} of {wb} {_fmt_shape(tb.shape)} is {db}")

    same(q.shape[0], k.shape[0], "query", "key", "batch size", q, k)
    same(q.shape[0], v.shape[0], "query", "value", "batch size", q, v)
    same(q.shape[3], k.shape[3], "query", "key", "head dim", q, k)
    same(k.shape[1], v.shape[1], "key", "value", "sequence length", k, v)
    same(k.shape[2], v.shape[2], "key", "value", "number of heads", k, v)
    hq, hk = _static_int(q.shape[2]), _static_int(k.shape[2])
    if hq is not None and hk is not None and (hk == 0 or hq % hk):
        raise ValueError(f"R.nn.attention: the number of heads of query {_fmt_shape(q.shape)} "
                         f"({hq}) is not a multiple of that of key {_fmt_shape(k.shape)} ({hk})")
    mask = call.attrs.get("causal_mask")
    if mask not in (None, "TopLeft", "BottomRight"):
        raise ValueError(f"R.nn.attention: causal_mask must be None, 'TopLeft' or 'BottomRight', "
                         f"got {mask!r}")
    return TensorStructInfo((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), q.dtype)


def _infer_call_dps_packed(call: Call) -> StructInfo:
    from .relax import ExternFunc

    if not isinstance(call.args[0], ExternFunc) or not isinstance(call.args[1], Tuple):
        raise TypeError("R.call_dps_packed(func, (args...), out_sinfo=...) expects an extern "
                        "function name and a tuple of arguments")
    outs = call.sinfo_args
    if len(outs) != 1:
        raise TypeError("R.call_dps_packed: out_sinfo must be one tensor or one tuple of tensors")
    fields = outs[0].fields if isinstance(outs[0], TupleStructInfo) else outs
    for s in fields:
        if not isinstance(s, TensorStructInfo) or s.shape is None:
            raise TypeError(f"R.call_dps_packed: every output must be a tensor with a known shape, "
                            f"got {s!r}")
    return outs[0]


CCL_REDUCE_OPS = ("sum", "prod", "min", "max", "avg")


def _infer_ccl_allreduce(call: Call) -> StructInfo:
    x = _tensor(call, 0)
    op_type = call.attrs.get("op_type")
    if op_type not in CCL_REDUCE_OPS:
        raise ValueError(f"R.ccl.allreduce: op_type must be one of {', '.join(CCL_REDUCE_OPS)}, "
                         f"got {op_type!r}")
    return TensorStructInfo(x.shape, x.dtype)


register_op("nn.conv2d", _infer_conv2d, ("strides", "padding", "dilation", "groups", "data_layout",
                                         "kernel_layout", "out_layout", "out_dtype"))
register_op("nn.conv1d_transpose", _infer_conv1d_transpose,
            ("strides", "padding", "output_padding", "dilation", "groups", "data_layout",
             "kernel_layout", "out_layout", "out_dtype"))
register_op("nn.group_norm", _infer_group_norm,
            ("num_groups", "channel_axis", "axes", "epsilon", "center", "scale"))
register_op("image.resize2d", _infer_resize2d,
            ("roi", "layout", "method", "coordinate_transformation_mode", "rounding_method",
             "cubic_alpha", "cubic_exclude", "extrapolation_value", "out_dtype"))
register_op("nn.attention", _infer_attention, ("scale", "causal_mask"))
register_op("call_dps_packed", _infer_call_dps_packed)
register_op("ccl.allreduce", _infer_ccl_allreduce, ("op_type",))
register_op("ccl.broadcast_from_worker0", _infer_unary)


def _infer_packed(call: Call) -> StructInfo:
    if not call.args or not isinstance(call.args[0], ExternFunc):
        raise TypeError(f"{call.op.name}: the first argument must be the runtime function's name")
    if len(call.sinfo_args) != 1:
        raise TypeError(f"{call.op.name}: needs exactly one sinfo_args entry, got {len(call.sinfo_args)}")
    return call.sinfo_args[0]


# Calls of runtime functions that the graph may reorder or drop when unused (TVM's
# ``R.call_pure_packed``) or that update their argument ``inplace_indices`` in place
# (``R.call_inplace_packed``). The VM runs them as builtins (see builder/compile.py).
# LegalizeOps keeps them as they are.
register_op("call_pure_packed", _infer_packed)
register_op("call_inplace_packed", _infer_packed, ("inplace_indices",))


# === section C: quantization ops (issue 4) ===
#
#   R.group_dequantize(q_weight, q_scale, bits=4, group_size=32, zero_point=7, in_features=4096)
#
# The weight of a group-quantized Linear / Embedding (MLC-LLM's q4f16_1 layout, NK): q_weight
# (rows, words) packs storage_bits // bits values per word (element i in bits [i*bits,
# (i+1)*bits)), q_scale (rows, ceil(in_features / group_size)) one scale per group; the result
# (rows, in_features) in the scale dtype is (value - zero_point) * scale. Per-channel int8 is the
# case group_size == in_features with int8 storage and zero_point 0. Legalization fuses it into
# a consuming matmul / take so that the float weight is never materialized.

QUANT_STORAGE_BITS = {"uint8": 8, "uint16": 16, "uint32": 32, "int8": 8}


def _infer_group_dequantize(call: Call) -> StructInfo:
    q, s = _tensor(call, 0, "q_weight"), _tensor(call, 1, "q_scale")
    a = call.attrs
    name = "R.group_dequantize"
    try:
        bits, group_size = int(a["bits"]), int(a["group_size"])
        zero_point, in_features = int(a["zero_point"]), int(a["in_features"])
    except KeyError as exc:
        raise ValueError(f"{name}: missing attribute {exc.args[0]!r} (needs bits, group_size, "
                         "zero_point, in_features)") from None
    act = a.get("activation_quantization", "none")
    if act not in ("none", "int8"):
        raise ValueError(f"{name}: activation_quantization must be \"none\" or \"int8\", got {act!r}")
    if q.dtype not in QUANT_STORAGE_BITS:
        raise TypeError(f"{name}: q_weight dtype must be one of {', '.join(QUANT_STORAGE_BITS)}, "
                        f"got {q.dtype}")
    if not E.is_float_dtype(s.dtype):
        raise TypeError(f"{name}: q_scale must be floating point, got {s.dtype}")
    if q.ndim != 2 or s.ndim != 2:
        raise ValueError(f"{name}: q_weight and q_scale must be 2-D, got {_fmt_shape(q.shape)} and "
                         f"{_fmt_shape(s.shape)}")
    sbits = QUANT_STORAGE_BITS[q.dtype]
    if bits <= 0 or sbits % bits or (q.dtype.startswith("int") and bits != sbits):
        raise ValueError(f"{name}: cannot store {bits}-bit values in {q.dtype}")
    per_word = sbits // bits
    if in_features <= 0 or group_size <= 0 or group_size % per_word:
        raise ValueError(f"{name}: group_size {group_size} must be a positive multiple of the "
                         f"{per_word} values per {q.dtype} word (in_features {in_features} > 0)")
    groups = -(-in_features // group_size)
    words = groups * group_size // per_word
    if _definitely_different(q.shape[1], words):
        raise ValueError(f"{name}: q_weight {_fmt_shape(q.shape)} has {q.shape[1]} words per row, but "
                         f"in_features={in_features} padded to groups of {group_size} needs {words}")
    if _definitely_different(s.shape[1], groups):
        raise ValueError(f"{name}: q_scale {_fmt_shape(s.shape)} has {s.shape[1]} groups per row, but "
                         f"in_features={in_features} in groups of {group_size} needs {groups}")
    if _definitely_different(q.shape[0], s.shape[0]):
        raise ValueError(f"{name}: q_weight {_fmt_shape(q.shape)} and q_scale {_fmt_shape(s.shape)} "
                         "have different numbers of rows")
    return TensorStructInfo((q.shape[0], in_features), s.dtype)


register_op("group_dequantize", _infer_group_dequantize,
            ("bits", "group_size", "zero_point", "in_features", "activation_quantization"))
