"""Translations of torch's elementwise functions: arithmetic with torch's type promotion, activations,
comparisons and logic, clamps, and the compositions of our records that torch has as one function
(``log1p``, ``sinh``, ``lerp``, ...).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...nn import op
from ..dtypes import as_dtype, is_float, torch_promote
from ..errors import UnsupportedNodeError
from .operands import at_least_1d, binary, is_tensor, norm_dim, static, to_tensor


# -- compositions of the op records (torch semantics); no record of their own --------------------------
_LN2 = math.log(2.0)


def addcmul(t, x, t1, t2, *, value=1):
    """``torch.addcmul(x, t1, t2, value=1)``: ``x + value * t1 * t2``, broadcast shapes, torch's type promotion
    (:func:`~.operands.binary`)."""
    return binary("add", x, binary("multiply", binary("multiply", t1, t2), value))


def addcdiv(t, x, t1, t2, *, value=1):
    """``torch.addcdiv(x, t1, t2, value=1)``: ``x + value * t1 / t2``, broadcast shapes, torch's type promotion
    (:func:`~.operands.binary`)."""
    return binary("add", x, binary("multiply", binary("divide", t1, t2), value))


def lerp(t, start, end, weight):
    """``torch.lerp(start, end, weight)``: ``start + weight * (end - start)``, broadcast (``weight`` a number or a
    tensor)."""
    return binary("add", start, binary("multiply", binary("subtract", end, start), weight))


def square(t, x):
    """``torch.square(x)``: ``x * x``, same shape and dtype."""
    return binary("multiply", x, x)


def reciprocal(t, x):
    """``torch.reciprocal(x)``: ``1 / x``, same shape; an integer or bool ``x`` gives float32 (PyTorch's rule)."""
    return binary("divide", 1.0, x if is_float(x.dtype) else as_dtype(x, "float32"))


def log1p(t, x):
    """``log(1 + x)`` (not a dedicated log1p: for |x| < 1e-7 the result is x's float32 rounding of 1 + x)."""
    return op.log(binary("add", x, 1.0))


def expm1(t, x):
    """``exp(x) - 1`` (not a dedicated expm1: absolute error about 1e-7 near 0)."""
    return binary("subtract", op.exp(x), 1.0)


def log2(t, x):
    """``torch.log2(x)``: ``log(x) / ln 2``, same shape and float dtype."""
    return binary("divide", op.log(x), _LN2)


def exp2(t, x):
    """``torch.exp2(x)``: ``exp(x * ln 2)``, same shape and float dtype."""
    return op.exp(binary("multiply", x, _LN2))


def sinh(t, x):
    """``torch.sinh(x)``: ``(exp(x) - exp(-x)) / 2`` (no record of its own), same shape and float dtype; the ONNX
    importer's ``Sinh`` too."""
    return binary("multiply", binary("subtract", op.exp(x), op.exp(op.negative(x))), 0.5)


def cosh(t, x):
    """``torch.cosh(x)``: ``(exp(x) + exp(-x)) / 2``, same shape and float dtype; the ONNX importer's ``Cosh`` too."""
    return binary("multiply", binary("add", op.exp(x), op.exp(op.negative(x))), 0.5)


def asinh(t, x):
    """``asinh(x) = sign(x) * log(|x| + sqrt(x**2 + 1))`` (odd, so the log's argument stays >= 1)."""
    ax = op.abs(x)
    return op.multiply(op.sign(x), op.log(binary("add", ax, op.sqrt(binary("add", op.multiply(ax, ax), 1.0)))))


def acosh(t, x):
    """``acosh(x) = log(x + sqrt(x**2 - 1))``, NaN below 1."""
    return op.log(binary("add", x, op.sqrt(binary("subtract", op.multiply(x, x), 1.0))))


def atanh(t, x):
    """``atanh(x) = 0.5 * log((1 + x) / (1 - x))``, +-inf at +-1, NaN beyond."""
    return binary("multiply", op.log(binary("divide", binary("add", x, 1.0), binary("subtract", 1.0, x))), 0.5)


def atan2(t, y, x):
    """``torch.atan2`` / ``numpy.arctan2``: the angle of (x, y) in ``[-pi, pi]``: ``atan(y / x)``, plus or minus
    pi where ``x < 0`` (the sign of ``y``), ``+-pi/2`` on the ``y`` axis, 0 at the origin."""
    y, x = to_tensor(y), to_tensor(x)
    base = op.atan(binary("divide", y, x))
    half = binary("multiply", op.sign(y), math.pi / 2)
    pi = op.where(op.less(y, 0.0), to_tensor(-math.pi, base.dtype), to_tensor(math.pi, base.dtype))
    left = binary("add", base, pi)
    return op.where(op.greater(x, 0.0), base, op.where(op.less(x, 0.0), left, half))


def isnan(t, x):
    """``torch.isnan(x)``: ``x != x``, a bool tensor of ``x``'s shape."""
    return op.not_equal(x, x)


def isinf(t, x):
    """``torch.isinf(x)``: ``|x| == inf`` for a float ``x``, all False otherwise; bool, ``x``'s shape."""
    return op.equal(op.abs(x), float("inf")) if is_float(x.dtype) else op.not_equal(x, x)


def isfinite(t, x):
    """``torch.isfinite(x)``: ``|x| < inf`` for a float ``x`` (False for NaN and infinities), all True otherwise; bool,
    ``x``'s shape."""
    return op.less(op.abs(x), float("inf")) if is_float(x.dtype) else op.equal(x, x)


def nan_to_num(t, x, nan=0.0, posinf=None, neginf=None):
    """``torch.nan_to_num``: NaN -> ``nan``, +-inf -> ``posinf`` / ``neginf`` (default: the dtype's
    largest / lowest finite values)."""
    if not is_float(x.dtype):
        return x
    info = np.finfo(np.float16 if x.dtype == "float16" else np.float64 if x.dtype == "float64" else np.float32)
    hi = float(info.max) if posinf is None else float(posinf)
    lo = float(info.min) if neginf is None else float(neginf)
    y = op.where(op.equal(x, float("inf")), hi, x)
    y = op.where(op.equal(x, float("-inf")), lo, y)
    return op.where(op.not_equal(x, x), float(nan), y)


def log_sigmoid(t, x):
    """``F.logsigmoid``: ``min(x, 0) - log(1 + exp(-|x|))`` (no overflow)."""
    return binary("subtract", op.minimum(x, to_tensor(0.0, x.dtype)), op.log(binary("add", op.exp(op.negative(op.abs(x))), 1.0)))


def rrelu(t, x, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """``F.rrelu`` in eval mode: a leaky ReLU with the mean slope ``(lower + upper) / 2``."""
    if training:
        raise UnsupportedNodeError("rrelu in training mode (random slopes)")
    return op.leaky_relu(x, (float(lower) + float(upper)) / 2)


def tanhshrink(t, x):
    """``F.tanhshrink(x)``: ``x - tanh(x)``, same shape and float dtype."""
    return binary("subtract", x, op.tanh(x))


def hardshrink(t, x, lambd=0.5):
    """``F.hardshrink(x, lambd=0.5)``: ``x`` where ``|x| > lambd``, else 0; same shape and dtype."""
    return op.where(op.greater(op.abs(x), float(lambd)), x, to_tensor(0.0, x.dtype))


def softshrink(t, x, lambd=0.5):
    """``F.softshrink(x, lambd=0.5)``: ``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, 0 between; same
    shape and dtype."""
    l_ = float(lambd)
    return op.where(op.greater(x, l_), binary("subtract", x, l_),
                    op.where(op.less(x, -l_), binary("add", x, l_), to_tensor(0.0, x.dtype)))


def threshold(t, x, threshold_, value, inplace=False):
    """``F.threshold(x, threshold, value)``: ``x`` where ``x > threshold``, else ``value``; same shape and dtype
    (``inplace`` ignored: values are never mutated)."""
    return op.where(op.greater(x, float(threshold_)), x, to_tensor(float(value), x.dtype))


def add(t, a, b, alpha=1):
    """``torch.add(a, b, alpha=1)`` / ``a + b``: ``a + alpha * b``, broadcast shapes, torch's type promotion
    (:func:`~.operands.binary`); two sizes or numbers are added in Python (symbolic sizes stay PrimExprs)."""
    if alpha != 1:
        b = binary("multiply", b, alpha)
    return binary("add", a, b)


def sub(t, a, b, alpha=1):
    """``torch.sub(a, b, alpha=1)`` / ``a - b``: ``a - alpha * b``, broadcast shapes, torch's type promotion
    (:func:`~.operands.binary`); sizes and numbers in Python."""
    if alpha != 1:
        b = binary("multiply", b, alpha)
    return binary("subtract", a, b)


def rsub(t, a, b, alpha=1):
    """``torch.rsub(a, b, alpha=1)`` (ATen's ``b - alpha * a``, what ``2 - x`` exports as): :func:`sub` with the
    operands swapped."""
    return sub(t, b, a, alpha)


def mul(t, a, b):
    """``torch.mul(a, b)`` / ``a * b``, broadcast shapes, torch's type promotion (:func:`~.operands.binary`); sizes and
    numbers in Python."""
    return binary("multiply", a, b)


def div(t, a, b, rounding_mode=None):
    """``torch.div(a, b, rounding_mode=None)`` / ``a / b``: true division (integer and bool tensors become float32
    first, PyTorch's rule), ``"floor"`` (:func:`builder.nn.op.floor_divide`) or ``"trunc"`` (toward zero); broadcast
    shapes. Two numbers / sizes are divided in Python. Raises UnsupportedNodeError for another rounding mode."""
    if not is_tensor(a) and not is_tensor(b):
        if rounding_mode == "floor":
            return a // b
        if rounding_mode == "trunc":
            return int(a / b)
        return a / b
    if rounding_mode == "floor":
        return binary("floor_divide", a, b)
    if rounding_mode == "trunc":       # integer tensors: C-style division truncates already
        q = binary("divide", a, b)
        return op.trunc(q) if is_float(q.dtype) else q
    if rounding_mode is not None:
        raise UnsupportedNodeError(f"division with rounding_mode={rounding_mode!r}")
    for v in (a, b):
        if is_tensor(v) and not is_float(v.dtype):
            if is_tensor(a):
                a = as_dtype(a, "float32") if not is_float(a.dtype) else a
            if is_tensor(b):
                b = as_dtype(b, "float32") if not is_float(b.dtype) else b
    return binary("divide", a, b)


def floordiv(t, a, b):
    """``a // b`` / ``torch.floor_divide`` (floor division, torch's since 1.13): sizes in Python,
    tensors through ``floor_divide``."""
    if not is_tensor(a) and not is_tensor(b):
        return a // b
    return binary("floor_divide", a, b)


def mod(t, a, b):
    """``a % b`` / ``torch.remainder(a, b)``: the remainder with the sign of ``b`` (``floor_mod``), broadcast, torch's
    type promotion; two sizes / numbers in Python."""
    if not is_tensor(a) and not is_tensor(b):
        return a % b
    return binary("floor_mod", a, b)


def pow_(t, a, b):
    """``torch.pow(a, b)`` / ``a ** b``, broadcast: a tensor to the number 1 is itself, 2 ``a * a``, 0.5 ``sqrt``, -0.5
    ``rsqrt``; an integer tensor to a number becomes float32 first; a number to a tensor is a constant of the
    tensor's dtype."""
    if is_tensor(a) and not is_tensor(b):
        if b == 1:
            return a
        if b == 2:
            return op.multiply(a, a)
        if b == 0.5:
            return op.sqrt(a)
        if b == -0.5:
            return op.rsqrt(a)
        if not is_float(a.dtype):
            a = as_dtype(a, "float32")
    if is_tensor(b) and not is_tensor(a):
        a = to_tensor(float(a), b.dtype)
    return binary("power", a, b)


def neg(t, x):
    """``torch.neg(x)`` / ``-x``: a tensor negated (same shape and dtype) or a size / number in Python."""
    return -x if not is_tensor(x) else op.negative(x)


def unary(name: str, float_only: bool = True):
    """The translation of the unary ``builder.nn.op`` function ``name`` (``exp``, ``sqrt``, ``sin``, ...): ``fn(t, x)``
    of ``x``'s shape; with ``float_only`` an integer or bool ``x`` is cast to float32 first (torch's promotion for
    the float functions)."""
    def fn(t, x, *args, **kwargs):
        if float_only and not is_float(x.dtype):
            x = as_dtype(x, "float32")
        return getattr(op, name)(x)
    fn.__name__ = name
    return fn


def relu(t, x, inplace=False):
    """``torch.relu`` / ``F.relu`` / ``nn.ReLU``: ``max(x, 0)``, same shape and dtype."""
    return op.relu(x)


def gelu(t, x, approximate="none"):
    """``F.gelu(x, approximate='none')``: the exact GELU (``x * Phi(x)``) or, with ``'tanh'``, its tanh approximation;
    same shape and dtype."""
    return op.gelu(x, approximate=None if approximate == "none" else approximate)


def silu(t, x, inplace=False):
    """``F.silu`` / ``nn.SiLU``: ``x * sigmoid(x)``, same shape and dtype."""
    return op.silu(x)


def hardtanh(t, x, min_val=-1.0, max_val=1.0, inplace=False):
    """``F.hardtanh(x, min_val=-1, max_val=1)``: ``x`` clamped to ``[min_val, max_val]``, same shape and dtype."""
    return op.hardtanh(x, float(min_val), float(max_val))


def relu6(t, x, inplace=False):
    """``F.relu6``: ``x`` clamped to ``[0, 6]``, same shape and dtype."""
    return op.hardtanh(x, 0.0, 6.0)


def hardsigmoid(t, x, inplace=False):
    """``F.hardsigmoid``: ``clamp(x / 6 + 1/2, 0, 1)`` (PyTorch's constants), same shape and dtype."""
    return op.hardsigmoid(x)


def hardswish(t, x, inplace=False):
    """``F.hardswish``: ``x * hardsigmoid(x)``, same shape and dtype."""
    return op.hardswish(x)


def leaky_relu(t, x, negative_slope=0.01, inplace=False):
    """``F.leaky_relu(x, negative_slope=0.01)``: ``x`` above 0, ``negative_slope * x`` below; same shape and dtype."""
    return op.leaky_relu(x, float(negative_slope))


def elu(t, x, alpha=1.0, inplace=False):
    """``F.elu(x, alpha=1)``: ``x`` above 0, ``alpha * (exp(x) - 1)`` below; same shape and dtype."""
    return op.elu(x, float(alpha))


def selu(t, x, inplace=False):
    """``F.selu``: :func:`elu` with PyTorch's ``alpha = 1.6732632423543772`` and ``scale = 1.0507009873554805``."""
    return op.elu(x, 1.6732632423543772, 1.0507009873554805)


def celu(t, x, alpha=1.0, inplace=False):
    """``F.celu(x, alpha=1)``: ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``, same shape and dtype."""
    return op.celu(x, float(alpha))


def softplus(t, x, beta=1.0, threshold=20.0):
    """``F.softplus(x, beta=1, threshold=20)``: ``log(1 + exp(beta * x)) / beta``, ``x`` itself where ``beta * x >
    threshold`` (PyTorch's rule); same shape and dtype."""
    return op.softplus(x, float(beta), float(threshold))


def softsign(t, x):
    """``F.softsign``: ``x / (1 + |x|)``, same shape and dtype."""
    return op.softsign(x)


def mish(t, x, inplace=False):
    """``F.mish``: ``x * tanh(softplus(x))``, same shape and dtype."""
    return op.mish(x)


def prelu(t, x, weight):
    """``F.prelu``: ``x`` where ``x >= 0``, else ``weight * x``; a (C,) weight applies along dim 1."""
    w = weight
    if w.ndim == 1 and x.ndim >= 2 and static(w.shape[0]) != 1:
        w = op.reshape(w, [1, w.shape[0]] + [1] * (x.ndim - 2))
    return op.where(op.greater_equal(x, 0.0), x, binary("multiply", x, w))


def glu(t, x, dim=-1):
    """``F.glu(x, dim=-1)``: ``a * sigmoid(b)`` of the two halves of ``dim`` (whose size must be even); the result has
    half of it."""
    a, b = op.chunk(x, 2, dim=norm_dim(dim, x.ndim))
    return op.multiply(a, op.sigmoid(b))


def identity(t, x, *args, **kwargs):
    """``nn.Identity`` and the ops that change nothing here (``x`` itself, whatever the other arguments)."""
    return x


def dropout(t, x, p=0.5, train=False, inplace=False, *, training=None):
    """Dropout of every kind at inference: the identity (``train`` / ``training`` are not followed)."""
    return x


def round_(t, x, decimals=0):
    """``torch.round``: halves to even; with ``decimals``, ``round(x * 10**d) / 10**d`` as torch."""
    if not decimals:
        return op.round(x)
    scale = 10.0 ** int(decimals)
    return binary("divide", op.round(binary("multiply", x, scale)), scale)


def float_unary(name: str) -> Callable:
    """The translation of a rounding op (``floor``, ``ceil``, ``trunc``, ``sign``) that torch applies to floats only:
    ``fn(t, x)``, same shape and dtype (integers pass through unchanged)."""
    fn = getattr(op, name)

    def run(t, x):
        return fn(x)
    run.__name__ = name
    return run


def compare(name: str):
    """The translation of the comparison ``name`` (``"equal"``, ``"less"``, ... as in ``builder.nn.op``): ``fn(t, a,
    b)``, a bool tensor of the broadcast shape (torch's promotion of the operands first); two sizes / numbers are
    compared in Python."""
    def fn(t, a, b):
        return binary(name, a, b)
    fn.__name__ = name
    return fn


def maximum(t, a, b):
    """``torch.maximum(a, b)``: the elementwise larger, broadcast shapes, torch's type promotion
    (:func:`~.operands.binary`)."""
    return binary("maximum", a, b)


def minimum(t, a, b):
    """``torch.minimum(a, b)``: the elementwise smaller, broadcast shapes, torch's type promotion
    (:func:`~.operands.binary`)."""
    return binary("minimum", a, b)


def clamp(t, x, min=None, max=None):
    """``torch.clamp(x, min=None, max=None)``: ``min(max(x, min), max)`` with either bound omitted; the bounds are
    numbers or tensors, broadcast shapes, torch's type promotion (:func:`~.operands.binary`)."""
    if min is not None:
        x = binary("maximum", x, min)
    if max is not None:
        x = binary("minimum", x, max)
    return x


def where(t, cond, a=None, b=None):
    """``torch.where(cond, a, b)``: ``a`` where ``cond`` else ``b`` (broadcast; tensors of different dtypes promoted as
    torch does, two numbers as a constant, float32 when either is a float). ``torch.where(cond)`` alone is
    ``cond.nonzero(as_tuple=True)``: a tuple of one int64 index tensor per dim of ``cond``, of the data-dependent
    length."""
    if a is None:   # torch.where(cond) = cond.nonzero(as_tuple=True): one 1-D index tensor per dim
        idx = op.nonzero(at_least_1d(t, cond))
        n = idx.shape[1]
        return tuple(t.reshape(op.take(idx, to_tensor(i, "int64"), axis=0), [n]) for i in range(idx.shape[0]))
    if is_tensor(a) and is_tensor(b):
        dt = torch_promote(a.dtype, b.dtype)
        a, b = as_dtype(a, dt), as_dtype(b, dt)
    elif not is_tensor(a) and not is_tensor(b):
        a = to_tensor(a, "float32" if isinstance(a, float) or isinstance(b, float) else None)
    return op.where(cond, a, b)


def masked_fill(t, x, mask, value):
    """``Tensor.masked_fill(mask, value)``: ``value`` where the bool ``mask`` (broadcast to ``x``) is True; the result
    has ``x``'s shape and dtype (a float value for an integer ``x`` is truncated)."""
    if is_tensor(value):
        value = as_dtype(value, x.dtype)
    elif not is_float(x.dtype) and isinstance(value, float):
        value = int(value)
    return op.where(mask, value, x)


def logical_and(t, a, b):
    """``torch.logical_and(a, b)``: a bool tensor of the broadcast shape (nonzero is True); two Python values are
    and-ed in Python."""
    if not is_tensor(a) and not is_tensor(b):
        return a and b
    a = to_tensor(a, "bool") if not is_tensor(a) else as_dtype(a, "bool")
    return op.where(a, to_tensor(b, "bool") if not is_tensor(b) else as_dtype(b, "bool"), False)


def logical_or(t, a, b):
    """``torch.logical_or(a, b)``: a bool tensor of the broadcast shape (nonzero is True); two Python values are or-ed
    in Python."""
    if not is_tensor(a) and not is_tensor(b):
        return a or b
    a = to_tensor(a, "bool") if not is_tensor(a) else as_dtype(a, "bool")
    return op.where(a, True, to_tensor(b, "bool") if not is_tensor(b) else as_dtype(b, "bool"))


def bitwise_and(t, a, b):
    """``torch.bitwise_and`` / ``a & b`` of bool tensors (:func:`logical_and`). Raises UnsupportedNodeError for integer
    tensors."""
    if (is_tensor(a) and a.dtype != "bool") or (is_tensor(b) and b.dtype != "bool"):
        raise UnsupportedNodeError("bitwise and of integer tensors (only bool tensors)")
    return logical_and(t, a, b)


def bitwise_or(t, a, b):
    """``torch.bitwise_or`` / ``a | b`` of bool tensors (:func:`logical_or`). Raises UnsupportedNodeError for integer
    tensors."""
    if (is_tensor(a) and a.dtype != "bool") or (is_tensor(b) and b.dtype != "bool"):
        raise UnsupportedNodeError("bitwise or of integer tensors (only bool tensors)")
    return logical_or(t, a, b)


def logical_not(t, x):
    """``torch.logical_not(x)``: True where ``x`` is zero; bool, ``x``'s shape."""
    return op.equal(as_dtype(x, "bool"), False)


def bitwise_not(t, x):
    """``torch.bitwise_not`` / ``~x`` of a bool tensor (:func:`logical_not`). Raises UnsupportedNodeError for an
    integer tensor."""
    if x.dtype != "bool":
        raise UnsupportedNodeError("bitwise not of an integer tensor (only bool tensors)")
    return logical_not(t, x)


def clamp_min(t, x, min):
    """``torch.clamp_min(x, min)``: :func:`clamp` with only the lower bound."""
    return clamp(t, x, min, None)


def clamp_max(t, x, max):
    """``torch.clamp_max(x, max)``: :func:`clamp` with only the upper bound."""
    return clamp(t, x, None, max)


def fmod(t, a, b):
    """``torch.fmod``: the C remainder, with the sign of the dividend (``floor_mod`` has the divisor's)."""
    if not is_tensor(a) and not is_tensor(b):
        return math.fmod(a, b)
    r = binary("floor_mod", a, b)
    a_t = to_tensor(a, r.dtype)
    b_t = to_tensor(b, r.dtype)
    zero = to_tensor(0, r.dtype)
    wrong = op.where(op.not_equal(r, zero), op.not_equal(op.less(r, zero), op.less(a_t, zero)), False)
    return op.where(wrong, binary("subtract", r, b_t), r)


def logical_xor(t, a, b):
    """``torch.logical_xor``: bool, true where exactly one operand is nonzero (numbers broadcast)."""
    a = to_tensor(a, "bool") if not is_tensor(a) else as_dtype(a, "bool")
    b = to_tensor(b, "bool") if not is_tensor(b) else as_dtype(b, "bool")
    return op.not_equal(a, b)


def bitwise_xor(t, a, b):
    """``torch.bitwise_xor`` / ``^`` of bool tensors (:func:`logical_xor`). Raises UnsupportedNodeError for
    integer tensors."""
    if (is_tensor(a) and a.dtype != "bool") or (is_tensor(b) and b.dtype != "bool"):
        raise UnsupportedNodeError("bitwise xor of integer tensors (only bool tensors)")
    return logical_xor(t, a, b)


def scalar_math(name: str) -> Callable:
    """The translation of ``math.<name>`` (``math.sqrt`` & co.) on a size or number known at import time: a Python
    number. Raises UnsupportedNodeError for a symbolic size (it has no value at import time)."""
    fn = getattr(math, name)

    def run(t, v):
        s = static(v) if not isinstance(v, float) else v
        if s is None:
            raise UnsupportedNodeError(f"math.{name} of the symbolic size {v}")
        return fn(s)
    return run
