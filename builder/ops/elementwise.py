"""Elementwise ops: unary math and activations, binary arithmetic with numpy broadcasting, comparisons.

One record per op (:func:`builder.ir.op.register_op`). ``compute`` is the topi compute, which both the
legalization (one ``R.call_tir`` per call) and fusion (elementwise chains and matmul epilogues inlined
into one kernel) use.
"""
from __future__ import annotations

from ..ir.op import OpPattern, register_op
from ..ir.op.elementwise import infer_binary, infer_compare, infer_unary, infer_unary_float
from ..te import topi
from .common import te_rule

ELEMWISE, BROADCAST = OpPattern.ELEMWISE, OpPattern.BROADCAST


def _elementwise(name: str, infer, pattern: OpPattern, compute, frontend: str | None, doc: str,
                 intrinsic: str | None = None) -> None:
    """A record whose legalization and fusion compute are the topi ``compute``; every one with a
    frontend is offered to recipes (comparisons too: their bool results feed ``where``)."""
    register_op(name, infer, pattern=pattern, compute=compute, legalize=te_rule(compute, name.split(".")[-1]),
                intrinsic=intrinsic, frontend=frontend, in_recipes=frontend is not None,
                doc=doc)


# activations
_elementwise("nn.relu", infer_unary_float, ELEMWISE, topi.relu, "relu", "``max(x, 0)`` (NaN stays NaN, as in PyTorch).")
_elementwise("nn.silu", infer_unary_float, ELEMWISE, topi.silu, "silu",
             "``x * sigmoid(x)`` (SiLU / swish; Elfwing et al. 2017).")
_elementwise("nn.gelu", infer_unary_float, ELEMWISE, topi.gelu, "gelu",
             "Exact GELU ``x * Phi(x)`` (Hendrycks & Gimpel 2016).")
_elementwise("nn.gelu_tanh", infer_unary_float, ELEMWISE, topi.gelu_tanh, None,
             "GELU with the tanh approximation (``nn.op.gelu(x, approximate=\"tanh\")``).")

# unary math (the scalar intrinsic of the same name)
_elementwise("exp", infer_unary_float, ELEMWISE, topi.exp, "exp", "``e ** x``.", "exp")
_elementwise("log", infer_unary_float, ELEMWISE, topi.log, "log", "Natural logarithm.", "log")
_elementwise("sqrt", infer_unary_float, ELEMWISE, topi.sqrt, "sqrt", "Square root.", "sqrt")
_elementwise("rsqrt", infer_unary_float, ELEMWISE, topi.rsqrt, "rsqrt", "``1 / sqrt(x)``.", "rsqrt")
_elementwise("tanh", infer_unary_float, ELEMWISE, topi.tanh, "tanh", "Hyperbolic tangent.", "tanh")
_elementwise("sigmoid", infer_unary_float, ELEMWISE, topi.sigmoid, "sigmoid", "``1 / (1 + exp(-x))``.", "sigmoid")
_elementwise("sin", infer_unary_float, ELEMWISE, topi.sin, "sin", "Sine.", "sin")
_elementwise("cos", infer_unary_float, ELEMWISE, topi.cos, "cos", "Cosine.", "cos")
_elementwise("tan", infer_unary_float, ELEMWISE, topi.tan, "tan", "Tangent.", "tan")
_elementwise("atan", infer_unary_float, ELEMWISE, topi.atan, "atan", "Arc tangent, in [-pi/2, pi/2].", "atan")
_elementwise("asin", infer_unary_float, ELEMWISE, topi.asin, "asin", "Arc sine, in [-pi/2, pi/2].", "asin")
_elementwise("acos", infer_unary_float, ELEMWISE, topi.acos, "acos", "Arc cosine, in [0, pi].", "acos")
_elementwise("erf", infer_unary_float, ELEMWISE, topi.erf, "erf",
             "Gauss error function ``2 / sqrt(pi) * integral from 0 to x of exp(-t**2) dt``.", "erf")
_elementwise("negative", infer_unary, ELEMWISE, topi.negative, "negative", "``-x``.")
_elementwise("abs", infer_unary, ELEMWISE, topi.abs, "abs", "``|x|`` (elementwise absolute value).")
_elementwise("floor", infer_unary, ELEMWISE, topi.floor, "floor", "The largest integer <= x (integers unchanged).")
_elementwise("ceil", infer_unary, ELEMWISE, topi.ceil, "ceil", "The smallest integer >= x (integers unchanged).")
_elementwise("round", infer_unary, ELEMWISE, topi.round, "round",
             "To the nearest integer, halves to even (``torch.round``; integers unchanged).")
_elementwise("trunc", infer_unary, ELEMWISE, topi.trunc, "trunc", "Toward zero (integers unchanged).")
_elementwise("sign", infer_unary, ELEMWISE, topi.sign, "sign", "-1, 0 or 1 (NaN stays NaN).")

# binary arithmetic (numpy broadcasting; a Python scalar operand becomes a constant of the tensor's dtype)
_elementwise("add", infer_binary, BROADCAST, topi.add, "add", "``a + b``.")
_elementwise("subtract", infer_binary, BROADCAST, topi.subtract, "subtract", "``a - b``.")
_elementwise("multiply", infer_binary, BROADCAST, topi.multiply, "multiply", "``a * b``.")
_elementwise("divide", infer_binary, BROADCAST, topi.divide, "divide", "``a / b``.")
_elementwise("maximum", infer_binary, BROADCAST, topi.maximum, "maximum", "Elementwise maximum (NaN propagates).")
_elementwise("minimum", infer_binary, BROADCAST, topi.minimum, "minimum", "Elementwise minimum (NaN propagates).")
_elementwise("floor_divide", infer_binary, BROADCAST, topi.floor_divide, "floor_divide",
             "``floor(a / b)`` (``a // b``; integers: ``x // 0 == 0``).")
_elementwise("floor_mod", infer_binary, BROADCAST, topi.floor_mod, "floor_mod",
             "``a - floor(a / b) * b``, the sign of ``b`` (``torch.remainder``; integers: ``x % 0 == 0``).")
_elementwise("power", infer_binary, BROADCAST, topi.power, "power", "``a ** b``.")

# comparisons (bool results)
_elementwise("equal", infer_compare, BROADCAST, topi.equal, "equal", "``a == b``.")
_elementwise("not_equal", infer_compare, BROADCAST, topi.not_equal, "not_equal", "``a != b``.")
_elementwise("less", infer_compare, BROADCAST, topi.less, "less", "``a < b``.")
_elementwise("less_equal", infer_compare, BROADCAST, topi.less_equal, "less_equal", "``a <= b``.")
_elementwise("greater", infer_compare, BROADCAST, topi.greater, "greater", "``a > b``.")
_elementwise("greater_equal", infer_compare, BROADCAST, topi.greater_equal, "greater_equal", "``a >= b``.")
