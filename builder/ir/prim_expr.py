"""The scalar expression nodes (``PrimExpr``), shared by the graph level and the loop level; callers use them
through :mod:`builder.ir.expr` (``E.Add``, ``E.simplify``), which adds the analysis of :mod:`builder.ir.arith`.

Mirrors TVM's ``tir.PrimExpr`` family: symbolic shape variables (``Var``), constants
(``IntImm`` / ``FloatImm``), arithmetic (``Add``, ``Sub``, ``Mul``, ``FloorDiv``, ``FloorMod``,
``Div``, ``Min``, ``Max``), comparisons, logic, ``Select``, ``Cast`` and intrinsic ``Call``\\ s.
Graph-level shapes are tuples of ``int`` or int64 ``PrimExpr``; loop-level code (``builder.ir.tir``)
adds buffer loads on top of the same nodes.

Equality: ``Var`` compares by identity (two variables that share a name stay distinct, as
TVM's reference semantics say); every other node compares structurally. Arithmetic on
expressions folds constants and applies the identities ``x + 0``, ``x * 1``, ``x * 0``;
:func:`prove_equal` decides equality of int64 shape expressions through a polynomial normal form
(the analysis lives in :mod:`builder.ir.arith`, which imports these nodes).
"""
from __future__ import annotations

import math
import struct
from typing import Iterable, Union

__all__ = [
    "PrimExpr", "Var", "SizeVar", "IntImm", "FloatImm", "StringImm", "BinaryOp", "Add", "Sub", "Mul",
    "Div", "FloorDiv", "FloorMod", "Min", "Max", "CmpOp", "EQ", "NE", "LT", "LE", "GT", "GE",
    "And", "Or", "Not", "Select", "Cast", "Let", "Call", "const", "convert", "is_int_dtype", "is_float_dtype",
    "promote_dtype",
    "ExprLike", "DivisionByZero",
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


def promote_dtype(a: str, b: str) -> str:
    """Result dtype of a binary op on dtypes ``a`` and ``b``: equal dtypes stay, float beats int and
    bool, the wider wins (``bool`` is 1 bit wide; on equal widths ``a``)."""
    if a == b:
        return a
    fa, fb = is_float_dtype(a), is_float_dtype(b)
    if fa != fb:
        return a if fa else b
    width = {"bool": 1}
    return a if width.get(a, _bits(a)) >= width.get(b, _bits(b)) else b


def _scalar_operands(method):
    """An arithmetic / comparison dunder of PrimExpr that returns ``NotImplemented`` for an operand that is
    not a scalar (an ``nn.Tensor``), so that Python asks the other operand (``n - x`` becomes
    ``x.__rsub__(n)``)."""
    import functools
    import numbers

    @functools.wraps(method)
    def wrapper(self, other):
        if not isinstance(other, (PrimExpr, numbers.Number)):
            return NotImplemented
        return method(self, other)

    return wrapper


class PrimExpr:
    """Base class of scalar expressions. ``dtype`` is the scalar type of the value."""

    __slots__ = ("dtype", "_hash")
    dtype: str

    # -- construction helpers -------------------------------------------------------------
    @_scalar_operands
    def __add__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Add, self, other)

    @_scalar_operands
    def __radd__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Add, other, self)

    @_scalar_operands
    def __sub__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Sub, self, other)

    @_scalar_operands
    def __rsub__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Sub, other, self)

    @_scalar_operands
    def __mul__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Mul, self, other)

    @_scalar_operands
    def __rmul__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Mul, other, self)

    @_scalar_operands
    def __truediv__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Div, self, other)

    @_scalar_operands
    def __rtruediv__(self, other: ExprLike) -> "PrimExpr":
        return _binary(Div, other, self)

    @_scalar_operands
    def __floordiv__(self, other: ExprLike) -> "PrimExpr":
        return _binary(FloorDiv, self, other)

    @_scalar_operands
    def __rfloordiv__(self, other: ExprLike) -> "PrimExpr":
        return _binary(FloorDiv, other, self)

    @_scalar_operands
    def __mod__(self, other: ExprLike) -> "PrimExpr":
        return _binary(FloorMod, self, other)

    @_scalar_operands
    def __rmod__(self, other: ExprLike) -> "PrimExpr":
        return _binary(FloorMod, other, self)

    def __neg__(self) -> "PrimExpr":
        return _binary(Sub, const(0, self.dtype), self)

    @_scalar_operands
    def __lt__(self, other: ExprLike) -> "PrimExpr":
        return _binary(LT, self, other)

    @_scalar_operands
    def __le__(self, other: ExprLike) -> "PrimExpr":
        return _binary(LE, self, other)

    @_scalar_operands
    def __gt__(self, other: ExprLike) -> "PrimExpr":
        return _binary(GT, self, other)

    @_scalar_operands
    def __ge__(self, other: ExprLike) -> "PrimExpr":
        return _binary(GE, self, other)

    def astype(self, dtype: str) -> "PrimExpr":
        """Convert to ``dtype``: returns ``self`` when the dtype already matches, a folded constant
        for ``IntImm`` / ``FloatImm`` operands, and a ``Cast`` node otherwise.

        Integer constants wrap to the target width (two's complement, as a C cast does on every
        supported target); float -> int truncates toward zero; float -> narrower float rounds.

        Raises ValueError when folding a non-finite float constant to an integer dtype (C leaves it
        undefined).
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
        if self is other:
            return True
        if type(self) is not type(other) or hash(self) != hash(other):   # cached hashes: a fast no
            return False
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        """Structural hash, computed once per node (cached) and bottom-up without recursion: a shared DAG
        (``x = x * x`` repeated) hashes in time linear in its distinct nodes, not in its tree."""
        h = getattr(self, "_hash", None)
        if h is None:
            _hash_bottom_up(self)
            h = self._hash
        return h

    def __str__(self) -> str:
        from .expr_printer import print_prim_expr

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

    Raises TypeError for a float with a fractional part given an integer dtype.
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
    dtype = promote_dtype(a.dtype, b.dtype)
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


class DivisionByZero(ValueError, ZeroDivisionError):
    """An integer ``//``, ``%`` or ``/`` whose divisor is 0: built with the constant 0 as divisor
    (:func:`_fold`: the operators, :func:`simplify`, :func:`substitute`), or evaluated with a divisor
    that is 0 (:func:`evaluate`). A ValueError naming the expression (and a ZeroDivisionError)."""


def _fold(cls: type, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """Build ``cls(a, b)``, folding constants and trivial identities.

    Raises :class:`DivisionByZero` for an integer ``//``, ``%`` or ``/`` (truncating) by the constant 0
    (C and LLVM leave it undefined; Python raises): float division by 0.0 is IEEE's inf / nan and stays."""
    ca = a.value if isinstance(a, (IntImm, FloatImm)) else None
    cb = b.value if isinstance(b, (IntImm, FloatImm)) else None
    is_int = not is_float_dtype(a.dtype)
    if cb == 0 and is_int and cls in (FloorDiv, FloorMod, Div):
        raise DivisionByZero(f"integer division by zero in the expression {cls(a, b)}")
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


def _hash_bottom_up(e: PrimExpr) -> None:
    """Cache the structural hash of ``e`` and of its descendants that have none, children first (an
    explicit stack), so that each ``hash((name, _key()))`` finds its operands' hashes cached."""
    stack: list[tuple[PrimExpr, bool]] = [(e, False)]
    while stack:
        node, ready = stack.pop()
        if type(node).__hash__ is not PrimExpr.__hash__ or getattr(node, "_hash", None) is not None:
            continue
        if not ready:
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node) if isinstance(c, PrimExpr))
            continue
        node._hash = hash((type(node).__name__, node._key()))


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
