"""``attention``: scaled dot-product attention (``softmax(q @ k.T * scale + mask) @ v``) over
(batch, seq, heads, dim) tensors; ``attention_var_len``: the same over sequences of different lengths
packed one after another; ``paged_attention``: new queries over the keys of a paged KV cache's blocks;
``rope``: the rotary position embedding's rotation of one tensor.
"""
from __future__ import annotations

import math

from ...ir import expr as E
from ...ir import tir
from ...ir.op.common import fmt_shape, static_int
from .. import tensor as _te
from ..tensor import Tensor
from .broadcast import add, multiply
from .common import cast_value, is_static_one, norm_acc_dtype, two_stage_compute
from .elementwise import negative
from .fusion import inline_injective
from .transform import checked_index, concat, split

__all__ = ["attention", "attention_var_len", "paged_attention", "rope"]


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary position embedding applied to ``x`` (Su et al. 2021, RoFormer; HF transformers'
    ``modeling_llama.apply_rotary_pos_emb`` for one tensor, ``rotate_half`` convention)::

        rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])
        out = x * cos + rotate_half(x) * sin

    ``x`` (..., D) with a static even ``D``; ``cos`` / ``sin`` of ``x``'s dtype broadcasting to its
    shape. One loop nest: the split / negative / concat / multiply / add computes inlined
    (:func:`inline_injective`), so the result, float16 / bfloat16 roundings of the intermediates
    included, is that of those ops one by one."""
    x1, x2 = split(x, 2, axis=x.ndim - 1)
    rotated = concat([negative(x2), x1], axis=x.ndim - 1)
    return inline_injective(add(multiply(x, cos), multiply(rotated, sin)))


def attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, scale: float | None = None,
              causal_mask: str | None = None, window_size: int | None = None,
              logit_softcap: float | None = None) -> Tensor:
    """Scaled dot-product attention in TVM's (batch, seq, heads, head_dim) layout
    (Vaswani et al. 2017; ``torch.nn.functional.scaled_dot_product_attention``; TVM's
    ``R.nn.attention(query, key, value, bias, scale, causal_mask)``)::

        s[b, h, i, j] = scale * sum_d q[b, i, h, d] * k[b, j, h', d]
        s = cap * tanh(s / cap)                                     (logit_softcap = cap)
        s = s + bias[b, h, i, j]      (causally masked, or outside the window: -inf)
        out[b, i, h, e] = sum_j exp(s - max_j s) * v[b, j, h', e] / sum_j exp(s - max_j s)
                        (0 where every s[b, h, i, :] is -inf: the sum is 0)

    ``q`` (B, Sq, H, D), ``k`` (B, Sk, Hk, D), ``v`` (B, Sk, Hk, Dv); ``h' = h // (H / Hk)``
    (grouped-query attention). ``bias`` (optional, q's dtype) has shape (B, H, Sq, Sk) where any
    dim may be 1 (broadcast); it is added in the math dtype, so ``-inf`` in it masks a key.
    ``scale`` defaults to ``1 / sqrt(D)``. ``causal_mask``: ``"TopLeft"`` keeps ``j <= i``
    (PyTorch's ``is_causal``), ``"BottomRight"`` keeps ``j <= i + Sk - Sq``; ``window_size`` ``W``
    (needs a causal mask) also drops keys ``j <= limit - W`` where ``limit`` is that causal bound, so a
    query sees its own token and the ``W - 1`` before it (HF transformers' ``masking_utils``
    ``sliding_window_overlay``: ``kv_idx > q_idx - sliding_window``; Mistral, Qwen2, Gemma 2).
    ``logit_softcap`` (Gemma 2's ``attn_logit_softcapping``) caps the scaled scores with a tanh before
    the bias and the masks. A row whose scores
    are all ``-inf`` (every key masked) gives zeros, as PyTorch >= 2.5's ``_safe_softmax`` in
    its math attention (pytorch/pytorch#131060), not NaN. Math in float32 (float64 for
    float64). Stages: ``T_attention_score`` (+ ``_acc``), ``T_attention_max``,
    ``T_attention_exp``, ``T_attention_sum``, ``T_attention`` (+ ``_acc``). Raises ValueError
    for non-4-D inputs, a bias whose dims are neither 1 nor those of the scores, an unknown
    mask, a window without a causal mask or that is not a positive int, or a cap that is not positive.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"attention: query, key and value must be 4-D (B, S, H, D), got "
                         f"{fmt_shape(q.shape)}, {fmt_shape(k.shape)}, {fmt_shape(v.shape)}")
    if causal_mask not in (None, "TopLeft", "BottomRight"):
        raise ValueError(f"attention: unknown causal_mask {causal_mask!r}")
    if window_size is not None and (causal_mask is None or isinstance(window_size, bool)
                                    or not isinstance(window_size, int) or window_size <= 0):
        raise ValueError(f"attention: window_size must be a positive int with a causal mask, got {window_size!r} "
                         f"(causal_mask={causal_mask!r})")
    if logit_softcap is not None and not float(logit_softcap) > 0:
        raise ValueError(f"attention: logit_softcap must be positive, got {logit_softcap!r}")
    acc = norm_acc_dtype(q.dtype)
    bsz, sq, heads, dim = q.shape
    sk, hk, dv = k.shape[1], k.shape[2], v.shape[3]
    s_shape = (bsz, heads, sq, sk)
    if bias is not None:
        if bias.ndim != 4:
            raise ValueError(f"attention: bias must be 4-D (B, H, Sq, Sk), got {fmt_shape(bias.shape)}")
        for bd, sd in zip(bias.shape, s_shape):
            if not is_static_one(bd) and static_int(bd) is not None and static_int(sd) is not None \
                    and static_int(bd) != static_int(sd):
                raise ValueError(f"attention: bias {fmt_shape(bias.shape)} does not broadcast to the "
                                 f"scores {fmt_shape(s_shape)}")
        b_one = [is_static_one(bd) and not is_static_one(sd) for bd, sd in zip(bias.shape, s_shape)]
    neg_inf = E.const(float("-inf"), acc)
    rep = E.simplify(heads // hk)
    if scale is None:
        sd = static_int(dim)
        sc = (E.const(1.0 / math.sqrt(sd), acc) if sd is not None
              else tir.rsqrt(dim.astype(acc)))
    else:
        sc = E.const(float(scale), acc)

    def kv_head(h):
        return h if is_static_one(rep) else h // rep

    def fscore(b, h, i, j):
        rd = _te.reduce_axis((0, dim), name="rd")
        return _te.sum(cast_value(q[b, i, h, rd.var], acc) * cast_value(k[b, j, kv_head(h), rd.var], acc),
                       axis=rd)

    def fmask(val, idx):
        val = val * sc
        if logit_softcap is not None:
            cap = E.const(float(logit_softcap), acc)
            val = cap * tir.tanh(val / cap)
        if bias is not None:
            bidx = [E.IntImm(0, "int64") if one else x for one, x in zip(b_one, idx)]
            val = val + cast_value(bias[tuple(bidx)], acc)
        if causal_mask is None:
            return val
        i, j = idx[2], idx[3]
        limit = i if causal_mask == "TopLeft" else E.simplify(i + (sk - sq))
        keep = E.LE(j, limit)
        if window_size is not None:
            keep = E.And(keep, E.GT(j, E.simplify(limit - window_size)))
        return E.Select(keep, val, neg_inf)

    score = _te.compute(s_shape, fscore, name="T_attention_score")

    def masked(b, h, i, j):
        return fmask(score[b, h, i, j], (b, h, i, j))

    def fmax(b, h, i):
        rj = _te.reduce_axis((0, sk), name="rj")
        return _te.max(masked(b, h, i, rj.var), axis=rj)

    mx = _te.compute((bsz, heads, sq), fmax, name="T_attention_max")
    ex = _te.compute(s_shape, lambda b, h, i, j: tir.exp(masked(b, h, i, j) - mx[b, h, i]),
                     name="T_attention_exp")

    def fsum(b, h, i):
        rj = _te.reduce_axis((0, sk), name="rj")
        return _te.sum(ex[b, h, i, rj.var], axis=rj)

    total = _te.compute((bsz, heads, sq), fsum, name="T_attention_sum")

    def fout(b, i, h, e):
        rj = _te.reduce_axis((0, sk), name="rj")
        return _te.sum(ex[b, h, i, rj.var] * cast_value(v[b, rj.var, kv_head(h), e], acc), axis=rj)

    def fnorm(val, idx):
        b, i, h = idx[0], idx[1], idx[2]
        out = val / total[b, h, i]
        if bias is not None or causal_mask is not None:   # (a window needs a causal mask)
            # every key masked (-inf): exp(-inf - lowest) sums to 0 -> 0, as _safe_softmax
            out = E.Select(E.EQ(total[b, h, i], E.const(0.0, acc)), E.const(0.0, acc), out)
        if static_int(sk) is None:   # no keys: zeros (PyTorch's math attention), not 0 / 0
            out = E.Select(E.GT(E.convert(sk).astype("int64"), E.IntImm(0, "int64")), out, E.convert(0.0, acc))
        return out

    return two_stage_compute((bsz, sq, heads, dv), fout, acc, q.dtype, "T_attention", fnorm)


def attention_var_len(q: Tensor, k: Tensor, v: Tensor, seqstart: Tensor, scale: float | None = None,
                      causal_mask: str | None = None) -> Tensor:
    """Attention over sequences of different lengths packed one after another (FlashAttention-2's
    varlen form, Dao 2023: ``cu_seqlens``; TVM's ``R.nn.attention_var_len``): ``q`` (T, H, D), ``k``
    (T, Hk, D), ``v`` (T, Hk, Dv) and ``seqstart`` (B + 1,) integer, sequence ``b`` the tokens
    ``seqstart[b] <= t < seqstart[b + 1]`` (``seqstart[0] = 0``, non-decreasing, ``seqstart[B] = T``:
    the fast kernel checks it); each token attends to the tokens of its own sequence (``causal_mask``
    ``"TopLeft"``: those at or before it) -> (T, H, Dv).

    The semantics are :func:`attention` of one batch row of T tokens with a bias that is 0 between
    tokens of the same sequence and -inf across sequences, and this is how the reference loops compute
    it (the sequence of token ``t``: the number of ``seqstart[i] <= t`` for ``1 <= i < B``); the code
    generator's attention kernel visits only each sequence's own keys. Raises ValueError for inputs
    that are not 3-D, a 2-D ``seqstart`` or an unknown mask."""
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3 or seqstart.ndim != 1:
        raise ValueError(f"attention_var_len: query, key and value must be 3-D (T, H, D) and seqstart 1-D, got "
                         f"{fmt_shape(q.shape)}, {fmt_shape(k.shape)}, {fmt_shape(v.shape)}, {fmt_shape(seqstart.shape)}")
    if causal_mask not in (None, "TopLeft"):
        raise ValueError(f"attention_var_len: causal_mask must be None or 'TopLeft', got {causal_mask!r}")
    tokens = q.shape[0]
    nseq = E.simplify(seqstart.shape[0] - 1)

    def fseg(t):
        ri = _te.reduce_axis((0, E.simplify(nseq - 1)), name="ri")
        return _te.sum(E.Select(E.LE(cast_value(seqstart[ri.var + 1], "int64"), t), E.IntImm(1, "int64"),
                                E.IntImm(0, "int64")), axis=ri)

    seg = _te.compute((tokens,), fseg, name="T_attention_segment")
    acc = norm_acc_dtype(q.dtype)
    one = E.IntImm(1, "int64")
    bias = _te.compute((one, one, tokens, tokens),
                       lambda b, h, i, j: cast_value(E.Select(E.EQ(seg[i], seg[j]), E.const(0.0, acc),
                                                              E.const(float("-inf"), acc)), q.dtype),
                       name="T_attention_segment_bias")

    def batched(x):
        return _te.compute((one, *x.shape), lambda b, t, h, d: x[t, h, d], name=f"T_attention_{x.name}_rows")

    out = attention(batched(q), batched(k), batched(v), bias, scale, causal_mask)
    return _te.compute(tuple(out.shape[1:]), lambda t, h, e: out[E.IntImm(0, "int64"), t, h, e],
                       name="T_attention_var_len")


def paged_attention(q: Tensor, k_pool: Tensor, v_pool: Tensor, block_table: Tensor, lengths: Tensor,
                    bias: Tensor | None = None, scale: float | None = None, causal_mask: str | None = None,
                    window_size: int | None = None, logit_softcap: float | None = None) -> Tensor:
    """Attention of new queries over the keys a paged KV cache holds (vLLM's PagedAttention, Kwon et al.
    2023; TVM's ``PagedKVCache``): ``q`` (B, Sq, H, D), one layer's pools ``k_pool`` (N, BS, Hk, D) and
    ``v_pool`` (N, BS, Hk, Dv), ``block_table`` (B, M) and ``lengths`` (B,) int32 / int64 -> (B, Sq, H, Dv).

    Row ``b`` holds ``lengths[b]`` keys, key ``j`` in slot ``j % BS`` of block ``block_table[b, j // BS]``;
    its ``Sq`` queries are the last of them, query ``i`` at position ``p = lengths[b] - Sq + i``. The result
    is :func:`attention` of ``q`` over each row's keys gathered in position order, with ``causal_mask``
    ``"BottomRight"`` keeping keys ``j <= p`` (None: every key of the row), ``window_size`` ``W`` also
    dropping ``j <= p - W``, ``logit_softcap`` and ``bias`` ((B, H, Sq, Skv), dims 1 broadcast; column
    ``j`` the key at position ``j``) as there; a query that sees no key gives zeros.

    The loops gather the ``M * BS`` slots of each row's table (a slot at or past the row's length is 0 and
    masked), so an out-of-range index is an error when the code runs (:func:`checked_index`,
    "index out of range"; never a read out of bounds): a block id of a row's first ``ceil(lengths[b] / BS)``
    entries outside ``[0, N)``, a length outside ``[Sq, M * BS]`` or, with a bias whose key dim is not 1,
    above ``Skv``. The code generator's attention kernel reads the blocks in place and checks the same
    before any unit runs (its own messages). Raises ValueError for non-4-D inputs, a 1-D table, a mask
    other than None / ``"BottomRight"``, or a window without it."""
    if q.ndim != 4 or k_pool.ndim != 4 or v_pool.ndim != 4 or block_table.ndim != 2 or lengths.ndim != 1:
        raise ValueError(f"paged_attention: q, k_pool, v_pool must be 4-D, block_table 2-D and lengths 1-D, got "
                         f"{fmt_shape(q.shape)}, {fmt_shape(k_pool.shape)}, {fmt_shape(v_pool.shape)}, "
                         f"{fmt_shape(block_table.shape)}, {fmt_shape(lengths.shape)}")
    if causal_mask not in (None, "BottomRight"):
        raise ValueError(f"paged_attention: causal_mask must be None or 'BottomRight', got {causal_mask!r}")
    if window_size is not None and causal_mask is None:
        raise ValueError("paged_attention: a window needs the causal mask")
    i64 = "int64"
    zero = E.IntImm(0, i64)
    bsz, sq, heads, _ = q.shape
    nblocks, bsize, hk = k_pool.shape[0], k_pool.shape[1], k_pool.shape[2]
    cap = E.simplify(block_table.shape[1] * bsize)        # the slots of a row's table: the gathered key dim
    sq64 = E.convert(sq).astype(i64)

    def held(b):   # the keys row b held before the call, checked: 0 <= lengths[b] - Sq <= M * BS - Sq
        return checked_index(cast_value(lengths[b], i64) - sq64, E.simplify(cap - sq + 1))

    def gather(pool: Tensor, name: str) -> Tensor:
        def f(b, j, h, d):   # a slot past the row's keys reads block 0's and is 0 (a pool holds garbage there)
            used = E.LT(j, held(b) + sq64)
            block = checked_index(E.Select(used, cast_value(block_table[b, j // bsize], i64), zero), nblocks)
            return E.Select(used, pool[block, E.FloorMod(j, bsize), h, d], E.const(0.0, pool.dtype))
        return _te.compute((bsz, cap, hk, pool.shape[3]), f, name=name)

    kg, vg = gather(k_pool, "T_paged_keys"), gather(v_pool, "T_paged_values")
    acc = norm_acc_dtype(q.dtype)
    bias_heads = heads if bias is not None and not is_static_one(bias.shape[1]) else E.IntImm(1, i64)

    def fmask(b, h, i, j):
        end = held(b) + sq64
        keep = E.LT(j, end)
        if causal_mask is not None:
            pos = held(b) + i
            keep = E.And(keep, E.LE(j, pos))
            if window_size is not None:
                keep = E.And(keep, E.GT(j, pos - window_size))
        val = E.const(0.0, acc)
        if bias is not None:
            one = [is_static_one(d) for d in bias.shape]
            skv = bias.shape[3]
            col = zero if one[3] else E.Select(E.LT(j, skv), j, zero)
            at = [zero if one[0] else b, zero if one[1] else h, zero if one[2] else i, col]
            val = cast_value(bias[tuple(at)], acc)
            if not one[3]:   # every length within the bias's key dim
                keep = E.And(keep, E.GE(checked_index(end, E.simplify(skv + 1)), zero))
        return cast_value(E.Select(keep, val, E.const(float("-inf"), acc)), q.dtype)

    mask = _te.compute((bsz, bias_heads, sq, cap), fmask, name="T_paged_mask")
    return attention(q, kg, vg, mask, scale, None, None, logit_softcap)
