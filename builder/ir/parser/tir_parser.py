"""Parser of ``@T.prim_func`` definitions (loop level)."""
from __future__ import annotations

import ast
from typing import Any, Callable, Sequence

from .. import expr as E
from .. import tir
from ..kernel import KERNEL_ATTR, spec_from_attr
from .common import (BINOPS, CMPOPS, FOR_KINDS, SCALAR_DTYPES, ParseError, call_name, dotted,
    expr_call, is_call, is_docstring, is_empty_tuple, Lit, Literals, Source, special_float,
    sym_decl)


class _PrimParser:
    """Scalar expressions; ``lookup(name, node)`` resolves a name to a Var or Buffer."""

    def __init__(self, src: Source, lookup: Callable[[str, ast.AST], Any]) -> None:
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
        if isinstance(x, Lit):
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
                return Lit(v)
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
            cls = BINOPS.get(type(node.op))
            if cls is None:
                raise self.src.error(node, f"unsupported operator in `{ast.unparse(node)}`")
            return self.binary(cls, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp):
            inner = self.expr(node.operand)
            if isinstance(node.op, ast.USub):
                if isinstance(inner, Lit):
                    return Lit(-inner.value)
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
            cls = CMPOPS.get(type(node.ops[0]))
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
        if isinstance(a, Lit) and isinstance(b, Lit):
            a = self.resolve(a, None, node)
        if isinstance(a, Lit):
            a = self.resolve(a, b.dtype, node)
        if isinstance(b, Lit):
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
        name = call_name(node)
        if name is None or not name.startswith("T."):
            raise self.src.error(node, f"unsupported call `{ast.unparse(node.func)}`")
        fn = name[2:]
        args = node.args
        if fn in SCALAR_DTYPES and len(args) == 1:
            special = special_float(args[0])
            inner = Lit(special) if special is not None else self.expr(args[0])
            if isinstance(inner, Lit):
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
            t = self.resolve(t, None if isinstance(f, Lit) else f.dtype, args[1])
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
            t = self.resolve(t, None if isinstance(f, Lit) else f.dtype, args[1])
            f = self.resolve(f, t.dtype, args[2])
            return E.Call(t.dtype, "if_then_else", [c, t, f])
        if node.keywords:
            raise self.src.error(node, f"T.{fn} takes no keyword arguments here")
        if not args:
            raise self.src.error(node, f"unsupported call `{ast.unparse(node)}`")
        parsed = [self.expr(a) for a in args]
        hint = next((p.dtype for p in parsed if not isinstance(p, Lit)), None)
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

    def __init__(self, src: Source, node: ast.FunctionDef) -> None:
        self.src = src
        self.node = node
        self.scopes: list[dict[str, Any]] = [{}]
        self.loop_dom: dict[int, tuple[E.PrimExpr, E.PrimExpr]] = {}
        self.p = _PrimParser(src, self.lookup)
        self.lit = Literals(src, self.p.prim)

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
            decl = sym_decl(st)
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
            if sym_decl(st) is not None or is_docstring(st):
                continue
            call = expr_call(st, "T.func_attr")
            if call is not None:
                if len(call.args) != 1:
                    raise self.src.error(call, "T.func_attr takes one dict")
                attrs = self.lit.value(call.args[0])
                if isinstance(attrs, dict) and KERNEL_ATTR in attrs:
                    try:
                        attrs[KERNEL_ATTR] = spec_from_attr(attrs[KERNEL_ATTR])
                    except ValueError as exc:
                        raise self.src.error(call, str(exc)) from None
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
        if isinstance(ann, ast.Subscript) and dotted(ann.value) == "T.Buffer":
            parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            keywords: list[ast.keyword] = []
        elif isinstance(ann, ast.Call) and dotted(ann.func) == "T.Buffer":
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
                name = call_name(n.items[0].context_expr) if len(n.items) == 1 else None
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
            call = expr_call(n, "T.evaluate")
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
                and is_call(n.value, "T.alloc_buffer"))

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
        dtype = dotted(n.annotation)
        if dtype is None or not dtype.startswith("T.") or dtype[2:] not in SCALAR_DTYPES:
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
        idx = [self.p.prim(i, "int64") for i in self.p.indices(target) if not is_empty_tuple(i)]
        value = self.p.prim(n.value, buf.dtype)
        return tir.BufferStore(buf, value, idx)

    def for_(self, n: ast.For) -> tir.Stmt:
        if n.orelse:
            raise self.src.error(n, "for-else is not supported")
        it = n.iter
        kind_name = call_name(it)
        if kind_name is None or (kind_name != "T.grid" and kind_name not in FOR_KINDS):
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
            loops.append((names[0], lo, ext, FOR_KINDS[kind_name], annotations))
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
                    and (call_name(st.value) or "").startswith("T.axis.")):
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
            call = expr_call(st, "T.where", "T.reads", "T.writes", "T.block_attr")
            if call is not None:
                which = call_name(call)
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
        if k < len(body) and isinstance(body[k], ast.With) and is_call(body[k].items[0].context_expr, "T.init"):
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
        fn = call_name(call)
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
            if is_empty_tuple(i):
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
        if k < len(nodes) and isinstance(nodes[k], ast.With) and is_call(nodes[k].items[0].context_expr, "T.init"):
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
