"""Traversal of loop-level IR: children of expressions and statements, visiting helpers, and TVM's
``StmtExprVisitor`` / ``StmtExprMutator`` base classes."""
from __future__ import annotations

from typing import Callable

from .. import expr as E
from ..expr import PrimExpr
from .nodes import (Allocate, Block, BlockRealize, BufferLoad, BufferStore, Evaluate, For, IfThenElse,
    LetStmt, SeqStmt, Stmt)

__all__ = ["expr_children", "post_order_visit", "buffer_loads", "stmt_children", "walk_stmt", "stmt_exprs",
           "StmtExprVisitor", "ExprMutator", "StmtExprMutator"]


def expr_children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    """The direct sub-expressions of ``e`` (loads included)."""
    return E._children(e)


def post_order_visit(e: PrimExpr, fvisit: Callable[[PrimExpr], None]) -> None:
    """Call ``fvisit`` on every node of ``e``, children first (left to right; an explicit stack, so
    expressions of any depth)."""
    stack: list[tuple[PrimExpr, bool]] = [(e, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            fvisit(node)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(expr_children(node)))


def buffer_loads(e: PrimExpr) -> list[BufferLoad]:
    """All loads in ``e`` in pre-order (outer load before loads inside its indices; an explicit stack,
    so expressions of any depth)."""
    out: list[BufferLoad] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, BufferLoad):
            out.append(x)
        stack.extend(reversed(expr_children(x)))
    return out


def stmt_children(s: Stmt) -> tuple[Stmt, ...]:
    """The direct sub-statements of ``s``."""
    if isinstance(s, SeqStmt):
        return s.seq
    if isinstance(s, (For, LetStmt, Allocate)):
        return (s.body,)
    if isinstance(s, IfThenElse):
        return (s.then_case,) if s.else_case is None else (s.then_case, s.else_case)
    if isinstance(s, BlockRealize):
        return (s.block,)
    if isinstance(s, Block):
        return (s.body,) if s.init is None else (s.init, s.body)
    return ()


def walk_stmt(s: Stmt, fvisit: Callable[[Stmt], None]) -> None:
    """Call ``fvisit`` on ``s`` and every nested statement, parents first."""
    fvisit(s)
    for c in stmt_children(s):
        walk_stmt(c, fvisit)


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


_METHODS: dict[type, str] = {}


def _method(obj) -> str:
    """``visit_<snake_case class name>`` of ``obj`` (``BufferLoad`` -> ``visit_buffer_load``)."""
    cls = type(obj)
    name = _METHODS.get(cls)
    if name is None:
        name = _METHODS[cls] = "visit_" + _snake(cls.__name__)
    return name


class StmtExprVisitor:
    """Visits every statement and expression of a loop-level function (TVM's ``StmtExprVisitor``).

    ``visit_stmt(s)`` / ``visit_expr(e)`` dispatch to a method named after the node's class
    (``visit_for``, ``visit_buffer_store``, ``visit_buffer_load``, ``visit_add``, ...) when the
    subclass defines one, else visit the node's children. An overriding method that still wants
    the children visited calls :meth:`generic_visit_stmt` / :meth:`generic_visit_expr`. Recursion
    follows the nesting of the IR (loops and expressions, whose depth the passes bound).
    """

    def visit_stmt(self, s: Stmt) -> None:
        """Visit statement ``s``: the subclass's ``visit_<node class>`` method (``visit_for``,
        ``visit_buffer_store``, ...) when it has one, else :meth:`generic_visit_stmt`."""
        method = getattr(self, _method(s), None)
        if method is not None:
            return method(s)
        return self.generic_visit_stmt(s)

    def visit_expr(self, e: PrimExpr) -> None:
        """Visit expression ``e``: the subclass's ``visit_<node class>`` method (``visit_buffer_load``,
        ``visit_add``, ...) when it has one, else :meth:`generic_visit_expr`."""
        method = getattr(self, _method(e), None)
        if method is not None:
            return method(e)
        return self.generic_visit_expr(e)

    def generic_visit_stmt(self, s: Stmt) -> None:
        """Visit the expressions of ``s`` (values, indices, bounds, conditions), then its statements."""
        for e in stmt_exprs(s):
            self.visit_expr(e)
        for c in stmt_children(s):
            self.visit_stmt(c)

    def generic_visit_expr(self, e: PrimExpr) -> None:
        """Visit the sub-expressions of ``e``."""
        for c in expr_children(e):
            self.visit_expr(c)


def stmt_exprs(s: Stmt) -> tuple[PrimExpr, ...]:
    """The expressions held directly by statement ``s`` (not those of nested statements)."""
    if isinstance(s, BufferStore):
        return (s.value, *s.indices)
    if isinstance(s, For):
        return (s.min, s.extent)
    if isinstance(s, (IfThenElse,)):
        return (s.condition,)
    if isinstance(s, (LetStmt, Evaluate)):
        return (s.value,)
    if isinstance(s, BlockRealize):
        return (*s.iter_values, s.predicate)
    if isinstance(s, Block):
        return tuple(d for iv in s.iter_vars for d in (iv.dom.min, iv.dom.extent))
    return ()


class ExprMutator:
    """Rebuilds expressions (TVM's ``ExprMutator`` for loop-level expressions): ``visit_expr(e)``
    dispatches like :class:`StmtExprVisitor` and returns the new expression; the default rebuilds
    ``e`` from its rewritten children, returning ``e`` itself when none changed. Node types outside
    this module (``te.Reduce``) are returned unchanged unless the subclass handles them."""

    def visit_expr(self, e: PrimExpr) -> PrimExpr:
        """The rewritten ``e``: the subclass's ``visit_<node class>`` method when it has one, else
        :meth:`generic_visit_expr` (``e`` itself when no child changed)."""
        method = getattr(self, _method(e), None)
        if method is not None:
            return method(e)
        return self.generic_visit_expr(e)

    def generic_visit_expr(self, e: PrimExpr) -> PrimExpr:
        """``e`` rebuilt from its rewritten children."""
        if isinstance(e, E.BinaryOp):
            a, b = self.visit_expr(e.a), self.visit_expr(e.b)
            return e if a is e.a and b is e.b else type(e)(a, b, e.dtype)
        if isinstance(e, E.Not):
            a = self.visit_expr(e.a)
            return e if a is e.a else E.Not(a)
        if isinstance(e, E.Select):
            c, t, f = (self.visit_expr(x) for x in (e.condition, e.true_value, e.false_value))
            same = c is e.condition and t is e.true_value and f is e.false_value
            return e if same else E.Select(c, t, f)
        if isinstance(e, E.Cast):
            v = self.visit_expr(e.value)
            return e if v is e.value else E.Cast(e.dtype, v)
        if isinstance(e, E.Call):
            args = [self.visit_expr(a) for a in e.args]
            return e if all(x is y for x, y in zip(args, e.args)) else E.Call(e.dtype, e.op, args)
        if isinstance(e, E.Let):
            value, body = self.visit_expr(e.value), self.visit_expr(e.body)
            return e if value is e.value and body is e.body else E.Let(e.var, value, body)
        if isinstance(e, BufferLoad):
            idx = [self.visit_expr(i) for i in e.indices]
            return e if all(x is y for x, y in zip(idx, e.indices)) else BufferLoad(e.buffer, idx)
        return e


class StmtExprMutator(ExprMutator):
    """Rebuilds statements and their expressions (TVM's ``StmtExprMutator``): ``visit_stmt(s)``
    dispatches to ``visit_<node>`` (``visit_for``, ``visit_block_realize``, ``visit_seq_stmt``, ...)
    when the subclass defines one, else rebuilds ``s`` with every expression passed through
    :meth:`visit_expr` and every nested statement through :meth:`visit_stmt`. A subclass that
    rewrites only expressions overrides :meth:`visit_expr` (substitution: ``E.substitute``)."""

    def visit_stmt(self, s: Stmt) -> Stmt:
        """The rewritten statement ``s``: the subclass's ``visit_<node class>`` method when it has one, else
        :meth:`generic_visit_stmt`."""
        method = getattr(self, _method(s), None)
        if method is not None:
            return method(s)
        return self.generic_visit_stmt(s)

    def generic_visit_stmt(self, s: Stmt) -> Stmt:
        """``s`` rebuilt from its rewritten expressions and statements (a new node every time);
        a statement of another kind is returned unchanged."""
        ve, vs = self.visit_expr, self.visit_stmt
        if isinstance(s, SeqStmt):
            return SeqStmt([vs(c) for c in s.seq])
        if isinstance(s, For):
            return For(s.loop_var, ve(s.min), ve(s.extent), s.kind, vs(s.body), s.annotations)
        if isinstance(s, BlockRealize):
            return BlockRealize([ve(v) for v in s.iter_values], ve(s.predicate), vs(s.block))
        if isinstance(s, Block):
            return Block(s.name, s.iter_vars, s.reads, s.writes, vs(s.body), None if s.init is None else vs(s.init),
                         s.alloc_buffers, s.annotations)
        if isinstance(s, BufferStore):
            return BufferStore(s.buffer, ve(s.value), [ve(i) for i in s.indices])
        if isinstance(s, IfThenElse):
            return IfThenElse(ve(s.condition), vs(s.then_case), None if s.else_case is None else vs(s.else_case))
        if isinstance(s, LetStmt):
            return LetStmt(s.var, ve(s.value), vs(s.body))
        if isinstance(s, Evaluate):
            return Evaluate(ve(s.value))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, vs(s.body))
        return s
