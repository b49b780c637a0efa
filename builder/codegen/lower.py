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
    tir.walk_stmt(s, lambda x: [out.update(E.free_vars(e)) for e in tir.stmt_exprs(x)])
    return out


class _Lowerer(tir.StmtExprMutator):
    """The rewriter; ``vmap`` maps the block iter vars in scope to their bound values (every
    expression is substituted with it)."""

    def __init__(self) -> None:
        self.vmap: dict = {}

    def visit_expr(self, e: PrimExpr) -> PrimExpr:
        return E.substitute(e, self.vmap)

    def scoped(self, vmap: dict, s: Stmt) -> Stmt:
        """``s`` lowered with ``vmap`` in scope."""
        saved, self.vmap = self.vmap, vmap
        try:
            return self.visit_stmt(s)
        finally:
            self.vmap = saved

    def visit_seq_stmt(self, s: SeqStmt) -> Stmt:
        return SeqStmt.flatten([self.visit_stmt(c) for c in s.seq])

    def visit_for(self, s: For) -> Stmt:
        hoisted = self.try_hoist_init(s)
        return hoisted if hoisted is not None else self.generic_visit_stmt(s)

    def visit_block_realize(self, s: BlockRealize) -> Stmt:
        return self.block(s, with_init=True)

    def visit_block(self, s: Block) -> Stmt:
        raise ValueError(f"block '{s.name}' is not wrapped in a BlockRealize")

    def generic_visit_stmt(self, s: Stmt) -> Stmt:
        if not isinstance(s, (For, BufferStore, IfThenElse, LetStmt, Evaluate, Allocate)):
            raise TypeError(f"cannot lower statement {type(s).__name__}")
        return super().generic_visit_stmt(s)

    def bind(self, r: BlockRealize) -> dict:
        inner = dict(self.vmap)
        for iv, v in zip(r.block.iter_vars, r.iter_values):
            inner[iv.var] = E.substitute(v, self.vmap)
        return inner

    def block(self, r: BlockRealize, with_init: bool) -> Stmt:
        b = r.block
        inner = self.bind(r)
        body = self.scoped(inner, b.body)
        if with_init and b.init is not None:
            conds = [E._binary(E.EQ, inner[iv.var], iv.dom.min) for iv in b.iter_vars
                     if iv.kind == "R"]
            init = _guard(tir.all(*conds), self.scoped(inner, b.init))
            body = SeqStmt.flatten([init, body])
        out = _guard(E.substitute(r.predicate, self.vmap), body)
        for buf in reversed(b.alloc_buffers):
            out = Allocate(buf, out)
        return out

    def try_hoist_init(self, f: For) -> Stmt | None:
        vmap = self.vmap
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
        inner = self.bind(leaf)
        init = self.scoped(inner, b.init)
        body = self.scoped(inner, b.body)
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
    body = _Lowerer().visit_stmt(func.body)
    return PrimFunc(func.params, body, {**func.attrs, "tir.lowered": True}, func.name)
