"""Arithmetic analysis of scalar expressions (TVM's ``tvm.arith``): :func:`simplify` (constant folding
and a canonical polynomial form of integer sums / products), :func:`prove_equal` (equality of int64
shape expressions through that normal form, :func:`poly_form`), :func:`divide_exact`,
:func:`free_vars`, :func:`substitute` and :func:`evaluate`. The normal form is bounded
(:data:`MAX_POLY_DEGREE`, :data:`MAX_POLY_TERMS`, :data:`MAX_POLY_PAIRS`), so is the tree of an integer
result of :func:`simplify` (:data:`MAX_EXPR_NODES`, :data:`MAX_EXPR_DEPTH`), and every walk of
:func:`simplify`, :func:`poly_form` and :func:`free_vars` visits each distinct node once, iteratively.

:mod:`builder.ir.expr` re-exports the public functions with the nodes, so ``E.simplify(e)`` reaches them.
"""
from __future__ import annotations

from .prim_expr import (Add, BinaryOp, Call, Cast, Div, DivisionByZero, ExprLike, FloatImm, FloorDiv, FloorMod, IntImm, Let,
                   Mul, Not, PrimExpr, Select, Sub, Var, _cast_const_or, _children, _const_eval, _fold, convert,
                   is_float_dtype)

__all__ = ["simplify", "prove_equal", "poly_form", "divide_exact", "free_vars", "substitute", "evaluate",
           "expr_tree_size"]


#: Bounds of the polynomial normal form (issue 40, item 9): no expansion holds more than MAX_POLY_TERMS
#: monomials or a monomial of more than MAX_POLY_DEGREE atoms, and no product multiplies more than
#: MAX_POLY_PAIRS pairs of monomials. Squaring ``n + 1`` ten times would take 2**20 monomial products
#: of degree up to 1024 (and ``n`` squared ten times is a dim of degree 1024): past a bound
#: :func:`simplify` raises ValueError, :func:`poly_form` returns None and :func:`prove_equal` False.
#: Shape and index arithmetic of real models stays far below them (a few terms, degree < 10).
MAX_POLY_TERMS = 2048
MAX_POLY_DEGREE = 64
MAX_POLY_PAIRS = 65536

#: Bounds of the integer arithmetic tree :func:`simplify` returns (issue 40 fuzzers): at most
#: MAX_EXPR_NODES nodes when its DAG is expanded as a tree and at most MAX_EXPR_DEPTH levels deep,
#: counted through the arithmetic nodes (+ - * / // % min max, comparisons, casts; any other node, such as a
#: Select or a buffer load, counts as one). Every later walk of a dim (hashing and equality of PrimExpr,
#: the printer, ``codegen.abi.dim_to_json``, the runtime's ``eval_dim`` and JSON) visits the tree, so a
#: chain such as ``d = d // 2 + d * batch`` repeated, then squared, made a dim of 83,157 nodes that
#: serialising never finished. Shape arithmetic of real models stays far below (tens of nodes).
MAX_EXPR_NODES = 8192
MAX_EXPR_DEPTH = 256


def poly_form(e: PrimExpr) -> dict[tuple, int] | None:
    """Normal form of an int expression as {sorted tuple of atom keys: coefficient}.

    Atoms are variables and any node that is not +, -, * (kept opaque, compared structurally).
    Each distinct node is expanded once (memoised by identity: ``x * x`` expands ``x`` once), without
    recursion (chains of any depth). Returns None for float expressions and for expansions past
    :data:`MAX_POLY_TERMS`, :data:`MAX_POLY_DEGREE` or :data:`MAX_POLY_PAIRS`.
    """
    try:
        return _Poly(lambda node: {(_Atom(node),): 1}).form(e)
    except _TooLarge:
        return None


class _TooLarge(ValueError):
    """An expansion past the bounds of :func:`poly_form`."""


class _Poly:
    """Expansion of +, -, * trees into polynomials, memoised by node identity; raises _TooLarge past the
    bounds. ``atom_of(node)`` gives the polynomial of a node that is not +, -, *, IntImm (None for a
    float node)."""

    __slots__ = ("memo", "atom_of")

    def __init__(self, atom_of) -> None:
        self.memo: dict[int, tuple[PrimExpr, dict | None]] = {}   # id -> (node kept alive, polynomial)
        self.atom_of = atom_of

    def form(self, e: PrimExpr) -> dict[tuple, int] | None:
        memo = self.memo
        stack: list[tuple[PrimExpr, bool]] = [(e, False)]
        while stack:
            node, ready = stack.pop()
            if id(node) in memo:
                continue
            if is_float_dtype(node.dtype):
                res = None
            elif isinstance(node, IntImm):
                res = {(): node.value} if node.value else {}
            elif isinstance(node, (Add, Sub, Mul)):
                if not ready:
                    stack.append((node, True))
                    stack.append((node.b, False))
                    stack.append((node.a, False))
                    continue
                res = _combine(node, memo[id(node.a)][1], memo[id(node.b)][1])
            else:
                res = self.atom_of(node)
            memo[id(node)] = (node, res)
        return memo[id(e)][1]


def _combine(node: PrimExpr, pa: dict | None, pb: dict | None) -> dict | None:
    """The polynomial of ``node`` (+, -, *) from its operands'; _TooLarge past the bounds."""
    if pa is None or pb is None:
        return None
    out: dict[tuple, int] = {}
    if isinstance(node, Mul):
        degree = _degree(pa) + _degree(pb)
        if degree > MAX_POLY_DEGREE:
            raise _TooLarge(f"a product of degree {degree} (more than MAX_POLY_DEGREE = {MAX_POLY_DEGREE})")
        if len(pa) * len(pb) > MAX_POLY_PAIRS:
            raise _TooLarge(f"a product of a sum of {len(pa)} terms by one of {len(pb)} (more than "
                            f"MAX_POLY_PAIRS = {MAX_POLY_PAIRS} products of terms)")
        for ka, va in pa.items():
            for kb, vb in pb.items():
                k = _merge(ka, kb)
                c = out.get(k, 0) + va * vb
                if c:
                    out[k] = c
                else:
                    out.pop(k, None)
    else:
        sign = 1 if isinstance(node, Add) else -1
        out = dict(pa)
        for k, v in pb.items():
            c = out.get(k, 0) + sign * v
            if c:
                out[k] = c
            else:
                out.pop(k, None)
    if len(out) > MAX_POLY_TERMS:
        raise _TooLarge(f"a sum of {len(out)} terms (more than MAX_POLY_TERMS = {MAX_POLY_TERMS})")
    return out


def _degree(p: dict) -> int:
    return max((len(k) for k in p), default=0)


def _merge(ka: tuple, kb: tuple) -> tuple:
    """The monomial ``ka * kb`` (both sorted by :func:`_atom_order`), sorted."""
    if not ka:
        return kb
    if not kb:
        return ka
    return tuple(sorted(ka + kb, key=_atom_order))


class _Atom:
    """Hashable wrapper giving atoms structural identity (Var by identity); the hash is computed once."""

    __slots__ = ("e", "h")

    def __init__(self, e: PrimExpr) -> None:
        self.e = e
        self.h = hash(e)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Atom) and (self.e is other.e or (self.h == other.h and self.e == other.e))

    def __hash__(self) -> int:
        return self.h


def _atom_order(a: _Atom) -> tuple:
    e = a.e
    return (getattr(e, "name", type(e).__name__), a.h)


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

    Each distinct node is visited once (a shared subexpression, as ``x * x`` builds it, is simplified
    once) and +, -, * chains of any depth are walked without recursion. Raises ValueError for an
    expansion past the bounds of :func:`poly_form` (:data:`MAX_POLY_DEGREE`, ...) and for an integer
    result past :data:`MAX_EXPR_NODES` / :data:`MAX_EXPR_DEPTH` (its tree, see :func:`expr_tree_size`),
    naming its variables.
    """
    e = _fold_tree(convert(e))
    try:
        out = _Canon().canon(e)
        if not is_float_dtype(out.dtype):
            _check_tree(out)
        return out
    except _TooLarge as err:
        names = ", ".join(v.name for v in free_vars(e)[:8]) or "constants"
        raise ValueError(f"the symbolic expression in {names} is too large to simplify: expanding it makes "
                         f"{err} (builder.ir.arith; a shape built by repeated squaring?)") from None


def expr_tree_size(e: ExprLike, limit: int | None = None) -> tuple[int, int]:
    """``(nodes, depth)`` of ``e``'s arithmetic tree: its DAG expanded as a tree, through binary nodes and
    casts (any other node counts as one node of depth 1). Each distinct node is visited once, without
    recursion; with ``limit`` the count stops past it (the returned count is then only ``> limit``)."""
    e = convert(e)
    memo: dict[int, tuple[PrimExpr, int, int]] = {}   # id -> (node kept alive, nodes, depth)
    stack: list[tuple[PrimExpr, bool]] = [(e, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        kids = (node.a, node.b) if isinstance(node, BinaryOp) else (node.value,) if isinstance(node, Cast) else ()
        if kids and not ready:
            stack.append((node, True))
            stack.extend((k, False) for k in kids)
            continue
        size = 1 + sum(memo[id(k)][1] for k in kids)
        depth = 1 + max((memo[id(k)][2] for k in kids), default=0)
        if limit is not None and size > limit:
            return size, depth
        memo[id(node)] = (node, size, depth)
    return memo[id(e)][1], memo[id(e)][2]


def _check_tree(e: PrimExpr) -> None:
    """_TooLarge when ``e``'s arithmetic tree is past :data:`MAX_EXPR_NODES` nodes or :data:`MAX_EXPR_DEPTH`."""
    size, depth = expr_tree_size(e, MAX_EXPR_NODES)
    if size > MAX_EXPR_NODES:
        raise _TooLarge(f"an expression of more than MAX_EXPR_NODES = {MAX_EXPR_NODES} nodes")
    if depth > MAX_EXPR_DEPTH:
        raise _TooLarge(f"an expression {depth} levels deep (more than MAX_EXPR_DEPTH = {MAX_EXPR_DEPTH})")


def divide_exact(e: ExprLike, divisor: ExprLike) -> PrimExpr | None:
    """The int expression ``q`` with ``q * divisor == e`` for every value of the variables, else None.

    ``divisor`` is an int or an int expression (``batch * seq`` divides ``batch * seq * 4`` into ``4``).
    Exact multivariate division of the polynomial forms (:func:`poly_form`; any monomial order that is
    graded and compatible with products works, Cox, Little, O'Shea, *Ideals, Varieties, and Algorithms*,
    2.3): the leading term of the remainder is divided by the divisor's leading term until the remainder
    is 0; None when a leading term does not divide (its atoms or its integer coefficient), when a form
    is past the bounds, or for a divisor 0. Raises ValueError as :func:`simplify` does.
    """
    d = simplify(divisor)
    if isinstance(d, IntImm) and d.value == 0:
        return None
    e = simplify(e)
    pe, pd = poly_form(e), poly_form(d)
    if pe is None or pd is None or not pd:
        return None
    lead_d = max(pd, key=_mono_order)
    cd = pd[lead_d]
    rem, quot = dict(pe), {}
    for _ in range(MAX_POLY_TERMS + 1):
        if not rem:
            return _rebuild(quot, free_vars(e) + free_vars(d), e.dtype)
        lead = max(rem, key=_mono_order)
        mono = _mono_quotient(lead, lead_d)
        if mono is None or rem[lead] % cd:
            return None
        c = rem[lead] // cd
        quot[mono] = quot.get(mono, 0) + c
        for k, v in pd.items():
            m = _merge(mono, k)
            r = rem.get(m, 0) - c * v
            if r:
                rem[m] = r
            else:
                rem.pop(m, None)
    return None


def _mono_order(m: tuple) -> tuple:
    """A graded monomial order: degree, then the atoms' order (ties of equal monomials impossible)."""
    return (len(m), [_atom_order(a) for a in m])


def _mono_quotient(m: tuple, by: tuple) -> tuple | None:
    """The monomial ``m / by`` (both sorted multisets of atoms), None when ``by`` does not divide ``m``."""
    rest = list(m)
    for a in by:
        for i, b in enumerate(rest):
            if b == a:
                del rest[i]
                break
        else:
            return None
    return tuple(rest)


class _Canon:
    """The canonical form of :func:`simplify`, memoised by node identity for one call."""

    __slots__ = ("memo", "poly")

    def __init__(self) -> None:
        self.memo: dict[int, tuple[PrimExpr, PrimExpr]] = {}
        self.poly = _Poly(self._atom_poly)

    def canon(self, e: PrimExpr) -> PrimExpr:
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit[1]
        out = self._canon(e)
        self.memo[id(e)] = (e, out)
        return out

    def _atom_poly(self, node: PrimExpr) -> dict | None:
        """The polynomial of a node that is not +, -, *: that of its canonical form (a floor division
        may become a polynomial), else the canonical node as one atom."""
        c = self.canon(node)
        if c is not node and isinstance(c, (Add, Sub, Mul, IntImm)):
            return self.poly.form(c)
        if is_float_dtype(c.dtype):
            return None
        return {(_Atom(c),): 1}

    def _canon(self, e: PrimExpr) -> PrimExpr:
        if is_float_dtype(e.dtype) or e.dtype == "bool":
            return e
        if isinstance(e, BinaryOp) and not isinstance(e, (Add, Sub, Mul, FloorDiv)):
            return _fold(type(e), self.canon(e.a), self.canon(e.b))
        if isinstance(e, FloorDiv) and isinstance(e.b, IntImm) and e.b.value > 0:
            pa = self.poly.form(e.a)
            if pa is not None and all(v % e.b.value == 0 for v in pa.values()):
                return _rebuild({k: v // e.b.value for k, v in pa.items()}, free_vars(e.a), e.dtype)
            return _fold(FloorDiv, self.canon(e.a), e.b)
        if not isinstance(e, (Add, Sub, Mul)):
            return e
        p = self.poly.form(e)
        if p is None:
            a, b = self.canon(e.a), self.canon(e.b)
            return e if a is e.a and b is e.b else type(e)(a, b, e.dtype)
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
    """Constants folded bottom-up through binary nodes and casts; each distinct node once, no recursion."""
    memo: dict[int, tuple[PrimExpr, PrimExpr]] = {}
    stack: list[tuple[PrimExpr, bool]] = [(e, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        if isinstance(node, BinaryOp):
            if not ready:
                stack += [(node, True), (node.b, False), (node.a, False)]
                continue
            out = _fold(type(node), memo[id(node.a)][1], memo[id(node.b)][1])
        elif isinstance(node, Cast):
            if not ready:
                stack += [(node, True), (node.value, False)]
                continue
            v = memo[id(node.value)][1]
            out = _cast_const_or(v, node.dtype) if isinstance(v, (IntImm, FloatImm)) else Cast(node.dtype, v)
        else:
            out = node
        memo[id(node)] = (node, out)
    return memo[id(e)][1]


def free_vars(e: ExprLike) -> list[Var]:
    """The distinct ``Var``\\ s in ``e`` in order of first appearance (left to right).

    Walks each distinct node once (shared subexpressions are not re-walked) without recursion."""
    out: list[Var] = []
    seen: set[int] = set()
    bound: set[int] = set()   # Let variables: bound inside the expression, not free
    visited: dict[int, PrimExpr] = {}   # id -> node (kept alive so that ids stay unique)
    stack = [convert(e)]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            if id(x) not in seen:
                seen.add(id(x))
                out.append(x)
            continue
        if id(x) in visited:
            continue
        visited[id(x)] = x
        if isinstance(x, Let):
            bound.add(id(x.var))
        stack.extend(reversed(_children(x)))
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

    Raises KeyError naming the first unbound variable; :class:`~builder.ir.expr.DivisionByZero` (a ValueError
    naming the expression, also a ZeroDivisionError) for a division or modulo by zero.
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
            raise DivisionByZero(f"division by zero in {e}: {e.b} is 0")
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
