"""Tensor-expression definitions of the graph-level operators (our TOPI).

Each function takes :class:`~builder.te.tensor.Tensor`\\ s plus Python attributes and returns the
output :class:`~builder.te.tensor.Tensor`; intermediate stages (reduction accumulators, softmax's
max / exp / sum, ...) are ordinary computes that :func:`builder.te.create_prim_func` turns into
``alloc_buffer``\\ s. The legalizer lowers every graph-level call with one of these.

Conventions

* Shapes may hold symbolic int64 dims (:class:`builder.ir.expr.Var` or expressions of them); every
  function works from the shapes of its inputs and never assumes static sizes.
* Broadcasting follows numpy (https://numpy.org/doc/stable/user/basics.broadcasting.html): shapes
  align from the right, a dim of static size 1 broadcasts, and two symbolic dims that cannot be
  proven equal are assumed equal (the left one is kept, as the graph-level shape inference does).
* Precision: ``float16`` / ``bfloat16`` values are converted to ``float32`` when loaded; math,
  reductions and accumulations run in ``float32`` and the result is converted back to the output
  dtype at the end (a separate cast stage after a reduction). ``float64`` stays ``float64``.
* Compute names follow TVM's TOPI (``T_add``, ``T_transpose``, ``T_softmax_norm``, ``matmul``,
  ``conv1d_ncw``, ...); accumulators feeding a cast stage are named ``<name>_acc``.
"""
from __future__ import annotations

import builtins
import math
from typing import Callable, Sequence, Union

from ..ir import expr as E
from ..ir import tir
from ..ir.expr import PrimExpr
from . import tensor as _te
from .tensor import Tensor

__all__ = [
    # unary
    "relu", "silu", "gelu", "gelu_tanh", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin",
    "cos", "erf", "negative", "abs", "unary",
    # binary
    "broadcast_binary", "broadcast_shape", "add", "subtract", "multiply", "divide",
    "floor_divide", "maximum", "minimum", "power", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal",
    # layout / dtype
    "astype", "permute_dims", "reshape", "take",
    # linear algebra and nn
    "matmul", "linear", "layer_norm", "rms_norm", "softmax", "conv1d",
    # reductions
    "sum", "mean", "max", "min",
]

Operand = Union[Tensor, PrimExpr, int, float]

_LOW_FLOATS = ("float16", "bfloat16")


# ---------------------------------------------------------------------------------------------
# helpers


def _is_float(dtype: str) -> bool:
    return E.is_float_dtype(dtype)


def _compute_dtype(dtype: str) -> str:
    """The dtype math runs in for values of ``dtype``: float32 for 16-bit floats, else itself."""
    return "float32" if dtype in _LOW_FLOATS else dtype


def _up(v: PrimExpr) -> PrimExpr:
    """Convert a loaded 16-bit float to float32 (other dtypes pass through)."""
    return v.astype("float32") if v.dtype in _LOW_FLOATS else v


def _cast(v: PrimExpr, dtype: str) -> PrimExpr:
    """Convert ``v`` to ``dtype``; 16-bit floats go through float32 first (exact), and a
    conversion to bool is ``v != 0`` (numpy's truth value, not a truncation)."""
    if v.dtype == dtype:
        return v
    v = _up(v)
    if v.dtype == dtype:
        return v
    if dtype == "bool":
        return E.NE(v, E.const(0, v.dtype))
    return v.astype(dtype)


def _promote(a: str, b: str) -> str:
    """Common dtype of two operands: equal dtypes stay; float beats int; the wider wins."""
    if a == b:
        return a
    fa, fb = _is_float(a), _is_float(b)
    if fa != fb:
        return a if fa else b
    bits = {"bool": 1}

    def width(d: str) -> int:
        if d in bits:
            return bits[d]
        digits = "".join(c for c in d if c.isdigit())
        return int(digits) if digits else 32

    return a if width(a) >= width(b) else b


def _is_static_one(d: PrimExpr) -> bool:
    return isinstance(d, E.IntImm) and d.value == 1


def _static(d: PrimExpr) -> int | None:
    d = E.simplify(d)
    return d.value if isinstance(d, E.IntImm) else None


def _dim_str(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _norm_axis(axis: int, ndim: int, what: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{what}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{what}: axis {axis} is out of range for a tensor of ndim {ndim}")
    return axis % ndim


def _norm_axes(axes, ndim: int, what: str) -> list[int]:
    """Normalized, sorted, duplicate-free axes; ``None`` means all axes."""
    if axes is None:
        return list(range(ndim))
    if isinstance(axes, int):
        axes = [axes]
    out = sorted({_norm_axis(a, ndim, what) for a in axes})
    if len(out) != len(list(axes)):
        raise ValueError(f"{what}: repeated axis in {list(axes)}")
    return out


def _product(dims: Sequence[PrimExpr]) -> PrimExpr:
    out: PrimExpr = E.IntImm(1, "int64")
    for d in dims:
        out = out * d
    return E.simplify(out)


def _count(dims: Sequence[PrimExpr], dtype: str) -> PrimExpr:
    """The number of elements of ``dims`` as a ``dtype`` (float) scalar."""
    n = _product(dims)
    if isinstance(n, E.IntImm):
        return E.const(float(n.value), dtype)
    return n.astype(dtype)


def _as_tensor_or_scalar(x: Operand):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (PrimExpr, int, float)):
        return E.convert(x)
    raise TypeError(f"expected a te.Tensor or a scalar, got {type(x).__name__}")


def broadcast_shape(a: Sequence[PrimExpr], b: Sequence[PrimExpr], what: str = "broadcast"
                    ) -> tuple[PrimExpr, ...]:
    """numpy broadcasting of two shapes (see the module docstring).

    Raises ValueError when two static dims differ and neither is 1.
    """
    out = []
    for i in range(1, builtins.max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else E.IntImm(1, "int64")
        db = b[-i] if i <= len(b) else E.IntImm(1, "int64")
        if _is_static_one(da):
            out.append(db)
        elif _is_static_one(db):
            out.append(da)
        else:
            sa, sb = _static(da), _static(db)
            if sa is not None and sb is not None and sa != sb:
                raise ValueError(f"{what}: shapes {_dim_str(a)} and {_dim_str(b)} do not broadcast "
                                 f"(dim {sa} vs {sb})")
            out.append(da)
    return tuple(reversed(out))


def _broadcast_index(idx: Sequence[PrimExpr], shape: Sequence[PrimExpr]) -> tuple:
    """Index of an operand of ``shape`` for the output index ``idx`` (aligned right; a static
    size-1 dim reads element 0)."""
    lead = len(idx) - len(shape)
    return tuple(E.IntImm(0, "int64") if _is_static_one(d) else idx[lead + k]
                 for k, d in enumerate(shape))


def _two_stage(shape, fbody: Callable, acc_dtype: str, out_dtype: str, name: str,
               fepilogue: Callable | None = None) -> Tensor:
    """A reduction compute in ``acc_dtype`` followed, when needed, by an elementwise stage that
    applies ``fepilogue(acc_value, idx)`` (if given) and converts to ``out_dtype``.

    ``fbody(*idx)`` returns the reduction (a ``Reduce`` in ``acc_dtype``).
    """
    if acc_dtype == out_dtype and fepilogue is None:
        return _te.compute(shape, fbody, name=name)
    acc = _te.compute(shape, fbody, name=name + "_acc")

    def fout(*idx):
        v = acc[idx]
        if fepilogue is not None:
            v = fepilogue(v, idx)
        return _cast(v, out_dtype)

    return _te.compute(shape, fout, name=name)


# ---------------------------------------------------------------------------------------------
# unary elementwise


def unary(x: Tensor, fscalar: Callable[[PrimExpr], PrimExpr], name: str = "compute",
          out_dtype: str | None = None) -> Tensor:
    """``out[i] = fscalar(x[i])`` with 16-bit floats computed in float32 and converted back.

    ``out_dtype`` defaults to ``x.dtype`` (or bool when ``fscalar`` returns a bool).
    """
    def f(*idx):
        r = E.convert(fscalar(_up(x[idx])))
        dt = out_dtype or ("bool" if r.dtype == "bool" else x.dtype)
        return _cast(r, dt)

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


def erf(x: Tensor) -> Tensor:
    """Gauss error function (``torch.erf`` / ``scipy.special.erf``)."""
    return unary(x, tir.erf, "T_erf")


def negative(x: Tensor) -> Tensor:
    """``-x`` (``numpy.negative``): floats are multiplied by ``-1`` (sign of zero not guaranteed
    under the code generator's ``nsz`` fast-math flag), integers wrap."""
    def f(v):
        if _is_float(v.dtype):
            return v * E.const(-1.0, v.dtype)
        return E.Sub(E.const(0, v.dtype), v)

    return unary(x, f, "T_negative")


def abs(x: Tensor) -> Tensor:  # noqa: A001 - op name
    """``|x|`` (``numpy.abs``); unsigned ints and bools are returned unchanged (copied)."""
    return unary(x, tir.abs, "T_abs")


# ---------------------------------------------------------------------------------------------
# binary elementwise with broadcasting


def broadcast_binary(a: Operand, b: Operand, fscalar: Callable[[PrimExpr, PrimExpr], PrimExpr],
                     name: str, out_dtype: str | None = None) -> Tensor:
    """``out[i] = fscalar(a[ia], b[ib])`` with numpy broadcasting (module docstring).

    ``a`` / ``b`` are tensors or scalars (Python numbers or PrimExprs, treated as 0-d); at least
    one must be a tensor. Both operands are converted to their common dtype (equal dtypes stay;
    float beats int; the wider wins), with 16-bit floats promoted to float32 for the math.
    ``out_dtype`` defaults to the common dtype, or bool when ``fscalar`` returns a bool.
    Raises ValueError for shapes that do not broadcast.
    """
    ta, tb = _as_tensor_or_scalar(a), _as_tensor_or_scalar(b)
    if not isinstance(ta, Tensor) and not isinstance(tb, Tensor):
        raise TypeError(f"{name}: at least one operand must be a te.Tensor")
    # a Python number adopts the tensor's dtype (a float with an integer tensor stays float32)
    if isinstance(ta, Tensor) and isinstance(b, (int, float)):
        tb = E.convert(b, ta.dtype)
    if isinstance(tb, Tensor) and isinstance(a, (int, float)):
        ta = E.convert(a, tb.dtype)
    common = _promote(ta.dtype, tb.dtype)
    work = _compute_dtype(common)
    sa = ta.shape if isinstance(ta, Tensor) else ()
    sb = tb.shape if isinstance(tb, Tensor) else ()
    shape = broadcast_shape(sa, sb, name)

    def load(t, idx):
        v = t[_broadcast_index(idx, t.shape)] if isinstance(t, Tensor) else t
        return _cast(v, work)

    def f(*idx):
        r = E.convert(fscalar(load(ta, idx), load(tb, idx)))
        dt = out_dtype or ("bool" if r.dtype == "bool" else common)
        return _cast(r, dt)

    return _te.compute(shape, f, name=name)


def _same(cls):
    def f(x: PrimExpr, y: PrimExpr) -> PrimExpr:
        return cls(x, y)

    return f


def add(a: Operand, b: Operand) -> Tensor:
    """``a + b`` with broadcasting (``numpy.add``)."""
    return broadcast_binary(a, b, _same(E.Add), "T_add")


def subtract(a: Operand, b: Operand) -> Tensor:
    """``a - b`` with broadcasting (``numpy.subtract``)."""
    return broadcast_binary(a, b, _same(E.Sub), "T_subtract")


def multiply(a: Operand, b: Operand) -> Tensor:
    """``a * b`` with broadcasting (``numpy.multiply``)."""
    return broadcast_binary(a, b, _same(E.Mul), "T_multiply")


def _int_div(cls, x: PrimExpr, y: PrimExpr) -> PrimExpr:
    """Integer division that never traps: a zero divisor gives 0 (numpy's result) instead of
    a hardware exception (the divisor is replaced by 1, then the quotient by 0)."""
    zero = E.const(0, y.dtype)
    is_zero = E.EQ(y, zero)
    q = cls(x, E.Select(is_zero, E.const(1, y.dtype), y))
    return E.Select(is_zero, E.const(0, x.dtype), q)


def divide(a: Operand, b: Operand) -> Tensor:
    """``a / b`` with broadcasting: true division for floats (``numpy.divide``); for integers
    C-style division truncating toward zero (TVM's ``topi.divide``; the dtype is kept), with
    ``x / 0 == 0`` (numpy's integer result) instead of a trap."""
    def f(x, y):
        return E.Div(x, y) if _is_float(x.dtype) else _int_div(E.Div, x, y)

    return broadcast_binary(a, b, f, "T_divide")


def floor_divide(a: Operand, b: Operand) -> Tensor:
    """``a // b`` with broadcasting (``numpy.floor_divide``): ``floor(a / b)`` for floats; for
    integers floor division with ``x // 0 == 0``."""
    def f(x, y):
        if _is_float(x.dtype):
            return tir.floor(x / y)
        return _int_div(E.FloorDiv, x, y)

    return broadcast_binary(a, b, f, "T_floor_divide")


def maximum(a: Operand, b: Operand) -> Tensor:
    """Elementwise ``max(a, b)`` with broadcasting (``numpy.maximum``)."""
    return broadcast_binary(a, b, _same(E.Max), "T_maximum")


def minimum(a: Operand, b: Operand) -> Tensor:
    """Elementwise ``min(a, b)`` with broadcasting (``numpy.minimum``)."""
    return broadcast_binary(a, b, _same(E.Min), "T_minimum")


def power(a: Operand, b: Operand) -> Tensor:
    """``a ** b`` with broadcasting (``numpy.power``). Integers are raised in float64 and
    converted back (exact while the result fits in 53 bits)."""
    def f(x, y):
        if _is_float(x.dtype):
            return tir.power(x, y)
        r = tir.power(x.astype("float64"), y.astype("float64"))
        return tir.round(r).astype(x.dtype)

    return broadcast_binary(a, b, f, "T_power")


def equal(a: Operand, b: Operand) -> Tensor:
    """``a == b`` (bool) with broadcasting (``numpy.equal``)."""
    return broadcast_binary(a, b, _same(E.EQ), "T_equal", "bool")


def not_equal(a: Operand, b: Operand) -> Tensor:
    """``a != b`` (bool) with broadcasting (``numpy.not_equal``; true for NaN operands)."""
    return broadcast_binary(a, b, _same(E.NE), "T_not_equal", "bool")


def less(a: Operand, b: Operand) -> Tensor:
    """``a < b`` (bool) with broadcasting (``numpy.less``)."""
    return broadcast_binary(a, b, _same(E.LT), "T_less", "bool")


def less_equal(a: Operand, b: Operand) -> Tensor:
    """``a <= b`` (bool) with broadcasting (``numpy.less_equal``)."""
    return broadcast_binary(a, b, _same(E.LE), "T_less_equal", "bool")


def greater(a: Operand, b: Operand) -> Tensor:
    """``a > b`` (bool) with broadcasting (``numpy.greater``)."""
    return broadcast_binary(a, b, _same(E.GT), "T_greater", "bool")


def greater_equal(a: Operand, b: Operand) -> Tensor:
    """``a >= b`` (bool) with broadcasting (``numpy.greater_equal``)."""
    return broadcast_binary(a, b, _same(E.GE), "T_greater_equal", "bool")


# ---------------------------------------------------------------------------------------------
# dtype and layout


def astype(x: Tensor, dtype: str) -> Tensor:
    """Elementwise conversion to ``dtype`` (``numpy.ndarray.astype``): float -> int truncates
    toward zero, -> bool is ``x != 0``, 16-bit floats convert through float32 (exact)."""
    return _te.compute(x.shape, lambda *i: _cast(x[i], dtype), name="T_cast")


def permute_dims(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """Transpose (``numpy.transpose``): output dim ``j`` is input dim ``axes[j]``; ``None``
    reverses the dims. Raises ValueError when ``axes`` is not a permutation."""
    nd = x.ndim
    ax = list(range(nd))[::-1] if axes is None else [_norm_axis(a, nd, "permute_dims")
                                                     for a in axes]
    if sorted(ax) != list(range(nd)):
        raise ValueError(f"permute_dims: axes {axes} are not a permutation of {nd} dims")
    shape = [x.shape[a] for a in ax]

    def f(*idx):
        src = [None] * nd
        for j, a in enumerate(ax):
            src[a] = idx[j]
        return x[tuple(src)]

    return _te.compute(shape, f, name="T_transpose")


def _resolve_shape(shape: Sequence[PrimExpr], new_shape: Sequence) -> list[PrimExpr]:
    """``new_shape`` as int64 PrimExprs with one ``-1`` inferred from ``shape``."""
    new = [E.convert(d) for d in new_shape]
    new = [d.astype("int64") if d.dtype != "int64" else d for d in new]
    holes = [i for i, d in enumerate(new) if isinstance(d, E.IntImm) and d.value == -1]
    if len(holes) > 1:
        raise ValueError(f"reshape: at most one -1 allowed in {_dim_str(new)}")
    if holes:
        known = [d for i, d in enumerate(new) if i != holes[0]]
        total, part = _product(shape), _product(known)
        if isinstance(total, E.IntImm) and isinstance(part, E.IntImm):
            if part.value == 0 or total.value % part.value:
                raise ValueError(f"reshape: cannot reshape {_dim_str(shape)} to {_dim_str(new)}")
            inferred: PrimExpr = E.IntImm(total.value // part.value, "int64")
        else:
            # cancel the known dims one by one against the dims of `shape`
            remaining = list(shape)
            rest = []
            for d in known:
                for j, s in enumerate(remaining):
                    if E.prove_equal(s, d):
                        del remaining[j]
                        break
                else:
                    rest.append(d)
            inferred = _product(remaining)
            if rest:
                inferred = E.simplify(inferred // _product(rest))
        new[holes[0]] = inferred
    return new


def reshape(x: Tensor, new_shape: Sequence) -> Tensor:
    """Row-major reshape (``numpy.reshape``, C order) to ``new_shape`` (ints / int PrimExprs, one
    ``-1`` allowed). Leading and trailing dims shared with the input are indexed directly; the
    middle dims go through the flat index (``FloorDiv`` / ``FloorMod`` by the input dims).
    Raises ValueError when the static element counts differ."""
    old = list(x.shape)
    new = _resolve_shape(old, new_shape)
    t_old, t_new = _product(old), _product(new)
    if isinstance(t_old, E.IntImm) and isinstance(t_new, E.IntImm) and t_old.value != t_new.value:
        raise ValueError(f"reshape: cannot reshape {_dim_str(old)} ({t_old.value} elements) to "
                         f"{_dim_str(new)} ({t_new.value} elements)")
    lim = builtins.min(len(old), len(new))
    p = 0
    while p < lim and E.prove_equal(old[p], new[p]):
        p += 1
    s = 0
    while s < lim - p and E.prove_equal(old[-1 - s], new[-1 - s]):
        s += 1
    mid_old = old[p:len(old) - s]
    mid_new = new[p:len(new) - s]

    def f(*idx):
        lead = list(idx[:p])
        trail = list(idx[len(new) - s:]) if s else []
        flat: PrimExpr = E.IntImm(0, "int64")
        for d, i in zip(mid_new, idx[p:len(new) - s]):
            flat = flat * d + i
        mid: list[PrimExpr] = []
        for d in reversed(mid_old[1:]):
            mid.append(E.IntImm(0, "int64") if _is_static_one(d) else flat % d)
            flat = flat // d
        if mid_old:
            mid.append(E.IntImm(0, "int64") if _is_static_one(mid_old[0]) else flat)
        mid.reverse()
        return x[tuple(lead + mid + trail)]

    return _te.compute(new, f, name="T_reshape")


def take(x: Tensor, indices: Tensor, axis: int = 0, mode: str = "fast") -> Tensor:
    """Gather along ``axis`` (``numpy.take``): ``out[pre, j..., post] = x[pre, indices[j...],
    post]`` with shape ``x.shape[:axis] + indices.shape + x.shape[axis + 1:]``.

    ``mode``: ``"fast"`` assumes every index is in range (no check), ``"clip"`` clamps to
    ``[0, dim - 1]``, ``"wrap"`` takes the index modulo the dim (numpy's modes). Indices may be
    any integer dtype (int32 / int64). Raises TypeError for non-integer indices.
    """
    if not E.is_int_dtype(indices.dtype) or indices.dtype == "bool":
        raise TypeError(f"take: indices must be integers, got {indices.dtype}")
    if mode not in ("fast", "clip", "wrap"):
        raise ValueError(f"take: unknown mode {mode!r}")
    ax = _norm_axis(axis, x.ndim, "take")
    ni = indices.ndim
    shape = list(x.shape[:ax]) + list(indices.shape) + list(x.shape[ax + 1:])
    dim = x.shape[ax]

    def f(*idx):
        j = indices[tuple(idx[ax:ax + ni])].astype("int64")
        if mode == "clip":
            j = tir.minimum(tir.maximum(j, E.IntImm(0, "int64")), dim - 1)
        elif mode == "wrap":
            j = E.FloorMod(j, dim)
        return x[tuple(idx[:ax]) + (j,) + tuple(idx[ax + ni:])]

    return _te.compute(shape, f, name="T_take")


# ---------------------------------------------------------------------------------------------
# matmul / linear


def _acc_dtype(in_dtype: str, out_dtype: str) -> str:
    """Accumulator of a dot product of ``in_dtype`` values giving ``out_dtype``: float32 for
    16-bit floats (float64 when either side is float64), the output dtype otherwise (numpy
    accumulates integers in the result dtype)."""
    if out_dtype in _LOW_FLOATS or (_is_float(in_dtype) and not _is_float(out_dtype)):
        return "float64" if in_dtype == "float64" else "float32"
    return out_dtype


def _out_dtype(in_dtype: str, out_dtype: str | None) -> str:
    return in_dtype if out_dtype in (None, "", "void") else out_dtype


def matmul(a: Tensor, b: Tensor, out_dtype: str | None = None) -> Tensor:
    """Matrix product with ``numpy.matmul`` semantics
    (https://numpy.org/doc/stable/reference/generated/numpy.matmul.html): a 1-D ``a`` is a row
    vector and a 1-D ``b`` a column vector (the added dim is removed from the result), and the
    batch dims (all but the last two) broadcast.

    ``out_dtype`` (default: the input dtype; ``"void"`` means default) is the result dtype. The
    sum runs in float32 for 16-bit floats (an accumulator stage ``matmul_acc`` then a cast stage
    ``matmul``), in the result dtype otherwise. Raises ValueError for 0-d operands or static
    reduction dims that differ.
    """
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must have ndim >= 1")
    in_dtype = _promote(a.dtype, b.dtype)
    odt = _out_dtype(in_dtype, out_dtype)
    acc = _acc_dtype(in_dtype, odt)
    ka = a.shape[-1]
    kb = b.shape[-2] if b.ndim >= 2 else b.shape[0]
    sa_, sb_ = _static(ka), _static(kb)
    if sa_ is not None and sb_ is not None and sa_ != sb_:
        raise ValueError(f"matmul: reduction dims differ: {_dim_str(a.shape)} @ "
                         f"{_dim_str(b.shape)}")
    a_batch = list(a.shape[:-2])
    b_batch = list(b.shape[:-2])
    batch = list(broadcast_shape(a_batch, b_batch, "matmul"))
    shape = batch + ([a.shape[-2]] if a.ndim >= 2 else []) + ([b.shape[-1]] if b.ndim >= 2 else [])
    nb = len(batch)

    def fbody(*idx):
        k = _te.reduce_axis((0, ka), name="k")
        bidx = idx[:nb]
        rest = list(idx[nb:])
        ai = _broadcast_index(bidx, a_batch) + ((rest.pop(0),) if a.ndim >= 2 else ()) + (k.var,)
        if b.ndim >= 2:
            bi = _broadcast_index(bidx, b_batch) + (k.var, rest.pop(0))
        else:
            bi = (k.var,)
        return _te.sum(_cast(a[ai], acc) * _cast(b[bi], acc), axis=k)

    return _two_stage(shape, fbody, acc, odt, "matmul")


def linear(x: Tensor, w: Tensor, bias: Tensor | None = None,
           out_dtype: str | None = None) -> Tensor:
    """``x @ w.T (+ bias)`` (``torch.nn.functional.linear``) with ``w`` in (out, in) layout, read
    directly as ``w[j, k]``: the fused form of ``matmul(x, permute_dims(w))``.

    ``x`` has any number of leading dims (``(..., in)``), ``w`` is ``(out, in)`` and ``bias``
    ``(out,)``. Precision as in :func:`matmul`; the bias is added in the accumulator dtype in the
    cast stage. Raises ValueError for a non-2-D weight or static ``in`` dims that differ.
    """
    if w.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out, in), got {_dim_str(w.shape)}")
    if x.ndim == 0:
        raise ValueError("linear: input must have ndim >= 1")
    if bias is not None and bias.ndim != 1:
        raise ValueError(f"linear: bias must be 1-D (out,), got {_dim_str(bias.shape)}")
    kx, kw = _static(x.shape[-1]), _static(w.shape[1])
    if kx is not None and kw is not None and kx != kw:
        raise ValueError(f"linear: input {_dim_str(x.shape)} does not match weight "
                         f"{_dim_str(w.shape)}")
    in_dtype = _promote(x.dtype, w.dtype)
    odt = _out_dtype(in_dtype, out_dtype)
    acc = _acc_dtype(in_dtype, odt)
    shape = list(x.shape[:-1]) + [w.shape[0]]
    kdim = x.shape[-1]

    def fbody(*idx):
        k = _te.reduce_axis((0, kdim), name="k")
        return _te.sum(_cast(x[tuple(idx[:-1]) + (k.var,)], acc) * _cast(w[idx[-1], k.var], acc),
                       axis=k)

    epilogue = None
    if bias is not None:
        def epilogue(v, idx):
            return v + _cast(bias[idx[-1]], acc)

    return _two_stage(shape, fbody, acc, odt, "NT_matmul", epilogue)


# ---------------------------------------------------------------------------------------------
# reductions


def _reduced_shape(shape, axes: list[int], keepdims: bool) -> list[PrimExpr]:
    if keepdims:
        return [E.IntImm(1, "int64") if d in axes else s for d, s in enumerate(shape)]
    return [s for d, s in enumerate(shape) if d not in axes]


def _reduce_axes(shape, axes: list[int]) -> list:
    return [_te.reduce_axis((0, shape[a]), name=f"k{a}") for a in axes]


def _full_index(out_idx, axes: list[int], ndim: int, rvars, keepdims: bool) -> tuple:
    """Input index of a reduction: output index for kept dims, reduce vars for ``axes``."""
    full, it, rv = [], iter(out_idx), iter(rvars)
    for d in range(ndim):
        if d in axes:
            full.append(next(rv).var)
            if keepdims:
                next(it)
        else:
            full.append(next(it))
    return tuple(full)


def _kept_index(full_idx, axes: list[int]) -> tuple:
    """Index into a ``keepdims=False`` reduction result from a full index."""
    return tuple(i for d, i in enumerate(full_idx) if d not in axes)


def _reduce(x: Tensor, axis, keepdims: bool, reducer, name: str, acc_dtype: str,
            out_dtype: str, fepilogue=None) -> Tensor:
    axes = _norm_axes(axis, x.ndim, name)
    shape = _reduced_shape(x.shape, axes, keepdims)

    def fbody(*idx):
        rv = _reduce_axes(x.shape, axes)
        return reducer(_cast(x[_full_index(idx, axes, x.ndim, rv, keepdims)], acc_dtype), axis=rv)

    epi = None if fepilogue is None else (lambda v, idx: fepilogue(v, axes))
    return _two_stage(shape, fbody, acc_dtype, out_dtype, name, epi)


def sum(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - op name
    """Sum over ``axis`` (int, list or None = all; negative allowed) (``numpy.sum``).

    16-bit floats accumulate in float32 (then a cast stage); bools are summed as int64; other
    dtypes accumulate in their own dtype (TVM's ``topi.sum``)."""
    out = "int64" if x.dtype == "bool" else x.dtype
    return _reduce(x, axis, keepdims, _te.sum, "T_sum", _compute_dtype(out), out)


def mean(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over ``axis`` (``numpy.mean``): the sum (float32 for 16-bit floats) divided
    by the number of reduced elements, in an epilogue stage. Integer inputs keep their dtype and
    divide truncating toward zero (TVM's ``topi.mean``)."""
    acc = _compute_dtype(x.dtype)

    def epi(v, axes):
        n = _product([x.shape[a] for a in axes])
        return v / (_count([n], acc) if _is_float(acc) else n.astype(acc))

    return _reduce(x, axis, keepdims, _te.sum, "T_mean", acc, x.dtype, epi)


def max(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - op name
    """Maximum over ``axis`` (``numpy.max``); identity is the dtype's lowest finite value."""
    return _reduce(x, axis, keepdims, _te.max, "T_max", _compute_dtype(x.dtype), x.dtype)


def min(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - op name
    """Minimum over ``axis`` (``numpy.min``); identity is the dtype's highest finite value."""
    return _reduce(x, axis, keepdims, _te.min, "T_min", _compute_dtype(x.dtype), x.dtype)


# ---------------------------------------------------------------------------------------------
# normalization and softmax


def _norm_acc(dtype: str) -> str:
    if not _is_float(dtype):
        raise TypeError(f"normalization needs a floating-point tensor, got {dtype}")
    return "float64" if dtype == "float64" else "float32"


def _check_param(p: Tensor | None, x: Tensor, axes: list[int], what: str) -> None:
    if p is None:
        return
    expected = [x.shape[a] for a in axes]
    if p.ndim != len(expected):
        raise ValueError(f"{what} shape {_dim_str(p.shape)} does not match the normalized dims "
                         f"{_dim_str(expected)} of {_dim_str(x.shape)}")
    for d, e in zip(p.shape, expected):
        sd, se = _static(d), _static(e)
        if sd is not None and se is not None and sd != se:
            raise ValueError(f"{what} shape {_dim_str(p.shape)} does not match the normalized "
                             f"dims {_dim_str(expected)} of {_dim_str(x.shape)}")


def layer_norm(x: Tensor, gamma: Tensor | None, beta: Tensor | None, axes, epsilon: float = 1e-5
               ) -> Tensor:
    """Layer normalization over ``axes`` (``torch.nn.LayerNorm``,
    https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html)::

        y = (x - mean) / sqrt(var + eps) * gamma + beta

    with the mean and the biased variance (divide by N) over ``axes`` (negative allowed).
    ``gamma`` / ``beta`` have the shape of the normalized dims (in axis order) and may be None.
    Two-pass and in float32 (float64 for float64 inputs): ``T_layer_norm_sum`` -> ``_mean`` ->
    ``_var`` (sum of squared deviations) -> ``_rstd`` -> ``T_layer_norm``.
    """
    acc = _norm_acc(x.dtype)
    ax = _norm_axes(axes, x.ndim, "layer_norm")
    _check_param(gamma, x, ax, "layer_norm: gamma")
    _check_param(beta, x, ax, "layer_norm: beta")
    red_shape = _reduced_shape(x.shape, ax, False)
    n = _count([x.shape[a] for a in ax], acc)
    nd = x.ndim

    def fsum(*idx):
        rv = _reduce_axes(x.shape, ax)
        return _te.sum(_cast(x[_full_index(idx, ax, nd, rv, False)], acc), axis=rv)

    total = _te.compute(red_shape, fsum, name="T_layer_norm_sum")
    mu = _te.compute(red_shape, lambda *i: total[i] / n, name="T_layer_norm_mean")

    def fvar(*idx):
        rv = _reduce_axes(x.shape, ax)
        d = _cast(x[_full_index(idx, ax, nd, rv, False)], acc) - mu[idx]
        return _te.sum(d * d, axis=rv)

    var = _te.compute(red_shape, fvar, name="T_layer_norm_var")
    eps = E.const(float(epsilon), acc)
    rstd = _te.compute(red_shape, lambda *i: 1.0 / tir.sqrt(var[i] / n + eps),
                       name="T_layer_norm_rstd")

    def fout(*idx):
        k = _kept_index(idx, ax)
        p = tuple(idx[a] for a in ax)
        v = (_cast(x[idx], acc) - mu[k]) * rstd[k]
        if gamma is not None:
            v = v * _cast(gamma[p], acc)
        if beta is not None:
            v = v + _cast(beta[p], acc)
        return _cast(v, x.dtype)

    return _te.compute(x.shape, fout, name="T_layer_norm")


def rms_norm(x: Tensor, weight: Tensor | None, axes=-1, epsilon: float = 1e-5) -> Tensor:
    """RMS normalization (Zhang & Sennrich 2019; ``torch.nn.RMSNorm``)::

        y = x / sqrt(mean(x^2 over axes) + eps) * weight

    ``weight`` has the shape of the normalized dims (may be None). In float32 (float64 for
    float64): ``T_rms_norm_sumsq`` -> ``T_rms_norm_rstd`` -> ``T_rms_norm``.
    """
    acc = _norm_acc(x.dtype)
    ax = _norm_axes(axes, x.ndim, "rms_norm")
    _check_param(weight, x, ax, "rms_norm: weight")
    red_shape = _reduced_shape(x.shape, ax, False)
    n = _count([x.shape[a] for a in ax], acc)
    nd = x.ndim

    def fsq(*idx):
        rv = _reduce_axes(x.shape, ax)
        v = _cast(x[_full_index(idx, ax, nd, rv, False)], acc)
        return _te.sum(v * v, axis=rv)

    sumsq = _te.compute(red_shape, fsq, name="T_rms_norm_sumsq")
    eps = E.const(float(epsilon), acc)
    rstd = _te.compute(red_shape, lambda *i: 1.0 / tir.sqrt(sumsq[i] / n + eps),
                       name="T_rms_norm_rstd")

    def fout(*idx):
        v = _cast(x[idx], acc) * rstd[_kept_index(idx, ax)]
        if weight is not None:
            v = v * _cast(weight[tuple(idx[a] for a in ax)], acc)
        return _cast(v, x.dtype)

    return _te.compute(x.shape, fout, name="T_rms_norm")


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """Numerically stable softmax along ``axis`` (``torch.softmax``)::

        y = exp(x - max(x)) / sum(exp(x - max(x)))

    Stages (float32 for 16-bit floats): ``T_softmax_maxelem``, ``T_softmax_exp``,
    ``T_softmax_expsum``, ``T_softmax_norm`` (TVM's names).
    """
    acc = _norm_acc(x.dtype)
    a = _norm_axis(axis, x.ndim, "softmax")
    ax = [a]
    red_shape = _reduced_shape(x.shape, ax, False)
    nd = x.ndim

    def fmax(*idx):
        rv = _reduce_axes(x.shape, ax)
        return _te.max(_cast(x[_full_index(idx, ax, nd, rv, False)], acc), axis=rv)

    mx = _te.compute(red_shape, fmax, name="T_softmax_maxelem")
    ex = _te.compute(x.shape, lambda *i: tir.exp(_cast(x[i], acc) - mx[_kept_index(i, ax)]),
                     name="T_softmax_exp")

    def fsum(*idx):
        rv = _reduce_axes(x.shape, ax)
        return _te.sum(ex[_full_index(idx, ax, nd, rv, False)], axis=rv)

    s = _te.compute(red_shape, fsum, name="T_softmax_expsum")
    return _te.compute(x.shape, lambda *i: _cast(ex[i] / s[_kept_index(i, ax)], x.dtype),
                       name="T_softmax_norm")


# ---------------------------------------------------------------------------------------------
# convolution


def _one(v, what: str) -> int:
    if isinstance(v, (list, tuple)):
        if len(v) != 1:
            raise ValueError(f"conv1d: {what} must have one value, got {v!r}")
        v = v[0]
    return int(v)


def conv1d(x: Tensor, w: Tensor, strides=1, padding=0, dilation=1, groups: int = 1,
           out_dtype: str | None = None) -> Tensor:
    """1-D convolution, NCW data and OIW weight (``torch.nn.Conv1d``,
    https://pytorch.org/docs/stable/generated/torch.nn.Conv1d.html; a cross-correlation)::

        out[n, o, t] = sum_{c, k} x_pad[n, g*C/G + c, t*stride + k*dilation] * w[o, c, k]
        g = o // (O / G),   W_out = (W + lo + hi - dilation*(K - 1) - 1) // stride + 1

    ``padding`` is an int, ``(p,)`` or ``(lo, hi)``; zero padding is applied inline with
    ``if_then_else`` on the bounds. ``strides`` / ``dilation`` are ints or 1-tuples. Precision
    as in :func:`matmul` (16-bit floats accumulate in float32, then a cast stage). Raises
    ValueError for non-3-D operands or channel counts that do not match ``groups``.
    """
    if x.ndim != 3 or w.ndim != 3:
        raise ValueError(f"conv1d: data and weight must be 3-D (NCW / OIW), got "
                         f"{_dim_str(x.shape)} and {_dim_str(w.shape)}")
    s = _one(strides, "strides")
    d = _one(dilation, "dilation")
    if isinstance(padding, (list, tuple)):
        if len(padding) == 1:
            lo = hi = int(padding[0])
        elif len(padding) == 2:
            lo, hi = int(padding[0]), int(padding[1])
        else:
            raise ValueError(f"conv1d: padding must be p, (p,) or (lo, hi), got {padding!r}")
    else:
        lo = hi = int(padding)
    g = int(groups)
    if s < 1 or d < 1 or g < 1 or lo < 0 or hi < 0:
        raise ValueError(f"conv1d: invalid strides={strides} dilation={dilation} groups={groups} "
                         f"padding={padding}")
    n, c, width = x.shape
    o, cg, k = w.shape
    sc, scg, so = _static(c), _static(cg), _static(o)
    if sc is not None and scg is not None and sc != scg * g:
        raise ValueError(f"conv1d: data has {sc} channels but weight {_dim_str(w.shape)} with "
                         f"groups={g} expects {scg * g}")
    if so is not None and so % g:
        raise ValueError(f"conv1d: {so} output channels are not divisible by groups={g}")
    out_w = E.simplify((width + (lo + hi - 1) - (k - 1) * d) // s + 1)
    in_dtype = _promote(x.dtype, w.dtype)
    odt = _out_dtype(in_dtype, out_dtype)
    acc = _acc_dtype(in_dtype, odt)
    o_per_g = E.simplify(o // g) if g > 1 else o

    def fbody(nn, oc, t):
        rc = _te.reduce_axis((0, cg), name="rc")
        rk = _te.reduce_axis((0, k), name="rk")
        pos = t * s + rk.var * d - lo if lo else t * s + rk.var * d
        chan = rc.var if g == 1 else (oc // o_per_g) * cg + rc.var
        v = _cast(x[nn, chan, pos], acc)
        conds = []
        if lo:
            conds.append(E.GE(pos, E.IntImm(0, "int64")))
        if hi:
            conds.append(E.LT(pos, width))
        if conds:
            v = tir.if_then_else(tir.all(*conds), v, E.const(0, acc))
        return _te.sum(v * _cast(w[oc, rc.var, rk.var], acc), axis=[rc, rk])

    return _two_stage((n, o, out_w), fbody, acc, odt, "conv1d_ncw")


# === section A: tensor creation / manipulation / reduction ops (issue 3) ===


# === section B: neural-network ops, extern and TE/TIR ops (issue 3) ===
