"""The attention kernel planner: :func:`plan_attention` checks a PrimFunc built by
:func:`builder.te.topi.attention` against its :class:`~builder.ir.kernel.AttentionKernelSpec`
(parameters, dtypes, static head counts and head dims, shapes that agree, the bias's broadcast
dims, the reference stages) and returns an :class:`AttentionPlan`, or the reason the fast kernel
does not apply (then the reference loops are compiled)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ....ir import expr as E
from ....ir import tir
from ....ir.kernel import KERNEL_ATTR, AttentionKernelSpec
from ....ir.op.common import static_int
from ....ir.tir import BlockRealize, Buffer, PrimFunc
from ..simd import SimdInfo

__all__ = ["AttentionPlan", "plan_attention", "ATTENTION_TUNING", "STAGES"]

#: The block names of :func:`builder.te.topi.attention` the kernel replaces.
STAGES = ("T_attention_score", "T_attention_max", "T_attention_exp", "T_attention_sum", "T_attention")

#: Tunables (read at code generation time).
ATTENTION_TUNING = {
    "rows": 64,                 # (query, head) rows per work unit (each unit packs its key blocks once: 8 -> 32
                                # rows, Xeon, TinyLlama prefill attention 896 -> 691 us, MiniLM 8 x 41 421 -> 342;
                                # 32 -> 64 with 4 rows per pass: Whisper-shaped 16.3-17.1 -> 15.3-15.4 ms,
                                # TinyLlama 478-501 -> 442-454 us, MiniLM 8 x 41 248-263 -> 227-240)
    "key_vectors": 4,           # keys per block = key_vectors * lanes
    "value_vectors": 4,         # head_dim vectors per pass of the value product
    "pass_rows": 0,             # rows per pass of the score and value loops (0: 4 with 32 registers, 2 with 16)
    "parallel_min_macs": 1 << 17,
    "tasks_per_thread": 8,
    "max_head_dim": 1024,       # larger head dims stay on the loops (the code is unrolled per vector)
}

_FLOATS = ("float32", "float16", "bfloat16")


@dataclass
class AttentionPlan:
    """A validated attention kernel: the spec, its buffers and static sizes (``heads`` H,
    ``kv_heads`` Hk, ``dim`` D, ``dim_v`` Dv), the input and output dtypes."""

    spec: AttentionKernelSpec
    q: Buffer
    k: Buffer
    v: Buffer
    bias: Buffer | None
    out: Buffer
    #: the sequence starts of the variable-length form (q / k / v / out 3-D, (T, heads, dim)), else None
    seqstart: Buffer | None
    heads: int
    kv_heads: int
    dim: int
    dim_v: int
    dtype: str
    out_dtype: str
    #: the paged form's block table (B, M) and lengths (B,) (k / v are pools (N, BS, Hk, D)), else None
    block_table: Buffer | None = None
    lengths: Buffer | None = None

    def __str__(self) -> str:
        form = "_var_len" if self.seqstart is not None else "_paged" if self.block_table is not None else ""
        return (f"attention{form} H={self.heads} Hk={self.kv_heads} "
                f"D={self.dim} Dv={self.dim_v} {self.dtype} causal={self.spec.causal} "
                f"bias={'none' if self.bias is None else self.spec.bias_broadcast}"
                + (f" window={self.spec.window}" if self.spec.window else "")
                + (f" softcap={self.spec.softcap}" if self.spec.softcap else ""))


def _block_names(func: PrimFunc) -> set[str]:
    names: set[str] = set()
    tir.walk_stmt(func.body, lambda s: names.add(s.block.name) if isinstance(s, BlockRealize) else None)
    return names


def plan_attention(func: PrimFunc, simd: SimdInfo) -> AttentionPlan | str:
    """An :class:`AttentionPlan` for ``func``, or a string saying why the kernel does not apply:
    no vector unit, a spec that is not an :class:`AttentionKernelSpec`, parameters out of order,
    dtypes other than float32 / float16 / bfloat16 (all the same), symbolic or unequal head
    counts and dims, shapes the graph does not prove equal (batch, key length, ...), a bias dim
    that neither equals the scores' dim nor is a broadcast 1, a non-finite scale, a window without a
    causal mask, a negative or infinite softcap, or a body without the reference stages."""
    spec = func.attrs.get(KERNEL_ATTR)
    if not isinstance(spec, AttentionKernelSpec):
        return f"not an attention spec: {type(spec).__name__}"
    if not simd.usable:
        return "no vector unit"
    if spec.seqstart >= 0:
        return _plan_var_len(func, spec)
    if spec.block_table >= 0 or spec.lengths >= 0:
        return _plan_paged(func, spec)
    nparams = 5 if spec.bias >= 0 else 4
    order = (spec.q, spec.k, spec.v) + ((spec.bias,) if spec.bias >= 0 else ()) + (spec.out,)
    if len(func.params) != nparams or order != tuple(range(nparams)):
        return f"parameters {order} do not match the function's {len(func.params)}"
    q, k, v = func.params[:3]
    bias = func.params[3] if spec.bias >= 0 else None
    out = func.params[-1]
    bufs = [q, k, v, out] + ([bias] if bias is not None else [])
    if any(len(b.shape) != 4 for b in bufs):
        return "query, key, value, bias and output must be 4-D"
    if q.dtype not in _FLOATS or any(b.dtype != q.dtype for b in bufs):
        return f"dtypes {[b.dtype for b in bufs]}: the kernel takes one of {_FLOATS} for every tensor"
    sizes = _head_sizes(spec, q, k, v, out, 2)
    if isinstance(sizes, str):
        return sizes
    heads, kv_heads, dim, dim_v = sizes
    same = [(q.shape[0], k.shape[0], "batch of key"), (q.shape[0], v.shape[0], "batch of value"),
            (q.shape[0], out.shape[0], "batch of output"), (k.shape[1], v.shape[1], "key length of value"),
            (q.shape[1], out.shape[1], "query length of output")]
    for a, b, what in same:
        if not E.prove_equal(a, b):
            return f"{what}: cannot prove {a} == {b}"
    if bias is not None:
        scores = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
        for d, (bd, sd) in enumerate(zip(bias.shape, scores)):
            if d in spec.bias_broadcast:
                if static_int(bd) != 1:
                    return f"bias dim {d} is {bd}, not the broadcast 1 of the spec"
            elif not E.prove_equal(bd, sd) and not (static_int(bd) == 1 and static_int(sd) == 1):
                return f"bias dim {d}: cannot prove {bd} == the scores' {sd}"
    return _plan(func, spec, q, k, v, bias, out, None, sizes)


def _plan(func: PrimFunc, spec: AttentionKernelSpec, q, k, v, bias, out, seqstart, sizes: tuple,
          paged: tuple = (None, None)) -> AttentionPlan | str:
    """The plan, after the checks both forms share: a finite scale, a window only with a causal mask and
    not on the variable-length form, a finite cap >= 0, and the reference stages in the body."""
    if not math.isfinite(spec.scale):
        return f"scale {spec.scale} is not finite"
    if spec.window < 0 or (spec.window and (spec.causal == "none" or seqstart is not None)):
        return f"window {spec.window} needs a causal mask and the BSNH form"
    if not 0 <= spec.softcap < math.inf or (spec.softcap and seqstart is not None):
        return f"softcap {spec.softcap} must be finite and >= 0, and not on the variable-length form"
    missing = set(STAGES) - _block_names(func)
    if missing:
        return f"not the reference attention stages (missing {sorted(missing)})"
    return AttentionPlan(spec, q, k, v, bias, out, seqstart, *sizes, q.dtype, out.dtype, *paged)


def _head_sizes(spec: AttentionKernelSpec, q: Buffer, k: Buffer, v: Buffer, out: Buffer, hd: int) -> tuple | str:
    """``(heads, kv_heads, dim, dim_v)`` from the head dim ``hd`` of the buffers (2 in BSNH, 1 in the
    variable-length (T, H, D) form), or why they do not fit the kernel."""
    heads, kv_heads, dim, dim_v = (static_int(q.shape[hd]), static_int(k.shape[hd]), static_int(q.shape[hd + 1]),
                                   static_int(v.shape[hd + 1]))
    if None in (heads, kv_heads, dim, dim_v):
        return "symbolic head count or head dim"
    if kv_heads <= 0 or dim <= 0 or dim_v <= 0 or heads != spec.group * kv_heads:
        return f"H={heads}, Hk={kv_heads}, group {spec.group}: H must be group * Hk"
    if max(dim, dim_v) > ATTENTION_TUNING["max_head_dim"]:
        return f"head dim {max(dim, dim_v)} > {ATTENTION_TUNING['max_head_dim']}"
    if static_int(k.shape[hd + 1]) != dim or static_int(v.shape[hd]) != kv_heads or static_int(out.shape[hd]) != heads \
            or static_int(out.shape[hd + 1]) != dim_v:
        return "key / value / output head counts or dims differ from the query's"
    return heads, kv_heads, dim, dim_v


def _plan_var_len(func: PrimFunc, spec: AttentionKernelSpec) -> AttentionPlan | str:
    """The plan of :func:`builder.te.topi.attention_var_len`'s PrimFunc: parameters q, k, v, seqstart,
    out (3-D, one token per row; seqstart 1-D int32 / int64), no bias, causal none or TopLeft."""
    if (spec.q, spec.k, spec.v, spec.seqstart, spec.out) != (0, 1, 2, 3, 4) or spec.bias >= 0 or len(func.params) != 5:
        return "parameters do not match the variable-length attention's (q, k, v, seqstart, out)"
    q, k, v, st, out = func.params
    if any(len(x.shape) != 3 for x in (q, k, v, out)) or len(st.shape) != 1 or st.dtype not in ("int32", "int64"):
        return "query, key, value and output must be 3-D and seqstart 1-D int32 / int64"
    if q.dtype not in _FLOATS or any(x.dtype != q.dtype for x in (k, v, out)):
        return f"dtypes {[x.dtype for x in (q, k, v, out)]}: the kernel takes one of {_FLOATS} for every tensor"
    if spec.causal not in ("none", "TopLeft"):
        return f"causal mask {spec.causal} of a variable-length attention"
    sizes = _head_sizes(spec, q, k, v, out, 1)
    if isinstance(sizes, str):
        return sizes
    for a, b, what in ((q.shape[0], k.shape[0], "tokens of key"), (q.shape[0], v.shape[0], "tokens of value"),
                       (q.shape[0], out.shape[0], "tokens of output")):
        if not E.prove_equal(a, b):
            return f"{what}: cannot prove {a} == {b}"
    return _plan(func, spec, q, k, v, None, out, st, sizes)


def _plan_paged(func: PrimFunc, spec: AttentionKernelSpec) -> AttentionPlan | str:
    """The plan of :func:`builder.te.topi.paged_attention`'s PrimFunc: parameters q (B, Sq, H, D), the pools
    k (N, BS, Hk, D) and v (N, BS, Hk, Dv), block_table (B, M) and lengths (B,) int32 / int64, an optional
    bias (dims 0-2 those of the scores or a broadcast 1; its key dim checked against the lengths when the
    code runs), out (B, Sq, H, Dv); causal none or BottomRight."""
    nparams = 7 if spec.bias >= 0 else 6
    order = (spec.q, spec.k, spec.v, spec.block_table, spec.lengths) + ((spec.bias,) if spec.bias >= 0 else ()) \
        + (spec.out,)
    if len(func.params) != nparams or order != tuple(range(nparams)):
        return f"parameters {order} do not match the paged attention's {len(func.params)}"
    q, k, v, table, lengths = func.params[:5]
    bias = func.params[5] if spec.bias >= 0 else None
    out = func.params[-1]
    bufs = [q, k, v, out] + ([bias] if bias is not None else [])
    if any(len(b.shape) != 4 for b in bufs) or len(table.shape) != 2 or len(lengths.shape) != 1:
        return "query, pools, bias and output must be 4-D, the block table 2-D and the lengths 1-D"
    if table.dtype not in ("int32", "int64") or lengths.dtype not in ("int32", "int64"):
        return f"block table {table.dtype} and lengths {lengths.dtype} must be int32 / int64"
    if q.dtype not in _FLOATS or any(b.dtype != q.dtype for b in bufs):
        return f"dtypes {[b.dtype for b in bufs]}: the kernel takes one of {_FLOATS} for every tensor"
    if spec.causal not in ("none", "BottomRight"):
        return f"causal mask {spec.causal} of a paged attention"
    sizes = _head_sizes(spec, q, k, v, out, 2)
    if isinstance(sizes, str):
        return sizes
    same = [(q.shape[0], table.shape[0], "batch of block table"), (q.shape[0], lengths.shape[0], "batch of lengths"),
            (q.shape[0], out.shape[0], "batch of output"), (k.shape[0], v.shape[0], "blocks of value pool"),
            (k.shape[1], v.shape[1], "block size of value pool"), (q.shape[1], out.shape[1], "query length of output")]
    for a, b, what in same:
        if not E.prove_equal(a, b):
            return f"{what}: cannot prove {a} == {b}"
    if bias is not None:
        scores = (q.shape[0], q.shape[2], q.shape[1])
        for d, (bd, sd) in enumerate(zip(bias.shape[:3], scores)):
            if d in spec.bias_broadcast:
                if static_int(bd) != 1:
                    return f"bias dim {d} is {bd}, not the broadcast 1 of the spec"
            elif not E.prove_equal(bd, sd) and not (static_int(bd) == 1 and static_int(sd) == 1):
                return f"bias dim {d}: cannot prove {bd} == the scores' {sd}"
        if 3 in spec.bias_broadcast and static_int(bias.shape[3]) != 1:
            return f"bias dim 3 is {bias.shape[3]}, not the broadcast 1 of the spec"
    return _plan(func, spec, q, k, v, bias, out, None, sizes, (table, lengths))
