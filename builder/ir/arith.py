"""Arithmetic analysis of scalar expressions (TVM's ``tvm.arith``): :func:`simplify` (constant folding
and a canonical polynomial form of integer sums / products), :func:`prove_equal` (equality of int64
shape expressions through that normal form, :func:`poly_form`), :func:`divide_exact`,
:func:`free_vars`, :func:`substitute` and :func:`evaluate`.

:mod:`builder.ir.expr` re-exports the public functions, so ``E.simplify(e)`` reaches them too.
"""
from __future__ import annotations

from .expr import (Add, BinaryOp, Call, Cast, Div, ExprLike, FloatImm, FloorDiv, FloorMod, IntImm, Let, Mul, Not,
                   PrimExpr, Select, Sub, Var, _cast_const_or, _children, _const_eval, _fold, convert, is_float_dtype)

__all__ = ["simplify", "prove_equal", "poly_form", "divide_exact", "free_vars", "substitute", "evaluate"]


def poly_form(e: PrimExpr) -> dict[tuple, int] | None:
    """Normal form of an int expression as {sorted tuple of atom keys: coefficient}.

    Atoms are variables and any node that is not +, -, * (kept opaque, compared structurally).
    Returns None for float expressions.
    """
    if is_float_dtype(e.dtype):
        return None
    if isinstance(e, IntImm):
        return {(): e.value} if e.value else {}
    if isinstance(e, Add) or isinstance(e, Sub):
        pa, pb = poly_form(e.a), poly_form(e.b)
        if pa is None or pb is None:
            return None
        sign = 1 if isinstance(e, Add) else -1
        out = dict(pa)
        for k, v in pb.items():
            out[k] = out.get(k, 0) + sign * v
            if out[k] == 0:
                del out[k]
        return out
    if isinstance(e, Mul):
        pa, pb = poly_form(e.a), poly_form(e.b)
        if pa is None or pb is None:
            return None
        out: dict[tuple, int] = {}
        for ka, va in pa.items():
            for kb, vb in pb.items():
                k = tuple(sorted(ka + kb, key=_atom_order))
                out[k] = out.get(k, 0) + va * vb
                if out[k] == 0:
                    del out[k]
        return out
    return {(_Atom(e),): 1}


class _Atom:
    """Hashable wrapper giving atoms structural identity (Var by identity)."""

    __slots__ = ("e",)

    def __init__(self, e: PrimExpr) -> None:
        self.e = e

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Atom) and self.e == other.e

    def __hash__(self) -> int:
        return hash(self.e)


def _atom_order(a: _Atom) -> tuple:
    e = a.e
    return (getattr(e, "name", type(e).__name__), hash(e))


def prove_equal(a: ExprLike, b: ExprLike) -> bool:
    """True if the int expressions ``a`` and ``b`` are equal for every value of their variables.

    Decided on the polynomial normal form of ``+``, ``-``, ``*`` (other nodes are compared
    structurally). False means "not provably equal".
    """
    ea, eb = convert(a), convert(b)
    if ea == eb:
        return True
    pa, pb = poly_form(ea), poly_form(eb)
    return pa is not None and pa == pb


def simplify(e: ExprLike) -> PrimExpr:
    """Return ``e`` simplified: constants folded bottom-up, and integer sums/products of
    variables put in a canonical polynomial form (``n + 1 + 1 - 2`` -> ``n``, ``(n * 4) // 2``
    -> ``n * 2``). Variables keep their order of first appearance (``batch * seq``).
    """
    e = _fold_tree(convert(e))
    return _canonical(e)


def divide_exact(e: ExprLike, divisor: int) -> PrimExpr | None:
    """``e / divisor`` when every coefficient of ``e``'s polynomial form is divisible, else None."""
    if divisor == 0:
        return None
    e = simplify(e)
    p = poly_form(e)
    if p is None or any(v % divisor for v in p.values()):
        return None
    return _rebuild({k: v // divisor for k, v in p.items()}, free_vars(e), e.dtype)


def _canonical(e: PrimExpr) -> PrimExpr:
    if is_float_dtype(e.dtype) or e.dtype == "bool":
        return e
    if isinstance(e, BinaryOp) and not isinstance(e, (Add, Sub, Mul, FloorDiv)):
        return _fold(type(e), _canonical(e.a), _canonical(e.b))
    if isinstance(e, (Add, Sub, Mul)):
        a, b = _canonical(e.a), _canonical(e.b)
        if a is not e.a or b is not e.b:
            e = type(e)(a, b, e.dtype)
    if isinstance(e, FloorDiv) and isinstance(e.b, IntImm) and e.b.value > 0:
        pa = poly_form(e.a)
        if pa is not None and all(v % e.b.value == 0 for v in pa.values()):
            return _rebuild({k: v // e.b.value for k, v in pa.items()}, free_vars(e.a), e.dtype)
        return _fold(FloorDiv, _canonical(e.a), e.b)
    if not isinstance(e, (Add, Sub, Mul)):
        return e
    p = poly_form(e)
    if p is None:
        return e
    return _rebuild(p, free_vars(e), e.dtype)


def _rebuild(p: dict, order: list, dtype: str) -> PrimExpr:
    """Expression of a polynomial; monomials by degree (high first), then variable order."""
    rank = {id(v): i for i, v in enumerate(order)}

    def atom_rank(a: "_Atom") -> int:
        return rank.get(id(a.e), len(rank))

    terms = []
    for mono, coeff in p.items():
        atoms = sorted(mono, key=atom_rank)
        terms.append((atoms, coeff))
    terms.sort(key=lambda t: (-len(t[0]), [atom_rank(a) for a in t[0]]))
    out: PrimExpr | None = None
    for atoms, coeff in terms:
        if not atoms:
            term: PrimExpr = IntImm(abs(coeff), dtype)
        else:
            term = atoms[0].e
            for a in atoms[1:]:
                term = Mul(term, a.e)
            if abs(coeff) != 1:
                term = Mul(term, IntImm(abs(coeff), dtype))
        if out is None:
            out = term if coeff > 0 else Sub(IntImm(0, dtype), term) if atoms else IntImm(coeff, dtype)
        else:
            out = Add(out, term) if coeff > 0 else Sub(out, term)
    return out if out is not None else IntImm(0, dtype)


def _fold_tree(e: PrimExpr) -> PrimExpr:
    if isinstance(e, BinaryOp):
        return _fold(type(e), _fold_tree(e.a), _fold_tree(e.b))
    if isinstance(e, Cast):
        v = _fold_tree(e.value)
        return _cast_const_or(v, e.dtype) if isinstance(v, (IntImm, FloatImm)) else Cast(e.dtype, v)
    return e


def free_vars(e: ExprLike) -> list[Var]:
    """The distinct ``Var``\\ s in ``e`` in order of first appearance (left to right)."""
    out: list[Var] = []
    seen: set[int] = set()
    bound: set[int] = set()   # Let variables: bound inside the expression, not free

    def visit(x: PrimExpr) -> None:
        if isinstance(x, Var):
            if id(x) not in seen:
                seen.add(id(x))
                out.append(x)
            return
        if isinstance(x, Let):
            bound.add(id(x.var))
        for child in _children(x):
            visit(child)

    visit(convert(e))
    return [v for v in out if id(v) not in bound]


def substitute(e: ExprLike, vmap: dict) -> PrimExpr:
    """Replace variables of ``e`` by ``vmap[var]`` (PrimExpr or int), refolding constants.

    Only the node types of this module are rebuilt; loop-level nodes define their own.
    """
    e = convert(e)
    if isinstance(e, Var):
        return convert(vmap[e]) if e in vmap else e
    if isinstance(e, BinaryOp):
        return _fold(type(e), substitute(e.a, vmap), substitute(e.b, vmap))
    if isinstance(e, Not):
        return Not(substitute(e.a, vmap))
    if isinstance(e, Select):
        return Select(substitute(e.condition, vmap), substitute(e.true_value, vmap),
                      substitute(e.false_value, vmap))
    if isinstance(e, Cast):
        return Cast(e.dtype, substitute(e.value, vmap))
    if isinstance(e, Call):
        return Call(e.dtype, e.op, [substitute(a, vmap) for a in e.args])
    if isinstance(e, Let):
        return Let(e.var, substitute(e.value, vmap), substitute(e.body, vmap))
    sub = getattr(e, "substitute", None)
    return sub(vmap) if callable(sub) else e


def evaluate(e: ExprLike, env: dict) -> int | float:
    """Evaluate ``e`` with ``env`` mapping ``Var`` (or var name) -> number.

    Raises KeyError naming the first unbound variable; ZeroDivisionError on division by zero.
    Integer semantics follow TVM: ``//`` and ``%`` are floor division / modulo.
    """
    e = convert(e)
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    if isinstance(e, Var):
        if e in env:
            return env[e]
        if e.name in env:
            return env[e.name]
        raise KeyError(f"symbolic variable '{e.name}' has no value")
    if isinstance(e, BinaryOp):
        x, y = evaluate(e.a, env), evaluate(e.b, env)
        is_int = not is_float_dtype(e.a.dtype)
        if isinstance(e, (FloorDiv, FloorMod, Div)) and y == 0:
            raise ZeroDivisionError(f"division by zero in {e}")
        result = _const_eval(type(e), x, y, is_int)
        return int(result) if isinstance(result, bool) else result
    if isinstance(e, Not):
        return int(not evaluate(e.a, env))
    if isinstance(e, Select):
        return evaluate(e.true_value if evaluate(e.condition, env) else e.false_value, env)
    if isinstance(e, Cast):
        v = evaluate(e.value, env)
        return float(v) if is_float_dtype(e.dtype) else int(v)
    if isinstance(e, Let):
        return evaluate(e.body, {**env, e.var: evaluate(e.value, env)})
    raise TypeError(f"cannot evaluate {type(e).__name__} on the host")
