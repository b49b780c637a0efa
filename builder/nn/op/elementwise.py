"""Elementwise ops: the unary math / activations and the binary arithmetic / comparisons of the op
library, plus ``astype`` and ``where``.

Every op record of :mod:`builder.ops` with a ``frontend`` name and pattern kind ``ELEMWISE`` (one
tensor in) or ``BROADCAST`` (two operands, numpy broadcasting) gets its function here from the record
(:func:`unary_function`, :func:`binary_function`): its name, docstring and default name hint come from
the record, so adding such an op to the library adds ``nn.op.<name>``. The functions written out below
are those with more than the record says: ``multiply`` (TVM's name hint ``mul``), ``gelu`` (the
``approximate`` switch) and ``astype`` / ``where``; each is marked
:func:`~builder.nn.op.common.replaces_record`. Any other hand-written ``nn.op`` function named like such
a record would hide the record's function, so ``import builder.nn.op`` refuses it (ImportError naming
both, :func:`record_functions`).
"""
from __future__ import annotations

from typing import Callable


from ...ir import relax as rx
from ...ir.op import OpPattern, registered_ops
from ...ir.struct_info import DTYPES
from ..core import Tensor, wrap_nested
from .common import binary_operands, op_call, replaces_record


@replaces_record
def multiply(a, b, name: str = "mul") -> Tensor:
    """Elementwise ``a * b`` with broadcasting."""
    x, y = binary_operands(a, b)
    return wrap_nested(op_call("multiply", [x, y]), name)


@replaces_record
def gelu(x: Tensor, approximate: str | None = None, name: str = "gelu") -> Tensor:
    """GELU (Hendrycks & Gimpel 2016): exact ``x * Phi(x)`` (erf), or ``approximate="tanh"``."""
    if approximate not in (None, "none", "tanh"):
        raise ValueError(f"gelu: approximate must be None or 'tanh', got {approximate!r}")
    return wrap_nested(op_call("nn.gelu_tanh" if approximate == "tanh" else "nn.gelu", [x._expr]), name)


@replaces_record
def astype(x: Tensor, dtype: str, name: str = "astype") -> Tensor:
    """Convert elements to ``dtype`` (float -> int truncates toward zero)."""
    if dtype not in DTYPES:
        raise TypeError(f"astype: unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
    if x.dtype == dtype:
        return x
    return wrap_nested(op_call("astype", [x._expr], dtype=dtype), name)


@replaces_record
def where(condition: Tensor, x1, x2, name: str = "where") -> Tensor:
    """``x1`` where ``condition`` else ``x2``, with numpy broadcasting of all three
    (``numpy.where``): ``R.where(cond, x1, x2)``. A non-bool condition is cast to bool first
    (``astype`` binding); a Python number for ``x1`` / ``x2`` becomes a constant of the other's
    dtype. Raises TypeError when ``x1`` and ``x2`` dtypes differ."""
    condition = astype(condition, "bool")
    a, b = binary_operands(x1, x2)
    return wrap_nested(op_call("where", [condition._expr, a, b]), name)


def unary_function(op: rx.Op) -> Callable:
    """The ``nn.op`` function of a one-input elementwise op record: ``fn(x, name=<frontend>)`` emits
    ``R.<op>(x)``; its docstring is the record's."""
    def fn(x: Tensor, name: str = op.frontend) -> Tensor:
        return wrap_nested(rx.Call(op, [x._expr]), name)

    return _named(fn, op, "``x``: a Tensor (the op's struct-info rule says which dtypes).")


def binary_function(op: rx.Op) -> Callable:
    """The ``nn.op`` function of a two-operand broadcast op record: ``fn(a, b, name=<frontend>)``
    emits ``R.<op>(a, b)``; a Python number operand becomes a constant of the other's dtype
    (:func:`~builder.nn.op.common.scalar_constant`)."""
    def fn(a, b, name: str = op.frontend) -> Tensor:
        x, y = binary_operands(a, b)
        return wrap_nested(rx.Call(op, [x, y]), name)

    return _named(fn, op, "``a``, ``b``: Tensors (or one Python number), broadcast numpy-style; equal "
                          "dtypes.")


def _named(fn: Callable, op: rx.Op, args: str) -> Callable:
    fn.__name__ = fn.__qualname__ = op.frontend
    fn.__module__ = __name__
    fn.__doc__ = (f"{op.doc}\n\n{args} Emits ``R.{op.name.removeprefix('relax.')}``. Raises TypeError / "
                  "ValueError from the op's struct-info rule (dtypes, shapes).")
    return fn


def record_functions(defined: dict) -> dict[str, Callable]:
    """``frontend name -> function`` made for every elementwise / broadcast op record whose
    frontend name is not in ``defined`` (the hand-written functions, ``name -> function``).

    A hand-written function of such a record's name must be marked
    :func:`~builder.nn.op.common.replaces_record` (it deliberately does more than the record says);
    an unmarked one would silently shadow the record's function, so a new record would not be what
    runs: ImportError naming the function (module and line) and the record. A marked function that no
    elementwise / broadcast record names is an ImportError too (a stale mark)."""
    out = {}
    made = set()
    for op in registered_ops():
        if not op.frontend or op.pattern not in (OpPattern.ELEMWISE, OpPattern.BROADCAST):
            continue
        made.add(op.frontend)
        written = defined.get(op.frontend)
        if written is None:
            out[op.frontend] = (unary_function if op.pattern == OpPattern.ELEMWISE else binary_function)(op)
        elif not getattr(written, "__replaces_record__", False):
            raise ImportError(
                f"nn.op: the hand-written function {_where(written)} would shadow the function made from op "
                f"record '{op.name}' (pattern {op.pattern.name}, frontend '{op.frontend}'); remove it, or "
                f"mark it @replaces_record if it deliberately does more than the record")
    stale = sorted(_where(fn) for name, fn in defined.items()
                   if getattr(fn, "__replaces_record__", False) and name not in made)
    if stale:
        raise ImportError(f"nn.op: {', '.join(stale)} marked @replaces_record, but no elementwise / broadcast op "
                          "record has that frontend name")
    return out


def _where(fn: Callable) -> str:
    code = getattr(fn, "__code__", None)
    line = f":{code.co_firstlineno}" if code is not None else ""
    return f"{fn.__module__}.{fn.__name__}{line}"
