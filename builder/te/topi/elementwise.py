"""Unary elementwise computes: activations (relu, sigmoid, silu, gelu) and math (exp, log, sqrt, tanh,
sin, cos, erf, negative, abs), each a ``T_<name>`` stage over its input.
"""
from __future__ import annotations

import math
from typing import Callable

from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr
from .. import tensor as _te
from ..tensor import Tensor
from .common import cast_value, upcast

__all__ = [
    "abs", "ceil", "cos", "erf", "exp", "floor", "gelu", "gelu_tanh", "log", "negative", "relu", "round", "rsqrt",
    "sigmoid", "sign", "silu", "sin", "sqrt", "tanh", "trunc", "unary", "tan", "atan", "asin", "acos",
]


def unary(x: Tensor, fscalar: Callable[[PrimExpr], PrimExpr], name: str = "compute",
          out_dtype: str | None = None) -> Tensor:
    """``out[i] = fscalar(x[i])`` with 16-bit floats computed in float32 and converted back.

    ``out_dtype`` defaults to ``x.dtype`` (or bool when ``fscalar`` returns a bool).
    """
    def f(*idx):
        r = E.convert(fscalar(upcast(x[idx])))
        dt = out_dtype or ("bool" if r.dtype == "bool" else x.dtype)
        return cast_value(r, dt)

    return _te.compute(x.shape, f, name=name)


def _sigmoid_expr(v: PrimExpr) -> PrimExpr:
    """Overflow-free logistic: with ``e = exp(-|v|)`` (in (0, 1]), ``1 / (1 + e)`` for ``v >= 0``
    and ``e / (1 + e)`` otherwise (both equal ``1 / (1 + exp(-v))``)."""
    e = tir.exp(-tir.abs(v))
    r = 1.0 / (1.0 + e)
    return E.Select(E.GE(v, E.const(0.0, v.dtype)), r, e * r)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)`` (``torch.nn.ReLU``)."""
    return unary(x, lambda v: tir.maximum(v, E.const(0, v.dtype)), "T_relu")


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))`` (``torch.sigmoid``), evaluated through ``exp(-|x|)`` so that no
    intermediate overflows for large ``|x|``."""
    return unary(x, _sigmoid_expr, "T_sigmoid")


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` (``torch.nn.SiLU``), with the overflow-free sigmoid."""
    return unary(x, lambda v: v * _sigmoid_expr(v), "T_silu")


def gelu(x: Tensor) -> Tensor:
    """Exact GELU ``0.5 * x * (1 + erf(x / sqrt(2)))`` (``torch.nn.GELU(approximate='none')``)."""
    return unary(x, lambda v: 0.5 * v * (1.0 + tir.erf(v * (1.0 / math.sqrt(2.0)))), "T_gelu")


def gelu_tanh(x: Tensor) -> Tensor:
    """Tanh GELU ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``
    (``torch.nn.GELU(approximate='tanh')``)."""
    c = math.sqrt(2.0 / math.pi)
    return unary(x, lambda v: 0.5 * v * (1.0 + tir.tanh(c * (v + 0.044715 * (v * v * v)))),
                 "T_gelu_tanh")


def exp(x: Tensor) -> Tensor:
    """``e ** x`` (``numpy.exp``)."""
    return unary(x, tir.exp, "T_exp")


def log(x: Tensor) -> Tensor:
    """Natural logarithm (``numpy.log``)."""
    return unary(x, tir.log, "T_log")


def sqrt(x: Tensor) -> Tensor:
    """Square root (``numpy.sqrt``)."""
    return unary(x, tir.sqrt, "T_sqrt")


def rsqrt(x: Tensor) -> Tensor:
    """``1 / sqrt(x)`` (``torch.rsqrt``)."""
    return unary(x, tir.rsqrt, "T_rsqrt")


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent (``numpy.tanh``)."""
    return unary(x, tir.tanh, "T_tanh")


def sin(x: Tensor) -> Tensor:
    """Sine (``numpy.sin``)."""
    return unary(x, tir.sin, "T_sin")


def cos(x: Tensor) -> Tensor:
    """Cosine (``numpy.cos``)."""
    return unary(x, tir.cos, "T_cos")


def tan(x: Tensor) -> Tensor:
    """Tangent (``numpy.tan``; the C library's ``tanf`` / ``tan`` per element)."""
    return unary(x, tir.tan, "T_tan")


def atan(x: Tensor) -> Tensor:
    """Arc tangent in ``[-pi/2, pi/2]`` (``numpy.arctan``; the C library's ``atanf`` / ``atan``)."""
    return unary(x, tir.atan, "T_atan")


def asin(x: Tensor) -> Tensor:
    """Arc sine in ``[-pi/2, pi/2]``, NaN outside ``[-1, 1]`` (``numpy.arcsin``; ``asinf`` / ``asin``)."""
    return unary(x, tir.asin, "T_asin")


def acos(x: Tensor) -> Tensor:
    """Arc cosine in ``[0, pi]``, NaN outside ``[-1, 1]`` (``numpy.arccos``; ``acosf`` / ``acos``)."""
    return unary(x, tir.acos, "T_acos")


def erf(x: Tensor) -> Tensor:
    """Gauss error function (``torch.erf`` / ``scipy.special.erf``)."""
    return unary(x, tir.erf, "T_erf")


def negative(x: Tensor) -> Tensor:
    """``-x`` (``numpy.negative``): floats are multiplied by ``-1`` (sign of zero not guaranteed
    under the code generator's ``nsz`` fast-math flag), integers wrap."""
    def f(v):
        if E.is_float_dtype(v.dtype):
            return v * E.const(-1.0, v.dtype)
        return E.Sub(E.const(0, v.dtype), v)

    return unary(x, f, "T_negative")


def abs(x: Tensor) -> Tensor:  # noqa: A001 - op name
    """``|x|`` (``numpy.abs``); unsigned ints and bools are returned unchanged (copied)."""
    return unary(x, tir.abs, "T_abs")


def _rounding(fn: Callable[[PrimExpr], PrimExpr], name: str):
    def run(x: Tensor) -> Tensor:
        return unary(x, lambda v: fn(v) if E.is_float_dtype(v.dtype) else v, name)
    return run


floor = _rounding(tir.floor, "T_floor")
floor.__doc__ = "``numpy.floor``: the largest integer <= x (integers unchanged)."
ceil = _rounding(tir.ceil, "T_ceil")
ceil.__doc__ = "``numpy.ceil``: the smallest integer >= x (integers unchanged)."
round = _rounding(tir.round, "T_round")  # noqa: A001 - op name
round.__doc__ = "``numpy.round`` / ``torch.round``: to the nearest integer, halves to even (integers unchanged)."
trunc = _rounding(tir.trunc, "T_trunc")
trunc.__doc__ = "``numpy.trunc``: toward zero (integers unchanged)."


def sign(x: Tensor) -> Tensor:
    """``numpy.sign``: -1, 0 or 1 in ``x``'s dtype (NaN stays NaN, -0.0 gives 0); booleans unchanged."""
    def f(v):
        if v.dtype == "bool":
            return v
        zero = E.const(0, v.dtype)
        neg = E.const(-1, v.dtype) if v.dtype.startswith(("int", "float")) else zero
        return E.Select(E.GT(v, zero), E.const(1, v.dtype), E.Select(E.LT(v, zero), neg, v))

    return unary(x, f, "T_sign")
