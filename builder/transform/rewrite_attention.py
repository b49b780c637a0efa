"""RewriteAttention: attention written out as matmuls and a softmax becomes one ``R.nn.attention``
(graph level, before :class:`~builder.transform.SelectKernels`; the rewrite TVM's
``relax.backend.patterns.make_attention_rewrite_pattern`` / ``rewrite_attention`` does for its
fused attention kernels).

Imported models spell attention out: HF's eager attention, every ONNX export of it (torch's exporter
writes ``scaled_dot_product_attention`` out too), ``torch.matmul`` / ``torch.bmm`` code. On (B, H, S, D)
operands, with ``q`` (B, H, Sq, D), ``kt`` (B, Hk, D, Sk), ``v`` (B, Hk, Sk, Dv) (or 3-D, batch and heads in
one dim: the op's one head, each operand reshaped)::

    s = matmul(q, kt)                       (optionally q and kt each a scalar multiple)
    s = multiply(s, c) | divide(s, c)       (optional; c a float scalar constant)
    s = add(s, mask)                        (optional, either side; mask broadcasting to (B, H, Sq, Sk))
    p = softmax(s, axis=-1)                 (optionally where(p != p, 0, p): torch's ONNX export of SDPA;
                                             optionally in float32: astype(softmax(astype(s, f32)), dtype))
    o = matmul(p, v)

becomes, in the attention op's (B, S, H, D) layout::

    a = R.nn.attention(permute_dims(q, [0, 2, 1, 3]), permute_dims(kt, [0, 3, 1, 2]),
                       permute_dims(v, [0, 2, 1, 3]), mask, scale=c)
    o = permute_dims(a, [0, 2, 1, 3])

which the attention kernel computes per head and row block without the (B, H, Sq, Sk) scores (the
FlashAttention-2 schedule, :mod:`builder.codegen.kernels.attention`). The intermediates ``s`` and
``p`` must have no other use; ``Hk`` is ``H`` or 1 (the matmul's broadcast: multi-query attention).
Keys and values repeated over the heads (HF's ``repeat_kv``: ``reshape(broadcast_to(expand_dims(t, 2),
(B, Hk, n, S, D)), (B, Hk * n, S, D))``) are given to the op as their ``Hk`` heads (its grouped-query
attention), so the repeated copies are never made.

A ``permute_dims`` of a ``permute_dims`` (also through a ``reshape`` to the same shape) is composed
into one (none when the two cancel), here and anywhere in the function: the head splits
(``permute_dims(reshape(x, (B, S, H, D)), [0, 2, 1, 3])``) and the merge after ``o`` cancel against the
layout permutes above, so no transpose is left.

Measured (``benchmarks/README.md``, "Attention written out"; Intel Xeon, 2 threads): MiniLM's 8 x 41
attention 368 -> 300 us a layer, a Whisper-tiny layer at 1500 frames 38.9 -> 13.7 ms, TinyLlama's
prefill of 128 tokens with ``repeat_kv`` 927 -> 652 us.

Semantics: the result is that of the written-out graph up to rounding (the scores are summed and
the softmax taken in float32 for 16-bit data, where the graph rounded each intermediate), except
for a query row whose every key is masked with ``-inf``: the graph gives NaN there (softmax of all
``-inf``), the attention op zeros (PyTorch's ``_safe_softmax``). Finite masks (HF's
``finfo.min``, every ONNX export of it) are unaffected.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op.common import static_int
from .dce import dead_code_elimination
from .pass_infra import FunctionPass
from .patterns import FLOATS, call_op, permute_axes, same_shape, tensor_sinfo, void_dtype

__all__ = ["RewriteAttention"]

_HEADS = [0, 2, 1, 3]     # (B, H, S, D) <-> (B, S, H, D): its own inverse
_KEY = [0, 3, 1, 2]       # (B, H, D, S) -> (B, S, H, D)


class _Rewriter:
    """The rewrite of one function's dataflow blocks (see the module docstring): ``defs`` maps every
    variable to its (rewritten) value, ``uses`` counts the uses in the input function, ``vmap`` the
    dataflow variables replaced by another variable."""

    def __init__(self, func: rx.Function) -> None:
        self.defs: dict[rx.Var, rx.Expr] = {}
        self.uses: Counter = Counter()
        for block in func.body.blocks:
            for b in block.bindings:
                self.uses.update(rx.used_vars(b.value))
        self.uses.update(rx.used_vars(func.body.body))
        self.vmap: dict = {}
        self.bindings: list[rx.VarBinding] = []

    def call(self, e: rx.Expr, name: str) -> rx.Call | None:
        v = self.defs.get(e) if isinstance(e, rx.Var) else None
        ok = isinstance(v, rx.Call) and isinstance(v.op, rx.Op) and v.op.name == "relax." + name
        return v if ok else None

    def single(self, e: rx.Expr, name: str) -> rx.Call | None:
        """The ``name`` call bound to ``e`` when ``e`` is a dataflow variable used once, else None."""
        return self.call(e, name) if isinstance(e, rx.DataflowVar) and self.uses[e] == 1 else None

    def scalar(self, e: rx.Expr) -> float | None:
        """The value of a float constant holding one number (bound to ``e`` or ``e`` itself), else None."""
        c = self.defs.get(e) if isinstance(e, rx.Var) else e
        if not isinstance(c, rx.Constant) or c.dtype not in FLOATS or c.data.size != 1:
            return None
        v = float(np.asarray(c.values(), dtype=np.float64).reshape(()))
        return v if np.isfinite(v) else None

    def scaled(self, e: rx.Expr) -> tuple[rx.Expr, float] | None:
        """``(t, c)`` when ``e`` is ``multiply(t, c)`` / ``multiply(c, t)`` / ``divide(t, c)`` of a scalar
        constant ``c`` (``1 / c`` for the divide) used only here, the tensor ``t`` of ``e``'s shape."""
        for name in ("multiply", "divide"):
            call = self.single(e, name)
            if call is None:
                continue
            a, b = call.args
            order = [(a, b)] if name == "divide" else [(a, b), (b, a)]
            for t, c in order:
                v = self.scalar(c)
                ts, es = tensor_sinfo(t), tensor_sinfo(e)
                if v is None or ts is None or es is None or ts.ndim != es.ndim or ts.dtype != es.dtype:
                    continue
                if name == "divide":
                    if v == 0.0:
                        continue
                    v = 1.0 / v
                return t, v
        return None

    def emit(self, value: rx.Expr, name: str) -> rx.DataflowVar:
        var = rx.DataflowVar(name, value.struct_info)
        self.bind(var, value)
        return var

    def bind(self, var: rx.Var, value: rx.Expr) -> None:
        self.defs[var] = value
        self.bindings.append(rx.VarBinding(var, value))

    def permuted(self, x: rx.Expr, axes: list[int]) -> rx.Expr:
        """``permute_dims(x, axes)`` composed with a ``permute_dims`` bound to ``x``: the call (not yet
        bound), or the variable it would copy when the permutation is the identity."""
        inner = self.call(self.through_reshape(x), "permute_dims")
        if inner is not None:
            axes = [permute_axes(inner, len(axes))[a] for a in axes]
            x = inner.args[0]
        if axes == list(range(len(axes))):
            return x
        return call_op("permute_dims", [x], axes=axes)

    def through_reshape(self, x: rx.Expr) -> rx.Expr:
        """``y`` when ``x`` is ``reshape(y)`` to ``y``'s own shape (ONNX exports have them), else ``x``."""
        r = self.call(x, "reshape")
        if r is not None:
            xs, ys = tensor_sinfo(x), tensor_sinfo(r.args[0])
            if xs is not None and ys is not None and same_shape(xs.shape, ys.shape):
                return r.args[0]
        return x

    def operand(self, x: rx.Expr, axes: list[int], name: str) -> rx.Expr:
        """:meth:`permuted`, bound to a new variable when it is a call."""
        got = self.permuted(x, axes)
        return self.emit(got, name) if isinstance(got, rx.Call) else got

    def binding(self, b: rx.VarBinding, dataflow: bool) -> None:
        value = rx.substitute_vars(b.value, self.vmap)
        call = value if isinstance(value, rx.Call) and isinstance(value.op, rx.Op) else None
        if dataflow and call is not None:
            if call.op.name == "relax.matmul" and self.attention(b.var, call):
                return
            if (call.op.name == "relax.permute_dims"
                    and self.call(self.through_reshape(call.args[0]), "permute_dims") is not None):
                s = tensor_sinfo(b.var)
                if s is not None:
                    got = self.permuted(call.args[0], permute_axes(call, s.ndim))
                    if isinstance(b.var, rx.DataflowVar) and not isinstance(got, rx.Call):
                        self.vmap[b.var] = got
                    else:
                        self.bind(b.var, got)
                    return
        self.bind(b.var, value)

    def softmax_of(self, p: rx.Expr) -> tuple[rx.Call, rx.Expr] | None:
        """``(softmax call, its input before a float cast)`` when ``p`` is the softmax (or
        :meth:`nan_to_zero` of it), optionally taken in another float dtype: ``astype(softmax(astype(s,
        float32)), dtype)`` (HF's eager attention of 16-bit models); None otherwise."""
        cast = self.single(p, "astype")
        inner = cast.args[0] if cast is not None and tensor_sinfo(cast.args[0]) is not None else p
        if cast is not None and tensor_sinfo(inner).dtype not in FLOATS:
            return None
        sm = self.single(inner, "nn.softmax") or self.nan_to_zero(inner)
        if sm is None:
            return None
        s = sm.args[0]
        up = self.single(s, "astype")
        if up is not None and tensor_sinfo(up.args[0]) is not None and tensor_sinfo(up.args[0]).dtype in FLOATS:
            s = up.args[0]
        return sm, s

    def nan_to_zero(self, e: rx.Expr) -> rx.Call | None:
        """The softmax call of ``e = where(not_equal(p, p), 0, p)``, ``p = softmax(...)`` (NaN -> 0:
        torch's ONNX export of ``scaled_dot_product_attention``, whose fully masked rows are zeros, as the
        attention op's), ``p`` used by these alone; None otherwise."""
        w = self.single(e, "where")
        if w is None:
            return None
        cond, zero, p = w.args
        test = self.single(cond, "not_equal")
        if (test is None or not (test.args[0] is p and test.args[1] is p) or self.scalar(zero) != 0.0
                or not isinstance(p, rx.DataflowVar) or self.uses[p] != 3):
            return None
        return self.call(p, "nn.softmax")

    def unrepeat(self, x: rx.Expr) -> tuple[rx.Expr, int] | None:
        """``(t, n)`` when ``x`` (B, Hk * n, S, D) is ``t`` (B, Hk, S, D) with each head repeated ``n``
        times in a row (HF's ``repeat_kv``: ``reshape(broadcast_to(expand_dims(t, 2), (B, Hk, n, S, D)))``),
        the attention op's grouped-query heads; None otherwise."""
        r = self.call(x, "reshape")
        b = self.call(r.args[0], "broadcast_to") if r is not None else None
        e = self.call(b.args[0], "expand_dims") if b is not None else None
        if e is None or [int(a) for a in (e.attrs.get("axis") or [])] not in ([2], [-3]):
            return None
        t = e.args[0]
        xs, bs, ts = tensor_sinfo(x), tensor_sinfo(r.args[0]), tensor_sinfo(t)
        if xs is None or bs is None or ts is None or xs.ndim != 4 or ts.ndim != 4 or bs.ndim != 5:
            return None
        n = static_int(bs.shape[2])
        if (n is None or n < 1 or not same_shape([bs.shape[i] for i in (0, 1, 3, 4)], ts.shape)
                or not same_shape([xs.shape[0], xs.shape[2], xs.shape[3]], [ts.shape[0], ts.shape[2], ts.shape[3]])
                or not E.prove_equal(xs.shape[1], ts.shape[1] * n)):
            return None
        return t, n

    def scores(self, s: rx.Expr, shape) -> tuple[rx.Call, rx.Expr | None, float] | None:
        """``(matmul(q, kt), mask, c)`` when the softmax's input ``s`` is ``matmul(q, kt)``, scaled by ``c``
        (1 when not) and plus ``mask`` (None when not; either side of the add), each intermediate used
        once; None otherwise."""
        add = self.single(s, "add")
        tries = [(s, None)] if add is None else [(t, m) for t, m in (add.args, add.args[::-1])]
        for t, mask in tries:
            if mask is not None:
                ts, ms = tensor_sinfo(t), tensor_sinfo(mask)
                if ts is None or ms is None or not same_shape(ts.shape, shape) or ms.ndim > 4:
                    continue
            got = self.scaled(t)
            t, scale = got if got is not None else (t, 1.0)
            mm = self.single(t, "matmul")
            if mm is not None and void_dtype(mm.attrs.get("out_dtype")) is None:
                return mm, mask, scale
        return None

    def attention(self, var: rx.Var, call: rx.Call) -> bool:
        """``var = matmul(softmax(...), v)`` of the pattern in the module docstring -> bound to the
        attention op's result transposed (4-D) or reshaped (3-D) back; whether it was."""
        if void_dtype(call.attrs.get("out_dtype")) is not None:
            return False
        p, v = call.args
        got = self.softmax_of(p)
        ps, vs, os_ = tensor_sinfo(p), tensor_sinfo(v), tensor_sinfo(var)
        if got is None or ps is None or vs is None or os_ is None or ps.ndim not in (3, 4) or vs.ndim != ps.ndim:
            return False
        nd = ps.ndim
        sm, s = got
        if int(sm.attrs.get("axis", -1)) % nd != nd - 1:
            return False
        scores = self.scores(s, ps.shape)
        if scores is None:
            return False
        mm, mask, scale = scores
        q, kt = mm.args
        for side in (0, 1):
            got = self.scaled(q if side == 0 else kt)
            if got is not None:
                if side == 0:
                    q = got[0]
                else:
                    kt = got[0]
                scale *= got[1]
        qs, ks = tensor_sinfo(q), tensor_sinfo(kt)
        if qs is None or ks is None or qs.ndim != nd or ks.ndim != nd:
            return False
        dt = qs.dtype
        if dt not in FLOATS or {ks.dtype, vs.dtype, ps.dtype, os_.dtype} != {dt}:
            return False
        one = E.IntImm(1, "int64")
        # 3-D (torch.bmm over batch x heads): one head
        B, H, Sq, D = qs.shape if nd == 4 else (qs.shape[0], one, qs.shape[1], qs.shape[2])
        Bk, Hk, Dk, Sk = ks.shape if nd == 4 else (ks.shape[0], one, ks.shape[1], ks.shape[2])
        Bv, Hv, Sv, Dv = vs.shape if nd == 4 else (vs.shape[0], one, vs.shape[1], vs.shape[2])
        if not (E.prove_equal(B, Bk) and E.prove_equal(B, Bv) and E.prove_equal(D, Dk)
                and E.prove_equal(Hk, Hv) and E.prove_equal(Sk, Sv)
                and (E.prove_equal(H, Hk) or static_int(Hk) == 1)):
            return False
        score_shape = [B, H, Sq, Sk]
        if mask is not None:
            ms = tensor_sinfo(mask)
            shape = [one] * (nd - ms.ndim) + list(ms.shape)
            if nd == 3:
                shape.insert(1, one)
            if ms.dtype != dt or not all(static_int(d) == 1 or E.prove_equal(d, sd)
                                         for d, sd in zip(shape, score_shape)):
                return False
            if ms.ndim != 4:
                mask = self.emit(call_op("reshape", [mask, rx.ShapeExpr(shape)]), "attn_bias")
        name = var.name_hint
        if nd == 3:
            kk = self.operand(kt, [0, 2, 1], f"{name}_kn")
            args = [self.emit(call_op("reshape", [x, rx.ShapeExpr(dims)]), f"{name}_{what}")
                    for x, dims, what in ((q, [B, Sq, one, D], "q"), (kk, [B, Sk, one, D], "k"),
                                          (v, [B, Sk, one, Dv], "v"))]
        else:
            k, v4 = (kt, _KEY), (v, _HEADS)
            if static_int(Hk) != 1:
                # keys and values repeated over the heads (GQA written out): the attention op reads them once
                inner = self.call(kt, "permute_dims")
                k4 = inner.args[0] if inner is not None and permute_axes(inner, 4) == [0, 1, 3, 2] else None
                kr, vr = (self.unrepeat(k4) if k4 is not None else None), self.unrepeat(v)
                if kr is not None and vr is not None and kr[1] == vr[1]:
                    k, v4 = (kr[0], _HEADS), (vr[0], _HEADS)
            args = [self.operand(q, _HEADS, f"{name}_q"), self.operand(*k, f"{name}_k"),
                    self.operand(*v4, f"{name}_v")]
        a = self.emit(call_op("nn.attention", args + ([mask] if mask is not None else []),
                          scale=E.FloatImm(scale, "float32"), causal_mask=None, window_size=None),
                      f"{name}_attention")
        if nd == 3:
            self.bind(var, call_op("reshape", [a, rx.ShapeExpr([B, Sq, Dv])]))
        else:
            self.bind(var, call_op("permute_dims", [a], axes=list(_HEADS)))
        return True


class RewriteAttention(FunctionPass):
    """Pass: see the module docstring. ``RewriteAttention()(mod)``; unused bindings are removed after it."""

    name = "rewrite_attention"

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """The module with attention written out as matmuls and a softmax rewritten to ``R.nn.attention``
        (:meth:`transform_function`), then the bindings left unused removed."""
        return dead_code_elimination(super().transform_module(mod))

    def transform_function(self, bb: BlockBuilder, func: rx.Function, name: str) -> rx.Function:
        """``func`` with each written-out attention (module docstring) replaced by an ``R.nn.attention`` in
        (B, S, H, D) layout between permutes, and chains of ``permute_dims`` composed; ``func`` itself when
        it has no softmax or permute. Later uses of a rewritten variable read its replacement."""
        if not any(isinstance(b.value, rx.Call) and isinstance(b.value.op, rx.Op)
                   and b.value.op.name in ("relax.nn.softmax", "relax.permute_dims")
                   for block in func.body.blocks for b in block.bindings):
            return func
        rw = _Rewriter(func)
        blocks = []
        for block in func.body.blocks:
            rw.bindings = []
            for b in block.bindings:
                rw.binding(b, block.is_dataflow)
            blocks.append(type(block)(rw.bindings))
        body = rx.SeqExpr(blocks, rx.substitute_vars(func.body.body, rw.vmap))
        return rx.Function(func.params, body, func.ret_struct_info, func.attrs, func.is_pure, name=name)
