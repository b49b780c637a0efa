"""Helpers the functional ops share: building a call of a registered op, turning Python numbers and
shape / axis arguments into IR values, and short descriptions of arguments for error messages."""
from __future__ import annotations

import math
from contextvars import ContextVar
from typing import Sequence

import numpy as np

from core.limits import MAX_NDIM
from core.messages import shorten

from ...ir import expr as E
from ...ir import relax as rx
from ...ir.struct_info import TensorStructInfo
from ..core import Tensor


def recipe_function(fn):
    """Mark a composite ``nn.op`` function (one without its own op record: ``chunk``,
    ``normalize``, ...) as callable from recipes' ``forward:`` (listed by
    :func:`builder.nn.op.recipe_functions`). Functions of op records are offered through the
    record's ``in_recipes`` instead. Returns ``fn`` itself."""
    fn.__recipe__ = True
    return fn


def replaces_record(fn):
    """Mark a hand-written ``nn.op`` function as the deliberate replacement of the function an
    elementwise / broadcast op record of the same ``frontend`` name would get made
    (:func:`builder.nn.op.elementwise.record_functions`): ``multiply`` (TVM's name hint ``mul``),
    ``gelu`` (its ``approximate`` switch), ``broadcast_to`` (a shape argument), ... Without the mark
    such a function is a collision and ``import builder.nn.op`` raises ImportError naming both; a
    marked function with no such record raises too. Returns ``fn`` itself."""
    fn.__replaces_record__ = True
    return fn


def op_call(name: str, args: Sequence[rx.Expr], **attrs) -> rx.Call:
    return rx.Call(rx.Op.get(name), args, attrs)


def binary_operands(a, b) -> tuple[rx.Expr, rx.Expr]:
    """The two operands of a broadcast op as graph values: a Python / numpy number or an
    ``IntImm`` / ``FloatImm`` becomes a 0-d constant of the other operand's dtype
    (:func:`scalar_constant`), a symbolic int PrimExpr a 0-d tensor of that dtype
    (:func:`symbolic_scalar`). Raises TypeError when neither operand is a Tensor."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a._expr, b._expr
    if isinstance(a, Tensor):
        return a._expr, scalar_operand(b, a.dtype)
    if isinstance(b, Tensor):
        return scalar_operand(a, b.dtype), b._expr
    raise TypeError(f"at least one operand must be a Tensor, got {type(a).__name__} and {type(b).__name__}")


def scalar_operand(value, dtype: str) -> rx.Expr:
    """A number (:func:`scalar_constant`) or a symbolic int PrimExpr (:func:`symbolic_scalar`) as a
    0-d value of ``dtype``."""
    if isinstance(value, (E.IntImm, E.FloatImm)):
        value = bool(value.value) if value.dtype == "bool" else value.value
    if isinstance(value, E.PrimExpr):
        return symbolic_scalar(value, dtype)
    return scalar_constant(value, dtype)


#: The VM builtin that :func:`symbolic_scalar` calls: ``(value: int) -> int64 0-d array``
#: (``runtime.vm``), the role of TVM Relax's ``R.shape_to_tensor`` for one int.
PRIM_VALUE_TO_TENSOR = "vm.builtin.prim_value_to_tensor"


def builtin_call(func: str, args: Sequence[rx.Expr], sinfo) -> rx.Call:
    """``R.call_pure_packed(func, *args, sinfo_args=(sinfo,))``: a call of the VM builtin ``func``
    (``vm.builtin.*``, :mod:`runtime.vm`) whose result has struct info ``sinfo``; a var of ``sinfo``'s
    shape that nothing bound before is bound from the result when it runs (``match_shape``)."""
    return rx.Call(rx.Op.get("call_pure_packed"), [rx.ExternFunc(func), *args], sinfo_args=[sinfo])


def impure_builtin_call(func: str, args: Sequence[rx.Expr], sinfo) -> rx.Call:
    """``R.call_packed(func, *args, sinfo_args=(sinfo,))``: a call of the VM builtin ``func`` that changes
    state its arguments do not show (``vm.builtin.kv_cache_append`` writes the cache), so that no pass
    drops it when its result is unused, merges two equal calls or moves it (TVM's impure ``R.call_packed``:
    the callee is the ``ExternFunc`` itself, no op record). Its struct info is ``sinfo``. It is bound in the
    dataflow block like any call (this IR's verifier allows that; TVM would end the block before it), and the
    exporter marks a function holding one impure (``@R.function(pure=False)``)."""
    return rx.Call(rx.ExternFunc(func), list(args), sinfo_args=[sinfo], struct_info=sinfo)


def symbolic_scalar(value: E.PrimExpr, dtype: str = "int64") -> rx.Expr:
    """A symbolic int expression of the shape variables (``total - seq``) as a 0-d tensor of
    ``dtype`` (a conversion as ``astype`` does: float16 rounds beyond 2048).

    The runtime passes kernels tensors only (no scalar arguments), so the value is made by the VM,
    which evaluates it from the symbolic dims it has bound::

        R.call_pure_packed("vm.builtin.prim_value_to_tensor", R.prim_value(value),
                           sinfo_args=(R.Tensor((), dtype="int64"),))

    then ``astype`` for another ``dtype``: O(1) work per call, whatever the value, and any int64
    value, negative ones included (``total - seq`` < 0 is the number it is, as in numpy). A static
    value (an ``IntImm``) is a constant instead (:func:`scalar_constant`). Raises TypeError for a
    non-integer expression; ValueError, from :func:`scalar_constant`, for a static value ``dtype``
    cannot hold.
    """
    if not isinstance(value, E.PrimExpr) or not E.is_int_dtype(value.dtype) or value.dtype == "bool":
        raise TypeError(f"a symbolic scalar must be an integer PrimExpr, got {describe(value)}")
    value = E.simplify(value.astype("int64"))
    if isinstance(value, E.IntImm):
        return scalar_constant(value.value, dtype)
    out: rx.Expr = builtin_call(PRIM_VALUE_TO_TENSOR, [rx.PrimValue(value, "int64")], TensorStructInfo((), "int64"))
    return out if dtype == "int64" else op_call("astype", [out], dtype=dtype)


def scalar_constant(value, dtype: str) -> rx.Constant:
    """A Python / numpy number as a 0-d constant of ``dtype`` (the other operand's).

    Raises TypeError for a non-number and for a float that is not a whole number with an integer
    dtype (it would be truncated); ValueError for a number ``dtype`` cannot hold: an integer outside
    the integer dtype's range (``uint8 + -1``, ``int64 + 2**64``: numpy 2 and PyTorch refuse them
    too), a bool dtype with anything but 0 / 1, or an integer beyond float64 for a float dtype. A
    finite number beyond a narrower float dtype's range becomes inf, as in numpy and PyTorch, except
    while :data:`REFUSE_FLOAT_OVERFLOW` is set (a recipe's ``forward:``): then it is a ValueError
    (numpy's rule decides: it overflows when casting it gives inf, so 3.4028235e38 rounds to float32's
    largest value and fits; ``float("inf")`` itself is always allowed).
    """
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (int, float)):   # bool is an int
        raise TypeError(f"cannot combine a Tensor with {type(value).__name__} {short(value)}")
    if dtype == "bool":
        if value not in (0, 1):
            raise ValueError(f"cannot combine a bool tensor with {short(value)}: only 0, 1, True and False fit")
    elif dtype.startswith(("int", "uint")):
        if isinstance(value, float):
            if not value.is_integer():
                raise TypeError(f"cannot combine an {dtype} tensor with the float {short(value)} (it would be "
                                "truncated); convert one of them with astype")
            value = int(value)
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"the constant {short(value)} does not fit {dtype} ({info.min} to {info.max})")
    else:
        try:
            value = float(value)
        except OverflowError:
            raise ValueError(f"the constant {short(value)} does not fit {dtype} (beyond float64)") from None
    with np.errstate(over="ignore"):   # 1e39 as float32 is inf, as numpy and PyTorch make it
        constant = rx.Constant(np.asarray(value), dtype)
    if (REFUSE_FLOAT_OVERFLOW.get() and isinstance(value, float) and math.isfinite(value)
            and not np.isfinite(constant.values()).all()):
        from ...ir.tir.intrinsics import max_value

        raise ValueError(f"the constant {short(value)} does not fit {dtype}: it would become inf (the "
                         f"largest finite {dtype} is {max_value(dtype).value:.8g})")
    return constant


#: Set (to True) by the recipe interpreter (:mod:`builder.forward_language`) while an op of a ``forward:`` text
#: runs: a finite number that overflows the float dtype of the tensor it is combined with is then an
#: error (docs/SECURITY.md, "Recipes and overrides": a number must fit its tensor's dtype), where the
#: ``nn.op`` API otherwise makes it inf as numpy and PyTorch do (imported models keep their meaning).
REFUSE_FLOAT_OVERFLOW: ContextVar[bool] = ContextVar("REFUSE_FLOAT_OVERFLOW", default=False)


def short(value) -> str:
    return shorten(value, 60)


def shape_dims(shape, opname: str) -> list:
    """A shape argument (ints / int64 PrimExprs) as ShapeExpr values; ValueError for a
    negative dim, TypeError for other types."""
    if isinstance(shape, (int, E.PrimExpr)):
        raise TypeError(f"{opname}: shape must be a sequence of dims, got {shape!r}")
    check_ndim(len(shape), opname)
    out = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer, E.PrimExpr)):
            raise TypeError(f"{opname}: invalid dim {d!r} in shape {list(shape)}")
        if isinstance(d, (int, np.integer)) and d < 0:
            raise ValueError(f"{opname}: negative dim {d} in shape {list(shape)}")
        out.append(int(d) if isinstance(d, (int, np.integer)) else d)
    return out


def check_ndim(ndim: int, opname: str) -> None:
    """ValueError when a result would have more than :data:`~core.limits.MAX_NDIM` dims."""
    if ndim > MAX_NDIM:
        raise ValueError(f"{opname}: a tensor may have at most {MAX_NDIM} dims, got {ndim}")


def axis_list(axis) -> list[int] | None:
    if axis is None:
        return None
    if isinstance(axis, (int, np.integer)):
        return [int(axis)]
    return [int(a) for a in axis]


def int_list(v, n: int, what: str, opname: str) -> list[int]:
    """``v`` (an int or a sequence of ``n`` ints) as a list of ``n`` ints."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return [int(v)] * n
    vals = list(v)
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n or not all(isinstance(a, (int, np.integer)) for a in vals):
        raise ValueError(f"{opname}: {what} must be an int or {n} ints, got {v!r}")
    return [int(a) for a in vals]


def pair(v: int | Sequence[int]) -> list[int]:
    if isinstance(v, int):
        return [v, v]
    v = list(v)
    return v * 2 if len(v) == 1 else v


def prim_value(v) -> rx.PrimValue:
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


def describe(value) -> str:
    if isinstance(value, (list, tuple)):
        kinds = sorted({type(v).__name__ for v in value})
        return f"a {type(value).__name__} of {', '.join(kinds)}" if kinds else f"an empty {type(value).__name__}"
    return f"{type(value).__name__} {short(value)}" if isinstance(value, (int, float, str)) else type(value).__name__
