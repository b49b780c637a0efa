"""Lowering of TensorIR blocks to plain loops (the input of :mod:`builder.codegen.llvm_emit`).

The result uses only ``For``, ``SeqStmt``, ``IfThenElse``, ``LetStmt``, ``BufferStore``,
``Evaluate`` and ``Allocate``; block iter vars are replaced by their bound values and
``alloc_buffers`` become scoped ``Allocate``\\ s.

Reduction ``init``\\ s: when a block sits at the bottom of a perfect loop nest whose innermost
loops are exactly its reduction loops (bound one-to-one to the reduce iter vars, starting at the
domain min), the init is hoisted in front of the outermost of those loops, so LLVM sees a clean
reduction loop (``C[i, j] = 0; for k: C[i, j] += ...``). Otherwise it is guarded by
``if all(reduce values == dom.min)`` inside the body, as TVM's ``LowerInitBlock`` does.

Later schedule-level rewrites (tiling, vectorization, threading) are meant to be added here.
"""
from __future__ import annotations

from ..ir import expr as E
from ..ir import tir
from ..ir.expr import PrimExpr, Var
from ..ir.tir import (Allocate, Block, BlockRealize, BufferStore, Evaluate, For, IfThenElse,
                      LetStmt, PrimFunc, SeqStmt, Stmt)

__all__ = ["lower", "is_lowered"]

_TRUE = E.IntImm(1, "bool")


def _is_true(e: PrimExpr) -> bool:
    return isinstance(e, E.IntImm) and e.dtype == "bool" and e.value == 1


def _guard(cond: PrimExpr, body: Stmt) -> Stmt:
    return body if _is_true(cond) else IfThenElse(cond, body)


def _stmt_vars(s: Stmt) -> set:
    """Every Var that an expression inside ``s`` mentions."""
    out: set = set()

    def add(e: PrimExpr) -> None:
        out.update(E.free_vars(e))

    def visit(x: Stmt) -> None:
        if isinstance(x, BufferStore):
            add(x.value)
            for i in x.indices:
                add(i)
        elif isinstance(x, For):
            add(x.min)
            add(x.extent)
        elif isinstance(x, IfThenElse):
            add(x.condition)
        elif isinstance(x, LetStmt):
            add(x.value)
        elif isinstance(x, Evaluate):
            add(x.value)
        elif isinstance(x, BlockRealize):
            for v in x.iter_values:
                add(v)
            add(x.predicate)
        for c in tir.stmt_children(x):
            visit(c)

    visit(s)
    return out


class _Lowerer:
    """Recursive rewriter; ``vmap`` maps block iter vars to their bound values."""

    def stmt(self, s: Stmt, vmap: dict) -> Stmt:
        if isinstance(s, SeqStmt):
            return SeqStmt.flatten([self.stmt(c, vmap) for c in s.seq])
        if isinstance(s, For):
            hoisted = self.try_hoist_init(s, vmap)
            if hoisted is not None:
                return hoisted
            return For(s.loop_var, E.substitute(s.min, vmap), E.substitute(s.extent, vmap),
                       s.kind, self.stmt(s.body, vmap), s.annotations)
        if isinstance(s, BlockRealize):
            return self.block(s, vmap, with_init=True)
        if isinstance(s, BufferStore):
            return BufferStore(s.buffer, E.substitute(s.value, vmap),
                               [E.substitute(i, vmap) for i in s.indices])
        if isinstance(s, IfThenElse):
            return IfThenElse(E.substitute(s.condition, vmap), self.stmt(s.then_case, vmap),
                              None if s.else_case is None else self.stmt(s.else_case, vmap))
        if isinstance(s, LetStmt):
            return LetStmt(s.var, E.substitute(s.value, vmap), self.stmt(s.body, vmap))
        if isinstance(s, Evaluate):
            return Evaluate(E.substitute(s.value, vmap))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, self.stmt(s.body, vmap))
        if isinstance(s, Block):
            raise ValueError(f"block '{s.name}' is not wrapped in a BlockRealize")
        raise TypeError(f"cannot lower statement {type(s).__name__}")

    def bind(self, r: BlockRealize, vmap: dict) -> dict:
        inner = dict(vmap)
        for iv, v in zip(r.block.iter_vars, r.iter_values):
            inner[iv.var] = E.substitute(v, vmap)
        return inner

    def block(self, r: BlockRealize, vmap: dict, with_init: bool) -> Stmt:
        b = r.block
        inner = self.bind(r, vmap)
        body = self.stmt(b.body, inner)
        if with_init and b.init is not None:
            conds = [E._binary(E.EQ, inner[iv.var], iv.dom.min) for iv in b.iter_vars
                     if iv.kind == "R"]
            init = _guard(tir.all(*conds), self.stmt(b.init, inner))
            body = SeqStmt.flatten([init, body])
        out = _guard(E.substitute(r.predicate, vmap), body)
        for buf in reversed(b.alloc_buffers):
            out = Allocate(buf, out)
        return out

    def try_hoist_init(self, f: For, vmap: dict) -> Stmt | None:
        chain = [f]
        while isinstance(chain[-1].body, For):
            chain.append(chain[-1].body)
        leaf = chain[-1].body
        if not isinstance(leaf, BlockRealize):
            return None
        b = leaf.block
        if b.init is None or b.alloc_buffers:
            return None
        loop_vars = [c.loop_var for c in chain]
        red_vals, sp_vals, red_doms = [], [], []
        for iv, v in zip(b.iter_vars, leaf.iter_values):
            v = E.substitute(v, vmap)
            if iv.kind == "R":
                red_vals.append(v)
                red_doms.append(iv.dom)
            else:
                sp_vals.append(v)
        if not red_vals or not all(isinstance(v, Var) and v in loop_vars for v in red_vals):
            return None
        if len({id(v) for v in red_vals}) != len(red_vals):
            return None
        k = min(loop_vars.index(v) for v in red_vals)
        inner_loops = chain[k:]
        if {id(c.loop_var) for c in inner_loops} != {id(v) for v in red_vals}:
            return None
        inner_ids = {id(c.loop_var) for c in inner_loops}
        for v, dom in zip(red_vals, red_doms):
            loop = chain[loop_vars.index(v)]
            if not E.prove_equal(E.substitute(loop.min, vmap), E.substitute(dom.min, vmap)):
                return None
        for c in inner_loops:
            if any(id(x) in inner_ids for x in E.free_vars(c.min) + E.free_vars(c.extent)):
                return None
        outer_exprs = sp_vals + [E.substitute(leaf.predicate, vmap)]
        if any(id(x) in inner_ids for e in outer_exprs for x in E.free_vars(e)):
            return None
        red_block_vars = {iv.var for iv in b.iter_vars if iv.kind == "R"}
        if _stmt_vars(b.init) & red_block_vars:
            return None
        inner = self.bind(leaf, vmap)
        init = self.stmt(b.init, inner)
        body = self.stmt(b.body, inner)
        for c in reversed(inner_loops):
            body = For(c.loop_var, E.substitute(c.min, vmap), E.substitute(c.extent, vmap),
                       c.kind, body, c.annotations)
        out = _guard(E.substitute(leaf.predicate, vmap), SeqStmt.flatten([init, body]))
        for c in reversed(chain[:k]):
            out = For(c.loop_var, E.substitute(c.min, vmap), E.substitute(c.extent, vmap),
                      c.kind, out, c.annotations)
        return out


def is_lowered(func: PrimFunc) -> bool:
    """True when ``func`` contains no blocks."""
    found = []
    tir.walk_stmt(func.body, lambda s: found.append(s) if isinstance(s, (Block, BlockRealize))
                  else None)
    return not found


def lower(func: PrimFunc) -> PrimFunc:
    """Turn ``func``'s blocks into plain loops (see the module docstring).

    The result keeps params, name and attrs, plus ``attrs["tir.lowered"] = True``. Raises
    :class:`builder.ir.tir.VerifyError` when ``func`` is ill-formed (checked first).
    """
    tir.verify(func)
    body = _Lowerer().stmt(func.body, {})
    return PrimFunc(func.params, body, {**func.attrs, "tir.lowered": True}, func.name)
