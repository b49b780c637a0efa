"""Parser for the TVMScript subset that :mod:`builder.ir.printer` and :mod:`builder.ir.tir` print.

``parse(text) -> IRModule`` reads the text with :func:`ast.parse` (it is never executed) and
rebuilds the module through the ordinary constructors, so every call's struct info is inferred
again by its op's registered rule and checked against the printed annotation.

Graph level (``@R.function``): parameters with ``R.Tensor`` / ``R.Tuple`` / ``R.Object`` /
``R.Shape`` / ``R.Prim`` annotations (symbolic dims quoted in signatures, plain inside the
body; a name that no ``n = T.int64()`` declares is defined by the signature), ``n = T.int64()``
declarations, ``R.func_attr({...})``, ``with R.dataflow():`` ...
``R.output(...)``, bindings ``name: sinfo = value`` (the annotation may be left out), tuples,
``x[i]``, ``R.shape([...])``, ``R.const(value, "dtype")``, ``R.prim_value``, ``R.str``,
``R.call_tir(cls.f, (args,), out_sinfo=...)``, ``R.call_packed``, ``cls.f(args)`` and every
registered op by its printed name (``R.nn.relu`` is ``relax.nn.relu``; keyword arguments are
the op's attributes). ``@R.function(pure=False)`` marks an impure function.

Loop level (``@T.prim_func``): ``T.Buffer[(dims), "dtype"]`` parameters, ``T.func_attr``,
the root block (printed as the comment ``# with T.block("root")``, which is why the parser
also looks at comment lines), ``T.alloc_buffer``, ``T.grid`` / ``T.serial`` / ``T.parallel`` /
``T.vectorized`` / ``T.unroll`` loops, ``with T.block(...)`` with ``T.axis.remap`` /
``T.axis.spatial`` / ``T.axis.reduce``, ``T.where``, ``T.reads`` / ``T.writes``,
``T.block_attr``, ``with T.init():``, stores, ``if`` / ``else``, ``x: T.int64 = v`` lets,
``T.evaluate`` and the scalar expressions of :func:`builder.ir.printer.print_prim_expr`
(``T.float32(0)``, ``T.Cast``, ``T.Select``, ``T.max``, intrinsics such as ``T.exp``).

Errors raise :class:`ParseError`, whose message starts with ``line L, column C`` (both
1-based) and quotes the offending source line.

Known limits (the printer loses the information): consecutive non-dataflow binding blocks come
back as one block; an ``Allocate`` / ``LetStmt`` covers every statement that follows it in its
statement list; a bare integer prints the same for int32 and int64 and parses as int64 unless
the other operand of its expression says otherwise.
"""
from __future__ import annotations

import ast
from typing import Any, Callable, Sequence

import numpy as np

from . import expr as E
from . import relax as rx
from . import tir
from .struct_info import (
    DTYPES, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo,
    TupleStructInfo,
)

__all__ = ["parse", "parse_prim_func", "ParseError"]

_ROOT_COMMENT = '# with T.block("root")'
_SCALAR_DTYPES = set(DTYPES) | {"int", "float", "uint1"}
_FOR_KINDS = {"T.serial": "serial", "T.parallel": "parallel", "T.vectorized": "vectorized",
              "T.unroll": "unroll", "range": "serial"}
_BINOPS = {ast.Add: E.Add, ast.Sub: E.Sub, ast.Mult: E.Mul, ast.Div: E.Div,
           ast.FloorDiv: E.FloorDiv, ast.Mod: E.FloorMod}
_CMPOPS = {ast.Eq: E.EQ, ast.NotEq: E.NE, ast.Lt: E.LT, ast.LtE: E.LE, ast.Gt: E.GT,
           ast.GtE: E.GE}
_RELAX_BINOPS = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide"}


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


class _Source:
    """The text being parsed: source lines for error messages, root-block comment positions."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.root_comments: dict[int, int] = {}
        for i, line in enumerate(self.lines, start=1):
            if line.strip() == _ROOT_COMMENT:
                self.root_comments[i] = len(line) - len(line.lstrip())

    def error(self, node: ast.AST | None, message: str) -> ParseError:
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


def _dotted(node: ast.AST) -> str | None:
    """``R.nn.relu`` for an attribute chain of names, None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _call_name(node: ast.AST) -> str | None:
    return _dotted(node.func) if isinstance(node, ast.Call) else None


def _is_call(node: ast.AST, *names: str) -> bool:
    return _call_name(node) in names


def _expr_call(stmt: ast.stmt, *names: str) -> ast.Call | None:
    if isinstance(stmt, ast.Expr) and _is_call(stmt.value, *names):
        return stmt.value  # type: ignore[return-value]
    return None


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(
        stmt.value.value, str)


def _sym_decl(stmt: ast.stmt) -> tuple[str, str] | None:
    """``n = T.int64()`` -> ("n", "int64")."""
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call) and not stmt.value.args and not stmt.value.keywords):
        name = _dotted(stmt.value.func)
        if name is not None and name.startswith("T.") and name[2:] in ("int64", "int32", "int16", "int8"):
            return stmt.targets[0].id, name[2:]
    return None


class _Lit:
    """A bare Python number in an expression; its dtype comes from the other operand."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value


# =============================================================================================
# literals (attributes, func_attr dicts, constants)


class _Literals:
    """Turns literal syntax (numbers, strings, None, bools, lists, dicts) into Python values;
    names and arithmetic go to ``prim`` (symbolic dims inside attributes)."""

    def __init__(self, src: _Source, prim: Callable[[ast.AST], E.PrimExpr] | None = None) -> None:
        self.src = src
        self.prim = prim

    def value(self, node: ast.AST) -> Any:
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
        special = _special_float(node)
        if special is not None:
            return special
        if self.prim is not None:
            return self.prim(node)
        raise self.src.error(node, f"expected a literal value, got `{ast.unparse(node)}`")


# =============================================================================================
# scalar expressions


class _PrimParser:
    """Scalar expressions; ``lookup(name, node)`` resolves a name to a Var or Buffer."""

    def __init__(self, src: _Source, lookup: Callable[[str, ast.AST], Any]) -> None:
        self.src = src
        self.outer_lookup = lookup
        self.lets: list[tuple[str, E.Var]] = []   # variables of enclosing ``T.Let``s, innermost last

    def lookup(self, name: str, node: ast.AST):
        for let_name, var in reversed(self.lets):
            if let_name == name:
                return var
        return self.outer_lookup(name, node)

    def prim(self, node: ast.AST, dtype_hint: str | None = None) -> E.PrimExpr:
        """The expression ``node`` as a PrimExpr (bare numbers take ``dtype_hint``)."""
        return self.resolve(self.expr(node), dtype_hint, node)

    def resolve(self, x, dtype_hint: str | None, node: ast.AST) -> E.PrimExpr:
        if isinstance(x, _Lit):
            try:
                return E.convert(x.value, dtype_hint)
            except TypeError as exc:
                raise self.src.error(node, str(exc)) from None
        return x

    def expr(self, node: ast.AST):
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return E.IntImm(int(v), "bool")
            if isinstance(v, (int, float)):
                return _Lit(v)
            if isinstance(v, str):
                return E.StringImm(v)
            raise self.src.error(node, f"unsupported constant {v!r}")
        if isinstance(node, ast.Name):
            obj = self.lookup(node.id, node)
            if isinstance(obj, tir.Buffer):
                raise self.src.error(node, f"buffer '{node.id}' used as a scalar; index it")
            if not isinstance(obj, E.PrimExpr):
                raise self.src.error(node, f"'{node.id}' is not a scalar variable")
            return obj
        if isinstance(node, ast.BinOp):
            cls = _BINOPS.get(type(node.op))
            if cls is None:
                raise self.src.error(node, f"unsupported operator in `{ast.unparse(node)}`")
            return self.binary(cls, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp):
            inner = self.expr(node.operand)
            if isinstance(node.op, ast.USub):
                if isinstance(inner, _Lit):
                    return _Lit(-inner.value)
                if isinstance(inner, E.IntImm):
                    return E.IntImm(-inner.value, inner.dtype)
                if isinstance(inner, E.FloatImm):
                    return E.FloatImm(-inner.value, inner.dtype)
                return E.Sub(E.const(0, inner.dtype), inner)
            if isinstance(node.op, ast.UAdd):
                return inner
            if isinstance(node.op, ast.Not):
                return E.Not(self.resolve(inner, "bool", node))
            raise self.src.error(node, f"unsupported operator in `{ast.unparse(node)}`")
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self.src.error(node, "chained comparisons are not supported")
            cls = _CMPOPS.get(type(node.ops[0]))
            if cls is None:
                raise self.src.error(node, f"unsupported comparison in `{ast.unparse(node)}`")
            return self.binary(cls, self.expr(node.left), self.expr(node.comparators[0]), node)
        if isinstance(node, ast.BoolOp):
            cls = E.And if isinstance(node.op, ast.And) else E.Or
            out = self.resolve(self.expr(node.values[0]), "bool", node)
            for v in node.values[1:]:
                out = cls(out, self.resolve(self.expr(v), "bool", v))
            return out
        if isinstance(node, ast.Subscript):
            return self.load(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.src.error(node, f"unsupported expression `{ast.unparse(node)}`")

    def binary(self, cls: type, a, b, node: ast.AST) -> E.PrimExpr:
        if isinstance(a, _Lit) and isinstance(b, _Lit):
            a = self.resolve(a, None, node)
        if isinstance(a, _Lit):
            a = self.resolve(a, b.dtype, node)
        if isinstance(b, _Lit):
            b = self.resolve(b, a.dtype, node)
        if a.dtype != b.dtype:
            return E._binary(cls, a, b)
        return cls(a, b)

    def indices(self, node: ast.AST) -> list[ast.AST]:
        sl = node.slice if isinstance(node, ast.Subscript) else node
        if isinstance(sl, ast.Tuple):
            return list(sl.elts)
        return [sl]

    def load(self, node: ast.Subscript) -> E.PrimExpr:
        if not isinstance(node.value, ast.Name):
            raise self.src.error(node, f"unsupported subscript `{ast.unparse(node)}`")
        buf = self.lookup(node.value.id, node.value)
        if not isinstance(buf, tir.Buffer):
            raise self.src.error(node.value, f"'{node.value.id}' is not a buffer")
        idx = [self.prim(i, "int64") for i in self.indices(node)]
        try:
            return tir.BufferLoad(buf, idx)
        except (ValueError, TypeError) as exc:
            raise self.src.error(node, str(exc)) from None

    def call(self, node: ast.Call) -> E.PrimExpr:
        name = _call_name(node)
        if name is None or not name.startswith("T."):
            raise self.src.error(node, f"unsupported call `{ast.unparse(node.func)}`")
        fn = name[2:]
        args = node.args
        if fn in _SCALAR_DTYPES and len(args) == 1:
            special = _special_float(args[0])
            inner = _Lit(special) if special is not None else self.expr(args[0])
            if isinstance(inner, _Lit):
                try:
                    return E.const(inner.value, fn) if fn != "bool" else E.IntImm(int(bool(inner.value)), "bool")
                except TypeError as exc:
                    raise self.src.error(node, str(exc)) from None
            if isinstance(inner, E.IntImm) and inner.dtype == "bool" and fn == "bool":
                return inner
            return inner.astype(fn)
        if fn in ("min", "max") and len(args) == 2:
            return self.binary(E.Min if fn == "min" else E.Max, self.expr(args[0]), self.expr(args[1]), node)
        if fn == "Div" and len(args) == 2:
            return self.binary(E.Div, self.expr(args[0]), self.expr(args[1]), node)
        if fn in ("floordiv", "FloorDiv") and len(args) == 2:
            return self.binary(E.FloorDiv, self.expr(args[0]), self.expr(args[1]), node)
        if fn in ("floormod", "FloorMod") and len(args) == 2:
            return self.binary(E.FloorMod, self.expr(args[0]), self.expr(args[1]), node)
        if fn == "Select" and len(args) == 3:
            c = self.prim(args[0], "bool")
            t, f = self.expr(args[1]), self.expr(args[2])
            t = self.resolve(t, None if isinstance(f, _Lit) else f.dtype, args[1])
            f = self.resolve(f, t.dtype, args[2])
            return E.Select(c, t, f)
        if fn == "Cast" and len(args) == 2:
            dtype = self._string(args[0])
            return E.Cast(dtype, self.prim(args[1]))
        if fn == "Let" and len(args) == 1 and len(node.keywords) == 1 and node.keywords[0].arg == "where":
            where = node.keywords[0].value
            if not (isinstance(where, ast.Dict) and len(where.keys) == 1 and isinstance(where.keys[0], ast.Name)):
                raise self.src.error(where, "T.Let expects where={name: value}")
            value = self.prim(where.values[0])
            var = E.Var(where.keys[0].id, value.dtype)
            self.lets.append((var.name, var))
            try:
                return E.Let(var, value, self.prim(args[0]))
            finally:
                self.lets.pop()
        if fn == "if_then_else" and len(args) == 3:
            c = self.prim(args[0], "bool")
            t, f = self.expr(args[1]), self.expr(args[2])
            t = self.resolve(t, None if isinstance(f, _Lit) else f.dtype, args[1])
            f = self.resolve(f, t.dtype, args[2])
            return E.Call(t.dtype, "if_then_else", [c, t, f])
        if node.keywords:
            raise self.src.error(node, f"T.{fn} takes no keyword arguments here")
        if not args:
            raise self.src.error(node, f"unsupported call `{ast.unparse(node)}`")
        parsed = [self.expr(a) for a in args]
        hint = next((p.dtype for p in parsed if not isinstance(p, _Lit)), None)
        vals = [self.resolve(p, hint, a) for p, a in zip(parsed, args)]
        dtype = next((v.dtype for v in vals if v.dtype not in ("bool", "handle")), vals[0].dtype)
        return E.Call(dtype, fn, vals)

    def _string(self, node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        raise self.src.error(node, "expected a string")


# =============================================================================================
# loop level


class _PrimFuncParser:
    """One ``@T.prim_func`` definition."""

    def __init__(self, src: _Source, node: ast.FunctionDef) -> None:
        self.src = src
        self.node = node
        self.scopes: list[dict[str, Any]] = [{}]
        self.loop_dom: dict[int, tuple[E.PrimExpr, E.PrimExpr]] = {}
        self.p = _PrimParser(src, self.lookup)
        self.lit = _Literals(src, self.p.prim)

    # -- scopes
    def lookup(self, name: str, node: ast.AST):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise self.src.error(node, f"undefined name '{name}'")

    def define(self, name: str, obj) -> None:
        self.scopes[-1][name] = obj

    # -- function
    def parse(self) -> tir.PrimFunc:
        node = self.node
        for st in node.body:
            decl = _sym_decl(st)
            if decl is not None:
                self.define(decl[0], E.Var(decl[0], decl[1]))
        params = []
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            raise self.src.error(node, "a prim_func takes plain buffer parameters only")
        for arg in a.args:
            if arg.annotation is None:
                raise self.src.error(arg, f"parameter '{arg.arg}' needs a T.Buffer annotation")
            shape, dtype = self.buffer_type(arg.annotation)
            buf = tir.Buffer(arg.arg, shape, dtype)
            self.define(arg.arg, buf)
            params.append(buf)
        attrs = None
        rest = []
        for st in node.body:
            if _sym_decl(st) is not None or _is_docstring(st):
                continue
            call = _expr_call(st, "T.func_attr")
            if call is not None:
                if len(call.args) != 1:
                    raise self.src.error(call, "T.func_attr takes one dict")
                attrs = self.lit.value(call.args[0])
                continue
            rest.append(st)
        col = node.body[0].col_offset if node.body else node.col_offset + 4
        body = self.stmts(rest, node.lineno, node.end_lineno or node.lineno, col)
        try:
            func = tir.PrimFunc(params, body, attrs, node.name)
        except (TypeError, ValueError) as exc:
            raise self.src.error(node, str(exc)) from None
        return func

    def buffer_type(self, ann: ast.AST) -> tuple[list, str]:
        """``T.Buffer[(dims), "dtype"]`` or ``T.Buffer((dims), "dtype")`` -> (shape, dtype)."""
        if isinstance(ann, ast.Subscript) and _dotted(ann.value) == "T.Buffer":
            parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            keywords: list[ast.keyword] = []
        elif isinstance(ann, ast.Call) and _dotted(ann.func) == "T.Buffer":
            parts, keywords = list(ann.args), list(ann.keywords)
        else:
            raise self.src.error(ann, f"expected T.Buffer[(shape), dtype], got `{ast.unparse(ann)}`")
        dtype = "float32"
        if len(parts) >= 2:
            dtype = self.p._string(parts[1])
        for kw in keywords:
            if kw.arg == "dtype":
                dtype = self.p._string(kw.value)
            elif kw.arg == "shape":
                parts = [kw.value] + parts[1:]
        if not parts:
            raise self.src.error(ann, "T.Buffer needs a shape")
        return self.shape(parts[0]), dtype

    def shape(self, node: ast.AST) -> list[E.PrimExpr]:
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
        return [self.p.prim(d, "int64") for d in elts]

    # -- statements
    def stmts(self, nodes: Sequence[ast.stmt], after: int, end: int, col: int) -> tir.Stmt:
        out: list[tir.Stmt] = []
        prev = after
        for i, n in enumerate(nodes):
            root = self.src.root_comment_between(prev, n.lineno, n.col_offset)
            if root is not None:
                out.append(self.root_block(nodes[i:], n.col_offset, root))
                return tir.SeqStmt.flatten(out) if out else tir.SeqStmt([])
            if self._is_alloc(n):
                buf = self.alloc(n)
                self.scopes.append({n.targets[0].id: buf})
                body = self.stmts(nodes[i + 1:], n.end_lineno or n.lineno, end, col)
                self.scopes.pop()
                out.append(tir.Allocate(buf, body))
                return tir.SeqStmt.flatten(out)
            if isinstance(n, ast.AnnAssign):
                out.append(self.let(n, nodes[i + 1:], end, col))
                return tir.SeqStmt.flatten(out)
            out.append(self.stmt(n))
            prev = n.end_lineno or n.lineno
        root = self.src.root_comment_between(prev, end + 1, col)
        if root is not None:
            out.append(self.root_block([], col, root))
        return tir.SeqStmt.flatten(out) if out else tir.SeqStmt([])

    def stmt(self, n: ast.stmt) -> tir.Stmt:
        try:
            if isinstance(n, ast.For):
                return self.for_(n)
            if isinstance(n, ast.With):
                name = _call_name(n.items[0].context_expr) if len(n.items) == 1 else None
                if name == "T.block":
                    return self.block(n)
                if name == "T.init":
                    raise self.src.error(n, "`with T.init()` is only allowed at the start of a block body")
                raise self.src.error(n, f"unsupported with-statement `{ast.unparse(n.items[0])}`")
            if isinstance(n, ast.Assign):
                if len(n.targets) == 1 and isinstance(n.targets[0], ast.Subscript):
                    return self.store(n)
                raise self.src.error(n, f"unsupported assignment `{ast.unparse(n).splitlines()[0]}`")
            if isinstance(n, ast.If):
                cond = self.p.prim(n.test, "bool")
                then = self.stmts(n.body, n.lineno, n.body[-1].end_lineno or n.lineno, n.body[0].col_offset)
                other = None
                if n.orelse:
                    other = self.stmts(n.orelse, n.body[-1].end_lineno or n.lineno,
                                       n.end_lineno or n.lineno, n.orelse[0].col_offset)
                return tir.IfThenElse(cond, then, other)
            call = _expr_call(n, "T.evaluate")
            if call is not None:
                if len(call.args) != 1:
                    raise self.src.error(call, "T.evaluate takes one expression")
                return tir.Evaluate(self.p.prim(call.args[0]))
            raise self.src.error(n, f"unsupported statement `{ast.unparse(n).splitlines()[0]}`")
        except ParseError:
            raise
        except (ValueError, TypeError) as exc:
            raise self.src.error(n, str(exc)) from None

    def _is_alloc(self, n: ast.stmt) -> bool:
        return (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and _is_call(n.value, "T.alloc_buffer"))

    def alloc(self, n: ast.Assign) -> tir.Buffer:
        call = n.value
        assert isinstance(call, ast.Call)
        if not call.args:
            raise self.src.error(call, "T.alloc_buffer needs a shape")
        shape = self.shape(call.args[0])
        dtype = "float32"
        if len(call.args) > 1:
            dtype = self.p._string(call.args[1])
        for kw in call.keywords:
            if kw.arg == "dtype":
                dtype = self.p._string(kw.value)
            elif kw.arg != "scope":
                raise self.src.error(kw, f"unsupported T.alloc_buffer argument '{kw.arg}'")
        return tir.Buffer(n.targets[0].id, shape, dtype)  # type: ignore[union-attr]

    def let(self, n: ast.AnnAssign, rest: Sequence[ast.stmt], end: int, col: int) -> tir.Stmt:
        if not isinstance(n.target, ast.Name) or n.value is None:
            raise self.src.error(n, "expected `name: T.dtype = value`")
        dtype = _dotted(n.annotation)
        if dtype is None or not dtype.startswith("T.") or dtype[2:] not in _SCALAR_DTYPES:
            raise self.src.error(n.annotation, f"expected a scalar type like T.int64, got `{ast.unparse(n.annotation)}`")
        var = E.Var(n.target.id, dtype[2:])
        value = self.p.prim(n.value, var.dtype)
        self.scopes.append({n.target.id: var})
        body = self.stmts(rest, n.end_lineno or n.lineno, end, col)
        self.scopes.pop()
        try:
            return tir.LetStmt(var, value, body)
        except (ValueError, TypeError) as exc:
            raise self.src.error(n, str(exc)) from None

    def store(self, n: ast.Assign) -> tir.Stmt:
        target = n.targets[0]
        assert isinstance(target, ast.Subscript)
        if not isinstance(target.value, ast.Name):
            raise self.src.error(target, "expected `buffer[indices] = value`")
        buf = self.lookup(target.value.id, target.value)
        if not isinstance(buf, tir.Buffer):
            raise self.src.error(target.value, f"'{target.value.id}' is not a buffer")
        idx = [self.p.prim(i, "int64") for i in self.p.indices(target) if not _is_empty_tuple(i)]
        value = self.p.prim(n.value, buf.dtype)
        return tir.BufferStore(buf, value, idx)

    def for_(self, n: ast.For) -> tir.Stmt:
        if n.orelse:
            raise self.src.error(n, "for-else is not supported")
        it = n.iter
        kind_name = _call_name(it)
        if kind_name is None or (kind_name != "T.grid" and kind_name not in _FOR_KINDS):
            raise self.src.error(it, f"expected T.grid / T.serial / T.parallel / T.vectorized / "
                                     f"T.unroll, got `{ast.unparse(it)}`")
        assert isinstance(it, ast.Call)
        targets = n.target.elts if isinstance(n.target, ast.Tuple) else [n.target]
        for t in targets:
            if not isinstance(t, ast.Name):
                raise self.src.error(t, "loop variables must be names")
        names = [t.id for t in targets]  # type: ignore[union-attr]
        loops: list[tuple[str, E.PrimExpr, E.PrimExpr, str, dict]] = []
        if kind_name == "T.grid":
            if it.keywords:
                raise self.src.error(it, "T.grid takes extents only")
            if len(it.args) != len(names):
                raise self.src.error(it, f"T.grid has {len(it.args)} extents for {len(names)} loop variables")
            for name, a in zip(names, it.args):
                loops.append((name, E.IntImm(0, "int64"), self.p.prim(a, "int64"), "serial", {}))
        else:
            if len(names) != 1:
                raise self.src.error(n.target, f"{kind_name} binds one loop variable")
            annotations: dict = {}
            for kw in it.keywords:
                if kw.arg == "annotations":
                    annotations = self.lit.value(kw.value)
                else:
                    raise self.src.error(kw, f"unsupported loop argument '{kw.arg}'")
            if len(it.args) == 1:
                lo, ext = E.IntImm(0, "int64"), self.p.prim(it.args[0], "int64")
            elif len(it.args) == 2:
                lo = self.p.prim(it.args[0], "int64")
                hi = self.p.prim(it.args[1], "int64")
                ext = E.simplify(E._binary(E.Sub, hi, lo))
            else:
                raise self.src.error(it, f"{kind_name} takes (extent) or (begin, end)")
            loops.append((names[0], lo, ext, _FOR_KINDS[kind_name], annotations))
        scope: dict[str, Any] = {}
        loop_vars = []
        for name, lo, ext, _, _ in loops:
            v = E.Var(name, "int64")
            scope[name] = v
            self.loop_dom[id(v)] = (lo, ext)
            loop_vars.append(v)
        self.scopes.append(scope)
        body = self.stmts(n.body, n.lineno, n.end_lineno or n.lineno, n.body[0].col_offset)
        self.scopes.pop()
        for v, (_, lo, ext, kind, ann) in reversed(list(zip(loop_vars, loops))):
            body = tir.For(v, lo, ext, kind, body, ann)
        return body

    def block(self, n: ast.With) -> tir.Stmt:
        head = n.items[0].context_expr
        assert isinstance(head, ast.Call)
        if len(head.args) != 1:
            raise self.src.error(head, 'expected T.block("name")')
        name = self.p._string(head.args[0])
        body = list(n.body)
        k = 0
        decls: list[tuple[str, str, E.PrimExpr, tir.Range, ast.AST]] = []
        while k < len(body):
            st = body[k]
            if not (isinstance(st, ast.Assign) and len(st.targets) == 1
                    and (_call_name(st.value) or "").startswith("T.axis.")):
                break
            decls.extend(self.axis_decl(st))
            k += 1
        scope: dict[str, Any] = {}
        iter_vars = []
        values = []
        for vname, kind, value, dom, _node in decls:
            var = E.Var(vname, value.dtype if E.is_int_dtype(value.dtype) else "int64")
            scope[vname] = var
            iter_vars.append(tir.IterVar(var, dom, kind))
            values.append(value)
        self.scopes.append(scope)
        predicate: E.PrimExpr = E.IntImm(1, "bool")
        reads: list[tir.BufferRegion] = []
        writes: list[tir.BufferRegion] = []
        annotations: dict = {}
        allocs: list[tir.Buffer] = []
        init = None
        while k < len(body):
            st = body[k]
            call = _expr_call(st, "T.where", "T.reads", "T.writes", "T.block_attr")
            if call is not None:
                which = _call_name(call)
                if which == "T.where":
                    predicate = self.p.prim(call.args[0], "bool")
                elif which == "T.reads":
                    reads = [self.region(a) for a in self._region_args(call)]
                elif which == "T.writes":
                    writes = [self.region(a) for a in self._region_args(call)]
                else:
                    annotations = self.lit.value(call.args[0])
                k += 1
                continue
            if self._is_alloc(st):
                buf = self.alloc(st)  # type: ignore[arg-type]
                scope[st.targets[0].id] = buf  # type: ignore[union-attr]
                allocs.append(buf)
                k += 1
                continue
            break
        if k < len(body) and isinstance(body[k], ast.With) and _is_call(body[k].items[0].context_expr, "T.init"):
            w = body[k]
            init = self.stmts(w.body, w.lineno, w.end_lineno or w.lineno, w.body[0].col_offset)
            k += 1
        rest = body[k:]
        col = rest[0].col_offset if rest else n.col_offset + 4
        stmt_body = self.stmts(rest, body[k - 1].end_lineno if k else n.lineno, n.end_lineno or n.lineno, col)
        self.scopes.pop()
        try:
            blk = tir.Block(name, iter_vars, reads, writes, stmt_body, init=init, alloc_buffers=allocs,
                            annotations=annotations)
            return tir.BlockRealize(values, predicate, blk)
        except (ValueError, TypeError) as exc:
            raise self.src.error(n, str(exc)) from None

    def _region_args(self, call: ast.Call) -> list[ast.AST]:
        if len(call.args) == 1 and isinstance(call.args[0], (ast.List, ast.Tuple)):
            return list(call.args[0].elts)
        return list(call.args)

    def axis_decl(self, st: ast.Assign) -> list[tuple[str, str, E.PrimExpr, tir.Range, ast.AST]]:
        call = st.value
        assert isinstance(call, ast.Call)
        fn = _call_name(call)
        target = st.targets[0]
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        for t in names:
            if not isinstance(t, ast.Name):
                raise self.src.error(t, "block iterators must be names")
        ids = [t.id for t in names]  # type: ignore[union-attr]
        if fn == "T.axis.remap":
            if len(call.args) != 2:
                raise self.src.error(call, 'expected T.axis.remap("SR...", [loop vars])')
            kinds = self.p._string(call.args[0])
            vals_node = call.args[1]
            vals = vals_node.elts if isinstance(vals_node, (ast.List, ast.Tuple)) else [vals_node]
            if not (len(kinds) == len(vals) == len(ids)):
                raise self.src.error(call, f"T.axis.remap binds {len(ids)} names with {len(kinds)} kinds "
                                           f"and {len(vals)} values")
            out = []
            for name, kind, vnode in zip(ids, kinds, vals):
                if kind not in "SR":
                    raise self.src.error(call.args[0], f"unknown iterator kind {kind!r}")
                value = self.p.prim(vnode, "int64")
                dom = self.loop_dom.get(id(value)) if isinstance(value, E.Var) else None
                if dom is None:
                    raise self.src.error(vnode, f"T.axis.remap needs loop variables; `{ast.unparse(vnode)}` is not one")
                out.append((name, kind, value, tir.Range(dom[0], dom[1]), vnode))
            return out
        kinds = {"T.axis.spatial": "S", "T.axis.S": "S", "T.axis.reduce": "R", "T.axis.R": "R"}
        if fn not in kinds:
            raise self.src.error(call, f"unsupported block iterator `{fn}`")
        if len(ids) != 1 or len(call.args) != 2:
            raise self.src.error(call, f"expected `v = {fn}(dom, value)`")
        dom_node, value_node = call.args
        if isinstance(dom_node, ast.Tuple):
            if len(dom_node.elts) != 2:
                raise self.src.error(dom_node, "an iterator domain is (begin, end)")
            lo = self.p.prim(dom_node.elts[0], "int64")
            hi = self.p.prim(dom_node.elts[1], "int64")
            dom = tir.Range(lo, E.simplify(E._binary(E.Sub, hi, lo)))
        else:
            dom = tir.Range(0, self.p.prim(dom_node, "int64"))
        return [(ids[0], kinds[fn], self.p.prim(value_node, "int64"), dom, value_node)]

    def region(self, node: ast.AST) -> tir.BufferRegion:
        if not isinstance(node, ast.Subscript) or not isinstance(node.value, ast.Name):
            raise self.src.error(node, f"expected a buffer region like A[i, 0:4], got `{ast.unparse(node)}`")
        buf = self.lookup(node.value.id, node.value)
        if not isinstance(buf, tir.Buffer):
            raise self.src.error(node.value, f"'{node.value.id}' is not a buffer")
        ranges = []
        for i in self.p.indices(node):
            if _is_empty_tuple(i):
                continue
            if isinstance(i, ast.Slice):
                if i.lower is None or i.upper is None or i.step is not None:
                    raise self.src.error(i, "a region slice needs begin:end")
                lo = self.p.prim(i.lower, "int64")
                hi = self.p.prim(i.upper, "int64")
                ranges.append(tir.Range(lo, E.simplify(E._binary(E.Sub, hi, lo))))
            else:
                ranges.append(tir.Range(self.p.prim(i, "int64"), 1))
        try:
            return tir.BufferRegion(buf, ranges)
        except ValueError as exc:
            raise self.src.error(node, str(exc)) from None

    def root_block(self, nodes: Sequence[ast.stmt], col: int, comment_line: int) -> tir.Stmt:
        scope: dict[str, Any] = {}
        self.scopes.append(scope)
        allocs = []
        k = 0
        while k < len(nodes) and self._is_alloc(nodes[k]):
            buf = self.alloc(nodes[k])  # type: ignore[arg-type]
            scope[nodes[k].targets[0].id] = buf  # type: ignore[union-attr]
            allocs.append(buf)
            k += 1
        init = None
        if k < len(nodes) and isinstance(nodes[k], ast.With) and _is_call(nodes[k].items[0].context_expr, "T.init"):
            w = nodes[k]
            init = self.stmts(w.body, w.lineno, w.end_lineno or w.lineno, w.body[0].col_offset)
            k += 1
        rest = nodes[k:]
        after = (nodes[k - 1].end_lineno or comment_line) if k else comment_line
        end = (nodes[-1].end_lineno or comment_line) if nodes else comment_line
        body = self.stmts(rest, after, end, col) if rest else tir.SeqStmt([])
        self.scopes.pop()
        blk = tir.Block("root", [], [], [], body, init=init, alloc_buffers=allocs)
        return tir.BlockRealize([], E.IntImm(1, "bool"), blk)


def _special_float(node: ast.AST) -> float | None:
    """``inf``, ``-inf``, ``nan`` (how the printer writes non-finite floats), else None."""
    sign = 1.0
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        if isinstance(node.op, ast.USub):
            sign = -sign
        node = node.operand
    if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
        return sign * float(node.id)
    return None


def _is_empty_tuple(node: ast.AST) -> bool:
    return isinstance(node, ast.Tuple) and not node.elts


# =============================================================================================
# graph level


class _RelaxFunctionParser:
    """One ``@R.function`` definition."""

    def __init__(self, src: _Source, node: ast.FunctionDef, gvars: list[tuple[str, ast.AST]],
                 check: bool) -> None:
        self.src = src
        self.node = node
        self.gvars = gvars
        self.check = check
        self.vars: dict[str, rx.Var] = {}
        self.sym: dict[str, E.Var] = {}
        self.in_signature = False
        self.p = _PrimParser(src, self.lookup_sym)
        self.lit = _Literals(src, self.p.prim)

    def lookup_sym(self, name: str, node: ast.AST) -> E.Var:
        if name in self.sym:
            return self.sym[name]
        if self.in_signature:
            v = E.Var(name, "int64")
            self.sym[name] = v
            return v
        raise self.src.error(node, f"undefined symbolic variable '{name}'")

    def parse(self, pure: bool) -> rx.Function:
        node = self.node
        for st in node.body:
            decl = _sym_decl(st)
            if decl is not None:
                self.sym[decl[0]] = E.Var(decl[0], decl[1])
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            raise self.src.error(node, "an R.function takes plain parameters only")
        params = []
        self.in_signature = True
        for arg in a.args:
            if arg.annotation is None:
                raise self.src.error(arg, f"parameter '{arg.arg}' needs a struct info annotation")
            var = rx.Var(arg.arg, self.sinfo(arg.annotation))
            self.vars[arg.arg] = var
            params.append(var)
        ret = self.sinfo(node.returns) if node.returns is not None else None
        self.in_signature = False
        attrs: dict = {}
        blocks: list[rx.BindingBlock] = []
        current: rx.BindingBlock | None = None
        result: rx.Expr | None = None
        body = node.body
        for i, st in enumerate(body):
            if _sym_decl(st) is not None or _is_docstring(st):
                continue
            if result is not None:
                raise self.src.error(st, "statement after `return`")
            call = _expr_call(st, "R.func_attr")
            if call is not None:
                if len(call.args) != 1:
                    raise self.src.error(call, "R.func_attr takes one dict")
                attrs.update(self.lit.value(call.args[0]))
                continue
            if isinstance(st, ast.With):
                if len(st.items) != 1 or not _is_call(st.items[0].context_expr, "R.dataflow"):
                    raise self.src.error(st, f"unsupported with-statement `{ast.unparse(st.items[0])}`")
                current = None
                blocks.append(self.dataflow(st))
                continue
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                if current is None:
                    current = rx.BindingBlock()
                    blocks.append(current)
                current.bindings.append(self.binding(st, dataflow=False, outputs=set()))
                continue
            if isinstance(st, ast.Return):
                if st.value is None:
                    raise self.src.error(st, "an R.function must return a value")
                result = self.expr(st.value, top=True)
                continue
            raise self.src.error(st, f"unsupported statement `{ast.unparse(st).splitlines()[0]}`")
        if result is None:
            raise self.src.error(node, f"function '{node.name}' has no return statement")
        seq = rx.SeqExpr(blocks, result)
        if ret is not None and self.check and seq.struct_info is not None:
            if not _compatible(ret, seq.struct_info):
                raise self.src.error(node.returns, f"return annotation {_show(ret)} does not match the "
                                                   f"returned value's {_show(seq.struct_info)}")
        return rx.Function(params, seq, ret, attrs, pure, name=node.name)

    # -- struct info
    def sinfo(self, node: ast.AST) -> StructInfo:
        name = _dotted(node) if not isinstance(node, ast.Call) else _call_name(node)
        args = node.args if isinstance(node, ast.Call) else []
        kw = {k.arg: k.value for k in node.keywords} if isinstance(node, ast.Call) else {}
        if name == "R.Object":
            return ObjectStructInfo()
        if name == "R.Tensor":
            shape_node = args[0] if args else kw.get("shape")
            dtype_node = args[1] if len(args) > 1 else kw.get("dtype")
            dtype = self.p._string(dtype_node) if dtype_node is not None else "void"
            ndim = self.lit.value(kw["ndim"]) if "ndim" in kw else -1
            if shape_node is None or (isinstance(shape_node, ast.Constant) and shape_node.value is None):
                return self._build(node, lambda: TensorStructInfo(None, dtype, ndim))
            dims = self.dims(shape_node)
            return self._build(node, lambda: TensorStructInfo(dims, dtype))
        if name == "R.Tuple":
            fields = args[0].elts if len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)) else args
            return TupleStructInfo([self.sinfo(f) for f in fields])
        if name == "R.Shape":
            if args and not (isinstance(args[0], ast.Constant) and args[0].value is None):
                dims = self.dims(args[0])
                return self._build(node, lambda: ShapeStructInfo(dims))
            ndim = self.lit.value(kw["ndim"]) if "ndim" in kw else -1
            return ShapeStructInfo(None, ndim)
        if name == "R.Prim":
            dtype_node = args[0] if args else kw.get("dtype")
            return PrimStructInfo(self.p._string(dtype_node) if dtype_node is not None else "int64")
        raise self.src.error(node, f"unknown struct info `{ast.unparse(node)}`")

    def _build(self, node: ast.AST, make: Callable[[], StructInfo]) -> StructInfo:
        try:
            return make()
        except (TypeError, ValueError) as exc:
            raise self.src.error(node, str(exc)) from None

    def dims(self, node: ast.AST) -> list:
        if not isinstance(node, (ast.Tuple, ast.List)):
            raise self.src.error(node, f"expected a shape tuple, got `{ast.unparse(node)}`")
        return [self.dim(d) for d in node.elts]

    def dim(self, node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                inner = ast.parse(node.value.strip(), mode="eval").body
            except SyntaxError:
                raise self.src.error(node, f"invalid symbolic dim {node.value!r}") from None
            ast.copy_location(inner, node)
            for sub in ast.walk(inner):
                if hasattr(sub, "lineno"):
                    sub.lineno, sub.col_offset = node.lineno, node.col_offset  # type: ignore[attr-defined]
            node = inner
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        e = self.p.prim(node, "int64")
        if not E.is_int_dtype(e.dtype) or e.dtype == "bool":
            raise self.src.error(node, f"a shape dim must be an integer expression, got `{ast.unparse(node)}`")
        return e

    # -- blocks and bindings
    def dataflow(self, st: ast.With) -> rx.DataflowBlock:
        outputs: list[str] = []
        out_node = None
        stmts = []
        for s in st.body:
            call = _expr_call(s, "R.output")
            if call is not None:
                if out_node is not None:
                    raise self.src.error(s, "R.output appears twice in one dataflow block")
                out_node = call
                for a in call.args:
                    if not isinstance(a, ast.Name):
                        raise self.src.error(a, "R.output takes variable names")
                    outputs.append(a.id)
                continue
            if out_node is not None:
                raise self.src.error(s, "R.output must be the last statement of a dataflow block")
            stmts.append(s)
        # the last binding of each output name is the (non-dataflow) output var
        last: dict[str, int] = {}
        for i, s in enumerate(stmts):
            tgt = s.target if isinstance(s, ast.AnnAssign) else (s.targets[0] if isinstance(s, ast.Assign) and len(s.targets) == 1 else None)
            if isinstance(tgt, ast.Name):
                last[tgt.id] = i
        for name, a in zip(outputs, out_node.args if out_node else []):
            if name not in last:
                raise self.src.error(a, f"R.output names '{name}', which this dataflow block does not bind")
        out_idx = {last[n] for n in outputs}
        block = rx.DataflowBlock()
        before = dict(self.vars)
        for i, s in enumerate(stmts):
            if not isinstance(s, (ast.Assign, ast.AnnAssign)):
                raise self.src.error(s, f"unsupported statement in a dataflow block `{ast.unparse(s).splitlines()[0]}`")
            block.bindings.append(self.binding(s, dataflow=True, outputs={i} & out_idx))
        # dataflow vars are not visible after the block
        visible = dict(before)
        for b in block.bindings:
            if not isinstance(b.var, rx.DataflowVar):
                visible[b.var.name_hint] = b.var
        self.vars = visible
        return block

    def binding(self, st: ast.stmt, dataflow: bool, outputs: set) -> rx.VarBinding:
        if isinstance(st, ast.AnnAssign):
            target, ann, value_node = st.target, st.annotation, st.value
        else:
            assert isinstance(st, ast.Assign)
            if len(st.targets) != 1:
                raise self.src.error(st, "chained assignment is not supported")
            target, ann, value_node = st.targets[0], None, st.value
        if not isinstance(target, ast.Name):
            raise self.src.error(target, "a binding assigns one name")
        if value_node is None:
            raise self.src.error(st, "a binding needs a value")
        value = self.expr(value_node, top=True)
        sinfo = value.struct_info
        if ann is not None:
            declared = self.sinfo(ann)
            if sinfo is None:
                value.struct_info = declared
            elif self.check and not _compatible(declared, sinfo):
                raise self.src.error(ann, f"annotation {_show(declared)} does not match the inferred "
                                          f"{_show(sinfo)} of `{ast.unparse(value_node)}`")
            sinfo = declared
        if sinfo is None:
            raise self.src.error(value_node, f"cannot infer the struct info of `{ast.unparse(value_node)}`; "
                                             f"annotate the binding")
        cls = rx.DataflowVar if dataflow and not outputs else rx.Var
        var = cls(target.id, sinfo)
        self.vars[target.id] = var
        return rx.VarBinding(var, value)

    # -- expressions
    def expr(self, node: ast.AST, top: bool = False) -> rx.Expr:
        try:
            return self._expr(node)
        except ParseError:
            raise
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise self.src.error(node, str(msg)) from None

    def _expr(self, node: ast.AST) -> rx.Expr:
        if isinstance(node, ast.Name):
            if node.id in self.vars:
                return self.vars[node.id]
            if node.id in self.sym:
                raise self.src.error(node, f"'{node.id}' is a symbolic variable, not a value")
            raise self.src.error(node, f"undefined variable '{node.id}'")
        if isinstance(node, ast.Tuple):
            return rx.Tuple([self.expr(e) for e in node.elts])
        if isinstance(node, ast.Subscript):
            tup = self.expr(node.value)
            idx = self.lit.value(node.slice)
            if not isinstance(idx, int) or isinstance(idx, bool):
                raise self.src.error(node.slice, "a tuple index must be an integer")
            return rx.TupleGetItem(tup, idx)
        if isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name is not None and name.startswith("cls."):
                return self.gvar(node, name[4:])
            raise self.src.error(node, f"unsupported expression `{ast.unparse(node)}`")
        if isinstance(node, ast.BinOp) and type(node.op) in _RELAX_BINOPS:
            op = rx.Op.get(_RELAX_BINOPS[type(node.op)])
            return rx.Call(op, [self.expr(node.left), self.expr(node.right)])
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.src.error(node, f"unsupported expression `{ast.unparse(node)}`")

    def gvar(self, node: ast.AST, name: str) -> rx.GlobalVar:
        self.gvars.append((name, node))
        return rx.GlobalVar(name)

    def call(self, node: ast.Call) -> rx.Expr:
        name = _call_name(node)
        if name is None:
            raise self.src.error(node, f"unsupported call `{ast.unparse(node.func)}`")
        if name.startswith("cls."):
            gv = self.gvar(node.func, name[4:])
            if node.keywords:
                raise self.src.error(node, "calls of module functions take positional arguments")
            return rx.Call(gv, [self.expr(a) for a in node.args])
        if not name.startswith("R."):
            raise self.src.error(node, f"unsupported call `{name}`")
        fn = name[2:]
        args, kw = node.args, {k.arg: k.value for k in node.keywords}
        if None in kw:
            raise self.src.error(node, "`**` arguments are not supported")
        if fn == "shape":
            if len(args) != 1:
                raise self.src.error(node, "R.shape takes one list of dims")
            return rx.ShapeExpr(self.dims(args[0]))
        if fn == "const":
            return self.const(node, args, kw)
        if fn == "prim_value":
            if len(args) != 1:
                raise self.src.error(node, "R.prim_value takes one value")
            value = self.p.prim(args[0], "int64")
            return rx.PrimValue(value, value.dtype)
        if fn == "str":
            return rx.StringImm(self.p._string(args[0]))
        if fn == "tuple":
            return rx.Tuple([self.expr(a) for a in args])
        if fn == "ExternFunc":
            return rx.ExternFunc(self.p._string(args[0]))
        if fn == "call_packed":
            if not args:
                raise self.src.error(node, "R.call_packed needs the function name")
            sinfo_args = self._sinfo_list(kw.pop("sinfo_args")) if "sinfo_args" in kw else []
            if kw:
                raise self.src.error(node, f"unsupported R.call_packed argument '{next(iter(kw))}'")
            call = rx.Call(rx.ExternFunc(self.p._string(args[0])), [self.expr(a) for a in args[1:]],
                           sinfo_args=sinfo_args)
            if sinfo_args and call.struct_info is None:
                call.struct_info = sinfo_args[0]
            return call
        if fn == "call_tir":
            if len(args) not in (2, 3):
                raise self.src.error(node, "expected R.call_tir(cls.func, (args...), out_sinfo=...)")
            callee = self.expr(args[0])
            if not isinstance(callee, rx.GlobalVar):
                raise self.src.error(args[0], "R.call_tir calls a module function `cls.name`")
            out = args[2] if len(args) == 3 else kw.pop("out_sinfo", None)
            if out is None:
                raise self.src.error(node, "R.call_tir needs out_sinfo")
            if kw:
                raise self.src.error(node, f"unsupported R.call_tir argument '{next(iter(kw))}'")
            tup = self.expr(args[1])
            if not isinstance(tup, rx.Tuple):
                raise self.src.error(args[1], "the arguments of R.call_tir are a tuple `(a, b)`")
            return rx.Call(rx.Op.get("call_tir"), [callee, tup], sinfo_args=self._sinfo_list(out))
        if fn == "dtype":
            from . import op as _op

            cls = getattr(_op, "DataTypeImm", rx.StringImm)
            return cls(self.p._string(args[0]))
        op = _lookup_op(fn)
        if op is None:
            raise self.src.error(node.func, f"unknown operator '{name}' (no relax.{fn} is registered)")
        sinfo_args = []
        for key in ("out_sinfo", "sinfo_args"):
            if key in kw:
                sinfo_args = self._sinfo_list(kw.pop(key))
        attrs = {k: self.lit.value(v) for k, v in kw.items()}
        # a bare string argument names a runtime function (R.call_dps_packed("f", ...))
        call_args = [rx.ExternFunc(a.value) if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     else self.expr(a) for a in args]
        return rx.Call(op, call_args, attrs, sinfo_args=sinfo_args)

    def _sinfo_list(self, node: ast.AST) -> list[StructInfo]:
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.sinfo(e) for e in node.elts]
        return [self.sinfo(node)]

    def const(self, node: ast.Call, args: list, kw: dict) -> rx.Constant:
        if not args:
            raise self.src.error(node, "R.const needs a value")
        value = self.lit.value(args[0])
        dtype_node = args[1] if len(args) > 1 else kw.get("dtype")
        dtype = self.p._string(dtype_node) if dtype_node is not None else None
        if dtype is None:
            return rx.const(value)
        try:
            return rx.Constant(np.array(value), dtype)
        except (TypeError, ValueError) as exc:
            raise self.src.error(node, f"invalid constant: {exc}") from None


def _lookup_op(name: str) -> rx.Op | None:
    """The registered op ``relax.<name>``; ops that the nn frontend registers on import
    (``call_pure_packed``, ...) are found too."""
    try:
        return rx.Op.get("relax." + name)
    except KeyError:
        pass
    try:
        from .. import nn  # noqa: F401 - registers the frontend's ops
    except ImportError:  # pragma: no cover
        return None
    try:
        return rx.Op.get("relax." + name)
    except KeyError:
        return None


def _show(s: StructInfo) -> str:
    from .printer import print_struct_info

    return print_struct_info(s)


def _compatible(declared: StructInfo, inferred: StructInfo) -> bool:
    """True when ``declared`` equals ``inferred`` or is a less specific description of it."""
    if declared.same_as(inferred):
        return True
    if isinstance(declared, ObjectStructInfo):
        return True
    if isinstance(declared, TensorStructInfo) and isinstance(inferred, TensorStructInfo):
        if declared.dtype not in ("void", inferred.dtype):
            return False
        if declared.shape is None:
            return declared.ndim in (-1, inferred.ndim)
        return False
    if isinstance(declared, ShapeStructInfo) and isinstance(inferred, ShapeStructInfo):
        return declared.values is None and declared.ndim in (-1, inferred.ndim)
    if isinstance(declared, TupleStructInfo) and isinstance(inferred, TupleStructInfo):
        return len(declared.fields) == len(inferred.fields) and all(
            _compatible(a, b) for a, b in zip(declared.fields, inferred.fields))
    if isinstance(declared, PrimStructInfo) and isinstance(inferred, PrimStructInfo):
        return declared.dtype == inferred.dtype
    return False


# =============================================================================================
# module


def _decorator_kind(src: _Source, fn: ast.FunctionDef) -> tuple[str, bool]:
    """("relax" | "tir", pure) from a function's decorators."""
    if len(fn.decorator_list) != 1:
        raise src.error(fn, f"function '{fn.name}' needs exactly one decorator: @R.function or @T.prim_func")
    dec = fn.decorator_list[0]
    name = _dotted(dec) if not isinstance(dec, ast.Call) else _call_name(dec)
    if name in ("R.function", "relax.function"):
        pure = True
        if isinstance(dec, ast.Call):
            if dec.args:
                raise src.error(dec, "@R.function takes keyword arguments only")
            for kw in dec.keywords:
                if kw.arg == "pure" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
                    pure = kw.value.value
                elif kw.arg != "private":
                    raise src.error(kw, f"unsupported @R.function argument '{kw.arg}'")
        return "relax", pure
    if name in ("T.prim_func", "tir.prim_func"):
        if isinstance(dec, ast.Call) and (dec.args or any(k.arg != "private" for k in dec.keywords)):
            raise src.error(dec, "unsupported @T.prim_func arguments")
        return "tir", True
    raise src.error(dec, f"unknown decorator `@{ast.unparse(dec)}`; expected @R.function or @T.prim_func")


def _parse_functions(src: _Source, defs: Sequence[ast.FunctionDef], check: bool) -> rx.IRModule:
    mod = rx.IRModule()
    gvars: list[tuple[str, ast.AST]] = []
    for fn in defs:
        if fn.name in mod.functions:
            raise src.error(fn, f"function '{fn.name}' is defined twice")
        kind, pure = _decorator_kind(src, fn)
        if kind == "tir":
            mod[fn.name] = _PrimFuncParser(src, fn).parse()
        else:
            mod[fn.name] = _RelaxFunctionParser(src, fn, gvars, check).parse(pure)
    for name, node in gvars:
        if name not in mod.functions:
            raise src.error(node, f"the module has no function '{name}'")
    return mod


def parse(text: str, check_struct_info: bool = True) -> rx.IRModule:
    """Parse TVMScript ``text`` (as :meth:`IRModule.script` prints it) into an IRModule.

    The text is an ``@I.ir_module`` class of ``@R.function`` / ``@T.prim_func`` definitions,
    or such definitions at top level (then each becomes a module function under its name).
    Calls are rebuilt through the op registry, so struct info is inferred again; with
    ``check_struct_info`` (the default) each binding's annotation must equal the inferred
    struct info or be a less specific form of it. Raises :class:`ParseError` naming the line
    and column of the first problem.
    """
    src = _Source(text)
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        line = exc.lineno or 1
        raise ParseError(f"invalid syntax: {exc.msg}", line, exc.offset or 1,
                         src.lines[line - 1] if 0 < line <= len(src.lines) else None) from None
    classes = []
    defs = []
    for st in tree.body:
        if isinstance(st, (ast.Import, ast.ImportFrom)) or _is_docstring(st):
            continue
        if isinstance(st, ast.ClassDef):
            classes.append(st)
        elif isinstance(st, ast.FunctionDef):
            defs.append(st)
        else:
            raise src.error(st, f"unexpected top-level statement `{ast.unparse(st).splitlines()[0]}`")
    if classes and defs:
        raise src.error(defs[0], "top-level functions next to an ir_module class")
    if len(classes) > 1:
        raise src.error(classes[1], "more than one ir_module class")
    if classes:
        cls = classes[0]
        decos = [_dotted(d) for d in cls.decorator_list]
        if decos not in (["I.ir_module"], ["tvm.script.ir_module"], ["ir_module"]):
            raise src.error(cls, f"class '{cls.name}' needs the @I.ir_module decorator")
        defs = []
        for st in cls.body:
            if _is_docstring(st):
                continue
            if not isinstance(st, ast.FunctionDef):
                raise src.error(st, f"unexpected statement in the module class `{ast.unparse(st).splitlines()[0]}`")
            defs.append(st)
    return _parse_functions(src, defs, check_struct_info)


def parse_prim_func(text: str) -> tir.PrimFunc:
    """Parse the text of one ``@T.prim_func`` (as :meth:`PrimFunc.script` prints it).

    Raises :class:`ParseError` when the text holds anything else than one prim_func.
    """
    mod = parse(text)
    funcs = list(mod.functions.values())
    if len(funcs) != 1 or not isinstance(funcs[0], tir.PrimFunc):
        raise ParseError("expected exactly one @T.prim_func", 1, 1)
    return funcs[0]
