"""What both TVMScript parsers share: the source with positions and errors, name helpers, literals."""
from __future__ import annotations

import ast
from typing import Any, Callable

from .. import expr as E
from ..struct_info import DTYPES

ROOT_COMMENT = '# with T.block("root")'
SCALAR_DTYPES = set(DTYPES) | {"int", "float", "uint1"}
FOR_KINDS = {"T.serial": "serial", "T.parallel": "parallel", "T.vectorized": "vectorized",
              "T.unroll": "unroll", "range": "serial"}
BINOPS = {ast.Add: E.Add, ast.Sub: E.Sub, ast.Mult: E.Mul, ast.Div: E.Div,
           ast.FloorDiv: E.FloorDiv, ast.Mod: E.FloorMod}
CMPOPS = {ast.Eq: E.EQ, ast.NotEq: E.NE, ast.Lt: E.LT, ast.LtE: E.LE, ast.Gt: E.GT,
           ast.GtE: E.GE}
RELAX_BINOPS = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide"}


class ParseError(ValueError):
    """A TVMScript text that cannot be parsed or does not type-check.

    ``line`` and ``column`` are 1-based; ``message`` is the bare reason. ``str(err)`` is
    ``line L, column C: reason`` followed by the source line and a caret under the column.
    """

    def __init__(self, message: str, line: int, column: int, source_line: str | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        text = f"line {line}, column {column}: {message}"
        if source_line is not None and source_line.strip():
            text += f"\n    {source_line.rstrip()}\n    {' ' * max(column - 1, 0)}^"
        super().__init__(text)


class Source:
    """The text being parsed: source lines for error messages, root-block comment positions."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.root_comments: dict[int, int] = {}
        for i, line in enumerate(self.lines, start=1):
            if line.strip() == ROOT_COMMENT:
                self.root_comments[i] = len(line) - len(line.lstrip())

    def error(self, node: ast.AST | None, message: str) -> ParseError:
        """A :class:`ParseError` with ``message`` at ``node``'s position (1-based line and column; line 1,
        column 1 when ``node`` is None or has none) and the source line it points into. Returned, not
        raised: callers write ``raise src.error(node, "...")``."""
        line = getattr(node, "lineno", 1) or 1
        col = (getattr(node, "col_offset", 0) or 0) + 1
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return ParseError(message, line, col, src)

    def root_comment_between(self, after: int, before: int, col: int) -> int | None:
        """Line of a root-block comment strictly between two lines at indentation ``col``."""
        for line, c in self.root_comments.items():
            if after < line < before and c == col:
                return line
        return None


def dotted(node: ast.AST) -> str | None:
    """``R.nn.relu`` for an attribute chain of names, None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def call_name(node: ast.AST) -> str | None:
    """The dotted name of the function ``node`` calls (``R.nn.relu`` for ``R.nn.relu(x)``), or None when
    ``node`` is not a call or calls something that is not a name chain."""
    return dotted(node.func) if isinstance(node, ast.Call) else None


def is_call(node: ast.AST, *names: str) -> bool:
    """True when ``node`` is a call of one of ``names`` (dotted, as :func:`call_name` gives them)."""
    return call_name(node) in names


def expr_call(stmt: ast.stmt, *names: str) -> ast.Call | None:
    """The call of a statement that is a bare call of one of ``names`` (``R.output(gv)``,
    ``T.func_attr({...})``), else None."""
    if isinstance(stmt, ast.Expr) and is_call(stmt.value, *names):
        return stmt.value  # type: ignore[return-value]
    return None


def is_docstring(stmt: ast.stmt) -> bool:
    """True for a statement that is a bare string (a docstring, skipped by the parsers)."""
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(
        stmt.value.value, str)


def sym_decl(stmt: ast.stmt) -> tuple[str, str] | None:
    """``n = T.int64()`` -> ("n", "int64")."""
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call) and not stmt.value.args and not stmt.value.keywords):
        name = dotted(stmt.value.func)
        if name is not None and name.startswith("T.") and name[2:] in ("int64", "int32", "int16", "int8"):
            return stmt.targets[0].id, name[2:]
    return None


class Lit:
    """A bare Python number in an expression; its dtype comes from the other operand."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value


# =============================================================================================
# literals (attributes, func_attr dicts, constants)


class Literals:
    """Turns literal syntax (numbers, strings, None, bools, lists, dicts) into Python values;
    names and arithmetic go to ``prim`` (symbolic dims inside attributes)."""

    def __init__(self, src: Source, prim: Callable[[ast.AST], E.PrimExpr] | None = None) -> None:
        self.src = src
        self.prim = prim

    def value(self, node: ast.AST) -> Any:
        """The Python value of a literal ``node``: a number, string, bool or None; a list for a list or
        tuple; a dict; ``-x`` of a number; ``inf`` / ``-inf`` / ``nan``. Anything else goes to ``prim`` (a
        symbolic dim in an attribute) when given, else raises ParseError at the node."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e) for e in node.elts]
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    raise self.src.error(node, "`**` is not allowed in a literal dict")
                out[self.value(k)] = self.value(v)
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.value(node.operand)
            if isinstance(inner, (int, float)) and not isinstance(inner, bool):
                return -inner if isinstance(node.op, ast.USub) else inner
        special = special_float(node)
        if special is not None:
            return special
        if self.prim is not None:
            return self.prim(node)
        raise self.src.error(node, f"expected a literal value, got `{ast.unparse(node)}`")


# =============================================================================================
# scalar expressions


def special_float(node: ast.AST) -> float | None:
    """``inf``, ``-inf``, ``nan`` (how the printer writes non-finite floats), else None."""
    sign = 1.0
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        if isinstance(node.op, ast.USub):
            sign = -sign
        node = node.operand
    if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
        return sign * float(node.id)
    return None


def is_empty_tuple(node: ast.AST) -> bool:
    """True for ``()`` in the text."""
    return isinstance(node, ast.Tuple) and not node.elts


# =============================================================================================
# graph level
