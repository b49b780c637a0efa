"""Fused-kernel builders.

``inline_injective`` is TVM's ``compute_inline`` applied to every elementwise / injective
stage of a tensor-expression graph: a stage that is not a reduction disappears into its
readers (its body substituted at the read's indices), so a chain ``matmul -> silu -> multiply``
becomes one reduction stage per matmul plus one elementwise stage that reads the reductions.
``linear_kernel`` builds such a graph for ``epilogue(x @ W_0.T, x @ W_1.T, ...)`` from the
ordinary topi ops (so the fused semantics equal the unfused ones, roundings included) and
describes it for the matmul kernel emitter (``builder/codegen/kernels/linear/``).
"""
from __future__ import annotations

import itertools
from typing import Callable, Sequence

from ...ir import expr as E
from ...ir import kernel as _kernel
from ...ir.expr import PrimExpr, promote_dtype
from ...ir.op.quantize import operand_format
from ...ir.relax import Op
from ...ir.tir import BufferLoad as _BufferLoad, ExprMutator, expr_children
from .. import tensor as _te
from ..tensor import ComputeOp as _ComputeOp, Reduce as _Reduce, Tensor
from .linear_algebra import linear, matmul
from .transform import permute_dims
from .quantize import dequantized_weight

__all__ = ["inline_injective", "linear_kernel", "replay"]



def _inlinable_key(ld: _BufferLoad):
    """``(id(tensor), indices)`` for a load of an inlinable (injective compute) stage, else None;
    the indices compare structurally (variables by identity)."""
    t = getattr(ld.buffer, "tensor", None)
    if t is None or not isinstance(t.op, _ComputeOp) or isinstance(t.op.body, _Reduce):
        return None
    try:
        key = (id(t), tuple(ld.indices))
        hash(key)
    except TypeError:
        return None
    return key


def _unguarded_loads(e: PrimExpr):
    """Keys (:func:`_inlinable_key`) of the loads of ``e`` that are evaluated whenever ``e`` is: not
    under a ``Select`` branch, the right side of ``and`` / ``or``, a conditional intrinsic or a
    reduction. Iterative (no recursion limit on deep expressions)."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, _BufferLoad):
            key = _inlinable_key(x)
            if key is not None:
                yield key
            stack.extend(x.indices)
        elif isinstance(x, E.Select):
            stack.append(x.condition)
        elif isinstance(x, (E.And, E.Or)):
            stack.append(x.a)
        elif isinstance(x, E.Call) and x.op == "if_then_else":
            stack.append(x.args[0])
        elif not isinstance(x, _Reduce):
            stack.extend(expr_children(x))


class _LoadRewriter(ExprMutator):
    """Rebuilds an expression with every BufferLoad replaced by ``fn(load)`` (indices rewritten
    first), reductions included."""

    def __init__(self, fn: Callable[[_BufferLoad], PrimExpr]):
        self.fn = fn

    def visit_buffer_load(self, e: _BufferLoad) -> PrimExpr:
        return self.fn(_BufferLoad(e.buffer, [self.visit_expr(i) for i in e.indices]))

    def visit_reduce(self, e: _Reduce) -> PrimExpr:
        init = None if e.init is None else self.visit_expr(e.init)
        return _Reduce(e.combiner, self.visit_expr(e.source), e.axis, self.visit_expr(e.condition), init)


def inline_injective(output: Tensor, reduction_names: dict | None = None) -> Tensor:
    """``output`` rebuilt with every non-reduction compute it depends on inlined into its
    readers (TVM's ``compute_inline`` on all injective stages). Reductions stay stages of
    their own (their sources get their injective producers inlined); placeholders stay.
    A producer that a reader evaluates more than once at the same element (``silu(y) = y *
    sigmoid(y)`` reads ``y`` twice) is bound once with a ``Let`` instead of being copied, so the
    inlined expression grows linearly with the length of the chain, not exponentially; reads under
    a condition (a ``Select`` branch, the right side of ``and`` / ``or``) are copied, never hoisted
    out of their condition.

    ``reduction_names`` (optional) maps ``id(old reduction tensor)`` to the name of its rebuilt
    stage; the dict is filled with the names used (made unique with ``_1``, ``_2`` suffixes).
    Returns the new output tensor (a new compute even when ``output`` is a placeholder-free
    elementwise stage). Raises TypeError for an operation that is not a compute or placeholder.
    """
    memo: dict[int, Tensor] = {}
    used: set[str] = set()
    let_ids = itertools.count()   # per call: the same graph gives the same names in every build (cache keys)
    names = reduction_names if reduction_names is not None else {}

    def unique(name: str) -> str:
        base, k, n = name, 0, name
        while n in used:
            k += 1
            n = f"{base}_{k}"
        used.add(n)
        return n

    def load(ld: _BufferLoad) -> PrimExpr:
        t = getattr(ld.buffer, "tensor", None)
        if t is None or not isinstance(t.op, _ComputeOp):
            return ld
        if isinstance(t.op.body, _Reduce):
            return _BufferLoad(build(t).buffer, ld.indices)
        vmap = {iv.var: i for iv, i in zip(t.op.axis, ld.indices)}
        return E.substitute(inline(t.op.body), vmap)

    def inline(body: PrimExpr) -> PrimExpr:
        if isinstance(body, _Reduce):    # a value used per reduction step is not hoisted out of it
            return _LoadRewriter(load).visit_expr(body)
        counts: dict = {}
        for key in _unguarded_loads(body):
            counts[key] = counts.get(key, 0) + 1
        shared: dict = {}
        lets: list[tuple[E.Var, PrimExpr]] = []

        def share(ld: _BufferLoad) -> PrimExpr:
            key = _inlinable_key(ld)
            if key is None or counts.get(key, 0) < 2:
                return load(ld)
            var = shared.get(key)
            if var is None:
                value = load(ld)
                var = shared[key] = E.Var(f"{ld.buffer.name}_v{next(let_ids)}", value.dtype)
                lets.append((var, value))
            return var

        out = _LoadRewriter(share).visit_expr(body)
        for var, value in reversed(lets):
            out = E.Let(var, value, out)
        return out

    def build(t: Tensor) -> Tensor:
        got = memo.get(id(t))
        if got is not None:
            return got
        op = t.op
        if not isinstance(op, _ComputeOp):
            if isinstance(op, _te.PlaceholderOp):
                return t
            raise TypeError(f"inline_injective: unsupported operation {type(op).__name__}")
        body = inline(op.body)
        old = [iv.var for iv in op.axis]
        name = unique(names.get(id(t), op.name)) if isinstance(op.body, _Reduce) else unique(op.name)
        new = _te.compute(t.shape, lambda *idx: E.substitute(body, dict(zip(old, idx))), name=name,
                          tag=op.tag, attrs=op.attrs)
        if isinstance(op.body, _Reduce):
            names[id(t)] = name
        memo[id(t)] = new
        return new

    return build(output)


def _find_reduction(t: Tensor) -> Tensor:
    """The reduction stage behind a topi matmul result (itself, or the ``_acc`` stage its
    cast / epilogue stage reads)."""
    if isinstance(t.op, _ComputeOp) and isinstance(t.op.body, _Reduce):
        return t
    for src in t.op.input_tensors:
        if isinstance(src.op, _ComputeOp) and isinstance(src.op.body, _Reduce):
            return src
    raise ValueError(f"no reduction stage behind '{t.name}'")


def _linear_weight(w, inputs: Sequence[Tensor]) -> Tensor:
    """The (out, in) weight of a :class:`~builder.ir.kernel.DenseWeight` / ``GroupWeight`` as a te
    tensor: a dense input, or the float32 dequantization (an injective stage that gets inlined)."""
    if isinstance(w, _kernel.DenseWeight):
        t = inputs[w.w]
        if not w.row_tile:
            return t
        T = w.row_tile
        return _te.compute((t.shape[0] * T, t.shape[1]), lambda n, k: t[n // T, k, n % T], name="T_untile")
    q, s = inputs[w.q], inputs[w.scale]
    fmt, kin = operand_format(q, s, w.op_attrs, "linear_kernel")   # every attribute the weight carries
    return dequantized_weight(q, s, fmt, kin)


def replay(node, inputs: Sequence[Tensor], lin: Sequence[Tensor] = ()) -> Tensor:
    """The tensor an epilogue tree (:mod:`builder.ir.kernel`) computes: ``EpilogueTensor(i)`` is
    ``inputs[i]``, ``EpilogueLinear(k)`` is ``lin[k]``, ``EpilogueOp`` applies the registered op's
    fusion ``compute`` to its children with its attributes. Raises ValueError for an op without one."""
    if isinstance(node, _kernel.EpilogueLinear):
        return lin[node.index]
    if isinstance(node, _kernel.EpilogueTensor):
        return inputs[node.index]
    compute = Op.get(node.op).compute
    if compute is None:
        raise ValueError(f"{node.op} has no fusion compute")
    return compute(*(replay(a, inputs, lin) for a in node.args), **dict(node.attrs))


def linear_kernel(x: Tensor, *tensors: Tensor, weights: Sequence, epilogue=_kernel.EpilogueLinear(0),
                  out_dtype: str | None = None, spec: list | None = None) -> Tensor:
    """``epilogue(x @ W_0.T, x @ W_1.T, ...)`` as one fused stage graph for the matmul kernel emitter.

    ``x`` is ``(..., in)``; ``tensors`` are the other inputs, so that input ``i`` is ``(x, *tensors)[i]``.
    ``weights`` are :class:`~builder.ir.kernel.DenseWeight` (a float ``(out, in)`` input) or
    :class:`~builder.ir.kernel.GroupWeight` (group-quantized, dequantized in float32 inside the
    reduction); ``epilogue`` is an epilogue tree (:func:`replay`), whose ``EpilogueLinear(k)`` is
    matmul ``k`` as :func:`linear` computes it with ``out_dtype``. The result is what those topi ops
    compute, with every elementwise stage inlined: one reduction stage per weight (float32
    accumulators) and one output stage.

    ``spec`` (optional list) receives the :class:`~builder.ir.kernel.LinearKernelSpec` the code
    generator reads from ``attrs["mb.kernel"]``. Raises ValueError / TypeError as the topi ops do.
    """
    inputs = (x, *tensors)
    lin = []
    for w in weights:
        odt = out_dtype
        if isinstance(w, _kernel.DenseWeight) and (w.batched or w.kn):
            t = inputs[w.w]
            if not w.kn:   # (*B, out, in): the matmul of x and its transpose (inlined: read as stored)
                t = permute_dims(t, list(range(t.ndim - 2)) + [t.ndim - 1, t.ndim - 2])
            lin.append(matmul(x, t, out_dtype=odt))
            continue
        wt = _linear_weight(w, inputs)
        if odt is None and isinstance(w, _kernel.GroupWeight):
            # the graph's dtype: that of x @ dequantize(q, s).T with the weight in the scale dtype
            odt = promote_dtype(x.dtype, inputs[w.scale].dtype)
        lin.append(linear(x, wt, out_dtype=odt))
    out = replay(epilogue, inputs, lin)
    names: dict[int, str] = {}
    reds = [_find_reduction(t) for t in lin]
    for k, r in enumerate(reds):
        names[id(r)] = r.op.name if len(reds) == 1 else f"{r.op.name}{k}"
    fused = inline_injective(out, names)
    if spec is not None:
        spec.append(_kernel.LinearKernelSpec(0, len(inputs), tuple(weights), tuple(names[id(r)] for r in reds)))
    return fused
