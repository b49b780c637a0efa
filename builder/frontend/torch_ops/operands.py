"""The arguments of a translation as the importers give them (``nn.Tensor``, sizes, numbers) and the
results that are not tensors: checks, dims normalized, numbers as 0-d constants, torch's binary promotion.
"""
from __future__ import annotations

import operator

import numpy as np

from ...ir import expr as E
from ...ir import relax as rx
from ...nn import op
from ...nn.core import Tensor, wrap_nested
from ...nn.op.common import symbolic_scalar
from ..dtypes import as_dtype, is_float, scalar_dtype, torch_promote
from ..errors import FrontendError


def fmt(shape) -> str:
    """A shape as text, ``(2, n, 4)`` (for error messages)."""
    return "(" + ", ".join(str(d) for d in shape) + ")"


def is_tensor(v) -> bool:
    """Whether ``v`` is a graph value (an ``nn.Tensor``) rather than a size, number or other Python value."""
    return isinstance(v, Tensor)


def is_size(v) -> bool:
    """Whether ``v`` is a size: a Python / numpy int (not a bool) or an int64 ``PrimExpr`` (a symbolic dim)."""
    return (isinstance(v, (int, np.integer, E.PrimExpr)) and not isinstance(v, bool)) or (
        isinstance(v, E.PrimExpr))


def norm_dim(d: int, ndim: int) -> int:
    """``d`` as a dim of a tensor of ``ndim`` dims in ``[0, ndim)`` (negative counts from the end; a 0-d tensor takes
    -1 and 0, as in PyTorch). Raises FrontendError for a non-int or a dim out of range."""
    if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
        raise FrontendError(f"a dim must be an int, got {d!r}")
    d = int(d)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise FrontendError(f"dim {d} is out of range for a tensor of {ndim} dims")
    return d % max(ndim, 1)


def sizes(args) -> list:
    """torch's ``*size`` arguments as one list: ``f(a, b)``, ``f((a, b))`` and ``f([a, b])`` alike."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0])
    return list(args)


def static(d) -> int | None:
    """The value of a size known at import time (an int, numpy int or ``IntImm``), else None (a symbolic dim)."""
    if isinstance(d, (int, np.integer)):
        return int(d)
    if isinstance(d, E.IntImm):
        return d.value
    return None


def binary(name: str, a, b):
    """A broadcast op with torch's type promotion: tensors of different dtypes meet at the wider
    (float over int over bool); a float number with an int / bool tensor makes it float32; two
    numbers / sizes are computed in Python (symbolic sizes stay PrimExprs)."""
    if not is_tensor(a) and not is_tensor(b):
        return _PY_BINARY[name](a, b)
    if is_tensor(a) and is_tensor(b):
        dt = torch_promote(a.dtype, b.dtype)
        a, b = as_dtype(a, dt), as_dtype(b, dt)
    else:
        t, s = (a, b) if is_tensor(a) else (b, a)
        if isinstance(s, E.PrimExpr) and not isinstance(s, (E.IntImm, E.FloatImm)):
            want = t.dtype if t.dtype != "bool" else "int64"
        else:
            sd = scalar_dtype(s.value if isinstance(s, (E.IntImm, E.FloatImm)) else s)
            want = torch_promote(t.dtype, sd) if not (is_float(t.dtype) or t.dtype == sd) else t.dtype
            if t.dtype.startswith(("int", "uint")) and sd == "int64":
                want = t.dtype
        if want != t.dtype:
            t = op.astype(t, want)
        a, b = (t, b) if is_tensor(a) else (a, t)
    return getattr(op, name)(a, b)


_PY_BINARY = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
              "divide": operator.truediv, "power": operator.pow, "maximum": max, "minimum": min,
              "equal": operator.eq, "not_equal": operator.ne, "less": operator.lt,
              "less_equal": operator.le, "greater": operator.gt, "greater_equal": operator.ge}


def to_tensor(v, dtype: str | None = None) -> Tensor:
    """A tensor operand: a Tensor as it is (cast to ``dtype`` when given), a symbolic size as an int64 (or ``dtype``)
    0-d tensor computed from the shape variables, a number as a 0-d constant of ``dtype`` or
    :func:`~builder.frontend.dtypes.scalar_dtype` of it."""
    if is_tensor(v):
        return v if dtype is None else as_dtype(v, dtype)
    if isinstance(v, E.PrimExpr) and not isinstance(v, (E.IntImm, E.FloatImm)):
        return wrap_nested(symbolic_scalar(v, dtype or "int64"), "size")
    if isinstance(v, (E.IntImm, E.FloatImm)):
        v = v.value
    return Tensor(_expr=rx.Constant(np.asarray(v), dtype or scalar_dtype(v)))


def reduce_axes(x: Tensor, dim):
    """The axes of a reduction over ``dim`` of ``x`` (an int or a list of them, normalized by :func:`norm_dim`), None
    for every axis (``dim`` None or empty). Raises FrontendError for a dim out of range."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    if isinstance(dim, (list, tuple)):
        return [norm_dim(d, x.ndim) for d in dim]
    return [norm_dim(dim, x.ndim)]


class ValuesIndices(tuple):
    """``(values, indices)`` with torch's named-tuple fields (``torch.return_types.max`` & co.)."""

    @property
    def values(self):
        """The values (``result[0]``)."""
        return self[0]

    @property
    def indices(self):
        """Their int64 indices (``result[1]``)."""
        return self[1]


def at_least_1d(t, x):
    """``x`` reshaped to ``(1,)`` when it is 0-d, else ``x`` itself (what ``nonzero`` and friends need)."""
    return t.reshape(x, [1]) if x.ndim == 0 else x


class Unavailable:
    """A result a translation does not compute (layer norm's saved statistics); a node that uses it is an error
    (:meth:`GraphTranslator.value`), selecting it from its tuple is not."""

    def __init__(self, what: str) -> None:
        self.what = what


def first_of(v):
    """The first element of a one-element list / tuple of ints (torch's ``stride=(2,)``) or the int itself, as an int."""
    return int(v[0]) if isinstance(v, (list, tuple)) else int(v)
