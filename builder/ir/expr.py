"""Scalar expressions (``PrimExpr``), shared by the graph level and the loop level.

Mirrors TVM's ``tir.PrimExpr`` family: symbolic shape variables (``Var``), constants
(``IntImm`` / ``FloatImm``), arithmetic (``Add``, ``Sub``, ``Mul``, ``FloorDiv``, ``FloorMod``,
``Div``, ``Min``, ``Max``), comparisons, logic, ``Select``, ``Cast`` and intrinsic ``Call``\\ s.
Graph-level shapes are tuples of ``int`` or int64 ``PrimExpr``; loop-level code (``builder.ir.tir``)
adds buffer loads on top of the same nodes.

Equality: ``Var`` compares by identity (two variables that share a name stay distinct, as
TVM's reference semantics say); every other node compares structurally. Arithmetic on
expressions folds constants and applies the identities ``x + 0``, ``x * 1``, ``x * 0``;
:func:`prove_equal` decides equality of int64 shape expressions through a polynomial normal form.
"""
from __future__ import annotations

import math
import struct
from typing import Iterable, Union

__all__ = [
    "PrimExpr", "Var", "SizeVar", "IntImm", "FloatImm", "StringImm", "BinaryOp", "Add", "Sub", "Mul",
    "Div", "FloorDiv", "FloorMod", "Min", "Max", "CmpOp", "EQ", "NE", "LT", "LE", "GT", "GE",
    "And", "Or", "Not", "Select", "Cast", "Let", "Call", "const", "convert", "simplify", "prove_equal",
    "free_vars", "substitute", "evaluate", "divide_exact", "is_int_dtype", "is_float_dtype", "ExprLike",
]

ExprLike = Union["PrimExpr", int, float, bool]


def is_int_dtype(dtype: str) -> bool:
    """True for ``int8..int64``, ``uint8..uint64`` and ``bool``."""
    return dtype.startswith(("int", "uint")) or dtype == "bool"


def is_float_dtype(dtype: str) -> bool:
    """True for ``float16``, ``bfloat16``, ``float32``, ``float64``."""
    return dtype.startswith(("float", "bfloat"))


def _bits(dtype: str) -> int:
    if dtype == "bool":
        return 1
    digits = "".join(c for c in dtype if c.isdigit())
    return int(digits) if digits else 32


def _promote(a: str, b: str) -> str:
    """Result dtype of a binary op on dtypes ``a`` and ``b`` (float wins; wider wins)."""
    if a == b:
        return a
    fa, fb = is_float_dtype(a), is_float_dtype(b)
    if fa != fb:
        return a if fa else b
    return a if _bits(a) >= _bits(b) else b


class PrimExpr:
    """Base class of scalar expressions. ``dtype`` is the scalar type of the value."""

    __slots__ = ("dtype",)
    dtype: str

    # -- construction helpers -------------------------------------------------------------
    def __add__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Add, self, other)

    def __radd__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Add, other, self)

    def __sub__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Sub, self, other)

    def __rsub__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Sub, other, self)

    def __mul__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Mul, self, other)

    def __rmul__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Mul, other, self)

    def __truediv__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Div, self, other)

    def __rtruediv__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Div, other, self)

    def __floordiv__(self, other: ExprLike) -> "PrimExpr":
        return _binary(FloorDiv, self, other)

    def __rfloordiv__(self, other: ExprLike) -> "PrimExpr":
        return _binary(FloorDiv, other, self)

    def __mod__(self, other: ExprLike) -> "PrimExpr":
        return _binary(FloorMod, self, other)

    def __rmod__(self, other: ExprLike) -> "PrimExpr":
        return _binary(FloorMod, other, self)

    def __neg__(self) -> "PrimExpr":
        return _binary(Sub, const(0, self.dtype), self)

    def __lt__(self, other: ExprLike) -> "PrimExpr":
        return _binary(LT, self, other)

    def __le__(self, other: ExprLike) -> "PrimExpr":
        return _binary(LE, self, other)

    def __gt__(self, other: ExprLike) -> "PrimExpr":
        return _binary(GT, self, other)

    def __ge__(self, other: ExprLike) -> "PrimExpr":
        return _binary(GE, self, other)

    def astype(self, dtype: str) -> "PrimExpr":
        """Convert to ``dtype``: returns ``self`` when the dtype already matches, a folded constant
        for ``IntImm`` / ``FloatImm`` operands, and a ``Cast`` node otherwise.

        Integer constants wrap to the target width (two's complement, as a C cast does on every
        supported target); float -> int truncates toward zero; float -> narrower float rounds.
        """
        if dtype == self.dtype:
            return self
        if isinstance(self, (IntImm, FloatImm)):
            return _fold_cast(self.value, dtype)
        return Cast(dtype, self)

    def __bool__(self) -> bool:
        raise TypeError(
            f"cannot decide the truth of the symbolic expression {self!s}; "
            "use builder.ir.expr.prove_equal or evaluate it with concrete values"
        )

    # structural equality (Var overrides with identity)
    def _key(self) -> tuple:
        """The fields that decide structural equality (each node class defines it)."""
        raise TypeError(f"{type(self).__name__} defines no structural key")

    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            other = const(other, self.dtype)
        if not isinstance(other, PrimExpr):
            return NotImplemented
        return self is other or (type(self) is type(other) and self._key() == other._key())

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __str__(self) -> str:
        from .printer import print_prim_expr

        return print_prim_expr(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self!s})"


class Var(PrimExpr):
    """A scalar variable, e.g. the symbolic dim ``batch_size`` (int64) or a loop index.

    Two ``Var`` objects are equal only if they are the same object, even with the same name.
    """

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str = "int64") -> None:
        self.name = name
        self.dtype = dtype

    def _key(self) -> tuple:
        return (id(self),)

    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        return self is other

    def __hash__(self) -> int:
        return id(self)

    @property
    def name_hint(self) -> str:
        """TVM's spelling of ``name``."""
        return self.name


class SizeVar(Var):
    """A ``Var`` known to be non-negative (shape dims)."""

    __slots__ = ()


class IntImm(PrimExpr):
    """An integer (or bool) constant of a given dtype."""

    __slots__ = ("value",)

    def __init__(self, value: int, dtype: str = "int64") -> None:
        self.value = int(value)
        self.dtype = dtype

    def _key(self) -> tuple:
        return (self.value, self.dtype)

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value


class FloatImm(PrimExpr):
    """A floating-point constant (``inf`` / ``nan`` allowed)."""

    __slots__ = ("value",)

    def __init__(self, value: float, dtype: str = "float32") -> None:
        self.value = float(value)
        self.dtype = dtype

    def _key(self) -> tuple:
        return (repr(self.value), self.dtype)

    def __float__(self) -> float:
        return self.value


class StringImm(PrimExpr):
    """A string constant (used as an argument of intrinsic calls such as ``T.call_extern``)."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value
        self.dtype = "handle"

    def _key(self) -> tuple:
        return (self.value,)


class BinaryOp(PrimExpr):
    """Base of two-operand nodes; ``a`` and ``b`` share a dtype."""

    __slots__ = ("a", "b")
    op = "?"

    def __init__(self, a: PrimExpr, b: PrimExpr, dtype: str | None = None) -> None:
        self.a = a
        self.b = b
        self.dtype = dtype or a.dtype

    def _key(self) -> tuple:
        return (self.a, self.b)


class Add(BinaryOp):
    """``a + b``."""

    __slots__ = ()
    op = "+"


class Sub(BinaryOp):
    """``a - b``."""

    __slots__ = ()
    op = "-"


class Mul(BinaryOp):
    """``a * b``."""

    __slots__ = ()
    op = "*"


class Div(BinaryOp):
    """True division ``a / b`` (floats; for ints TVM's truncated division)."""

    __slots__ = ()
    op = "/"


class FloorDiv(BinaryOp):
    """Floor division ``a // b`` (rounds toward minus infinity)."""

    __slots__ = ()
    op = "//"


class FloorMod(BinaryOp):
    """Floor modulo ``a % b`` (sign of ``b``)."""

    __slots__ = ()
    op = "%"


class Min(BinaryOp):
    """``min(a, b)``, printed ``T.min(a, b)``."""

    __slots__ = ()
    op = "min"


class Max(BinaryOp):
    """``max(a, b)``, printed ``T.max(a, b)``."""

    __slots__ = ()
    op = "max"


class CmpOp(BinaryOp):
    """Base of comparisons; the result dtype is ``bool``."""

    __slots__ = ()

    def __init__(self, a: PrimExpr, b: PrimExpr, dtype: str | None = None) -> None:
        super().__init__(a, b, "bool")


class EQ(CmpOp):
    """``a == b``."""

    __slots__ = ()
    op = "=="


class NE(CmpOp):
    """``a != b``."""

    __slots__ = ()
    op = "!="


class LT(CmpOp):
    """``a < b``."""

    __slots__ = ()
    op = "<"


class LE(CmpOp):
    """``a <= b``."""

    __slots__ = ()
    op = "<="


class GT(CmpOp):
    """``a > b``."""

    __slots__ = ()
    op = ">"


class GE(CmpOp):
    """``a >= b``."""

    __slots__ = ()
    op = ">="


class And(CmpOp):
    """Logical and of two bools."""

    __slots__ = ()
    op = "and"


class Or(CmpOp):
    """Logical or of two bools."""

    __slots__ = ()
    op = "or"


class Not(PrimExpr):
    """Logical not."""

    __slots__ = ("a",)

    def __init__(self, a: PrimExpr) -> None:
        self.a = a
        self.dtype = "bool"

    def _key(self) -> tuple:
        return (self.a,)


class Select(PrimExpr):
    """``true_value if condition else false_value`` (both sides evaluated; no side effects)."""

    __slots__ = ("condition", "true_value", "false_value")

    def __init__(self, condition: PrimExpr, true_value: PrimExpr, false_value: PrimExpr) -> None:
        self.condition = condition
        self.true_value = true_value
        self.false_value = false_value
        self.dtype = true_value.dtype

    def _key(self) -> tuple:
        return (self.condition, self.true_value, self.false_value)


class Cast(PrimExpr):
    """Convert ``value`` to ``dtype`` (float->int truncates toward zero, as C does)."""

    __slots__ = ("value",)

    def __init__(self, dtype: str, value: PrimExpr) -> None:
        self.dtype = dtype
        self.value = value

    def _key(self) -> tuple:
        return (self.dtype, self.value)


class Let(PrimExpr):
    """``body`` with ``var`` bound to ``value`` (TVM's ``tir.Let``, printed ``T.Let(body, where={var:
    value})``): ``value`` is computed once and every occurrence of ``var`` in ``body`` reads it. A
    fused elementwise chain binds a value used more than once this way, so that its expression stays
    linear in the chain's length (``silu(silu(x))`` reads the inner ``silu`` twice)."""

    __slots__ = ("var", "value", "body")

    def __init__(self, var: "Var", value: PrimExpr, body: PrimExpr) -> None:
        if var.dtype != value.dtype:
            raise TypeError(f"Let: variable '{var.name}' is {var.dtype}, its value {value.dtype}")
        self.var = var
        self.value = value
        self.body = body
        self.dtype = body.dtype

    def _key(self) -> tuple:
        return (self.var, self.value, self.body)


class Call(PrimExpr):
    """A call of a pure intrinsic, e.g. ``exp``, ``sqrt``, ``tanh``, ``erf``, ``fabs``.

    ``op`` is the intrinsic name without prefix; the printer writes ``T.exp(x)``.
    """

    __slots__ = ("op", "args")

    def __init__(self, dtype: str, op: str, args: Iterable[PrimExpr]) -> None:
        self.dtype = dtype
        self.op = op
        self.args = tuple(args)

    def _key(self) -> tuple:
        return (self.op, self.args, self.dtype)


# ---------------------------------------------------------------------------------------------
# construction with constant folding


def const(value: int | float | bool, dtype: str | None = None) -> PrimExpr:
    """A constant node: ``IntImm`` for ints/bools, ``FloatImm`` for floats.

    ``dtype`` defaults to ``int64`` for ints, ``bool`` for bools and ``float32`` for floats.
    """
    if isinstance(value, bool):
        return IntImm(int(value), dtype or "bool")
    if dtype is None:
        dtype = "int64" if isinstance(value, int) else "float32"
    if is_float_dtype(dtype):
        return FloatImm(float(value), dtype)
    if isinstance(value, float):
        if not value.is_integer():
            raise TypeError(f"cannot make an {dtype} constant from the float {value}")
    return IntImm(int(value), dtype)


def convert(value: ExprLike, dtype_hint: str | None = None) -> PrimExpr:
    """Turn a Python number into a constant (of ``dtype_hint`` when given); pass PrimExprs through.

    Objects that stand for an expression (e.g. ``builder.ir.tir.IterVar``, which TVM users index
    and do arithmetic with) convert through their ``as_prim_expr()`` method.
    Raises TypeError for anything else.
    """
    if isinstance(value, PrimExpr):
        return value
    as_expr = getattr(value, "as_prim_expr", None)
    if callable(as_expr):
        return as_expr()
    if isinstance(value, bool):
        return const(value, "bool")
    if isinstance(value, int):
        hint = dtype_hint if dtype_hint is not None else "int64"
        return const(value, hint)
    if isinstance(value, float):
        hint = dtype_hint if dtype_hint is not None and is_float_dtype(dtype_hint) else "float32"
        return const(value, hint)
    raise TypeError(f"cannot convert {type(value).__name__} {value!r} to a PrimExpr")


def _binary(cls: type, a: ExprLike, b: ExprLike) -> PrimExpr:
    if not isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
        raise TypeError("at least one operand must be a PrimExpr")
    if isinstance(a, PrimExpr):
        b = convert(b, a.dtype)
    else:
        a = convert(a, b.dtype)  # type: ignore[union-attr]
    dtype = _promote(a.dtype, b.dtype)
    if a.dtype != dtype:
        a = _cast_const_or(a, dtype)
    if b.dtype != dtype:
        b = _cast_const_or(b, dtype)
    return _fold(cls, a, b)


def _cast_const_or(x: PrimExpr, dtype: str) -> PrimExpr:
    if isinstance(x, IntImm) and not is_float_dtype(dtype):
        return IntImm(x.value, dtype)
    if isinstance(x, (IntImm, FloatImm)) and is_float_dtype(dtype):
        return FloatImm(float(x.value), dtype)
    return Cast(dtype, x)


def _fold_cast(value: int | float, dtype: str) -> PrimExpr:
    """Constant-fold a cast of ``value`` to ``dtype`` (C semantics, see ``PrimExpr.astype``)."""
    if dtype == "bool":
        return IntImm(int(value != 0), "bool")
    if is_float_dtype(dtype):
        v = float(value)
        fmt = {"float32": "f", "float16": "e"}.get(dtype)
        if fmt is not None and math.isfinite(v):
            try:
                v = struct.unpack(fmt, struct.pack(fmt, v))[0]
            except OverflowError:
                v = math.copysign(math.inf, v)
        return FloatImm(v, dtype)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot cast the float {value} to {dtype}")
        value = int(value)  # truncates toward zero
    bits = _bits(dtype)
    value &= (1 << bits) - 1
    if dtype.startswith("int") and value >= 1 << (bits - 1):
        value -= 1 << bits
    return IntImm(value, dtype)


def _floordiv(a: int, b: int) -> int:
    return a // b


def _fold(cls: type, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """Build ``cls(a, b)``, folding constants and trivial identities."""
    ca = a.value if isinstance(a, (IntImm, FloatImm)) else None
    cb = b.value if isinstance(b, (IntImm, FloatImm)) else None
    is_int = not is_float_dtype(a.dtype)
    if ca is not None and cb is not None:
        folded = _const_eval(cls, ca, cb, is_int)
        if folded is not None:
            if issubclass(cls, CmpOp):
                return IntImm(int(bool(folded)), "bool")
            return const(folded, a.dtype)
    if cls is Add:
        if cb == 0:
            return a
        if ca == 0:
            return b
    elif cls is Sub:
        if cb == 0:
            return a
        if a == b and is_int:
            return const(0, a.dtype)
    elif cls is Mul:
        if cb == 1:
            return a
        if ca == 1:
            return b
        if is_int and (ca == 0 or cb == 0):
            return const(0, a.dtype)
        # (x * c1) * c2 -> x * (c1 * c2)
        if cb is not None and isinstance(a, Mul) and isinstance(a.b, (IntImm, FloatImm)):
            return _fold(Mul, a.a, const(a.b.value * cb, a.dtype))
    elif cls in (FloorDiv, Div):
        if cb == 1:
            return a
    elif cls is FloorMod:
        if cb == 1 and is_int:
            return const(0, a.dtype)
    elif cls in (Min, Max):
        if a == b:
            return a
    return cls(a, b)


def _const_eval(cls: type, x, y, is_int: bool):
    if cls is Add:
        return x + y
    if cls is Sub:
        return x - y
    if cls is Mul:
        return x * y
    if cls is Div:
        if y == 0:
            return None
        return int(x / y) if is_int else x / y
    if cls is FloorDiv:
        if y == 0:
            return None
        return x // y if is_int else math.floor(x / y)
    if cls is FloorMod:
        if y == 0:
            return None
        return x % y
    if cls is Min:
        return min(x, y)
    if cls is Max:
        return max(x, y)
    table = {EQ: x == y, NE: x != y, LT: x < y, LE: x <= y, GT: x > y, GE: x >= y,
             And: bool(x) and bool(y), Or: bool(x) or bool(y)}
    return table.get(cls)


# ---------------------------------------------------------------------------------------------
# analysis


def _poly(e: PrimExpr) -> dict[tuple, int] | None:
    """Normal form of an int expression as {sorted tuple of atom keys: coefficient}.

    Atoms are variables and any node that is not +, -, * (kept opaque, compared structurally).
    Returns None for float expressions.
    """
    if is_float_dtype(e.dtype):
        return None
    if isinstance(e, IntImm):
        return {(): e.value} if e.value else {}
    if isinstance(e, Add) or isinstance(e, Sub):
        pa, pb = _poly(e.a), _poly(e.b)
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
        pa, pb = _poly(e.a), _poly(e.b)
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
    pa, pb = _poly(ea), _poly(eb)
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
    p = _poly(e)
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
        pa = _poly(e.a)
        if pa is not None and all(v % e.b.value == 0 for v in pa.values()):
            return _rebuild({k: v // e.b.value for k, v in pa.items()}, free_vars(e.a), e.dtype)
        return _fold(FloorDiv, _canonical(e.a), e.b)
    if not isinstance(e, (Add, Sub, Mul)):
        return e
    p = _poly(e)
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


def _children(x: PrimExpr) -> tuple[PrimExpr, ...]:
    if isinstance(x, BinaryOp):
        return (x.a, x.b)
    if isinstance(x, Not):
        return (x.a,)
    if isinstance(x, Select):
        return (x.condition, x.true_value, x.false_value)
    if isinstance(x, Cast):
        return (x.value,)
    if isinstance(x, Call):
        return x.args
    if isinstance(x, Let):
        return (x.value, x.body)
    children = getattr(x, "children", None)
    return tuple(children()) if callable(children) else ()


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
