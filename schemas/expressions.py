"""Arithmetic inside ``${...}``: a bounded tokenizer and recursive-descent evaluator of our own (never ``eval``).

Grammar (Python's precedence and semantics, for ints and floats only)::

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '/' | '//' | '%') unary)*
    unary   := ('-' | '+') unary | power
    power   := operand ['**' unary]
    operand := INT | FLOAT | 'int' '(' expr ')' | NAME | '(' expr ')'

``INT`` is ASCII digits (``2048``), ``FLOAT`` a decimal literal (``0.5``, ``.5``, ``1e-6``, ``2.5E3``), ``NAME``
an identifier (``hidden_size``) whose value the caller supplies (a recipe variable). ``int op int`` is an int
(``//`` and ``%`` floor as in Python: ``-7 // 2 == -4``, ``-7 % 2 == 1``), ``/`` is always a float, and a float
operand makes the result a float. ``**`` binds as in Python (right to left, tighter than a sign on its left:
``-2 ** 2 == -4``, ``2 ** -1 == 0.5``; ``${query_pre_attn_scalar ** -0.5}``); an int to a negative power is a
float, a negative number to a fractional power (complex in Python) and zero to a negative power are errors.
Booleans and strings are not numbers here. ``int(x)`` is the int ``x`` stands
for (``${int(head_dim * partial_rotary_factor)}``: a config's float fraction of a size); a float that is not
integral (more than 1e-9 relative away from its nearest integer) is an error, not truncated as Python's ``int``
does, since a silently smaller size would compute another model. ``int`` followed by ``(`` is this function;
``int`` alone is a variable name.

Bounds (:mod:`core.limits`): the expression is at most ``MAX_VAR_EXPRESSION_CHARS`` characters, nests at most
``MAX_VAR_EXPRESSION_DEPTH`` deep (parentheses and unary signs), a literal has at most 40 characters, every
int (literal, variable or intermediate result) fits int64 and every float is finite; division and modulo by
zero are errors. Each error is an :class:`ExpressionError` carrying the 0-based offset of the offending token
inside the expression text, so the loader can point at its file column.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Union

from core.limits import MAX_VAR_EXPRESSION_CHARS, MAX_VAR_EXPRESSION_DEPTH
from core.messages import shorten

Number = Union[int, float]

__all__ = ["ExpressionError", "evaluate", "is_expression"]

_INT64_MIN, _INT64_MAX = -2 ** 63, 2 ** 63 - 1
_MAX_LITERAL_CHARS = 40

_TOKEN = re.compile(r"""
    (?P<space>[ \t\r\n]+)
  | (?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)
  | (?P<int>[0-9]+)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\*\*|//|[-+*/%()])
""", re.VERBOSE)

_OPERATOR_CHARS = frozenset("+-*/%()")


class ExpressionError(ValueError):
    """A problem in a ``${...}`` expression: ``message`` and ``offset``, the 0-based index in the expression
    text of the token (or the end of the text) where it was found."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


def is_expression(text: str) -> bool:
    """Whether the inside of ``${...}`` is arithmetic rather than one variable name: it holds an operator or
    parenthesis, or is a number literal (``${2}``). ``${name}`` and ``${ name }`` are plain references."""
    stripped = text.strip()
    return bool(stripped) and (any(c in _OPERATOR_CHARS for c in stripped) or stripped[0].isdigit()
                               or stripped[0] == ".")


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """``(kind, text, offset)`` for every token of ``text`` (``kind`` is int, float, name or op), ending
    with ``("end", "", len(text))``. Raises ExpressionError at a character that starts no token."""
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ExpressionError(f"unexpected character {shorten(text[pos])} (expressions take numbers, "
                                  "variable names, + - * / // % ** and parentheses)", pos)
        kind = match.lastgroup
        if kind != "space":
            value = match.group()
            if kind in ("int", "float") and len(value) > _MAX_LITERAL_CHARS:
                raise ExpressionError(f"a number literal has more than {_MAX_LITERAL_CHARS} characters", pos)
            out.append((kind, value, pos))
        pos = match.end()
    out.append(("end", "", len(text)))
    return out


def _describe(token: tuple[str, str, int]) -> str:
    return "the end of the expression" if token[0] == "end" else repr(token[1])


class _Parser:
    """Evaluates while it parses (one pass over the tokens; recursion bounded by the depth limit)."""

    def __init__(self, text: str, lookup: Callable[[str, int], Number]) -> None:
        self.tokens = _tokens(text)
        self.index = 0
        self.lookup = lookup
        self.depth = 0

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.index]

    def take(self) -> tuple[str, str, int]:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def expression(self) -> Number:
        value = self.term()
        while self.peek()[0] == "op" and self.peek()[1] in "+-":
            op = self.take()
            value = _apply(op, value, self.term(after=op))
        return value

    def term(self, after: tuple[str, str, int] | None = None) -> Number:
        value = self.unary(after)
        while self.peek()[0] == "op" and self.peek()[1] in ("*", "/", "//", "%"):
            op = self.take()
            value = _apply(op, value, self.unary(after=op))
        return value

    def unary(self, after: tuple[str, str, int] | None = None) -> Number:
        token = self.peek()
        if token[0] == "op" and token[1] in "+-":
            self.take()
            self.enter(token)
            try:
                value = self.unary(after=token)
            finally:
                self.depth -= 1
            return _check(-value if token[1] == "-" else value, token)
        return self.power(after)

    def power(self, after: tuple[str, str, int] | None) -> Number:
        value = self.operand(after)
        if self.peek()[0] == "op" and self.peek()[1] == "**":
            op = self.take()
            self.enter(op)
            try:
                value = _apply(op, value, self.unary(after=op))
            finally:
                self.depth -= 1
        return value

    def integer(self, token: tuple[str, str, int]) -> int:
        """``int(expr)`` after the name ``int`` (``token``), the ``(`` next: the integral value of ``expr``."""
        value = self.operand(after=token)   # the parenthesised expression, its depth bounded as any
        return _integral(value, token)

    def enter(self, token: tuple[str, str, int]) -> None:
        """One level deeper (a sign or a parenthesis at ``token``); an ExpressionError past the bound."""
        self.depth += 1
        if self.depth > MAX_VAR_EXPRESSION_DEPTH:
            raise ExpressionError(f"the expression nests more than {MAX_VAR_EXPRESSION_DEPTH} levels deep "
                                  "(parentheses and signs)", token[2])

    def operand(self, after: tuple[str, str, int] | None) -> Number:
        token = self.take()
        kind, text, offset = token
        if kind == "int":
            return _check(int(text), token)
        if kind == "float":
            return _check(float(text), token)
        if kind == "name" and text == "int" and self.peek()[:2] == ("op", "("):
            return self.integer(token)
        if kind == "name":
            value = self.lookup(text, offset)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ExpressionError(f"variable {shorten(text)} is {shorten(value)} "
                                      f"({type(value).__name__}), not a number", offset)
            return _check(value, token)
        if kind == "op" and text == "(":
            self.enter(token)
            try:
                value = self.expression()
            finally:
                self.depth -= 1
            close = self.take()
            if close[1] != ")" or close[0] != "op":
                raise ExpressionError(f"'(' at character {offset + 1} is not closed: expected ')' or an operator, "
                                      f"got {_describe(close)}", close[2])
            return value
        where = f" after {after[1]!r}" if after is not None else ""
        raise ExpressionError(f"expected an operand (a number, a variable or '('){where}, got {_describe(token)}",
                              offset)


def _integral(value: Number, token: tuple[str, str, int]) -> int:
    """``value`` as an int: an int as is, a float within 1e-9 (relative, at least absolute) of an integer as
    that integer; any other float is an ExpressionError at ``token`` (the ``int`` of ``int(...)``)."""
    if isinstance(value, int):
        return value
    nearest = round(value)
    if abs(value - nearest) > 1e-9 * max(1.0, abs(value)):
        raise ExpressionError(f"int(...) of {value!r}, which is not an integer (int() does not truncate: the "
                              "value must be whole)", token[2])
    return _check(int(nearest), token)


def _check(value: Number, token: tuple[str, str, int]) -> Number:
    """``value`` if it fits (an int within int64, a finite float), else an ExpressionError at ``token``."""
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ExpressionError(f"{token[1]!r} gives an integer beyond int64", token[2])
    elif not math.isfinite(value):
        raise ExpressionError(f"{token[1]!r} gives a float that is not finite ({value})", token[2])
    return value


def _apply(op: tuple[str, str, int], left: Number, right: Number) -> Number:
    symbol = op[1]
    if symbol in ("/", "//", "%") and right == 0:
        raise ExpressionError(f"{'modulo' if symbol == '%' else 'division'} by zero", op[2])
    if symbol == "**":
        return _power(op, left, right)
    try:
        if symbol == "+":
            value = left + right
        elif symbol == "-":
            value = left - right
        elif symbol == "*":
            value = left * right
        elif symbol == "/":
            value = left / right
        elif symbol == "//":
            value = left // right
        else:
            value = left % right
    except OverflowError:   # int / int whose quotient is beyond float
        raise ExpressionError(f"{symbol!r} gives a float that is not finite", op[2]) from None
    return _check(value, op)


def _power(op: tuple[str, str, int], left: Number, right: Number) -> Number:
    """``left ** right`` as Python computes it, refused before computing an int beyond int64 (never a huge
    intermediate) and where Python's result would be complex or a ZeroDivisionError."""
    if left == 0 and right < 0:
        raise ExpressionError("zero to a negative power", op[2])
    if isinstance(left, int) and isinstance(right, int) and right >= 0:
        if abs(left) > 1 and right * math.log2(abs(left)) > 64:
            raise ExpressionError(f"{op[1]!r} gives an integer beyond int64", op[2])
        return _check(left ** right, op)
    if left < 0 and not float(right).is_integer():
        raise ExpressionError("a negative number to a fractional power (not a real number)", op[2])
    try:
        value = float(left) ** float(right)
    except OverflowError:
        raise ExpressionError(f"{op[1]!r} gives a float that is not finite", op[2]) from None
    return _check(value, op)


def evaluate(text: str, lookup: Callable[[str, int], Number]) -> Number:
    """The value of the ``${...}`` expression ``text`` (what is between the braces).

    ``lookup(name, offset)`` returns a variable's value (it may raise :class:`ExpressionError` itself, e.g.
    for an unknown name, at ``offset``); a value that is not an int or a float (a bool, a string, a list)
    is an error at the name.

    Raises:
        ExpressionError: a syntax error, an unknown character, a value beyond int64 or not finite, division
            or modulo by zero, or a bound exceeded; its ``offset`` is the position in ``text``.
    """
    if len(text) > MAX_VAR_EXPRESSION_CHARS:
        raise ExpressionError(f"the expression is {len(text):,} characters long, more than the "
                              f"{MAX_VAR_EXPRESSION_CHARS:,} allowed", 0)
    parser = _Parser(text, lookup)
    value = parser.expression()
    rest = parser.peek()
    if rest[0] != "end":
        if rest[1] == ")":
            raise ExpressionError("unexpected ')' (no '(' is open)", rest[2])
        raise ExpressionError(f"expected an operator or the end of the expression, got {_describe(rest)}",
                              rest[2])
    return value
