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
from ..ir import kernel as _kernel
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
    "astype", "permute_dims", "reshape", "take", "checked_index",
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
               fepilogue: Callable | None = None, attrs: dict | None = None) -> Tensor:
    """A reduction compute in ``acc_dtype`` followed, when needed, by an elementwise stage that
    applies ``fepilogue(acc_value, idx)`` (if given) and converts to ``out_dtype``.

    ``fbody(*idx)`` returns the reduction (a ``Reduce`` in ``acc_dtype``); ``attrs`` go to the
    reduction compute.
    """
    if acc_dtype == out_dtype and fepilogue is None:
        return _te.compute(shape, fbody, name=name, attrs=attrs)
    acc = _te.compute(shape, fbody, name=name + "_acc", attrs=attrs)

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
    Raises ValueError for shapes that do not broadcast; dims of two different symbols (not
    provably equal) must be equal when the code runs (an error otherwise: no run-time
    broadcasting of a symbolic dim that turns out to be 1).
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

    # dims of the two operands that the shapes cannot prove equal (two different symbols)
    # must be equal when the code runs: each read is checked against its own dim (E <= D);
    # this adds the other operand's dim, so a mismatch is an error, never a partial read
    checks = []
    for i in range(1, builtins.min(len(sa), len(sb)) + 1):
        da, db = sa[-i], sb[-i]
        if not (_is_static_one(da) or _is_static_one(db) or E.prove_equal(da, db)):
            checks += [(da, db), (db, da)]
    return _te.compute(shape, f, name=name, attrs={"mb.assert_le": checks} if checks else None)


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


def checked_index(j: PrimExpr, dim) -> PrimExpr:
    """``j`` as an index into a dim of extent ``dim``, checked when the code runs: the
    generated function returns an error (a ValueError from the runtime, "index out of range")
    for ``j`` outside ``[0, dim)`` instead of reading out of bounds. Both int64."""
    return E.Call("int64", "checked_index", [j.astype("int64"), E.convert(dim).astype("int64")])


def take(x: Tensor, indices: Tensor, axis: int = 0, mode: str = "fast") -> Tensor:
    """Gather along ``axis`` (``numpy.take``): ``out[pre, j..., post] = x[pre, indices[j...],
    post]`` with shape ``x.shape[:axis] + indices.shape + x.shape[axis + 1:]``.

    ``mode``: ``"fast"`` (TVM's default) does not clamp or wrap, and an index outside ``[0,
    dim)`` is an error when the code runs (:func:`checked_index`: ValueError, never a read out
    of bounds); ``"clip"`` clamps to ``[0, dim - 1]``, ``"wrap"`` takes the index modulo the
    dim (numpy's modes). Indices may be any integer dtype (int32 / int64). Raises TypeError for
    non-integer indices.
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
        else:
            j = checked_index(j, dim)
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
    reduction dims that differ; symbolic ones that the shapes cannot prove equal are compared
    when the code runs (an error, see :func:`builder.te.create_prim_func`).
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

    # reduction dims the graph could not prove equal (two different symbols): the run-time
    # read check gives ka <= kb, this the other half, so a mismatch is an error as in numpy
    attrs = None if E.prove_equal(ka, kb) else {"mb.assert_le": [(kb, ka)]}
    return _two_stage(shape, fbody, acc, odt, "matmul", attrs=attrs)


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
    # the dilated kernel must fit in the padded input (PyTorch raises "Kernel size can't be
    # greater than actual input size"): checked here when static, when the code runs otherwise
    span, padded = E.simplify(E.convert(k - 1) * d + 1), E.simplify(E.convert(width) + (lo + hi))
    checks = None
    if isinstance(span, E.IntImm) and isinstance(padded, E.IntImm):
        if span.value > padded.value:
            raise ValueError(f"conv1d: the input of length {width} (padded to {padded.value}) is shorter than "
                             f"the dilated kernel ({span.value} = dilation {d} x (kernel {k} - 1) + 1)")
    else:
        checks = {"mb.assert_le": [(span, padded, "the padded input is shorter than the dilated "
                                                  "kernel")]}
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

    return _two_stage((n, o, out_w), fbody, acc, odt, "conv1d_ncw", attrs=checks)


# === section A: tensor creation / manipulation / reduction ops (issue 3) ===
__all__ += [
    "concat", "split", "expand_dims", "squeeze", "broadcast_to", "repeat", "pad", "trilu", "triu",
    "tril", "full", "zeros", "ones", "arange", "where", "prod", "argmax", "argmin",
    "cumsum_prim_func",
]


def _zero() -> PrimExpr:
    return E.IntImm(0, "int64")


def _sum_exprs(dims) -> PrimExpr:
    out: PrimExpr = _zero()
    for d in dims:
        out = out + d
    return E.simplify(out)


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Concatenate along ``axis`` (``numpy.concatenate``): output ``axis`` index ``j`` reads the
    tensor whose range ``[offset_t, offset_t + d_t)`` holds ``j``, through nested
    ``if_then_else`` (only the chosen tensor is loaded). Raises ValueError for an empty list or
    differing ranks, TypeError for differing dtypes."""
    ts = list(tensors)
    if not ts:
        raise ValueError("concat: needs at least one tensor")
    first = ts[0]
    for i, t in enumerate(ts[1:], start=1):
        if t.ndim != first.ndim:
            raise ValueError(f"concat: ranks differ: {_dim_str(first.shape)} vs tensor {i} "
                             f"{_dim_str(t.shape)}")
        if t.dtype != first.dtype:
            raise TypeError(f"concat: dtypes differ: {first.dtype} vs tensor {i} {t.dtype}")
    ax = _norm_axis(axis, first.ndim, "concat")
    offsets = [_zero()]
    for t in ts:
        offsets.append(E.simplify(offsets[-1] + t.shape[ax]))
    shape = list(first.shape)
    shape[ax] = offsets[-1]

    def load(k: int, idx) -> PrimExpr:
        src = list(idx)
        src[ax] = E.simplify(idx[ax] - offsets[k]) if k else idx[ax]
        return ts[k][tuple(src)]

    def f(*idx):
        value = load(len(ts) - 1, idx)
        for k in range(len(ts) - 2, -1, -1):
            value = tir.if_then_else(E.LT(idx[ax], offsets[k + 1]), load(k, idx), value)
        return value

    return _te.compute(shape, f, name="T_concat")


def _split_sizes(length: PrimExpr, indices_or_sections) -> list[PrimExpr]:
    from ..ir.op import split_sizes

    sl = _static(length)
    sizes = split_sizes(sl if sl is not None else length, indices_or_sections, "split")
    return [E.IntImm(s, "int64") if isinstance(s, int) else s for s in sizes]


def split(x: Tensor, indices_or_sections, axis: int = 0) -> list[Tensor]:
    """Split along ``axis`` into several outputs (one compute each, ``T_split_<k>``): an int
    ``n`` gives pieces of ``ceil(d / n)`` with the rest in the last one (TVM / ``torch.chunk``),
    a list of indices cuts before each index (``numpy.split``). Raises ValueError for ``n < 1``
    or a static dim that the sections cannot cover."""
    ax = _norm_axis(axis, x.ndim, "split")
    sizes = _split_sizes(x.shape[ax], indices_or_sections)
    outs = []
    begin = _zero()
    for k, size in enumerate(sizes):
        shape = list(x.shape)
        shape[ax] = size

        def f(*idx, _begin=begin):
            src = list(idx)
            src[ax] = E.simplify(idx[ax] + _begin)
            return x[tuple(src)]

        outs.append(_te.compute(shape, f, name=f"T_split_{k}"))
        begin = E.simplify(begin + size)
    return outs


def expand_dims(x: Tensor, axis) -> Tensor:
    """Insert size-1 dims at ``axis`` (an int or a list, positions in the result; negative
    counts from the end of the result) (``numpy.expand_dims``)."""
    axes = [axis] if isinstance(axis, int) else list(axis)
    nd = x.ndim + len(axes)
    pos = sorted({_norm_axis(a, nd, "expand_dims") for a in axes})
    if len(pos) != len(axes):
        raise ValueError(f"expand_dims: repeated axis in {axes}")
    keep = [d for d in range(nd) if d not in pos]
    shape = [E.IntImm(1, "int64") if d in pos else x.shape[keep.index(d)] for d in range(nd)]
    return _te.compute(shape, lambda *i: x[tuple(i[d] for d in keep)], name="T_expand_dims")


def squeeze(x: Tensor, axis=None) -> Tensor:
    """Remove size-1 dims (``numpy.squeeze``): ``axis`` (int or list) names them; ``None`` drops
    every static size-1 dim. Raises ValueError for a named dim of static size other than 1."""
    if axis is None:
        axes = [d for d, s in enumerate(x.shape) if _is_static_one(s)]
    else:
        axes = _norm_axes(axis, x.ndim, "squeeze")
        for a in axes:
            s = _static(x.shape[a])
            if s is not None and s != 1:
                raise ValueError(f"squeeze: dim {a} of {_dim_str(x.shape)} is {s}, not 1")
    kept = [d for d in range(x.ndim) if d not in axes]

    def f(*idx):
        src = [_zero()] * x.ndim
        for d, i in zip(kept, idx):
            src[d] = i
        return x[tuple(src)]

    return _te.compute([x.shape[d] for d in kept], f, name="T_squeeze")


def broadcast_to(x: Tensor, shape: Sequence) -> Tensor:
    """Broadcast to ``shape`` (``numpy.broadcast_to``): dims align from the right and a static
    size-1 dim of ``x`` reads element 0. Raises ValueError for a lower target rank or a static
    dim that is neither 1 nor the target dim."""
    target = [E.convert(d) for d in shape]
    if len(target) < x.ndim:
        raise ValueError(f"broadcast_to: cannot broadcast {_dim_str(x.shape)} to {_dim_str(target)}")
    lead = len(target) - x.ndim
    for d, s in enumerate(x.shape):
        a, b = _static(s), _static(target[lead + d])
        if a is not None and b is not None and a != 1 and a != b:
            raise ValueError(f"broadcast_to: cannot broadcast {_dim_str(x.shape)} to "
                             f"{_dim_str(target)} (dim {a} vs {b})")
    return _te.compute(target, lambda *i: x[_broadcast_index(i, x.shape)], name="T_broadcast_to")


def _unravel(flat: PrimExpr, shape: Sequence[PrimExpr]) -> list[PrimExpr]:
    """Row-major multi-index of the flat index ``flat`` in ``shape``."""
    out: list[PrimExpr] = []
    for d in reversed(list(shape)[1:]):
        out.append(_zero() if _is_static_one(d) else flat % d)
        flat = flat // d
    if len(shape):
        out.append(_zero() if _is_static_one(shape[0]) else flat)
    return list(reversed(out))


def repeat(x: Tensor, repeats: int, axis: int | None = None) -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (``numpy.repeat``): output index
    ``j`` reads ``j // repeats``; ``axis=None`` works on the flattened tensor (1-D result).
    Raises ValueError for ``repeats < 0``."""
    r = int(repeats)
    if r < 0:
        raise ValueError(f"repeat: repeats must be >= 0, got {repeats}")
    if axis is None:
        n = E.simplify(_product(x.shape) * r)
        return _te.compute([n], lambda i: x[tuple(_unravel(i // r, x.shape))], name="T_repeat")
    ax = _norm_axis(axis, x.ndim, "repeat")
    shape = list(x.shape)
    shape[ax] = E.simplify(shape[ax] * r)

    def f(*idx):
        src = list(idx)
        src[ax] = idx[ax] // r
        return x[tuple(src)]

    return _te.compute(shape, f, name="T_repeat")


def pad(x: Tensor, pad_before: Sequence[int], pad_after: Sequence[int] | None = None,
        pad_value: float = 0.0, mode: str = "constant") -> Tensor:
    """Pad every dim by ``pad_before[d]`` / ``pad_after[d]`` elements (``numpy.pad``).

    ``mode``: ``"constant"`` fills ``pad_value`` (``if_then_else`` on the bounds, so the input
    is never read out of range); ``"edge"`` repeats the border element (the index is clamped);
    ``"reflect"`` mirrors without repeating the border (``-p`` below 0, ``2(d-1) - p`` above;
    pads must be smaller than the dim: for a symbolic dim the mirrored index is checked when the
    code runs, :func:`checked_index`). Raises ValueError for a wrong number of pads, a negative
    pad or an unknown mode.
    """
    nd = x.ndim
    lo = [int(p) for p in pad_before]
    hi = lo if pad_after is None else [int(p) for p in pad_after]
    if len(lo) != nd or len(hi) != nd:
        raise ValueError(f"pad: need {nd} pads before and after for {_dim_str(x.shape)}, got "
                         f"{lo} and {hi}")
    if builtins.any(p < 0 for p in lo + hi):
        raise ValueError(f"pad: pads must be >= 0, got {lo} and {hi}")
    if mode not in ("constant", "edge", "reflect"):
        raise ValueError(f"pad: unknown mode {mode!r} (constant, edge, reflect)")
    shape = [E.simplify(s + (a + b)) if (a or b) else s for s, a, b in zip(x.shape, lo, hi)]

    def f(*idx):
        src, conds = [], []
        for d in range(nd):
            i, p = idx[d], (idx[d] - lo[d] if lo[d] else idx[d])
            if not (lo[d] or hi[d]):
                src.append(i)
                continue
            dim = x.shape[d]
            if mode == "constant":
                if lo[d]:
                    conds.append(E.GE(i, E.IntImm(lo[d], "int64")))
                if hi[d]:
                    conds.append(E.LT(p, dim))
                src.append(p)
            elif mode == "edge":
                src.append(tir.minimum(tir.maximum(p, _zero()), dim - 1))
            else:
                top = dim - 1
                if isinstance(E.simplify(dim), E.IntImm):   # pads < dim checked at build time
                    p = E.Select(E.LT(p, _zero()), -p, p) if lo[d] else p
                    src.append(E.Select(E.GT(p, top), top * 2 - p, p) if hi[d] else p)
                    continue
                # a symbolic dim: each mirrored index is checked when the code runs (it is out
                # of [0, dim) exactly when a pad is not smaller than the dim)
                if lo[d]:
                    p = tir.if_then_else(E.LT(p, _zero()), checked_index(-p, dim), p)
                if hi[d]:
                    p = tir.if_then_else(E.GT(p, top), checked_index(top * 2 - p, dim), p)
                src.append(p)
        v = x[tuple(src)]
        if conds:
            v = tir.if_then_else(tir.all(*conds), v, E.convert(pad_value, x.dtype))
        return v

    return _te.compute(shape, f, name="PadInput" if mode == "constant" else f"T_pad_{mode}")


def trilu(x: Tensor, k=0, upper: bool = True) -> Tensor:
    """Upper (``numpy.triu``) or lower (``numpy.tril``) triangle of the last two dims: element
    ``[..., i, j]`` is kept when ``j - i >= k`` (upper) / ``j - i <= k`` (lower), else 0.
    ``k`` is an int or an int PrimExpr. Raises ValueError for ndim < 2."""
    if x.ndim < 2:
        raise ValueError(f"trilu: needs ndim >= 2, got {_dim_str(x.shape)}")
    kk = E.convert(k).astype("int64")

    def f(*idx):
        i, j = idx[-2], idx[-1]
        keep = E.GE(j - i, kk) if upper else E.LE(j - i, kk)
        return E.Select(keep, x[idx], E.convert(0, x.dtype))

    return _te.compute(x.shape, f, name="trilu")


def triu(x: Tensor, k=0) -> Tensor:
    """``numpy.triu(x, k)`` (see :func:`trilu`)."""
    return trilu(x, k, True)


def tril(x: Tensor, k=0) -> Tensor:
    """``numpy.tril(x, k)`` (see :func:`trilu`)."""
    return trilu(x, k, False)


def full(shape: Sequence, dtype: str, fill_value) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value``: a Python number / PrimExpr constant, or
    a 0-d te.Tensor read once per element and converted to ``dtype`` (``numpy.full``)."""
    if isinstance(fill_value, Tensor):
        if fill_value.ndim != 0:
            raise ValueError(f"full: fill_value must be 0-d, got {_dim_str(fill_value.shape)}")
        return _te.compute(shape, lambda *i: _cast(fill_value[()], dtype), name="T_full")
    value = E.convert(fill_value, dtype)
    if value.dtype != dtype:
        value = _cast(value, dtype)
    return _te.compute(shape, lambda *i: value, name="T_full")


def zeros(shape: Sequence, dtype: str = "float32") -> Tensor:
    """A tensor of zeros (``numpy.zeros``)."""
    return full(shape, dtype, 0)


def ones(shape: Sequence, dtype: str = "float32") -> Tensor:
    """A tensor of ones (``numpy.ones``)."""
    return full(shape, dtype, 1)


def arange(start, stop=None, step=1, dtype: str = "float32", length=None) -> Tensor:
    """``start + i * step`` for ``i < ceil((stop - start) / step)`` (``numpy.arange``; one bound
    means ``[0, start)``). Float results are computed in float64 and converted; ``stop`` may be
    a symbolic int dim, ``start`` / ``step`` must be numbers. ``length`` (an int or int64
    PrimExpr) overrides the element count computed from the bounds. Raises ValueError for
    step 0."""
    from ..ir.op import arange_length

    if stop is None and length is None:
        start, stop = 0, start
    for v, what in ((start, "start"), (step, "step")):
        if not isinstance(v, (int, float)):
            if isinstance(v, (E.IntImm, E.FloatImm)):
                continue
            raise ValueError(f"arange: {what} must be a number, got {v}")
    start = start.value if isinstance(start, (E.IntImm, E.FloatImm)) else start
    step = step.value if isinstance(step, (E.IntImm, E.FloatImm)) else step
    n = arange_length(start, stop, step) if length is None else length
    if _is_float(dtype):
        work = "float64"
    else:
        work = "int64"
        if isinstance(start, float) or isinstance(step, float):
            work = "float64"

    def f(i):
        v = E.convert(start, work) + i.astype(work) * E.convert(step, work)
        return _cast(v, dtype) if work != dtype else v

    return _te.compute([n], f, name="T_arange")


def where(cond: Tensor, a: Operand, b: Operand) -> Tensor:
    """``a`` where ``cond`` else ``b`` (``numpy.where``) with numpy broadcasting of all three;
    ``a`` / ``b`` may be scalars. The result dtype is their common dtype; a non-bool ``cond``
    is tested against 0. Raises ValueError for shapes that do not broadcast."""
    ta, tb = _as_tensor_or_scalar(a), _as_tensor_or_scalar(b)
    if isinstance(ta, Tensor) and isinstance(b, (int, float)):
        tb = E.convert(b, ta.dtype)
    if isinstance(tb, Tensor) and isinstance(a, (int, float)):
        ta = E.convert(a, tb.dtype)
    dtype = _promote(ta.dtype, tb.dtype)
    sa = ta.shape if isinstance(ta, Tensor) else ()
    sb = tb.shape if isinstance(tb, Tensor) else ()
    shape = broadcast_shape(cond.shape, broadcast_shape(sa, sb, "where"), "where")

    def load(t, idx):
        v = t[_broadcast_index(idx, t.shape)] if isinstance(t, Tensor) else t
        return _cast(v, dtype)

    def f(*idx):
        c = _cast(cond[_broadcast_index(idx, cond.shape)], "bool")
        return E.Select(c, load(ta, idx), load(tb, idx))

    return _te.compute(shape, f, name="T_where")


def prod(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - op name
    """Product over ``axis`` (``numpy.prod``, keeping the dtype; 16-bit floats in float32)."""
    return _reduce(x, axis, keepdims, _te.prod, "T_prod", _compute_dtype(x.dtype), x.dtype)


def _arg_reduce(x: Tensor, axis, keepdims: bool, largest: bool) -> Tensor:
    name = "T_argmax" if largest else "T_argmin"
    if axis is not None and not isinstance(axis, int):
        raise TypeError(f"{name[2:]}: axis must be an int or None, got {axis!r}")
    axes = _norm_axes(axis, x.ndim, name[2:])
    acc = _compute_dtype(x.dtype)
    shape = _reduced_shape(x.shape, axes, keepdims)
    nd = x.ndim
    reducer = _te.max if largest else _te.min

    def fext(*idx):
        rv = _reduce_axes(x.shape, axes)
        return reducer(_cast(x[_full_index(idx, axes, nd, rv, keepdims)], acc), axis=rv)

    ext = _te.compute(shape, fext, name=name + "_" + ("max" if largest else "min"))

    def fidx(*idx):
        rv = _reduce_axes(x.shape, axes)
        flat: PrimExpr = _zero()
        for a, r in zip(axes, rv):
            flat = flat * x.shape[a] + r.var
        hit = E.EQ(_cast(x[_full_index(idx, axes, nd, rv, keepdims)], acc), ext[idx])
        big = tir.max_value("int64")
        return _te.min(E.Select(hit, flat, big), axis=rv)

    return _te.compute(shape, fidx, name=name)


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int64) of the maximum along ``axis`` (``numpy.argmax``: the first one on ties;
    ``axis=None`` gives the flat index). Two passes: the maximum (``T_argmax_max``, float32
    for 16-bit floats), then the smallest index holding it (``T_argmax``)."""
    return _arg_reduce(x, axis, keepdims, True)


def argmin(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int64) of the minimum along ``axis`` (``numpy.argmin``; see :func:`argmax`)."""
    return _arg_reduce(x, axis, keepdims, False)


def cumsum_prim_func(x: Tensor, axis: int | None = None, dtype: str | None = None,
                     exclusive: bool = False, name: str = "cumsum") -> tir.PrimFunc:
    """A PrimFunc ``(x, T_cumsum)`` computing the cumulative sum of placeholder ``x`` along
    ``axis`` (``numpy.cumsum``; ``axis=None`` scans the flattened tensor into a 1-D result).

    A scan is not a tensor expression, so the loops are written directly (already lowered,
    as TVM's ``topi.cumsum`` builds them with the IR builder): for every position outside
    ``axis`` a running sum in a one-element accumulator (float32 for 16-bit floats, else the
    result dtype) walks the axis serially and stores ``acc`` after adding the element
    (``exclusive=True``: before). ``dtype`` (default ``x.dtype``) is the result dtype.
    """
    odt = dtype if dtype not in (None, "void") else x.dtype
    acc_dt = _compute_dtype(odt) if odt != "bool" else "int64"
    nd = x.ndim
    total = _product(x.shape)
    if axis is None:
        out = tir.Buffer("T_cumsum", [total], odt)
        outer_dims: list[int] = []
        scan_dims = list(range(nd))
    else:
        ax = _norm_axis(axis, nd, "cumsum")
        out = tir.Buffer("T_cumsum", x.shape, odt)
        outer_dims = [d for d in range(nd) if d != ax]
        scan_dims = [ax]
    acc = tir.Buffer("acc", [1], acc_dt)
    zero_i = _zero()
    ivars = [E.Var(f"i{d}", "int64") for d in range(nd)]

    def out_index() -> list[PrimExpr]:
        if axis is not None:
            return list(ivars)
        flat: PrimExpr = _zero()
        for d in range(nd):
            flat = flat * x.shape[d] + ivars[d]
        return [flat]

    v = _cast(x.buffer[tuple(ivars)], acc_dt)
    cur = tir.BufferLoad(acc, [zero_i])
    store_out = tir.BufferStore(out, _cast(cur, odt), out_index())
    add = tir.BufferStore(acc, cur + v, [zero_i])
    body: tir.Stmt = tir.SeqStmt([store_out, add] if exclusive else [add, store_out])
    for d in reversed(scan_dims):
        body = tir.For(ivars[d], 0, x.shape[d], "serial", body)
    body = tir.SeqStmt([tir.BufferStore(acc, E.const(0, acc_dt), [zero_i]), body])
    for d in reversed(outer_dims):
        body = tir.For(ivars[d], 0, x.shape[d], "serial", body)
    func = tir.PrimFunc([x.buffer, out], tir.Allocate(acc, body),
                        {"global_symbol": name, "tir.noalias": True}, name)
    tir.verify(func)
    return func


# === section B: neural-network ops, extern and TE/TIR ops (issue 3) ===

__all__ += ["conv2d", "conv1d_transpose", "group_norm", "resize2d", "attention"]


def _int_list(v, n: int, what: str, opname: str) -> list[int]:
    """``v`` (an int or ``n`` ints; a 1-list repeats) as ``n`` Python ints."""
    if isinstance(v, (list, tuple)):
        vals = [int(a) for a in v]
        if len(vals) == 1:
            vals = vals * n
    else:
        vals = [int(v)] * n
    if len(vals) != n:
        raise ValueError(f"{opname}: {what} must have {n} values, got {v!r}")
    return vals


def _in_bounds(pos: PrimExpr, size: PrimExpr, check_lo: bool, check_hi: bool) -> list[PrimExpr]:
    conds = []
    if check_lo:
        conds.append(E.GE(pos, E.IntImm(0, "int64")))
    if check_hi:
        conds.append(E.LT(pos, size))
    return conds


def conv2d(x: Tensor, w: Tensor, strides=1, padding=0, dilation=1, groups: int = 1,
           out_dtype: str | None = None) -> Tensor:
    """2-D convolution, NCHW data and OIHW weight (``torch.nn.Conv2d``,
    https://pytorch.org/docs/stable/generated/torch.nn.Conv2d.html; a cross-correlation)::

        out[n, o, y, x] = sum_{c, ky, kx} x_pad[n, g*C/G + c, y*sH + ky*dH, x*sW + kx*dW]
                                          * w[o, c, ky, kx],        g = o // (O / G)
        oH = (H + top + bottom - dH*(kH - 1) - 1) // sH + 1   (likewise oW)

    ``padding``: an int, ``(pH, pW)`` or ``(top, left, bottom, right)``; zero padding is read
    inline through ``if_then_else`` on the bounds. ``strides`` / ``dilation``: an int or
    ``(h, w)``. Precision as :func:`conv1d` (16-bit floats accumulate in float32, then a cast
    stage). Raises ValueError for non-4-D operands or channel counts that do not match ``groups``.
    """
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv2d: data and weight must be 4-D (NCHW / OIHW), got "
                         f"{_dim_str(x.shape)} and {_dim_str(w.shape)}")
    sh, sw = _int_list(strides, 2, "strides", "conv2d")
    dh, dw = _int_list(dilation, 2, "dilation", "conv2d")
    pads = list(padding) if isinstance(padding, (list, tuple)) else [padding]
    if len(pads) == 2:
        pads = pads * 2
    pt, pl, pb, pr = _int_list(pads, 4, "padding", "conv2d")
    g = int(groups)
    if builtins.min(sh, sw, dh, dw, g) < 1 or builtins.min(pt, pl, pb, pr) < 0:
        raise ValueError(f"conv2d: invalid strides={strides} dilation={dilation} groups={groups} "
                         f"padding={padding}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sc, scg, so = _static(c), _static(cg), _static(o)
    if sc is not None and scg is not None and sc != scg * g:
        raise ValueError(f"conv2d: data {_dim_str(x.shape)} has {sc} channels but weight "
                         f"{_dim_str(w.shape)} with groups={g} expects {scg * g}")
    if so is not None and so % g:
        raise ValueError(f"conv2d: {so} output channels are not divisible by groups={g}")
    oh = E.simplify((h + (pt + pb - 1) - (kh - 1) * dh) // sh + 1)
    ow = E.simplify((wd + (pl + pr - 1) - (kw - 1) * dw) // sw + 1)
    in_dtype = _promote(x.dtype, w.dtype)
    odt = _out_dtype(in_dtype, out_dtype)
    acc = _acc_dtype(in_dtype, odt)
    o_per_g = E.simplify(o // g) if g > 1 else o

    def fbody(nn, oc, yy, xx):
        rc = _te.reduce_axis((0, cg), name="rc")
        ry = _te.reduce_axis((0, kh), name="ry")
        rx = _te.reduce_axis((0, kw), name="rx")
        py = (yy * sh if sh != 1 else yy) + (ry.var * dh if dh != 1 else ry.var) - pt
        px = (xx * sw if sw != 1 else xx) + (rx.var * dw if dw != 1 else rx.var) - pl
        py, px = E.simplify(py), E.simplify(px)
        chan = rc.var if g == 1 else (oc // o_per_g) * cg + rc.var
        v = _cast(x[nn, chan, py, px], acc)
        conds = _in_bounds(py, h, pt > 0, pb > 0) + _in_bounds(px, wd, pl > 0, pr > 0)
        if conds:
            v = tir.if_then_else(tir.all(*conds), v, E.const(0, acc))
        return _te.sum(v * _cast(w[oc, rc.var, ry.var, rx.var], acc), axis=[rc, ry, rx])

    return _two_stage((n, o, oh, ow), fbody, acc, odt, "conv2d_nchw")


def conv1d_transpose(x: Tensor, w: Tensor, strides=1, padding=0, output_padding=0, dilation=1,
                     groups: int = 1, out_dtype: str | None = None) -> Tensor:
    """1-D transposed convolution, NCW data and IOW weight (``torch.nn.ConvTranspose1d``,
    https://pytorch.org/docs/stable/generated/torch.nn.ConvTranspose1d.html), written as a
    gather over the input::

        out[n, g*Og + o, t] = sum_{c, k} x[n, g*Cg + c, q] * w[g*Cg + c, o, k]
            where t + lo - k*dilation = q*stride with 0 <= q < W   (other terms are zero)
        W_out = (W - 1)*stride - lo - hi + dilation*(K - 1) + output_padding + 1

    ``x`` (N, C, W), ``w`` (C, Og, K), ``Cg = C / groups``; ``padding`` is ``p`` or
    ``(lo, hi)``. Precision as :func:`conv1d`. Raises ValueError for non-3-D operands or
    mismatched channels.
    """
    if x.ndim != 3 or w.ndim != 3:
        raise ValueError(f"conv1d_transpose: data and weight must be 3-D (NCW / IOW), got "
                         f"{_dim_str(x.shape)} and {_dim_str(w.shape)}")
    (s,) = _int_list(strides, 1, "strides", "conv1d_transpose")
    (d,) = _int_list(dilation, 1, "dilation", "conv1d_transpose")
    (opad,) = _int_list(output_padding, 1, "output_padding", "conv1d_transpose")
    lo, hi = _int_list(padding, 2, "padding", "conv1d_transpose")
    g = int(groups)
    if builtins.min(s, d, g) < 1 or builtins.min(lo, hi, opad) < 0:
        raise ValueError(f"conv1d_transpose: invalid strides={strides} dilation={dilation} "
                         f"groups={groups} padding={padding} output_padding={output_padding}")
    n, c, width = x.shape
    ci, og, k = w.shape
    sc, sci = _static(c), _static(ci)
    if sc is not None and sci is not None and sc != sci:
        raise ValueError(f"conv1d_transpose: data {_dim_str(x.shape)} has {sc} channels but "
                         f"weight {_dim_str(w.shape)} expects {sci}")
    if sc is not None and sc % g:
        raise ValueError(f"conv1d_transpose: {sc} input channels are not divisible by groups={g}")
    cg = E.simplify(c // g) if g > 1 else c
    out_c = E.simplify(og * g)
    out_w = E.simplify((width - 1) * s + (k - 1) * d + (opad + 1 - lo - hi))
    in_dtype = _promote(x.dtype, w.dtype)
    odt = _out_dtype(in_dtype, out_dtype)
    acc = _acc_dtype(in_dtype, odt)

    def fbody(nn, oc, t):
        rc = _te.reduce_axis((0, cg), name="rc")
        rk = _te.reduce_axis((0, k), name="rk")
        num = E.simplify(t + lo - (rk.var * d if d != 1 else rk.var))
        if s == 1:
            q = num
            conds = [E.GE(num, E.IntImm(0, "int64")), E.LT(num, width)]
        else:
            q = num // s
            conds = [E.GE(num, E.IntImm(0, "int64")),
                     E.EQ(num % s, E.IntImm(0, "int64")), E.LT(q, width)]
        chan = rc.var if g == 1 else (oc // og) * cg + rc.var
        oc_l = oc if g == 1 else oc % og
        v = _cast(x[nn, chan, q], acc) * _cast(w[chan, oc_l, rk.var], acc)
        return _te.sum(tir.if_then_else(tir.all(*conds), v, E.const(0, acc)), axis=[rc, rk])

    return _two_stage((n, out_c, out_w), fbody, acc, odt, "conv1d_transpose_ncw")


def group_norm(x: Tensor, gamma: Tensor | None, beta: Tensor | None, num_groups: int,
               channel_axis: int = 1, axes=None, epsilon: float = 1e-5) -> Tensor:
    """Group normalization (Wu & He 2018; ``torch.nn.GroupNorm``,
    https://pytorch.org/docs/stable/generated/torch.nn.GroupNorm.html)::

        y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c]

    The channels (``channel_axis``, C of them) split into ``num_groups`` groups of C / G; mean
    and biased variance run over the channels of a group and over ``axes`` (default: all dims
    but the first two), separately for every other index. ``gamma`` / ``beta`` are (C,) or
    None. Two-pass in float32 (float64 for float64): ``T_group_norm_sum`` -> ``_mean`` -> ``_var``
    -> ``_rstd`` -> ``T_group_norm``. Raises ValueError when C is not divisible by G or
    ``axes`` contains the channel axis.
    """
    acc = _norm_acc(x.dtype)
    nd = x.ndim
    ca = _norm_axis(channel_axis, nd, "group_norm")
    ax = _norm_axes(list(range(2, nd)) if axes is None else axes, nd, "group_norm")
    if ca in ax:
        raise ValueError(f"group_norm: axes {axes} must not contain the channel axis {channel_axis}")
    G = int(num_groups)
    chans = x.shape[ca]
    sch = _static(chans)
    if G < 1 or (sch is not None and sch % G):
        raise ValueError(f"group_norm: {chans} channels of {_dim_str(x.shape)} are not divisible "
                         f"by num_groups={num_groups}")
    _check_param(gamma, x, [ca], "group_norm: gamma")
    _check_param(beta, x, [ca], "group_norm: beta")
    cpg = E.simplify(chans // G) if G > 1 else chans
    kept = [dd for dd in range(nd) if dd not in ax]       # includes the channel axis
    stat_shape = [E.IntImm(G, "int64") if dd == ca else x.shape[dd] for dd in kept]
    n = _count([cpg] + [x.shape[a] for a in ax], acc)

    def stat_index(full):
        return tuple(full[dd] // cpg if dd == ca else full[dd] for dd in kept)

    def full_index(sidx, rc, rv):
        pos = {dd: i for i, dd in enumerate(kept)}
        it = iter(rv)
        out = []
        for dd in range(nd):
            if dd == ca:
                out.append(sidx[pos[dd]] * cpg + rc.var)
            elif dd in ax:
                out.append(next(it).var)
            else:
                out.append(sidx[pos[dd]])
        return tuple(out)

    def fsum(*sidx):
        rc = _te.reduce_axis((0, cpg), name="rc")
        rv = _reduce_axes(x.shape, ax)
        return _te.sum(_cast(x[full_index(sidx, rc, rv)], acc), axis=[rc] + rv)

    total = _te.compute(stat_shape, fsum, name="T_group_norm_sum")
    mu = _te.compute(stat_shape, lambda *i: total[i] / n, name="T_group_norm_mean")

    def fvar(*sidx):
        rc = _te.reduce_axis((0, cpg), name="rc")
        rv = _reduce_axes(x.shape, ax)
        dv = _cast(x[full_index(sidx, rc, rv)], acc) - mu[sidx]
        return _te.sum(dv * dv, axis=[rc] + rv)

    var = _te.compute(stat_shape, fvar, name="T_group_norm_var")
    eps = E.const(float(epsilon), acc)
    rstd = _te.compute(stat_shape, lambda *i: 1.0 / tir.sqrt(var[i] / n + eps),
                       name="T_group_norm_rstd")

    def fout(*idx):
        si = stat_index(idx)
        v = (_cast(x[idx], acc) - mu[si]) * rstd[si]
        if gamma is not None:
            v = v * _cast(gamma[idx[ca]], acc)
        if beta is not None:
            v = v + _cast(beta[idx[ca]], acc)
        return _cast(v, x.dtype)

    return _te.compute(x.shape, fout, name="T_group_norm")


def _round_index(v: PrimExpr, rounding: str) -> PrimExpr:
    if rounding == "round":
        return tir.round(v)
    if rounding == "floor":
        return tir.floor(v)
    if rounding == "ceil":
        return tir.ceil(v)
    if rounding == "round_prefer_ceil":
        return tir.floor(v + 0.5)
    if rounding == "round_prefer_floor":
        return tir.ceil(v - 0.5)
    raise ValueError(f"resize2d: unknown rounding_method {rounding!r}")


def resize2d(x: Tensor, size, layout: str = "NCHW", method: str = "linear",
             coordinate_transformation_mode: str = "half_pixel", rounding_method: str = "round",
             out_dtype: str | None = None) -> Tensor:
    """Resize the spatial dims (``size`` = (oH, oW)) of an NCHW / NHWC image (ONNX ``Resize``
    semantics, https://onnx.ai/onnx/operators/onnx__Resize.html). Per axis, with
    ``r = in / out``, the source coordinate of output index ``i`` is

    * ``asymmetric``: ``i * r``;  ``half_pixel``: ``(i + 0.5) * r - 0.5``;
    * ``align_corners``: ``i * (in - 1) / (out - 1)`` (0 when ``out == 1``).

    ``nearest_neighbor`` reads the pixel at the rounded coordinate (``rounding_method``; the
    asymmetric / floor case is the exact integer ``(i * in) // out``, PyTorch's nearest).
    ``linear`` interpolates the 2 x 2 neighbours of the coordinate (clamped to >= 0 for
    half_pixel, as PyTorch) with indices clamped to the image. Coordinates and weights are
    float32 (float64 for float64 data); the result is converted to ``out_dtype`` (default: the
    input dtype). Raises ValueError for other layouts, methods or modes.
    """
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"resize2d: layout must be 'NCHW' or 'NHWC', got {layout!r}")
    if method not in ("nearest_neighbor", "linear"):
        raise ValueError(f"resize2d: method {method!r} is not supported (nearest_neighbor, linear)")
    mode = coordinate_transformation_mode
    if mode not in ("asymmetric", "half_pixel", "align_corners"):
        raise ValueError(f"resize2d: coordinate_transformation_mode {mode!r} is not supported "
                         "(asymmetric, half_pixel, align_corners)")
    if x.ndim != 4:
        raise ValueError(f"resize2d: data must be 4-D, got {_dim_str(x.shape)}")
    oh, ow = [E.convert(s).astype("int64") for s in size]
    ha, wa = (2, 3) if layout == "NCHW" else (1, 2)
    in_h, in_w = x.shape[ha], x.shape[wa]
    shape = list(x.shape)
    shape[ha], shape[wa] = oh, ow
    cd = "float64" if x.dtype == "float64" else "float32"
    odt = _out_dtype(x.dtype, out_dtype)
    zero = E.IntImm(0, "int64")

    def fl(v) -> PrimExpr:
        return E.convert(v).astype(cd)

    def src(i, n_in, n_out) -> PrimExpr:
        if mode == "align_corners":
            ratio = (fl(n_in) - 1.0) / tir.maximum(fl(n_out) - 1.0, E.const(1.0, cd))
            return fl(i) * ratio
        ratio = fl(n_in) / fl(n_out)
        if mode == "asymmetric":
            return fl(i) * ratio
        return (fl(i) + 0.5) * ratio - 0.5

    def clamp(i, n_in) -> PrimExpr:
        return tir.minimum(tir.maximum(i, zero), n_in - 1)

    def load(idx, yi, xi):
        full = list(idx)
        full[ha], full[wa] = yi, xi
        return _cast(x[tuple(full)], cd)

    if method == "nearest_neighbor":
        def nearest(i, n_in, n_out):
            if mode == "asymmetric" and rounding_method == "floor":
                return (i * n_in) // n_out
            return clamp(_round_index(src(i, n_in, n_out), rounding_method).astype("int64"), n_in)

        def f(*idx):
            return _cast(load(idx, nearest(idx[ha], in_h, oh), nearest(idx[wa], in_w, ow)), odt)
    else:
        def coord(i, n_in, n_out):
            c = src(i, n_in, n_out)
            if mode == "half_pixel":
                c = tir.maximum(c, E.const(0.0, cd))
            c0 = tir.floor(c)
            i0 = c0.astype("int64")
            return clamp(i0, n_in), clamp(i0 + 1, n_in), c - c0

        def f(*idx):
            y0, y1, ly = coord(idx[ha], in_h, oh)
            x0, x1, lx = coord(idx[wa], in_w, ow)
            top = load(idx, y0, x0) * (1.0 - lx) + load(idx, y0, x1) * lx
            bottom = load(idx, y1, x0) * (1.0 - lx) + load(idx, y1, x1) * lx
            return _cast(top * (1.0 - ly) + bottom * ly, odt)

    return _te.compute(shape, f, name="resize")


def attention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
              causal_mask: str | None = None) -> Tensor:
    """Scaled dot-product attention in TVM's (batch, seq, heads, head_dim) layout
    (Vaswani et al. 2017; ``torch.nn.functional.scaled_dot_product_attention``)::

        s[b, h, i, j] = scale * sum_d q[b, i, h, d] * k[b, j, h', d]     (masked: lowest value)
        out[b, i, h, e] = sum_j exp(s - max_j s) * v[b, j, h', e] / sum_j exp(s - max_j s)

    ``q`` (B, Sq, H, D), ``k`` (B, Sk, Hk, D), ``v`` (B, Sk, Hk, Dv); ``h' = h // (H / Hk)``
    (grouped-query attention). ``scale`` defaults to ``1 / sqrt(D)``. ``causal_mask``:
    ``"TopLeft"`` keeps ``j <= i`` (PyTorch's ``is_causal``), ``"BottomRight"`` keeps
    ``j <= i + Sk - Sq``. Math in float32 (float64 for float64). Stages: ``T_attention_score``
    (+ ``_acc``), ``T_attention_max``, ``T_attention_exp``, ``T_attention_sum``,
    ``T_attention`` (+ ``_acc``). Raises ValueError for non-4-D inputs or an unknown mask.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"attention: query, key and value must be 4-D (B, S, H, D), got "
                         f"{_dim_str(q.shape)}, {_dim_str(k.shape)}, {_dim_str(v.shape)}")
    if causal_mask not in (None, "TopLeft", "BottomRight"):
        raise ValueError(f"attention: unknown causal_mask {causal_mask!r}")
    acc = _norm_acc(q.dtype)
    bsz, sq, heads, dim = q.shape
    sk, hk, dv = k.shape[1], k.shape[2], v.shape[3]
    rep = E.simplify(heads // hk)
    if scale is None:
        sd = _static(dim)
        sc = (E.const(1.0 / math.sqrt(sd), acc) if sd is not None
              else tir.rsqrt(dim.astype(acc)))
    else:
        sc = E.const(float(scale), acc)

    def kv_head(h):
        return h if _is_static_one(rep) else h // rep

    def fscore(b, h, i, j):
        rd = _te.reduce_axis((0, dim), name="rd")
        return _te.sum(_cast(q[b, i, h, rd.var], acc) * _cast(k[b, j, kv_head(h), rd.var], acc),
                       axis=rd)

    def fmask(val, idx):
        val = val * sc
        if causal_mask is None:
            return val
        i, j = idx[2], idx[3]
        limit = i if causal_mask == "TopLeft" else E.simplify(i + (sk - sq))
        return E.Select(E.LE(j, limit), val, tir.min_value(acc))

    s_shape = (bsz, heads, sq, sk)
    score = _te.compute(s_shape, fscore, name="T_attention_score")

    def masked(b, h, i, j):
        return fmask(score[b, h, i, j], (b, h, i, j))

    def fmax(b, h, i):
        rj = _te.reduce_axis((0, sk), name="rj")
        return _te.max(masked(b, h, i, rj.var), axis=rj)

    mx = _te.compute((bsz, heads, sq), fmax, name="T_attention_max")
    ex = _te.compute(s_shape, lambda b, h, i, j: tir.exp(masked(b, h, i, j) - mx[b, h, i]),
                     name="T_attention_exp")

    def fsum(b, h, i):
        rj = _te.reduce_axis((0, sk), name="rj")
        return _te.sum(ex[b, h, i, rj.var], axis=rj)

    total = _te.compute((bsz, heads, sq), fsum, name="T_attention_sum")

    def fout(b, i, h, e):
        rj = _te.reduce_axis((0, sk), name="rj")
        return _te.sum(ex[b, h, i, rj.var] * _cast(v[b, rj.var, kv_head(h), e], acc), axis=rj)

    def fnorm(val, idx):
        b, i, h = idx[0], idx[1], idx[2]
        out = val / total[b, h, i]
        if _static(sk) is None:   # no keys: zeros (PyTorch's math attention), not 0 / 0
            out = E.Select(E.GT(E.convert(sk).astype("int64"), E.IntImm(0, "int64")), out, E.convert(0.0, acc))
        return out

    return _two_stage((bsz, sq, heads, dv), fout, acc, q.dtype, "T_attention", fnorm)


# === section C: quantization ops (issue 4) ===
#
# Group-quantized weights (MLC-LLM's ``q4f16_1`` family; per-channel int8 is the case of one
# group per row): ``q`` (rows, words) packs ``per_word = storage bits // bits`` values per word,
# element ``i`` of a word in bits ``[i * bits, (i + 1) * bits)``; ``s`` (rows, groups) holds one
# scale per ``group_size`` columns. Column ``k`` of row ``n`` dequantizes to
# ``(unpack(q[n, k // per_word], k % per_word) - zero_point) * s[n, k // group_size]``, computed
# in float32 (exact: a small integer times a 16-bit float). The fused kernels read ``q`` and
# ``s`` directly inside their reduction / gather, so no float copy of the weight exists.

_STORAGE_BITS = {"uint8": 8, "uint16": 16, "uint32": 32, "int8": 8}


def _word_divisor(r: PrimExpr, bits: int, per_word: int, dtype: str, lo: int = 0,
                  hi: int | None = None) -> PrimExpr:
    """``2 ** (bits * r)`` as a ``dtype`` constant chosen by a balanced tree of selects on
    ``r`` in ``[lo, hi)`` (depth log2(per_word), so LLVM turns the division into a shift)."""
    hi = per_word if hi is None else hi
    if hi - lo == 1:
        return E.const(1 << (bits * lo), dtype)
    mid = (lo + hi) // 2
    return E.Select(E.LT(r, E.const(mid, r.dtype)), _word_divisor(r, bits, per_word, dtype, lo, mid),
                    _word_divisor(r, bits, per_word, dtype, mid, hi))


def _quant_layout(q: Tensor, s: Tensor, bits: int, group_size: int, in_features: int,
                  what: str) -> int:
    """Check the shapes / dtypes of a packed weight and its scales; returns values per word."""
    if q.dtype not in _STORAGE_BITS:
        raise TypeError(f"{what}: q_weight dtype must be one of {', '.join(_STORAGE_BITS)}, got {q.dtype}")
    if not _is_float(s.dtype):
        raise TypeError(f"{what}: q_scale must be floating point, got {s.dtype}")
    if q.ndim != 2 or s.ndim != 2:
        raise ValueError(f"{what}: q_weight and q_scale must be 2-D, got {_dim_str(q.shape)} and "
                         f"{_dim_str(s.shape)}")
    sbits = _STORAGE_BITS[q.dtype]
    if bits <= 0 or sbits % bits or (q.dtype.startswith("int") and bits != sbits):
        raise ValueError(f"{what}: cannot store {bits}-bit values in {q.dtype}")
    per_word = sbits // bits
    if group_size <= 0 or group_size % per_word:
        raise ValueError(f"{what}: group_size {group_size} is not a multiple of the {per_word} "
                         f"values per {q.dtype} word")
    groups = -(-in_features // group_size)
    words = groups * group_size // per_word
    sq, ss = _static(q.shape[1]), _static(s.shape[1])
    if sq is not None and sq != words:
        raise ValueError(f"{what}: q_weight {_dim_str(q.shape)} has {sq} words per row, but "
                         f"in_features={in_features} in groups of {group_size} needs {words}")
    if ss is not None and ss != groups:
        raise ValueError(f"{what}: q_scale {_dim_str(s.shape)} has {ss} groups per row, but "
                         f"in_features={in_features} in groups of {group_size} needs {groups}")
    return per_word


def _dequant_value(q: Tensor, s: Tensor, row: PrimExpr, k: PrimExpr, bits: int, per_word: int,
                   group_size: int, zero_point: int, split: tuple | None = None) -> PrimExpr:
    """The float32 value of column ``k`` of row ``row`` (see the section comment). ``split``
    ``(word, r)`` gives ``k // per_word`` and ``k % per_word`` as separate loop variables (then
    ``r`` runs over a constant range that LLVM unrolls, and every shift becomes a constant)."""
    if per_word > 1:
        word_index, r = split if split is not None else (k // per_word, k % per_word)
        word = q[row, word_index]
        value = (word // _word_divisor(r, bits, per_word, q.dtype)) % E.const(1 << bits, q.dtype)
    else:
        value = q[row, k]
    value = value.astype("int32")
    if zero_point:
        value = value - E.const(zero_point, "int32")
    return value.astype("float32") * _up(s[row, k // group_size])


def group_dequantize(q: Tensor, s: Tensor, bits: int, group_size: int, zero_point: int,
                     in_features: int) -> Tensor:
    """The dequantized weight ``(rows, in_features)`` in the scale dtype (``T_dequantize``), for
    a ``group_dequantize`` that no matmul / take consumes directly (then it is a real buffer).

    Raises TypeError / ValueError when the layout does not fit (words or groups per row,
    storage dtype, group size).
    """
    per_word = _quant_layout(q, s, bits, group_size, in_features, "group_dequantize")
    return _te.compute(
        (q.shape[0], E.IntImm(in_features, "int64")),
        lambda n, k: _cast(_dequant_value(q, s, n, k, bits, per_word, group_size, zero_point), s.dtype),
        name="T_dequantize")


def dequantize_linear(x: Tensor, q: Tensor, s: Tensor, bits: int, group_size: int, zero_point: int,
                      in_features: int, out_dtype: str | None = None) -> Tensor:
    """``x @ dequantize(q, s).T`` in one kernel (``dequantize_NT_matmul``): the fused form of
    ``matmul(x, permute_dims(group_dequantize(q, s)))``. Each weight is unpacked and scaled in
    registers inside the reduction over ``k < in_features`` (padding columns are never read);
    when ``in_features`` fills whole words the reduction runs over words ``kw`` and the values
    ``r`` of a word (``k = kw * per_word + r``), so that the unpacking shifts are constants.

    ``x`` (..., in_features) in the scale dtype; result (..., rows) in ``out_dtype`` (default:
    ``x.dtype``), accumulated in float32 (float64 never: the weights are at most 16-bit floats
    times small integers). Raises ValueError / TypeError for mismatched shapes or dtypes.
    """
    per_word = _quant_layout(q, s, bits, group_size, in_features, "dequantize_linear")
    if x.ndim == 0:
        raise ValueError("dequantize_linear: input must have ndim >= 1")
    kx = _static(x.shape[-1])
    if kx is not None and kx != in_features:
        raise ValueError(f"dequantize_linear: input {_dim_str(x.shape)} does not match the "
                         f"weight's in_features={in_features}")
    if x.dtype != s.dtype:
        raise TypeError(f"dequantize_linear: input dtype {x.dtype} differs from scale dtype {s.dtype}")
    odt = _out_dtype(x.dtype, out_dtype)
    acc = "float64" if x.dtype == "float64" else "float32"
    shape = list(x.shape[:-1]) + [q.shape[0]]

    def fbody(*idx):
        if per_word > 1 and in_features % per_word == 0:
            # two reduction loops, over words and over the values of a word (constant extent)
            kw = _te.reduce_axis((0, E.IntImm(in_features // per_word, "int64")), name="kw")
            r = _te.reduce_axis((0, E.IntImm(per_word, "int64")), name="r")
            k, axes, split = kw.var * per_word + r.var, [kw, r], (kw.var, r.var)
        else:
            kk = _te.reduce_axis((0, E.IntImm(in_features, "int64")), name="k")
            k, axes, split = kk.var, kk, None
        w = _dequant_value(q, s, idx[-1], k, bits, per_word, group_size, zero_point, split)
        return _te.sum(_cast(x[tuple(idx[:-1]) + (k,)], acc) * _cast(w, acc), axis=axes)

    return _two_stage(shape, fbody, acc, odt, "dequantize_NT_matmul")


def dequantize_take(q: Tensor, s: Tensor, indices: Tensor, bits: int, group_size: int,
                    zero_point: int, in_features: int) -> Tensor:
    """Rows ``indices`` of ``dequantize(q, s)`` (``T_dequantize_take``): the fused form of
    ``take(group_dequantize(q, s), indices, axis=0)``, unpacking only the gathered rows.

    Result ``indices.shape + (in_features,)`` in the scale dtype. An index outside the rows is
    an error when the code runs (as for ``take``, :func:`checked_index`). Raises TypeError for
    non-integer indices.
    """
    per_word = _quant_layout(q, s, bits, group_size, in_features, "dequantize_take")
    if not E.is_int_dtype(indices.dtype) or indices.dtype == "bool":
        raise TypeError(f"dequantize_take: indices must be integers, got {indices.dtype}")
    ni = indices.ndim

    def f(*idx):
        row = checked_index(indices[tuple(idx[:ni])].astype("int64"), q.shape[0])
        return _cast(_dequant_value(q, s, row, idx[ni], bits, per_word, group_size, zero_point), s.dtype)

    return _te.compute(list(indices.shape) + [E.IntImm(in_features, "int64")], f, name="T_dequantize_take")


__all__ += ["group_dequantize", "dequantize_linear", "dequantize_take"]


# === section D: fused kernels (issue 5) ===
#
# ``inline_injective`` is TVM's ``compute_inline`` applied to every elementwise / injective
# stage of a tensor-expression graph: a stage that is not a reduction disappears into its
# readers (its body substituted at the read's indices), so a chain ``matmul -> silu -> multiply``
# becomes one reduction stage per matmul plus one elementwise stage that reads the reductions.
# ``linear_kernel`` builds such a graph for ``epilogue(x @ W_0.T, x @ W_1.T, ...)`` from the
# ordinary topi ops (so the fused semantics equal the unfused ones, roundings included) and
# describes it for the matmul kernel emitter (``builder/codegen/kernels/linear.py``).

from ..ir.tir import BufferLoad as _BufferLoad  # noqa: E402
from .tensor import ComputeOp as _ComputeOp, Reduce as _Reduce  # noqa: E402


_LET_IDS = __import__("itertools").count()


def _inlinable_key(ld: _BufferLoad):
    """``(id(tensor), indices)`` for a load of an inlinable (injective compute) stage, else None;
    the indices compare structurally (variables by identity)."""
    t = getattr(ld.buffer, "tensor", None)
    if t is None or not isinstance(t.op, _ComputeOp) or isinstance(t.op.body, _Reduce):
        return None
    try:
        key = (id(t), tuple(ld.indices))
        hash(key)
    except TypeError:
        return None
    return key


def _unguarded_loads(e: PrimExpr):
    """Keys (:func:`_inlinable_key`) of the loads of ``e`` that are evaluated whenever ``e`` is: not
    under a ``Select`` branch, the right side of ``and`` / ``or``, a conditional intrinsic or a
    reduction. Iterative (no recursion limit on deep expressions)."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, _BufferLoad):
            key = _inlinable_key(x)
            if key is not None:
                yield key
            stack.extend(x.indices)
        elif isinstance(x, E.Select):
            stack.append(x.condition)
        elif isinstance(x, (E.And, E.Or)):
            stack.append(x.a)
        elif isinstance(x, E.Call) and x.op == "if_then_else":
            stack.append(x.args[0])
        elif not isinstance(x, _Reduce):
            stack.extend(E._children(x))


def _rewrite_loads(e: PrimExpr, fn: Callable) -> PrimExpr:
    """Rebuild ``e`` with every BufferLoad replaced by ``fn(load)`` (indices rewritten first)."""
    if isinstance(e, _BufferLoad):
        return fn(_BufferLoad(e.buffer, [_rewrite_loads(i, fn) for i in e.indices]))
    if isinstance(e, _Reduce):
        init = None if e.init is None else _rewrite_loads(e.init, fn)
        return _Reduce(e.combiner, _rewrite_loads(e.source, fn), e.axis,
                       _rewrite_loads(e.condition, fn), init)
    if isinstance(e, E.BinaryOp):
        return type(e)(_rewrite_loads(e.a, fn), _rewrite_loads(e.b, fn), e.dtype)
    if isinstance(e, E.Not):
        return E.Not(_rewrite_loads(e.a, fn))
    if isinstance(e, E.Select):
        return E.Select(_rewrite_loads(e.condition, fn), _rewrite_loads(e.true_value, fn),
                        _rewrite_loads(e.false_value, fn))
    if isinstance(e, E.Cast):
        return E.Cast(e.dtype, _rewrite_loads(e.value, fn))
    if isinstance(e, E.Call):
        return E.Call(e.dtype, e.op, [_rewrite_loads(a, fn) for a in e.args])
    if isinstance(e, E.Let):
        return E.Let(e.var, _rewrite_loads(e.value, fn), _rewrite_loads(e.body, fn))
    return e


def inline_injective(output: Tensor, reduction_names: dict | None = None) -> Tensor:
    """``output`` rebuilt with every non-reduction compute it depends on inlined into its
    readers (TVM's ``compute_inline`` on all injective stages). Reductions stay stages of
    their own (their sources get their injective producers inlined); placeholders stay.
    A producer that a reader evaluates more than once at the same element (``silu(y) = y *
    sigmoid(y)`` reads ``y`` twice) is bound once with a ``Let`` instead of being copied, so the
    inlined expression grows linearly with the length of the chain, not exponentially; reads under
    a condition (a ``Select`` branch, the right side of ``and`` / ``or``) are copied, never hoisted
    out of their condition.

    ``reduction_names`` (optional) maps ``id(old reduction tensor)`` to the name of its rebuilt
    stage; the dict is filled with the names used (made unique with ``_1``, ``_2`` suffixes).
    Returns the new output tensor (a new compute even when ``output`` is a placeholder-free
    elementwise stage). Raises TypeError for an operation that is not a compute or placeholder.
    """
    memo: dict[int, Tensor] = {}
    used: set[str] = set()
    names = reduction_names if reduction_names is not None else {}

    def unique(name: str) -> str:
        base, k, n = name, 0, name
        while n in used:
            k += 1
            n = f"{base}_{k}"
        used.add(n)
        return n

    def load(ld: _BufferLoad) -> PrimExpr:
        t = getattr(ld.buffer, "tensor", None)
        if t is None or not isinstance(t.op, _ComputeOp):
            return ld
        if isinstance(t.op.body, _Reduce):
            return _BufferLoad(build(t).buffer, ld.indices)
        vmap = {iv.var: i for iv, i in zip(t.op.axis, ld.indices)}
        return E.substitute(inline(t.op.body), vmap)

    def inline(body: PrimExpr) -> PrimExpr:
        if isinstance(body, _Reduce):    # a value used per reduction step is not hoisted out of it
            return _rewrite_loads(body, load)
        counts: dict = {}
        for key in _unguarded_loads(body):
            counts[key] = counts.get(key, 0) + 1
        shared: dict = {}
        lets: list[tuple[E.Var, PrimExpr]] = []

        def share(ld: _BufferLoad) -> PrimExpr:
            key = _inlinable_key(ld)
            if key is None or counts.get(key, 0) < 2:
                return load(ld)
            var = shared.get(key)
            if var is None:
                value = load(ld)
                var = shared[key] = E.Var(f"{ld.buffer.name}_v{next(_LET_IDS)}", value.dtype)
                lets.append((var, value))
            return var

        out = _rewrite_loads(body, share)
        for var, value in reversed(lets):
            out = E.Let(var, value, out)
        return out

    def build(t: Tensor) -> Tensor:
        got = memo.get(id(t))
        if got is not None:
            return got
        op = t.op
        if not isinstance(op, _ComputeOp):
            if isinstance(op, _te.PlaceholderOp):
                return t
            raise TypeError(f"inline_injective: unsupported operation {type(op).__name__}")
        body = inline(op.body)
        old = [iv.var for iv in op.axis]
        name = unique(names.get(id(t), op.name)) if isinstance(op.body, _Reduce) else unique(op.name)
        new = _te.compute(t.shape, lambda *idx: E.substitute(body, dict(zip(old, idx))), name=name,
                          tag=op.tag, attrs=op.attrs)
        if isinstance(op.body, _Reduce):
            names[id(t)] = name
        memo[id(t)] = new
        return new

    return build(output)


def _find_reduction(t: Tensor) -> Tensor:
    """The reduction stage behind a topi matmul result (itself, or the ``_acc`` stage its
    cast / epilogue stage reads)."""
    if isinstance(t.op, _ComputeOp) and isinstance(t.op.body, _Reduce):
        return t
    for src in t.op.input_tensors:
        if isinstance(src.op, _ComputeOp) and isinstance(src.op.body, _Reduce):
            return src
    raise ValueError(f"no reduction stage behind '{t.name}'")


def _linear_weight(w, inputs: Sequence[Tensor]) -> Tensor:
    """The (out, in) weight of a :class:`~builder.ir.kernel.DenseWeight` / ``GroupWeight`` as a te
    tensor: a dense input, or the float32 dequantization (an injective stage that gets inlined)."""
    if isinstance(w, _kernel.DenseWeight):
        return inputs[w.w]
    q, s = inputs[w.q], inputs[w.scale]
    bits, gs, zp, kin = w.bits, w.group_size, w.zero_point, w.in_features
    per_word = _quant_layout(q, s, bits, gs, kin, "linear_kernel")
    return _te.compute((q.shape[0], E.IntImm(kin, "int64")),
                       lambda n, k: _dequant_value(q, s, n, k, bits, per_word, gs, zp),
                       name="T_dequantize")


def replay(node, inputs: Sequence[Tensor], lin: Sequence[Tensor] = ()) -> Tensor:
    """The tensor an epilogue tree (:mod:`builder.ir.kernel`) computes: ``EpilogueTensor(i)`` is
    ``inputs[i]``, ``EpilogueLinear(k)`` is ``lin[k]``, ``EpilogueOp`` applies the registered op's
    fusion ``compute`` to its children with its attributes. Raises ValueError for an op without one."""
    if isinstance(node, _kernel.EpilogueLinear):
        return lin[node.index]
    if isinstance(node, _kernel.EpilogueTensor):
        return inputs[node.index]
    from ..ir.relax import Op

    compute = Op.get(node.op).compute
    if compute is None:
        raise ValueError(f"{node.op} has no fusion compute")
    return compute(*(replay(a, inputs, lin) for a in node.args), **dict(node.attrs))


def linear_kernel(x: Tensor, *tensors: Tensor, weights: Sequence, epilogue=_kernel.EpilogueLinear(0),
                  out_dtype: str | None = None, spec: list | None = None) -> Tensor:
    """``epilogue(x @ W_0.T, x @ W_1.T, ...)`` as one fused stage graph for the matmul kernel emitter.

    ``x`` is ``(..., in)``; ``tensors`` are the other inputs, so that input ``i`` is ``(x, *tensors)[i]``.
    ``weights`` are :class:`~builder.ir.kernel.DenseWeight` (a float ``(out, in)`` input) or
    :class:`~builder.ir.kernel.GroupWeight` (group-quantized, dequantized in float32 inside the
    reduction); ``epilogue`` is an epilogue tree (:func:`replay`), whose ``EpilogueLinear(k)`` is
    matmul ``k`` as :func:`linear` computes it with ``out_dtype``. The result is what those topi ops
    compute, with every elementwise stage inlined: one reduction stage per weight (float32
    accumulators) and one output stage.

    ``spec`` (optional list) receives the :class:`~builder.ir.kernel.LinearKernelSpec` the code
    generator reads from ``attrs["mb.kernel"]``. Raises ValueError / TypeError as the topi ops do.
    """
    inputs = (x, *tensors)
    lin = []
    for w in weights:
        wt = _linear_weight(w, inputs)
        odt = out_dtype
        if odt is None and isinstance(w, _kernel.GroupWeight):
            # the graph's dtype: that of x @ dequantize(q, s).T with the weight in the scale dtype
            odt = _promote(x.dtype, inputs[w.scale].dtype)
        lin.append(linear(x, wt, out_dtype=odt))
    out = replay(epilogue, inputs, lin)
    names: dict[int, str] = {}
    reds = [_find_reduction(t) for t in lin]
    for k, r in enumerate(reds):
        names[id(r)] = r.op.name if len(reds) == 1 else f"{r.op.name}{k}"
    fused = inline_injective(out, names)
    if spec is not None:
        spec.append(_kernel.LinearKernelSpec(0, len(inputs), tuple(weights), tuple(names[id(r)] for r in reds)))
    return fused


__all__ += ["inline_injective", "linear_kernel", "replay"]
