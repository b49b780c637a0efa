"""Well-formedness of loop-level functions: :func:`verify`."""
from __future__ import annotations

import builtins

from .. import expr as E
from ..expr import PrimExpr, Var
from .functor import expr_children
from .intrinsics import INTRINSICS
from .nodes import (Allocate, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore,
    Evaluate, For, IfThenElse, LetStmt, PrimFunc, SeqStmt, Stmt)


class VerifyError(ValueError):
    """Raised by :func:`verify`; the message names the function and each offending statement."""


def verify(func: PrimFunc) -> None:
    """Check that ``func`` is well formed; raise :class:`VerifyError` listing every problem.

    Checks: every buffer used (loaded, stored, in a read / write region) is a param or allocated
    in an enclosing block / ``Allocate``; every variable is bound (symbolic shape vars, enclosing
    loops, ``LetStmt``\\ s, the block's own iter vars — a block body may not use outer loop vars
    directly, as in TensorIR); the index count matches each buffer's rank and indices are
    integers; a store's value dtype equals the buffer dtype; conditions are ``bool``; loop kinds
    and iter-var bindings are valid.
    """
    errors: list[str] = []
    sym = set(func.sym_vars)

    def where(s: Stmt) -> str:
        text = str(s).strip().splitlines()
        head = text[0] if text else type(s).__name__
        return head if len(head) <= 160 else head[:157] + "..."

    def check_expr(e: PrimExpr, vars_: set, bufs: set, s: Stmt) -> None:
        def visit(x: PrimExpr) -> None:
            if isinstance(x, E.Let):
                visit(x.value)
                check_expr(x.body, vars_ | {x.var}, bufs, s)
                return
            if isinstance(x, Var):
                if x not in vars_ and x not in sym:
                    errors.append(f"variable '{x.name}' is not bound, in `{where(s)}`")
            elif isinstance(x, BufferLoad):
                check_access(x.buffer, x.indices, bufs, s)
            elif isinstance(x, E.Call) and x.op in INTRINSICS and len(x.args) != INTRINSICS[x.op].num_args:
                errors.append(f"intrinsic '{x.op}' takes {INTRINSICS[x.op].num_args} args, in `{where(s)}`")
            for c in expr_children(x):
                visit(c)

        visit(e)

    def check_access(buf: Buffer, indices, bufs: set, s: Stmt) -> None:
        if id(buf) not in bufs:
            errors.append(f"buffer '{buf.name}' is neither a param nor allocated, in `{where(s)}`")
        if len(indices) != buf.ndim:
            errors.append(f"buffer '{buf.name}' has {buf.ndim} dims but {len(indices)} indices "
                          f"are used, in `{where(s)}`")
        for i in indices:
            if not E.is_int_dtype(i.dtype) or i.dtype == "bool":
                errors.append(f"index {i} of '{buf.name}' is {i.dtype}, not an integer, "
                              f"in `{where(s)}`")

    def check_region(r: BufferRegion, vars_: set, bufs: set, s: Stmt) -> None:
        if id(r.buffer) not in bufs:
            errors.append(f"region buffer '{r.buffer.name}' is neither a param nor allocated, "
                          f"in `{where(s)}`")
        for rng in r.region:
            check_expr(rng.min, vars_, bufs, s)
            check_expr(rng.extent, vars_, bufs, s)

    def check_cond(c: PrimExpr, s: Stmt) -> None:
        if c.dtype != "bool":
            errors.append(f"condition {c} has dtype {c.dtype}, expected bool, in `{where(s)}`")

    def visit(s: Stmt, vars_: set, bufs: set) -> None:
        if isinstance(s, SeqStmt):
            for c in s.seq:
                visit(c, vars_, bufs)
        elif isinstance(s, BufferStore):
            check_access(s.buffer, s.indices, bufs, s)
            for i in s.indices:
                check_expr(i, vars_, bufs, s)
            check_expr(s.value, vars_, bufs, s)
            if s.value.dtype != s.buffer.dtype:
                errors.append(f"store of a {s.value.dtype} value into {s.buffer.dtype} buffer "
                              f"'{s.buffer.name}', in `{where(s)}`")
        elif isinstance(s, For):
            check_expr(s.min, vars_, bufs, s)
            check_expr(s.extent, vars_, bufs, s)
            if not E.is_int_dtype(s.loop_var.dtype):
                errors.append(f"loop variable '{s.loop_var.name}' is {s.loop_var.dtype}, "
                              f"in `{where(s)}`")
            if s.loop_var in vars_ or s.loop_var in sym:
                errors.append(f"loop variable '{s.loop_var.name}' is bound twice, in `{where(s)}`")
            visit(s.body, vars_ | {s.loop_var}, bufs)
        elif isinstance(s, IfThenElse):
            check_expr(s.condition, vars_, bufs, s)
            check_cond(s.condition, s)
            visit(s.then_case, vars_, bufs)
            if s.else_case is not None:
                visit(s.else_case, vars_, bufs)
        elif isinstance(s, LetStmt):
            check_expr(s.value, vars_, bufs, s)
            if s.value.dtype != s.var.dtype:
                errors.append(f"let '{s.var.name}' of dtype {s.var.dtype} bound to a "
                              f"{s.value.dtype} value, in `{where(s)}`")
            visit(s.body, vars_ | {s.var}, bufs)
        elif isinstance(s, Evaluate):
            check_expr(s.value, vars_, bufs, s)
        elif isinstance(s, Allocate):
            for d in s.buffer.shape:
                check_expr(d, vars_, bufs, s)
            visit(s.body, vars_, bufs | {id(s.buffer)})
        elif isinstance(s, BlockRealize):
            for v in s.iter_values:
                check_expr(v, vars_, bufs, s)
            check_expr(s.predicate, vars_, bufs, s)
            check_cond(s.predicate, s)
            b = s.block
            inner_vars = {iv.var for iv in b.iter_vars}
            for iv in b.iter_vars:
                check_expr(iv.dom.min, vars_, bufs, s)
                check_expr(iv.dom.extent, vars_, bufs, s)
            inner_bufs = bufs | {id(a) for a in b.alloc_buffers}
            for r in b.reads + b.writes:
                check_region(r, inner_vars, inner_bufs, s)
            if b.init is not None:
                if not builtins.any(iv.kind == "R" for iv in b.iter_vars):
                    errors.append(f"block '{b.name}' has an init but no reduction iter var")
                visit(b.init, inner_vars, inner_bufs)
            visit(b.body, inner_vars, inner_bufs)
        elif isinstance(s, Block):
            errors.append(f"block '{s.name}' is not wrapped in a BlockRealize")
        else:
            errors.append(f"unknown statement {type(s).__name__}")

    visit(func.body, set(), {id(p) for p in func.params})
    for p in func.params:
        for d in p.shape:
            if not E.is_int_dtype(d.dtype):
                errors.append(f"param '{p.name}' has a non-integer dim {d}")
    if errors:
        raise VerifyError(f"PrimFunc '{func.name}' is ill-formed:\n  " + "\n  ".join(errors))
