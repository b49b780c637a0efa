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
from typing import Callable, Sequence

from . import expr as E
from .relax import Call, Expr, GlobalVar, Op, ShapeExpr, Tuple
from .struct_info import (
    ObjectStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo, dims_equal,
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


# === section B: neural-network ops, extern and TE/TIR ops (issue 3) ===
