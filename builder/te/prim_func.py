"""``create_prim_func``: tensor expressions -> a TensorIR :class:`~builder.ir.tir.PrimFunc`.

Each compute becomes one loop nest (``for i0, i1, ... in T.grid(...)``, spatial loops then
reduction loops) around a block whose iter vars copy the compute's axes (``S``) and reduce axes
(``R``). Reductions get ``with T.init(): out[...] = init`` and the update
``out[...] = combine(out[...], source)``. Computes that are not arguments become intermediate
``T.alloc_buffer``\\ s of the root block. Mirrors ``tvm.te.create_prim_func``.
"""
from __future__ import annotations

from typing import Sequence

from ..ir import arith
from ..ir import expr as E
from ..ir import tir
from ..ir.expr import PrimExpr, Var
from ..ir.tir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, For,
                      IterVar, PrimFunc, Range, SeqStmt)
from .tensor import ComputeOp, PlaceholderOp, Reduce, Tensor

__all__ = ["create_prim_func"]


def _topo_order(outputs: Sequence[Tensor]) -> list[Tensor]:
    order: list[Tensor] = []
    state: dict[int, int] = {}  # 1 = visiting, 2 = done

    def visit(t: Tensor) -> None:
        s = state.get(id(t))
        if s == 2:
            return
        if s == 1:
            raise ValueError(f"tensor '{t.name}' depends on itself")
        state[id(t)] = 1
        for x in t.op.input_tensors:
            visit(x)
        state[id(t)] = 2
        order.append(t)

    for t in outputs:
        visit(t)
    return order


def _const_offset(a: PrimExpr, b: PrimExpr) -> int | None:
    """``a - b`` when it is a constant, else None."""
    poly = arith.poly_form(E._binary(E.Sub, a, b))
    if poly is None or any(k != () for k in poly):
        return None
    return poly.get((), 0)


def _has_load(e: PrimExpr) -> bool:
    return bool(tir.buffer_loads(e))


def _regions(loads: list[BufferLoad], exclude: Buffer | None) -> list[BufferRegion]:
    """Group loads by buffer (first-appearance order) into one covering region per buffer.

    Per dim: a point when every access uses the same index, a constant-offset window when the
    indices differ by constants, the whole dim otherwise (data-dependent / unrelated indices).
    """
    groups: dict[int, tuple[Buffer, list[tuple[PrimExpr, ...]]]] = {}
    for ld in loads:
        if ld.buffer is exclude:
            continue
        groups.setdefault(id(ld.buffer), (ld.buffer, []))[1].append(ld.indices)
    out = []
    for buf, accesses in groups.values():
        region = []
        for d in range(buf.ndim):
            idx = [a[d] for a in accesses]
            first = idx[0]
            if any(_has_load(i) for i in idx):
                region.append(Range(0, buf.shape[d]))
                continue
            offs = [_const_offset(i, first) for i in idx]
            if any(o is None for o in offs):
                region.append(Range(0, buf.shape[d]))
                continue
            lo, hi = min(offs), max(offs)  # type: ignore[type-var]
            region.append(Range(E.simplify(first + lo), hi - lo + 1))
        out.append(BufferRegion(buf, region))
    return out


def _unguarded_loads(e: PrimExpr, out: list) -> None:
    """The BufferLoads of ``e`` that always run: not inside a branch of ``if_then_else`` (whose
    untaken branch is never evaluated; both operands of a ``Select`` are)."""
    if isinstance(e, BufferLoad):
        out.append(e)
        for i in e.indices:
            _unguarded_loads(i, out)
        return
    if isinstance(e, E.Call) and e.op == "if_then_else":
        _unguarded_loads(e.args[0], out)
        return
    if isinstance(e, Reduce):
        if isinstance(e.condition, E.IntImm) and e.condition.value == 1:
            _unguarded_loads(e.source, out)
        return
    for c in tir.expr_children(e):
        _unguarded_loads(c, out)


def _read_checks(ops: list[ComputeOp]) -> list[tir.Stmt]:
    """Run-time checks that every read of an input at a bare loop index stays inside the
    input: a loop of ``E`` iterations reading a dim of ``D`` elements needs ``E <= D``. Emitted
    when the shapes cannot prove it (symbolic dims that the graph could not relate, e.g. a
    matmul whose reduction dims are two different symbols): ``T.evaluate(T.assert_le(E, D))``,
    which the generated code turns into an error before any loop runs. An op adds its own
    with ``attrs["mb.assert_le"] = [(E, D), ...]`` (or ``(E, D, message)`` for its own error text)."""
    seen: list[tuple[PrimExpr, PrimExpr]] = []
    out: list[tir.Stmt] = []
    for op in ops:
        for ext, dim, *message in op.attrs.get("mb.assert_le", ()):   # asked for by the op (topi.matmul)
            seen.append((ext, dim))
            out.append(tir.Evaluate(E.Call("int64", "assert_le", [E.convert(ext).astype("int64"),
                                                                  E.convert(dim).astype("int64"),
                                                                  *(E.StringImm(m) for m in message)])))
        extents = {a.var: a.dom for a in list(op.axis) + list(op.reduce_axis)}
        loads: list[BufferLoad] = []
        _unguarded_loads(op.body, loads)
        for ld in loads:
            for i, d in zip(ld.indices, ld.buffer.shape):
                dom = extents.get(i) if isinstance(i, Var) else None
                if dom is None or not (isinstance(dom.min, E.IntImm) and dom.min.value == 0):
                    continue
                ext = E.simplify(dom.extent)
                dim = E.simplify(E.convert(d))
                if E.prove_equal(ext, dim) or (isinstance(ext, E.IntImm) and isinstance(dim, E.IntImm)):
                    continue
                if any(E.prove_equal(ext, a) and E.prove_equal(dim, b) for a, b in seen):
                    continue
                seen.append((ext, dim))
                out.append(tir.Evaluate(E.Call("int64", "assert_le", [ext.astype("int64"),
                                                                      dim.astype("int64")])))
    return out


def _nest_for(op: ComputeOp, out: Buffer) -> tir.Stmt:
    spatial = [IterVar(Var(a.var.name, "int64"), a.dom, "S") for a in op.axis]
    reduce = [IterVar(Var(a.var.name, "int64"), a.dom, "R") for a in op.reduce_axis]
    vmap = {a.var: iv.var for a, iv in zip(op.axis, spatial)}
    vmap.update({a.var: iv.var for a, iv in zip(op.reduce_axis, reduce)})
    idx = [iv.var for iv in spatial]
    body_expr = op.body
    if isinstance(body_expr, Reduce):
        red = body_expr
        src = E.substitute(red.source, vmap)
        cond = E.substitute(red.condition, vmap)
        identity = red.combiner.identity(red.dtype)
        init_value = identity if red.init is None else E.substitute(red.init, vmap)
        step = src
        if not (isinstance(cond, E.IntImm) and cond.value == 1):
            step = tir.if_then_else(cond, src, identity)
        current = BufferLoad(out, idx)
        update = red.combiner.combine(current, step)
        if update.dtype != out.dtype:
            update = update.astype(out.dtype)
        init = BufferStore(out, init_value.astype(out.dtype), idx)
        body = BufferStore(out, update, idx)
        reads = _regions(tir.buffer_loads(src) + tir.buffer_loads(cond)
                         + tir.buffer_loads(init_value), exclude=out)
    else:
        value = E.substitute(body_expr, vmap)
        init = None
        body = BufferStore(out, value, idx)
        reads = _regions(tir.buffer_loads(value), exclude=None)
    writes = [BufferRegion.point(out, idx)]
    iter_vars = spatial + reduce
    block = Block(op.name, iter_vars, reads, writes, body, init=init)
    loop_vars = [Var(f"i{k}", "int64") for k in range(len(iter_vars))]
    stmt: tir.Stmt = BlockRealize(loop_vars, E.IntImm(1, "bool"), block)
    for lv, iv in reversed(list(zip(loop_vars, iter_vars))):
        stmt = For(lv, iv.dom.min, iv.dom.extent, "serial", stmt)
    return stmt  # a 0-d compute is a bare block realize that runs once


def create_prim_func(tensors: Sequence[Tensor], name: str = "main") -> PrimFunc:
    """Build a PrimFunc whose params are the buffers of ``tensors`` in the given order.

    ``tensors`` lists placeholders and outputs (TVM's destination-passing style). Every compute
    reachable from them that is not listed becomes an intermediate ``alloc_buffer``; each compute
    becomes one loop nest, in topological order. Symbolic dims of the placeholders become the
    function's symbolic vars. Raises ValueError when a placeholder that some compute reads is
    not listed, when a tensor is listed twice, or when the result is ill-formed
    (:func:`builder.ir.tir.verify`). Reads whose extent the shapes cannot bound get run-time
    checks in front of the loops (see :func:`_read_checks`).
    """
    args = list(tensors)
    if not args:
        raise ValueError("create_prim_func needs at least one tensor")
    for t in args:
        if not isinstance(t, Tensor):
            raise TypeError(f"create_prim_func takes te.Tensors, got {type(t).__name__}")
    if len({id(t) for t in args}) != len(args):
        raise ValueError("a tensor is listed twice in create_prim_func's arguments")
    arg_ids = {id(t) for t in args}
    order = _topo_order(args)
    nests = []
    ops: list[ComputeOp] = []
    intermediates: list[Buffer] = []
    for t in order:
        if isinstance(t.op, PlaceholderOp):
            if id(t) not in arg_ids:
                readers = [x.name for x in order
                           if any(y is t for y in x.op.input_tensors)]
                raise ValueError(f"placeholder '{t.name}' (read by {', '.join(readers)}) is not "
                                 f"among the arguments of create_prim_func")
            continue
        if not isinstance(t.op, ComputeOp):
            raise TypeError(f"unsupported operation {type(t.op).__name__}")
        if id(t) not in arg_ids:
            intermediates.append(t.buffer)
        ops.append(t.op)
        nests.append(_nest_for(t.op, t.buffer))
    nests = _read_checks(ops) + nests
    root = Block("root", [], [], [], SeqStmt.flatten(nests) if nests else tir.SeqStmt([]),
                 alloc_buffers=intermediates)
    func = PrimFunc([t.buffer for t in args], BlockRealize([], E.IntImm(1, "bool"), root),
                    {"global_symbol": name, "tir.noalias": True}, name)
    tir.verify(func)
    return func
