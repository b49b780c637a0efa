"""The scalar-expression printer (TVMScript syntax) and the name allocator (:func:`fresh_name`), shared by the
graph-level printer (:mod:`builder.ir.printer`, which re-exports them) and the loop-level one
(:mod:`builder.ir.tir.printer`); ``str(PrimExpr)`` prints with :func:`print_prim_expr`."""
from __future__ import annotations

from . import expr as E

__all__ = ["print_prim_expr", "format_float", "fresh_name"]

# precedence: higher binds tighter
_PREC = {
    E.Or: 1, E.And: 2, E.EQ: 4, E.NE: 4, E.LT: 4, E.LE: 4, E.GT: 4, E.GE: 4,
    E.Add: 5, E.Sub: 5, E.Mul: 6, E.Div: 6, E.FloorDiv: 6, E.FloorMod: 6,
}


def format_float(value: float) -> str:
    """Format a float as TVM does (``%.17g``): ``1e-05`` -> ``1.0000000000000001e-05``, 0.0 -> ``0``."""
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return "%.17g" % value


def fresh_name(hint: str, used: set[str]) -> str:
    """The first of ``hint``, ``hint_1``, ``hint_2``, ... not in ``used``, added to ``used``: how
    both printers give distinct objects that share a name hint distinct spellings."""
    name, k = hint, 0
    while name in used:
        k += 1
        name = f"{hint}_{k}"
    used.add(name)
    return name


def print_prim_expr(e: E.PrimExpr, name_of=None) -> str:
    """Print a scalar expression in TVMScript syntax.

    ``name_of`` optionally maps a ``Var`` to its printed name (the printer uses it to give
    distinct variables that share a name distinct spellings); default is ``var.name``.
    Loop-level nodes print themselves through a ``_print(name_of, recurse)`` method.
    """
    name_of = name_of or (lambda v: v.name)

    def p(x: E.PrimExpr, parent_prec: int = 0, right: bool = False) -> str:
        if isinstance(x, E.Var):
            return name_of(x)
        if isinstance(x, E.IntImm):
            if x.dtype == "bool":
                return "T.bool(True)" if x.value else "T.bool(False)"
            if x.dtype in ("int64", "int32"):
                return str(x.value) if x.value >= 0 or parent_prec == 0 else f"({x.value})"
            return f"T.{x.dtype}({x.value})"
        if isinstance(x, E.FloatImm):
            return f"T.{x.dtype}({format_float(x.value)})"
        if isinstance(x, E.StringImm):
            return '"' + x.value.replace('"', '\\"') + '"'
        if isinstance(x, (E.Min, E.Max)):
            return f"T.{x.op}({p(x.a)}, {p(x.b)})"
        if isinstance(x, E.BinaryOp):
            prec = _PREC[type(x)]
            # left-assoc: the right operand needs parens at equal precedence
            text = f"{p(x.a, prec)} {x.op} {p(x.b, prec + 1)}"
            if type(x) is E.Div and not E.is_float_dtype(x.dtype):
                text = f"T.Div({p(x.a)}, {p(x.b)})"
                return text
            return f"({text})" if prec < parent_prec else text
        if isinstance(x, E.Not):
            return f"not {p(x.a, 3)}"
        if isinstance(x, E.Select):
            return f"T.Select({p(x.condition)}, {p(x.true_value)}, {p(x.false_value)})"
        if isinstance(x, E.Cast):
            return f"T.Cast(\"{x.dtype}\", {p(x.value)})"
        if isinstance(x, E.Let):
            return f"T.Let({p(x.body)}, where={{{p(x.var)}: {p(x.value)}}})"
        if isinstance(x, E.Call):
            return f"T.{x.op}({', '.join(p(a) for a in x.args)})"
        custom = getattr(x, "_print", None)
        if callable(custom):
            return custom(name_of, p)
        raise TypeError(f"cannot print {type(x).__name__}")

    return p(e)
