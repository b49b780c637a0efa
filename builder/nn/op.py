"""Functional operators on ``nn.Tensor`` (``tvm.relax.frontend.nn.op``): each call emits one
graph-level binding named by ``name`` (TVM's default hints: ``add``, ``mul``, ``matmul``, ...).

Shapes and dtypes are checked when the op is emitted; a mismatch raises ValueError / TypeError
naming both sides. Python scalars combine with tensors as constants of the tensor's dtype (a value the
dtype cannot hold is a ValueError, as in numpy 2 and PyTorch). Every public op checks its arguments
before it builds anything: a parameter annotated ``Tensor`` must be a Tensor (``Tensor | None``: or
``None``; ``Sequence[Tensor]``: a sequence of Tensors) and ``name`` a string, else TypeError naming the
op and the parameter (see :func:`_checked`). A result may have at most
:data:`schemas.limits.MAX_NDIM` dims.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Sequence

import numpy as np
from schemas.limits import MAX_NDIM

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.op import resolve_reshape
from ..ir.struct_info import DTYPES
from .core import Tensor, wrap_nested

__all__ = [
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "less", "less_equal",
    "greater", "greater_equal", "equal", "not_equal", "matmul", "permute_dims", "reshape", "astype",
    "relu", "silu", "gelu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "negative",
    "layer_norm", "rms_norm", "conv1d", "take", "softmax", "null_value",
]


def _call(name: str, args: Sequence[rx.Expr], **attrs) -> rx.Call:
    return rx.Call(rx.Op.get(name), args, attrs)


def _binary_operands(a, b) -> tuple[rx.Expr, rx.Expr]:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a._expr, b._expr
    if isinstance(a, Tensor):
        return a._expr, _scalar(b, a.dtype)
    if isinstance(b, Tensor):
        return _scalar(a, b.dtype), b._expr
    raise TypeError(f"at least one operand must be a Tensor, got {type(a).__name__} and {type(b).__name__}")


def _scalar(value, dtype: str) -> rx.Constant:
    """A Python / numpy number as a 0-d constant of ``dtype`` (the other operand's).

    Raises TypeError for a non-number and for a float that is not a whole number with an integer
    dtype (it would be truncated); ValueError for a number ``dtype`` cannot hold: an integer outside
    the integer dtype's range (``uint8 + -1``, ``int64 + 2**64``: numpy 2 and PyTorch refuse them
    too), a bool dtype with anything but 0 / 1, or an integer beyond float64 for a float dtype. A
    finite float beyond a narrower float dtype's range becomes inf, as in numpy and PyTorch.
    """
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (int, float)):   # bool is an int
        raise TypeError(f"cannot combine a Tensor with {type(value).__name__} {_short(value)}")
    if dtype == "bool":
        if value not in (0, 1):
            raise ValueError(f"cannot combine a bool tensor with {_short(value)}: only 0, 1, True and False fit")
    elif dtype.startswith(("int", "uint")):
        if isinstance(value, float):
            if not value.is_integer():
                raise TypeError(f"cannot combine an {dtype} tensor with the float {_short(value)} (it would be "
                                "truncated); convert one of them with astype")
            value = int(value)
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"the constant {_short(value)} does not fit {dtype} ({info.min} to {info.max})")
    else:
        try:
            value = float(value)
        except OverflowError:
            raise ValueError(f"the constant {_short(value)} does not fit {dtype} (beyond float64)") from None
    with np.errstate(over="ignore"):   # 1e39 as float32 is inf, as numpy and PyTorch make it
        return rx.Constant(np.asarray(value), dtype)


def _short(value) -> str:
    from schemas.errors import shorten

    return shorten(value, 60)


def _binary(opname: str, a, b, name: str) -> Tensor:
    x, y = _binary_operands(a, b)
    return wrap_nested(_call(opname, [x, y]), name)


def add(a, b, name: str = "add") -> Tensor:
    """Elementwise ``a + b`` with numpy broadcasting; equal dtypes required."""
    return _binary("add", a, b, name)


def subtract(a, b, name: str = "subtract") -> Tensor:
    """Elementwise ``a - b`` with broadcasting."""
    return _binary("subtract", a, b, name)


def multiply(a, b, name: str = "mul") -> Tensor:
    """Elementwise ``a * b`` with broadcasting."""
    return _binary("multiply", a, b, name)


def divide(a, b, name: str = "divide") -> Tensor:
    """Elementwise ``a / b`` with broadcasting (true division for floats)."""
    return _binary("divide", a, b, name)


def maximum(x1, x2, name: str = "maximum") -> Tensor:
    """Elementwise maximum with broadcasting (``numpy.maximum``: a NaN operand gives NaN)."""
    return _binary("maximum", x1, x2, name)


def minimum(x1, x2, name: str = "minimum") -> Tensor:
    """Elementwise minimum with broadcasting (``numpy.minimum``: a NaN operand gives NaN)."""
    return _binary("minimum", x1, x2, name)


def power(a, b, name: str = "power") -> Tensor:
    """Elementwise ``a ** b`` with broadcasting."""
    return _binary("power", a, b, name)


def less(a, b, name: str = "less") -> Tensor:
    """Elementwise ``a < b`` (bool result)."""
    return _binary("less", a, b, name)


def less_equal(a, b, name: str = "less_equal") -> Tensor:
    """Elementwise ``a <= b`` (bool result)."""
    return _binary("less_equal", a, b, name)


def greater(a, b, name: str = "greater") -> Tensor:
    """Elementwise ``a > b`` (bool result)."""
    return _binary("greater", a, b, name)


def greater_equal(a, b, name: str = "greater_equal") -> Tensor:
    """Elementwise ``a >= b`` (bool result)."""
    return _binary("greater_equal", a, b, name)


def equal(a, b, name: str = "equal") -> Tensor:
    """Elementwise ``a == b`` (bool result)."""
    return _binary("equal", a, b, name)


def not_equal(a, b, name: str = "not_equal") -> Tensor:
    """Elementwise ``a != b`` (bool result)."""
    return _binary("not_equal", a, b, name)


def matmul(a: Tensor, b: Tensor, out_dtype: str | None = None, name: str = "matmul") -> Tensor:
    """``numpy.matmul(a, b)``: ``(..., m, k) @ (..., k, n) -> (..., m, n)``, batch dims broadcast.

    ``out_dtype`` (default: the inputs' dtype) is the result dtype; float16 inputs accumulate
    in float32. Raises ValueError when the reduction dims differ.
    """
    return wrap_nested(_call("matmul", [a._expr, b._expr], out_dtype=out_dtype or "void"), name)


def permute_dims(x: Tensor, axes: Sequence[int] | None = None, name: str | None = None) -> Tensor:
    """Permute dimensions (``numpy.transpose``); ``axes=None`` reverses them. Raises TypeError when
    ``axes`` is not None or a list / tuple (of ints: the op's shape rule checks them)."""
    if axes is not None and not isinstance(axes, (list, tuple)):
        raise TypeError(f"permute_dims: axes must be a list of ints or None, got {_describe(axes)}")
    return wrap_nested(_call("permute_dims", [x._expr], axes=None if axes is None else list(axes)),
                       name or "permute_dims")


def reshape(x: Tensor, shape: Sequence, name: str = "reshape") -> Tensor:
    """Reshape (row-major); one ``-1`` is inferred, symbolic dims allowed.

    Raises TypeError when ``shape`` is not a sequence of ints / int64 PrimExprs, ValueError for a
    negative dim other than ``-1``, more than :data:`~schemas.limits.MAX_NDIM` dims, or element counts
    that cannot match."""
    if isinstance(shape, (int, str, E.PrimExpr, Tensor)) or not isinstance(shape, Sequence):
        raise TypeError(f"reshape: shape must be a list of dims, got {type(shape).__name__}")
    _check_ndim(len(shape), "reshape")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer, E.PrimExpr)):
            raise TypeError(f"reshape: invalid dim {_short(d)} in the shape (ints or symbolic int64 dims)")
        if isinstance(d, (int, np.integer)) and d < -1:
            raise ValueError(f"reshape: negative dim {d} in the shape (only -1, inferred, may be negative)")
    dims = resolve_reshape(tuple(x.shape), list(shape))
    return wrap_nested(_call("reshape", [x._expr, rx.ShapeExpr(dims)]), name)


def astype(x: Tensor, dtype: str, name: str = "astype") -> Tensor:
    """Convert elements to ``dtype`` (float -> int truncates toward zero)."""
    if dtype not in DTYPES:
        raise TypeError(f"astype: unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
    if x.dtype == dtype:
        return x
    return wrap_nested(_call("astype", [x._expr], dtype=dtype), name)


def _unary(opname: str, x: Tensor, name: str) -> Tensor:
    return wrap_nested(_call(opname, [x._expr]), name)


def relu(x: Tensor, name: str = "relu") -> Tensor:
    """``max(x, 0)`` (NaN stays NaN, as in PyTorch)."""
    return _unary("nn.relu", x, name)


def silu(x: Tensor, name: str = "silu") -> Tensor:
    """``x * sigmoid(x)`` (SiLU / swish; Elfwing et al. 2017)."""
    return _unary("nn.silu", x, name)


def gelu(x: Tensor, approximate: str | None = None, name: str = "gelu") -> Tensor:
    """GELU (Hendrycks & Gimpel 2016): exact ``x * Phi(x)`` (erf), or ``approximate="tanh"``."""
    if approximate not in (None, "none", "tanh"):
        raise ValueError(f"gelu: approximate must be None or 'tanh', got {approximate!r}")
    return _unary("nn.gelu_tanh" if approximate == "tanh" else "nn.gelu", x, name)


def sigmoid(x: Tensor, name: str = "sigmoid") -> Tensor:
    """``1 / (1 + exp(-x))``."""
    return _unary("sigmoid", x, name)


def tanh(x: Tensor, name: str = "tanh") -> Tensor:
    """Hyperbolic tangent."""
    return _unary("tanh", x, name)


def exp(x: Tensor, name: str = "exp") -> Tensor:
    """``e ** x``."""
    return _unary("exp", x, name)


def log(x: Tensor, name: str = "log") -> Tensor:
    """Natural logarithm."""
    return _unary("log", x, name)


def sqrt(x: Tensor, name: str = "sqrt") -> Tensor:
    """Square root."""
    return _unary("sqrt", x, name)


def rsqrt(x: Tensor, name: str = "rsqrt") -> Tensor:
    """``1 / sqrt(x)``."""
    return _unary("rsqrt", x, name)


def sin(x: Tensor, name: str = "sin") -> Tensor:
    """Sine."""
    return _unary("sin", x, name)


def cos(x: Tensor, name: str = "cos") -> Tensor:
    """Cosine."""
    return _unary("cos", x, name)


def negative(x: Tensor, name: str = "negative") -> Tensor:
    """``-x``."""
    return _unary("negative", x, name)


def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5, name: str = "layer_norm") -> Tensor:
    """Layer normalization over the last ``len(normalized_shape)`` dims (Ba et al. 2016):
    ``(x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance, as PyTorch.
    Missing ``weight`` / ``bias`` default to ones / zeros constants.
    """
    if isinstance(normalized_shape, int):
        normalized_shape = [normalized_shape]
    axes = list(range(-len(normalized_shape), 0))
    w = weight._expr if weight is not None else rx.Constant(np.ones(normalized_shape), x.dtype)
    b = bias._expr if bias is not None else rx.Constant(np.zeros(normalized_shape), x.dtype)
    return wrap_nested(_call("nn.layer_norm", [x._expr, w, b], axes=axes, epsilon=float(eps),
                             center=True, scale=True), name)


def rms_norm(x: Tensor, weight: Tensor, axes: int | Sequence[int], epsilon: float = 1e-5,
             name: str = "rms_norm") -> Tensor:
    """RMS normalization (Zhang & Sennrich 2019): ``x / sqrt(mean(x**2, axes) + epsilon) * weight``."""
    if isinstance(axes, int):
        axes = [axes]
    return wrap_nested(_call("nn.rms_norm", [x._expr, weight._expr], axes=list(axes),
                             epsilon=float(epsilon)), name)


def _pair(v: int | Sequence[int]) -> list[int]:
    if isinstance(v, int):
        return [v, v]
    v = list(v)
    return v * 2 if len(v) == 1 else v


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1,
           name: str = "conv1d") -> Tensor:
    """1-D convolution, NCW data and OIW weight (PyTorch ``Conv1d`` semantics, cross-correlation).

    ``x`` (N, C, W), ``weight`` (O, C / groups, K) -> (N, O, (W + 2p - d(K-1) - 1) // s + 1);
    ``bias`` (O,) is added through a reshape to (1, O, 1), as TVM does.
    """
    strides = [stride] if isinstance(stride, int) else list(stride)
    dil = [dilation] if isinstance(dilation, int) else list(dilation)
    out: rx.Expr = _call("nn.conv1d", [x._expr, weight._expr], strides=strides, padding=_pair(padding),
                         dilation=dil, groups=groups, data_layout="NCW", kernel_layout="OIW",
                         out_layout="NCW", out_dtype="void")
    if bias is not None:
        shape = resolve_reshape(tuple(bias.shape), [1, -1, 1])
        out = _call("add", [out, _call("reshape", [bias._expr, rx.ShapeExpr(shape)])])
    return wrap_nested(out, name)


def take(x: Tensor, indices: Tensor, axis: int | None = None, name: str = "take") -> Tensor:
    """Gather ``x`` along ``axis`` at integer ``indices`` (``numpy.take``; out-of-range indices are
    an error the caller must avoid: mode "fast" does no clipping)."""
    return wrap_nested(_call("take", [x._expr, indices._expr], axis=0 if axis is None else axis,
                             mode="fast"), name)


def softmax(x: Tensor, axis: int = -1, name: str = "softmax") -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (numerically stable)."""
    return wrap_nested(_call("nn.softmax", [x._expr], axis=axis), name)


def null_value() -> rx.Call:
    """``R.null_value()``: an empty object (the initial IO effect token)."""
    return _call("null_value", [])


_ = E  # symbolic dims flow through ShapeExpr values


# === section A: tensor creation / manipulation / reduction ops (issue 3) ===
__all__ += [
    "concat", "split", "chunk", "unsqueeze", "squeeze", "broadcast_to", "repeat", "pad", "triu",
    "empty", "full", "ones", "zeros", "arange", "where", "sum", "mean", "max", "min", "argmax",
    "argmin", "cumsum",
]

import builtins  # noqa: E402

from ..ir.relax import DataTypeImm  # noqa: E402


def _dims(shape, opname: str) -> list:
    """A shape argument (ints / int64 PrimExprs) as ShapeExpr values; ValueError for a
    negative dim, TypeError for other types."""
    if isinstance(shape, (int, E.PrimExpr)):
        raise TypeError(f"{opname}: shape must be a sequence of dims, got {shape!r}")
    _check_ndim(len(shape), opname)
    out = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer, E.PrimExpr)):
            raise TypeError(f"{opname}: invalid dim {d!r} in shape {list(shape)}")
        if isinstance(d, (int, np.integer)) and d < 0:
            raise ValueError(f"{opname}: negative dim {d} in shape {list(shape)}")
        out.append(int(d) if isinstance(d, (int, np.integer)) else d)
    return out


def _check_ndim(ndim: int, opname: str) -> None:
    """ValueError when a result would have more than :data:`~schemas.limits.MAX_NDIM` dims."""
    if ndim > MAX_NDIM:
        raise ValueError(f"{opname}: a tensor may have at most {MAX_NDIM} dims, got {ndim}")


def _axis_list(axis) -> list[int] | None:
    if axis is None:
        return None
    if isinstance(axis, (int, np.integer)):
        return [int(axis)]
    return [int(a) for a in axis]


def concat(x: Sequence[Tensor], dim: int, name: str = "concat") -> Tensor:
    """Concatenate tensors along ``dim`` (``numpy.concatenate``): ``R.concat((a, b), axis=dim)``.

    All tensors need the same dtype and rank and equal dims outside ``dim`` (symbolic dims
    allowed); the result's ``dim`` is the sum. Raises TypeError / ValueError naming the
    mismatching elements.
    """
    exprs = [t._expr for t in x]
    return wrap_nested(_call("concat", [rx.Tuple(exprs)], axis=int(dim)), name)


def split(ary: Tensor, indices_or_sections: int | Sequence[int], axis: int = 0,
          name: str = "split") -> tuple[Tensor, ...]:
    """Split ``ary`` along ``axis``: ``R.split(x, indices_or_sections=..., axis=...)``.

    An int ``n`` gives ``n`` pieces of ``ceil(d / n)`` (the last one takes the rest, as TVM and
    ``torch.chunk``); a list of indices cuts before each index (``numpy.split``). Returns a
    tuple of Tensors (bindings ``split``, ``split_0``, ``split_1``, ...).
    """
    ios = (int(indices_or_sections) if isinstance(indices_or_sections, (int, np.integer))
           else [int(i) for i in indices_or_sections])
    return wrap_nested(_call("split", [ary._expr], indices_or_sections=ios, axis=int(axis)), name)


def chunk(x: Tensor, chunks: int, dim: int = 0, name: str = "chunk") -> tuple[Tensor, ...]:
    """``chunks`` pieces of ``x`` along ``dim``: ``R.split(x, indices_or_sections=chunks, axis=dim)``
    (each ``ceil(d / chunks)`` long, the last one shorter)."""
    return wrap_nested(_call("split", [x._expr], indices_or_sections=int(chunks), axis=int(dim)),
                       name)


def unsqueeze(x: Tensor, dim: int, name: str = "unsqueeze") -> Tensor:
    """Insert a size-1 axis at ``dim`` (negative counts from the end of the result):
    ``R.expand_dims(x, axis=[dim])``."""
    return wrap_nested(_call("expand_dims", [x._expr], axis=[int(dim)]), name)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = -1, name: str = "squeeze") -> Tensor:
    """Remove size-1 axes: ``R.squeeze(x, axis=[...])``; ``axis=None`` removes every static
    size-1 dim. Raises ValueError when a given axis has a static size other than 1."""
    return wrap_nested(_call("squeeze", [x._expr], axis=_axis_list(axis)), name)


def broadcast_to(x: Tensor, shape: Sequence, name: str = "broadcast_to") -> Tensor:
    """Broadcast ``x`` to ``shape`` (numpy rules): ``R.broadcast_to(x, R.shape([...]))``.
    Raises ValueError when a dim of ``x`` is neither 1 nor the target dim."""
    return wrap_nested(_call("broadcast_to", [x._expr, rx.ShapeExpr(_dims(shape, "broadcast_to"))]),
                       name)


def repeat(x: Tensor, repeats: int, axis: int | None = None, name: str = "repeat") -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (``numpy.repeat``); ``axis=None``
    repeats the flattened tensor: ``R.repeat(x, repeats=r, axis=a)``."""
    return wrap_nested(_call("repeat", [x._expr], repeats=int(repeats),
                             axis=None if axis is None else int(axis)), name)


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0,
        name: str = "pad") -> Tensor:
    """Pad ``x``; ``pad`` is ``[before_0, after_0, before_1, after_1, ...]`` from axis 0 (TVM's
    order, unlike ``torch.nn.functional.pad``). ``mode``: ``"constant"`` (fill ``value``),
    ``"edge"`` (repeat the border element) or ``"reflect"`` (mirror without the border, as
    ``numpy.pad``): ``R.nn.pad(x, pad_width=[...], pad_value=v, pad_mode=mode)``."""
    return wrap_nested(_call("nn.pad", [x._expr], pad_width=[int(p) for p in pad],
                             pad_value=float(value), pad_mode=mode), name)


def triu(x: Tensor, diagonal: int = 0, name: str = "triu") -> Tensor:
    """Upper triangle of the last two dims (``numpy.triu``): elements with ``j - i < diagonal``
    become 0: ``R.triu(x, R.prim_value(diagonal))``. Raises ValueError for ndim < 2."""
    return wrap_nested(_call("triu", [x._expr, rx.PrimValue(diagonal, "int64")]), name)


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
    return wrap_nested(_call("full", [rx.ShapeExpr(_dims(shape, "full")), fill], dtype=dtype), name)


def zeros(shape: Sequence, dtype: str = "float32", name: str = "zeros") -> Tensor:
    """A tensor of zeros: ``R.zeros(R.shape([...]), dtype=dtype)``."""
    return wrap_nested(_call("zeros", [rx.ShapeExpr(_dims(shape, "zeros"))], dtype=dtype), name)


def ones(shape: Sequence, dtype: str = "float32", name: str = "ones") -> Tensor:
    """A tensor of ones: ``R.ones(R.shape([...]), dtype=dtype)``."""
    return wrap_nested(_call("ones", [rx.ShapeExpr(_dims(shape, "ones"))], dtype=dtype), name)


def empty(shape: Sequence, dtype: str = "float32", name: str = "empty") -> Tensor:
    """An uninitialized tensor: ``R.builtin.alloc_tensor(R.shape([...]), R.dtype(dtype),
    R.prim_value(0), R.str("global"))``. Its contents are unspecified (this runtime fills
    zeros)."""
    return wrap_nested(_call("builtin.alloc_tensor", [rx.ShapeExpr(_dims(shape, "empty")),
                                                      DataTypeImm(dtype), rx.PrimValue(0, "int64"),
                                                      rx.StringImm("global")]), name)


def _prim(v) -> rx.PrimValue:
    if isinstance(v, (E.IntImm, E.FloatImm)):
        return rx.PrimValue(v, v.dtype)
    if isinstance(v, E.PrimExpr):
        return rx.PrimValue(v, v.dtype)
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"arange: bounds must be numbers, got {v!r}")
    if isinstance(v, (int, np.integer)):
        return rx.PrimValue(int(v), "int64")
    if isinstance(v, (float, np.floating)):
        return rx.PrimValue(float(v), "float32")
    raise TypeError(f"arange: bounds must be numbers or int64 PrimExprs, got {type(v).__name__}")


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
    return wrap_nested(_call("arange", [_prim(start), _prim(end), _prim(step)], dtype=dtype), name)


def where(condition: Tensor, x1, x2, name: str = "where") -> Tensor:
    """``x1`` where ``condition`` else ``x2``, with numpy broadcasting of all three
    (``numpy.where``): ``R.where(cond, x1, x2)``. A non-bool condition is cast to bool first
    (``astype`` binding); a Python number for ``x1`` / ``x2`` becomes a constant of the other's
    dtype. Raises TypeError when ``x1`` and ``x2`` dtypes differ."""
    condition = astype(condition, "bool")
    a, b = _binary_operands(x1, x2)
    return wrap_nested(_call("where", [condition._expr, a, b]), name)


def _statistical(opname: str, x: Tensor, axis, keepdims: bool, name: str) -> Tensor:
    return wrap_nested(_call(opname, [x._expr], axis=_axis_list(axis), keepdims=bool(keepdims)),
                       name)


def sum(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False,  # noqa: A001
        name: str = "sum") -> Tensor:
    """Sum over ``axis`` (int, list or None = all; ``numpy.sum`` but keeping the dtype; 16-bit
    floats accumulate in float32): ``R.sum(x, axis=[...], keepdims=...)``."""
    return _statistical("sum", x, axis, keepdims, name)


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
    return wrap_nested(_call("argmax", [x._expr], axis=None if axis is None else int(axis),
                             keepdims=bool(keepdims)), name)


def argmin(x: Tensor, axis: int | None = None, keepdims: bool = False, name: str = "argmin") -> Tensor:
    """Index (int64) of the minimum along ``axis`` (``numpy.argmin``, first on ties):
    ``R.argmin(x, axis=a, keepdims=...)``."""
    return wrap_nested(_call("argmin", [x._expr], axis=None if axis is None else int(axis),
                             keepdims=bool(keepdims)), name)


def cumsum(data: Tensor, axis: int | None = None, dtype: str | None = None,
           exclusive: bool | None = None, name: str = "cumsum") -> Tensor:
    """Inclusive cumulative sum along ``axis`` (``numpy.cumsum``; ``axis=None`` flattens;
    ``exclusive=True`` starts from 0 and leaves out the current element). ``dtype`` (default:
    the input's) is the result and accumulator dtype; 16-bit floats accumulate in float32:
    ``R.cumsum(x, axis=a, dtype="void", exclusive=None)``."""
    if dtype is not None and dtype not in DTYPES:
        raise TypeError(f"cumsum: unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
    return wrap_nested(_call("cumsum", [data._expr], axis=None if axis is None else int(axis),
                             dtype=dtype or "void", exclusive=exclusive), name)


# === section B: neural-network ops, extern and TE/TIR ops (issue 3) ===

__all__ += [
    "conv1d_transpose", "conv2d", "group_norm", "interpolate", "scaled_dot_product_attention",
    "get_timestep_embedding", "tensor_expr_op", "tensor_ir_op", "extern", "ccl_allreduce",
    "ccl_broadcast_from_worker0",
]

import math  # noqa: E402

from ..ir.struct_info import TupleStructInfo  # noqa: E402


def _ints(v, n: int, what: str, opname: str) -> list[int]:
    """``v`` (an int or a sequence of ``n`` ints) as a list of ``n`` ints."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return [int(v)] * n
    vals = list(v)
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n or not all(isinstance(a, (int, np.integer)) for a in vals):
        raise ValueError(f"{opname}: {what} must be an int or {n} ints, got {v!r}")
    return [int(a) for a in vals]


def conv1d_transpose(x: Tensor, weight: Tensor, bias: Tensor | None = None,
                     stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                     output_padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                     groups: int = 1, name: str = "conv1d_transpose") -> Tensor:
    """1-D transposed convolution, NCW data and IOW weight (``torch.nn.ConvTranspose1d``,
    https://pytorch.org/docs/stable/generated/torch.nn.ConvTranspose1d.html)::

        out[n, g*Og + o, s*stride + k*dilation - pad_lo] += x[n, g*Cg + c, s] * w[g*Cg + c, o, k]

    ``x`` (N, C_in, W), ``weight`` (C_in, C_out / groups, K) -> (N, C_out, W_out) with
    ``W_out = (W - 1) * stride - pad_lo - pad_hi + dilation * (K - 1) + output_padding + 1``.
    ``padding`` is ``p`` or ``(lo, hi)``; ``bias`` (C_out,) is added through a reshape to
    (1, C_out, 1), as TVM does. Raises ValueError for mismatched channels, a non-divisible
    ``groups`` or ``output_padding`` not smaller than the stride or the dilation.
    """
    op = "conv1d_transpose"
    out: rx.Expr = _call("nn.conv1d_transpose", [x._expr, weight._expr],
                         strides=_ints(stride, 1, "stride", op),
                         padding=_ints(padding, 2, "padding", op),
                         output_padding=_ints(output_padding, 1, "output_padding", op),
                         dilation=_ints(dilation, 1, "dilation", op), groups=int(groups),
                         data_layout="NCW", kernel_layout="IOW", out_layout="NCW", out_dtype="void")
    if bias is not None:
        shape = resolve_reshape(tuple(bias.shape), [1, -1, 1])
        out = _call("add", [out, _call("reshape", [bias._expr, rx.ShapeExpr(shape)])])
    return wrap_nested(out, name)


def _conv2d_padding(padding, weight: Tensor, dilation: list[int], strides: list[int]) -> list[int]:
    """TVM's 4-value padding ``[top, left, bottom, right]`` from an int, ``(pH, pW)``, 4 ints, or
    PyTorch's ``"valid"`` / ``"same"`` (stride 1; the odd extra pad goes bottom / right)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [0, 0, 0, 0]
        if padding != "same":
            raise ValueError(f"conv2d: padding string must be 'valid' or 'same', got {padding!r}")
        if strides != [1, 1]:
            raise ValueError(f"conv2d: padding='same' needs stride 1, got stride {strides}")
        pads = []
        for k, d in zip(weight.shape[2:], dilation):
            if not isinstance(k, int):
                raise ValueError("conv2d: padding='same' needs a static kernel size")
            pads.append(d * (k - 1))
        return [pads[0] // 2, pads[1] // 2, pads[0] - pads[0] // 2, pads[1] - pads[1] // 2]
    if isinstance(padding, (int, np.integer)):
        return [int(padding)] * 4
    vals = [int(p) for p in padding]
    if len(vals) == 1:
        return vals * 4
    if len(vals) == 2:
        return vals * 2
    if len(vals) == 4:
        return vals
    raise ValueError(f"conv2d: padding must be an int, 2 or 4 ints, 'valid' or 'same', got {padding!r}")


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None,
           stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1, name: str = "conv2d") -> Tensor:
    """2-D convolution, NCHW data and OIHW weight (``torch.nn.Conv2d`` semantics,
    https://pytorch.org/docs/stable/generated/torch.nn.Conv2d.html; a cross-correlation).

    ``x`` (N, C, H, W), ``weight`` (O, C / groups, kH, kW) -> (N, O, oH, oW) with
    ``oH = (H + top + bottom - dH * (kH - 1) - 1) // sH + 1`` (likewise oW). ``stride`` /
    ``dilation``: an int or ``(h, w)``; ``padding``: an int, ``(pH, pW)``, ``(top, left, bottom,
    right)``, ``"valid"`` or ``"same"``. ``bias`` (O,) is added through a reshape to
    (1, O, 1, 1), as TVM does. Raises ValueError for mismatched channels or groups.
    """
    strides = _ints(stride, 2, "stride", "conv2d")
    dil = _ints(dilation, 2, "dilation", "conv2d")
    out: rx.Expr = _call("nn.conv2d", [x._expr, weight._expr], strides=strides,
                         padding=_conv2d_padding(padding, weight, dil, strides), dilation=dil,
                         groups=int(groups), data_layout="NCHW", kernel_layout="OIHW",
                         out_layout="NCHW", out_dtype="void")
    if bias is not None:
        shape = resolve_reshape(tuple(bias.shape), [1, -1, 1, 1])
        out = _call("add", [out, _call("reshape", [bias._expr, rx.ShapeExpr(shape)])])
    return wrap_nested(out, name)


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None, bias: Tensor | None,
               eps: float = 1e-5, channel_axis: int = 1, axes: Sequence[int] | None = None,
               name: str = "group_norm") -> Tensor:
    """Group normalization (Wu & He 2018; ``torch.nn.GroupNorm``)::

        y = (x - mean) / sqrt(var + eps) * weight[c] + bias[c]

    with mean and biased variance over the channels of each of ``num_groups`` groups (along
    ``channel_axis``) and over ``axes`` (default: every dim after the first two). ``weight`` /
    ``bias`` have shape (C,); None means ones / zeros constants. Raises ValueError when C is not
    divisible by ``num_groups``.
    """
    if axes is None:
        axes = list(range(2, x.ndim))
    chans = [x.shape[channel_axis]]
    w = weight._expr if weight is not None else rx.Constant(np.ones(chans), x.dtype)
    b = bias._expr if bias is not None else rx.Constant(np.zeros(chans), x.dtype)
    return wrap_nested(_call("nn.group_norm", [x._expr, w, b], num_groups=int(num_groups),
                             channel_axis=int(channel_axis), axes=[int(a) for a in axes],
                             epsilon=float(eps), center=True, scale=True), name)


def _scaled_dim(d, factor: float):
    """``floor(d * factor)`` for a static dim; ``d * factor`` for a symbolic dim and an
    integer factor. Raises ValueError otherwise."""
    if isinstance(d, int):
        return int(math.floor(d * factor))
    if float(factor).is_integer():
        return E.simplify(d * int(factor))
    raise ValueError(f"interpolate: cannot scale the symbolic dim {d} by the non-integer factor "
                     f"{factor}; give size= instead")


def interpolate(x: Tensor, size: int | Sequence[int] | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool | None = None, name: str = "interpolate") -> Tensor:
    """Resize the two spatial dims of an NCHW tensor (``torch.nn.functional.interpolate``),
    emitted as ``R.image.resize2d``.

    Exactly one of ``size`` (an int or ``(oH, oW)``) and ``scale_factor`` (output dim =
    ``floor(dim * factor)``; symbolic dims need integer factors) is given. Modes:

    * ``"nearest"``: ``src = floor(dst * in / out)`` (coordinate mode ``asymmetric``, rounding
      ``floor``: PyTorch's nearest; TVM emits rounding ``round`` here, which picks other pixels
      when upsampling);
    * ``"linear"`` / ``"bilinear"``: ``half_pixel`` coordinates (``align_corners=False``, the
      default) or ``align_corners``, with edge clamping, as PyTorch.

    Coordinates use the in / out size ratio (as PyTorch with ``size=`` or an exact factor).
    Raises ValueError for other modes, both / neither of size and scale_factor, or
    ``align_corners`` with nearest; ValueError for ``recompute_scale_factor`` /
    ``antialias``.
    """
    if recompute_scale_factor is not None:
        raise ValueError("interpolate: recompute_scale_factor is not supported (as in TVM)")
    if antialias is not None:
        raise ValueError("interpolate: antialias is not supported (as in TVM)")
    if x.ndim != 4:
        raise ValueError(f"interpolate: input must be 4-D (N, C, H, W), got shape "
                         f"{tuple(str(d) for d in x.shape)}")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        out = [size, size] if isinstance(size, (int, E.PrimExpr)) else list(size)
        if len(out) != 2:
            raise ValueError(f"interpolate: size must be an int or 2 values, got {size!r}")
    else:
        factors = ([scale_factor] * 2 if isinstance(scale_factor, (int, float))
                   else list(scale_factor))
        if len(factors) != 2:
            raise ValueError(f"interpolate: scale_factor must be a number or 2 numbers, got "
                             f"{scale_factor!r}")
        out = [_scaled_dim(d, f) for d, f in zip(x.shape[2:], factors)]
    if mode == "nearest":
        if align_corners is not None:
            raise ValueError("interpolate: align_corners can only be set with the linear modes")
        method, coord, rounding = "nearest_neighbor", "asymmetric", "floor"
    elif mode in ("linear", "bilinear"):
        method, rounding = "linear", "round"
        coord = "align_corners" if align_corners else "half_pixel"
    else:
        raise ValueError(f"interpolate: mode must be 'nearest', 'linear' or 'bilinear', got {mode!r}")
    roi = [E.FloatImm(0.0, "float32")] * 4
    return wrap_nested(_call("image.resize2d", [x._expr, rx.ShapeExpr(out)], roi=roi,
                             layout="NCHW", method=method, coordinate_transformation_mode=coord,
                             rounding_method=rounding, cubic_alpha=-0.5, cubic_exclude=0,
                             extrapolation_value=0.0, out_dtype="void"), name)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, is_causal: bool | None = False,
                                 scale: float | None = None,
                                 name: str = "scaled_dot_product_attention") -> Tensor:
    """Scaled dot-product attention (Vaswani et al. 2017) in TVM's layout, emitted as
    ``R.nn.attention``::

        out[b, i, h, :] = sum_j softmax_j(scale * q[b, i, h, :] . k[b, j, h', :]) v[b, j, h', :]

    ``query`` (B, S_q, H, D), ``key`` (B, S_kv, H_kv, D), ``value`` (B, S_kv, H_kv, D_v) ->
    (B, S_q, H, D_v); ``h' = h // (H / H_kv)`` (grouped-query attention when H_kv < H).
    ``scale`` defaults to ``1 / sqrt(D)``; ``is_causal`` masks keys ``j > i`` (PyTorch's
    ``is_causal``, TVM's ``causal_mask="TopLeft"``). Raises ValueError for
    ``attn_mask``; ValueError / TypeError for mismatched shapes / dtypes.
    """
    if attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: attn_mask is not supported (as in TVM); use is_causal")
    sc = None if scale is None else E.FloatImm(float(scale), "float32")
    return wrap_nested(_call("nn.attention", [query._expr, key._expr, value._expr], scale=sc,
                             causal_mask="TopLeft" if is_causal else None), name)


def get_timestep_embedding(x: Tensor, embedding_dim: int, flip_sin_to_cos: bool = False,
                           downscale_freq_shift: float = 1, scale: float = 1,
                           max_period: int = 10000,
                           name: str = "get_timestep_embedding") -> Tensor:
    """Sinusoidal timestep embedding (Ho et al. 2020, DDPM; diffusers'
    ``get_timestep_embedding``): with ``half = embedding_dim // 2``::

        freq[j] = exp(-log(max_period) * j / (half - downscale_freq_shift)),   j < half
        emb[n]  = concat(sin(scale * x[n] * freq), cos(scale * x[n] * freq))

    (cos first when ``flip_sin_to_cos``), zero-padded by one column when ``embedding_dim`` is odd,
    computed in float32 and converted to the default dtype. ``x`` (N,) -> (N, embedding_dim).
    Emitted as TVM does (astype, expand_dims, arange, multiply, divide, exp, sin, cos, concat,
    nn.pad): it needs those manipulation ops registered. Raises ValueError for a non-1-D ``x``.
    """
    from .core import get_default_dtype

    if x.ndim != 1:
        raise ValueError(f"get_timestep_embedding: x must be 1-D (N,), got shape "
                         f"{tuple(str(d) for d in x.shape)}")
    half = embedding_dim // 2
    f32 = "float32"
    t = _call("astype", [x._expr], dtype=f32)
    ar = _call("arange", [rx.PrimValue(0), rx.PrimValue(half), rx.PrimValue(1)], dtype=f32)
    exponent = _call("multiply", [rx.const(-math.log(max_period), f32), ar])
    exponent = _call("divide", [exponent, rx.const(half - downscale_freq_shift, f32)])
    freq = _call("exp", [exponent])
    emb = _call("multiply", [_call("expand_dims", [t], axis=[1]),
                             _call("expand_dims", [freq], axis=[0])])
    if scale != 1:
        emb = _call("multiply", [rx.const(scale, f32), emb])
    from ..ir.block_builder import BlockBuilder

    emb = BlockBuilder.current().emit(emb)  # read twice (sin and cos): bind it once
    parts = [_call("cos", [emb]), _call("sin", [emb])]
    if not flip_sin_to_cos:
        parts.reverse()
    emb = _call("concat", [rx.Tuple(parts)], axis=-1)
    if embedding_dim % 2 == 1:
        emb = _call("nn.pad", [emb], pad_width=[0, 0, 0, 1], pad_mode="constant", pad_value=0.0)
    return wrap_nested(_call("astype", [emb], dtype=get_default_dtype()), name)


def tensor_expr_op(tensor_expr_func, name_hint: str, args: Sequence, *,
                   attrs: dict | None = None):
    """``R.call_tir`` of the PrimFunc that ``tensor_expr_func`` builds from tensor expressions.

    ``args``: Tensors (each becomes a ``te.placeholder``), symbolic vars or Python values passed
    through. The PrimFunc is added to the module under ``name_hint`` (deduplicated), with
    ``attrs`` merged into its attributes. Returns a Tensor (or a tuple of Tensors).
    """
    from ..ir.block_builder import BlockBuilder

    bb = BlockBuilder.current()
    call = bb.call_te(tensor_expr_func, *[a._expr if isinstance(a, Tensor) else a for a in args],
                      primfunc_name_hint=name_hint)
    if attrs:
        bb.get()[call.args[0].name_hint].attrs.update(attrs)
    return wrap_nested(bb.emit(call), name_hint)


def _out_sinfos(out) -> list:
    outs = [out] if isinstance(out, Tensor) else list(out)
    if not outs or not all(isinstance(o, Tensor) for o in outs):
        raise TypeError(f"out must be a Tensor or a list of Tensors, got {out!r}")
    return [o._expr.struct_info for o in outs]


def tensor_ir_op(func, name_hint: str, args, out):
    """``R.call_tir`` of a user PrimFunc (destination-passing: ``func``'s buffers are ``args``
    then the outputs). ``out`` gives the output shapes / dtypes (``Tensor.placeholder`` or a
    list of them). A copy of ``func`` is added to the module under ``name_hint``.

    Raises TypeError for non-Tensor arguments (scalar ``tir_vars`` are not supported) and
    ValueError when the PrimFunc's parameter count differs from ``len(args) + len(out)``.
    """
    from ..ir.block_builder import BlockBuilder

    args = [args] if isinstance(args, Tensor) else list(args)
    for a in args:
        if not isinstance(a, Tensor):
            raise TypeError(f"tensor_ir_op: arguments must be Tensors (scalar tir_vars are not "
                            f"supported), got {type(a).__name__}")
    sinfos = _out_sinfos(out)
    if len(func.params) != len(args) + len(sinfos):
        raise ValueError(f"tensor_ir_op: PrimFunc '{func.name}' has {len(func.params)} buffer "
                         f"parameters but {len(args)} inputs and {len(sinfos)} outputs were given")
    bb = BlockBuilder.current()
    gvar = bb.add_func(func.with_body(func.body), name_hint)
    call = rx.Call(rx.Op.get("call_tir"), [gvar, rx.Tuple([a._expr for a in args])],
                   sinfo_args=sinfos)
    return wrap_nested(bb.emit(call), name_hint)


def _extern_arg(arg) -> rx.Expr:
    if isinstance(arg, Tensor):
        return arg._expr
    if isinstance(arg, bool):
        raise TypeError("extern: bool arguments are not supported; pass an int")
    if isinstance(arg, int):
        return rx.PrimValue(E.IntImm(arg, "int64"), "int64")
    if isinstance(arg, float):
        return rx.PrimValue(E.FloatImm(arg, "float64"), "float64")
    if isinstance(arg, str):
        return rx.StringImm(arg)
    if isinstance(arg, E.PrimExpr):
        return rx.PrimValue(arg, arg.dtype)
    raise TypeError(f"extern: unsupported argument type {type(arg).__name__}")


def extern(name: str, args: Sequence, out):
    """Call the runtime function ``name`` in destination-passing style:
    ``R.call_dps_packed("name", (args...), out_sinfo=...)``.

    ``args``: Tensors, ints (int64), floats (float64), strings and scalar PrimExprs. ``out``: a
    Tensor (``Tensor.placeholder``) or a list of them giving the outputs' shapes and dtypes; the
    runtime allocates them and passes them after the arguments. On this runtime ``name`` must
    be registered with :func:`runtime.register_extern`. Returns a Tensor or a tuple of Tensors.
    """
    sinfos = _out_sinfos(out)
    out_sinfo = sinfos[0] if isinstance(out, Tensor) else TupleStructInfo(sinfos)
    call = rx.Call(rx.Op.get("call_dps_packed"),
                   [rx.ExternFunc(name), rx.Tuple([_extern_arg(a) for a in args])],
                   sinfo_args=[out_sinfo])
    hint = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return wrap_nested(call, hint)


def ccl_allreduce(x: Tensor, op_type: str = "sum", name: str = "ccl_allreduce") -> Tensor:
    """All-reduce across workers (``op_type``: sum, prod, min, max or avg). Exported and
    printed as ``R.ccl.allreduce``; compiling it needs a multi-worker runtime (LegalizeOps
    raises ValueError on this single-process one)."""
    return wrap_nested(_call("ccl.allreduce", [x._expr], op_type=op_type), name)


def ccl_broadcast_from_worker0(x: Tensor, name: str = "broadcast_from_worker") -> Tensor:
    """Broadcast ``x`` from worker 0 to every worker (``R.ccl.broadcast_from_worker0``); needs a
    multi-worker runtime to compile, like :func:`ccl_allreduce`."""
    return wrap_nested(_call("ccl.broadcast_from_worker0", [x._expr]), name)


# === section C: quantization ops (issue 4) ===


def group_dequantize(q_weight: Tensor, q_scale: Tensor, bits: int, group_size: int, zero_point: int,
                     in_features: int, activation_quantization: str = "none",
                     name: str = "dequantize") -> Tensor:
    """The float weight (rows, in_features) of a group-quantized parameter pair, in the dtype of
    ``q_scale``: ``R.group_dequantize(q_weight, q_scale, bits=..., group_size=..., zero_point=...,
    in_features=...)``.

    ``q_weight`` (rows, words) packs ``storage_bits // bits`` values per word (element ``i`` in
    bits ``[i*bits, (i+1)*bits)``); ``q_scale`` (rows, ceil(in_features / group_size)); value
    ``v`` of column ``k`` dequantizes to ``(v - zero_point) * q_scale[row, k // group_size]``
    (MLC-LLM's group quantization). A matmul or take that consumes the result is compiled into
    one kernel that dequantizes in registers; ``activation_quantization="int8"`` (printed only
    then) lets that matmul's GEMV quantize its input to int8 per group (see
    :class:`schemas.GroupQuantization`). Raises ValueError / TypeError when the shapes, dtypes or
    attributes do not fit together.
    """
    extra = {} if activation_quantization == "none" else {"activation_quantization": activation_quantization}
    return wrap_nested(_call("group_dequantize", [q_weight._expr, q_scale._expr], bits=int(bits),
                             group_size=int(group_size), zero_point=int(zero_point),
                             in_features=int(in_features), **extra), name)


__all__ += ["group_dequantize"]


# === argument checks of every public op ===

def _tensor_params(fn: Callable) -> tuple[inspect.Signature, list[tuple[str, str]]]:
    sig = inspect.signature(fn)
    kinds = {"Tensor": "tensor", "Tensor | None": "optional", "Sequence[Tensor]": "sequence",
             "str": "str", "str | None": "optional str"}
    return sig, [(p.name, kinds[p.annotation]) for p in sig.parameters.values()
                 if p.annotation in ("Tensor", "Tensor | None", "Sequence[Tensor]")
                 or (p.name == "name" and p.annotation in ("str", "str | None"))]


def _checked(fn: Callable) -> Callable:
    """``fn`` checking, before it runs, that each parameter annotated ``Tensor`` is a Tensor
    (``Tensor | None``: or None; ``Sequence[Tensor]``: a list or tuple of Tensors) and that ``name``
    is a string (``str | None``: or None). Raises TypeError naming the op and the parameter (a
    recipe's ``silu(3)`` or ``matmul(x, 2)`` reached ``x._expr`` and failed with AttributeError;
    ``subtract(x, x, x)`` bound a Tensor as the name)."""
    sig, params = _tensor_params(fn)
    if not params:
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)    # TypeError for arguments fn does not take, as fn itself
        for pname, kind in params:
            if pname not in bound.arguments:
                continue
            value = bound.arguments[pname]
            if kind == "tensor":
                ok = isinstance(value, Tensor)
            elif kind == "optional":
                ok = value is None or isinstance(value, Tensor)
            elif kind == "sequence":
                ok = isinstance(value, (list, tuple)) and builtins.all(isinstance(v, Tensor) for v in value)
            elif kind == "str":
                ok = isinstance(value, str)
            else:
                ok = value is None or isinstance(value, str)
            if not ok:
                what = {"tensor": "a Tensor", "optional": "a Tensor or None", "sequence": "a list of Tensors",
                        "str": "a string (the result's name hint)",
                        "optional str": "a string (the result's name hint) or None"}[kind]
                raise TypeError(f"{fn.__name__}: {pname} must be {what}, got {_describe(value)}")
        return fn(*args, **kwargs)

    return wrapper


def _describe(value) -> str:
    if isinstance(value, (list, tuple)):
        kinds = sorted({type(v).__name__ for v in value})
        return f"a {type(value).__name__} of {', '.join(kinds)}" if kinds else f"an empty {type(value).__name__}"
    return f"{type(value).__name__} {_short(value)}" if isinstance(value, (int, float, str)) else type(value).__name__


for _name in __all__:
    _fn = globals()[_name]
    if inspect.isfunction(_fn):
        globals()[_name] = _checked(_fn)
del _name, _fn
