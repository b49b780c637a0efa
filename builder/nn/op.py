"""Functional operators on ``nn.Tensor`` (``tvm.relax.frontend.nn.op``): each call emits one
graph-level binding named by ``name`` (TVM's default hints: ``add``, ``mul``, ``matmul``, ...).

Shapes and dtypes are checked when the op is emitted; a mismatch raises ValueError / TypeError
naming both sides. Python scalars combine with tensors as constants of the tensor's dtype.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

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
    if isinstance(value, (bool, int, float, np.number)):
        return rx.Constant(np.asarray(value), dtype)
    raise TypeError(f"cannot combine a Tensor with {type(value).__name__} {value!r}")


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
    """Elementwise maximum with broadcasting."""
    return _binary("maximum", x1, x2, name)


def minimum(x1, x2, name: str = "minimum") -> Tensor:
    """Elementwise minimum with broadcasting."""
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
    """Permute dimensions (``numpy.transpose``); ``axes=None`` reverses them."""
    return wrap_nested(_call("permute_dims", [x._expr], axes=None if axes is None else list(axes)),
                       name or "permute_dims")


def reshape(x: Tensor, shape: Sequence, name: str = "reshape") -> Tensor:
    """Reshape (row-major); one ``-1`` is inferred, symbolic dims allowed."""
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
    """``max(x, 0)``."""
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


# === section B: neural-network ops, extern and TE/TIR ops (issue 3) ===
