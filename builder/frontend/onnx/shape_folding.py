"""Shape computations at import time: symbolic dim expressions simplified and bounded
(:data:`MAX_SHAPE_EXPR_NODES`, ``core.limits.MAX_EXPRESSION_DEPTH``), integer arrays of them
(:class:`~.values._Sym`), signs of dims decided where they can be (dims are never negative), and the
bound on constant folding (:data:`MAX_FOLD_ELEMENTS`).
"""
from __future__ import annotations

import math

import numpy as np
from core.limits import MAX_EXPRESSION_DEPTH

from ...ir import expr as E
from .errors import ONNXImportError
from .values import _Sym


#: Constant folding of an op whose result may be larger than its inputs (Expand, ConstantOfShape,
#: Range, broadcasting arithmetic, ...) stops at this many elements; a larger result is computed by
#: the compiled graph instead.
MAX_FOLD_ELEMENTS = 1 << 16


#: The largest symbolic dim expression shape arithmetic may build (nodes of the expression tree): each value
#: is checked as it is made, so no expression given to the simplifier or the compiler nests deeper than
#: :data:`core.limits.MAX_EXPRESSION_DEPTH` (a chain of thousands of Div nodes on a Shape used to end in a
#: RecursionError).
MAX_SHAPE_EXPR_NODES = 4096


def _simp(e):
    """A dim value in canonical form: a Python int, or a simplified PrimExpr that is not constant."""
    if isinstance(e, (bool, np.bool_)):
        return int(e)
    if isinstance(e, (int, np.integer)):
        return int(e)
    if isinstance(e, E.PrimExpr):
        e = E.simplify(e)
        if isinstance(e, E.IntImm):
            return int(e.value)
        _check_expr_size(e)
        return e
    raise ONNXImportError(f"not an integer shape value: {e!r}")


def _check_expr_size(e) -> None:
    """ONNXImportError when the symbolic dim expression ``e`` nests deeper than MAX_EXPRESSION_DEPTH or has more
    than :data:`MAX_SHAPE_EXPR_NODES` nodes (walked without recursion)."""
    stack, seen = [(e, 1)], 0
    while stack:
        x, depth = stack.pop()
        seen += 1
        if depth > MAX_EXPRESSION_DEPTH or seen > MAX_SHAPE_EXPR_NODES:
            raise ONNXImportError(f"shape arithmetic builds a symbolic dim expression deeper than "
                                  f"{MAX_EXPRESSION_DEPTH} levels or larger than {MAX_SHAPE_EXPR_NODES} nodes "
                                  "(core.limits.MAX_EXPRESSION_DEPTH, MAX_SHAPE_EXPR_NODES)")
        for name in ("a", "b", "condition", "true_value", "false_value", "value", "body"):
            child = getattr(x, name, None)
            if isinstance(child, E.PrimExpr):
                stack.append((child, depth + 1))
        for child in getattr(x, "args", ()) if isinstance(x, E.Call) else ():
            if isinstance(child, E.PrimExpr):
                stack.append((child, depth + 1))


def _shape_value(vals: np.ndarray, dtype: str = "int64"):
    """An object array of dim values as a static array when every element is an int, else _Sym."""
    if not isinstance(vals, np.ndarray):   # numpy returns a lone element for 0-d results
        one = np.empty((), dtype=object)
        one[()] = vals
        vals = one
    flat = [_simp(v) for v in vals.ravel()]
    if all(isinstance(v, int) for v in flat):
        return np.array(flat, dtype=dtype).reshape(vals.shape)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return _Sym(out.reshape(vals.shape), dtype)


def _objects(v) -> np.ndarray:
    """A static integer array or a _Sym as an object array of ints / PrimExprs."""
    if isinstance(v, _Sym):
        return v.vals
    out = np.empty(v.shape, dtype=object)
    out.ravel()[:] = [int(x) for x in v.ravel()]
    return out


def _nonneg(e) -> bool:
    """Whether the dim expression is provably >= 0 (shape variables are never negative)."""
    if isinstance(e, int):
        return e >= 0
    if isinstance(e, E.IntImm):
        return e.value >= 0
    if isinstance(e, E.Var):
        return True
    if isinstance(e, (E.Add, E.Mul, E.FloorDiv, E.FloorMod, E.Max)):
        return _nonneg(e.a) and _nonneg(e.b)
    if isinstance(e, E.Min):
        return _nonneg(e.a) or _nonneg(e.b)
    return False


def _sign(a, b, what: str) -> int:
    """-1, 0 or 1 for ``a - b`` of dim values; ONNXImportError when it cannot be decided."""
    d = _simp(a - b) if not (isinstance(a, int) and isinstance(b, int)) else a - b
    if isinstance(d, int):
        return (d > 0) - (d < 0)
    if _nonneg(d) and _nonneg(_simp(d - 1)):
        return 1
    if _nonneg(_simp(-d)) and _nonneg(_simp(-d - 1)):
        return -1
    if _nonneg(d) and isinstance(b, int) and b < 0 or _nonneg(a) and isinstance(b, int) and b < 0:
        return 1
    if isinstance(a, int) and a < 0 and _nonneg(b):
        return -1
    raise ONNXImportError(f"{what}: cannot decide the comparison of symbolic dims {a} and {b} at import time")


def _fold_ok(*shapes) -> bool:
    """True when every shape is static and none has more than :data:`MAX_FOLD_ELEMENTS` elements: a result of those
    shapes is computed at import time (constant folding), else in the graph."""
    return all(isinstance(d, int) for s in shapes for d in s) and all(
        math.prod(s) <= MAX_FOLD_ELEMENTS for s in shapes)


def _int_div(a, b):
    """``a / b`` of integers or symbolic dims as ONNX's integer ``Div`` computes it (toward zero): ints in
    Python, a non-negative dim by a positive int or by a non-negative dim as ``FloorDiv`` (the same there).
    Raises ONNXImportError for a division by 0 or of dims whose signs are unknown."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ONNXImportError("integer division by zero in a shape computation")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q
    if _nonneg(a) and isinstance(b, int) and b > 0 or _nonneg(a) and _nonneg(b):
        return E.FloorDiv(E.convert(a, "int64"), E.convert(b, "int64"))
    raise ONNXImportError(f"cannot divide the symbolic dims {a} / {b} (the sign is unknown)")
