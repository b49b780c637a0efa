"""``Attention``: multi-head / grouped-query self-attention with optional rotary embeddings, padding
masks and the runtime KV cache; the attention layer of Llama-style decoders and BERT-style encoders.

Sources: scaled dot-product attention (Vaswani et al. 2017); grouped-query attention, several query
heads sharing one key / value head (Ainslie et al. 2023); rotary position embeddings (Su et al. 2021,
RoFormer) in HF transformers' Llama convention (``modeling_llama.rotate_half``); the parameter names
and layouts of HF's ``LlamaAttention`` (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, PyTorch
``Linear`` weights (out_features, in_features)).

With a cache (``spec.Object()`` input, at run time a ``runtime.PagedKVCache``) and
``total_seq_len`` (``spec.Int()`` input), the new tokens' keys and values are appended to the cache
under the layer's ``layer_id`` (``nn.op.kv_cache_append``) and the queries attend to every key their row
holds, read from the cache's blocks in place (``nn.op.paged_attention``: the block table and each row's
length, no copy of the keys), causally at their true positions (row ``r``'s query ``i`` of ``S_q`` new
tokens sits at ``held_r + i`` and sees keys ``0 .. held_r + i``), so a prefill, a second prefill chunk and
one-token decode steps all work, in a ragged batch (rows of different lengths) too; the default positions
are each row's own.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import expr as E
from ..ir.op.common import fmt_shape
from . import op
from . import tensor_parallel as tp
from .core import Module, Object, Tensor
from .modules import Linear, RMSNorm

__all__ = ["Attention"]


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"Attention: {what} must be a positive int, got {value!r}")
    return value


def check_cache_call(who: str, cache, total_seq_len, layer_id) -> None:
    """The checks of a layer's call that may use the runtime KV cache (``Attention``, ``KVCacheLayer``):
    ``cache`` (an ``nn.Object``, a ``spec.Object()`` input) and ``total_seq_len`` come together or not at all,
    and with a cache the layer has its ``layer_id`` (a non-negative int, numbered by ``builder.recipe``).
    Raises ValueError / TypeError naming ``who``."""
    if (cache is None) != (total_seq_len is None):
        raise ValueError(f"{who}: give cache and total_seq_len together (the KV cache and the tokens it holds "
                         "after this call), or neither")
    if cache is None:
        return
    if not isinstance(cache, Object):
        raise TypeError(f"{who}: cache must be an nn.Object (a spec.Object() input), got {type(cache).__name__}")
    if isinstance(layer_id, bool) or not isinstance(layer_id, int) or layer_id < 0:
        raise ValueError(f"{who}: using a KV cache needs the layer's layer_id (a non-negative int), got "
                         f"{layer_id!r}; number the cache layers of the model")


class Attention(Module):
    """Multi-head (or grouped-query) self-attention, HF Llama's ``LlamaAttention`` layout::

        q = x @ q_proj.T [+ b]  -> (B, S, H, D)      k, v = x @ {k,v}_proj.T [+ b] -> (B, S, H_kv, D)
        q, k = rope(q, positions), rope(k, positions)                    (when rope_theta is set)
        k, v = cache[layer_id] + (k, v)                                  (with a cache)
        o[b, i, h] = sum_j softmax_j(q[b, i, h] . k[b, j, h'] * scale + mask) v[b, j, h']
        y = o.reshape(B, S, H * D) @ o_proj.T [+ b]                      (B, S, hidden)

    with ``h' = h // (H / H_kv)`` (Ainslie et al. 2023).

    ``Attention(hidden_size, num_heads, num_kv_heads=None, head_dim=None, bias=False, out_bias=None,
    key_bias=None, rope_theta=None, causal=False, dtype=None)``: ``num_kv_heads`` defaults to
    ``num_heads`` (multi-head attention) and must divide it; ``head_dim`` defaults to ``hidden_size //
    num_heads``; ``bias`` gives ``q_proj`` / ``k_proj`` / ``v_proj`` biases, ``out_bias`` (default:
    ``bias``) the bias of ``o_proj``, ``key_bias`` (default: ``bias``) that of ``k_proj`` (false in
    Whisper, whose ``k_proj`` alone has none: a bias on the keys adds the same score to every key of a
    query, which the softmax cancels); ``rope_theta`` (None: no position embedding) the base of the
    rotary embeddings (10000 in Llama 2), which need an even ``head_dim``; ``causal``: each query sees
    only keys at or before its position; ``dtype`` the parameters' dtype (default: the default dtype);
    ``rope_scaling`` a RoPE frequency scaling in HF's keys (``rope_type`` ``linear`` or ``llama3``, ...:
    :func:`builder.nn.op.rope_scaled_inv_freq`; Llama 3.1 / 3.2 checkpoints); ``sliding_window`` ``W``
    (needs ``causal``): query ``i`` sees keys ``i - W < j <= i`` only, its own token and the ``W - 1``
    before it (HF transformers' ``masking_utils.sliding_window_overlay``; Mistral, Qwen2,
    Gemma 2), over the KV cache too (the cache keeps every key, the mask restricts); ``scale`` the score
    multiplier (default ``1 / sqrt(head_dim)``; 1.0 in T5, ``query_pre_attn_scalar ** -0.5`` in Gemma);
    ``logit_softcap`` ``c``: the scaled scores become ``c * tanh(s / c)`` before the masks (Gemma 2's
    ``attn_logit_softcapping``, HF ``modeling_gemma2.eager_attention_forward``); ``qk_norm`` (True or
    ``"rms"``): an RMSNorm over ``head_dim`` (epsilon ``qk_norm_eps``) of each query and key head after
    the projection, before RoPE (HF ``modeling_qwen3.Qwen3Attention``: children ``q_norm`` / ``k_norm``,
    weights (head_dim,); OLMo 2 normalizes the whole projection instead, which this is not);
    ``rotary_dim`` (even, at most ``head_dim``, with ``rope_theta``): RoPE of the first ``rotary_dim`` dims
    of each head only, the rest passed through (GPT-NeoX ``rotary_pct``, Phi-2 ``partial_rotary_factor``);
    ``fused_qkv``: one Linear ``qkv_proj`` (hidden_size -> (num_heads + 2 * num_kv_heads) * head_dim, q's
    rows first, then k's, then v's: HF Phi-3's layout) in place of ``q_proj`` / ``k_proj`` / ``v_proj``,
    split after the matmul; its bias is ``bias`` (``key_bias`` must agree); not tensor-parallel.

    Children: ``q_proj`` Linear(hidden_size, num_heads * head_dim), ``k_proj`` / ``v_proj``
    Linear(hidden_size, num_kv_heads * head_dim), ``o_proj`` Linear(num_heads * head_dim,
    hidden_size), with ``qk_norm`` ``q_norm`` / ``k_norm`` RMSNorm(head_dim); parameter names
    ``q_proj.weight`` (num_heads * head_dim, hidden_size), ...
    ``layer_id`` (int or None, settable) names the layer in the KV cache.

    Tensor parallelism (``tensor_parallel_shards=N > 1``, :mod:`builder.nn.tensor_parallel`): this
    worker keeps ``local_num_heads = num_heads / N`` query heads and ``local_num_kv_heads = num_kv_heads
    / N`` KV heads (worker ``r`` the ``r``-th contiguous block of each, so every GQA group stays on one
    worker), ``q/k/v_proj`` column-parallel and ``o_proj`` row-parallel (its partial products
    all-reduced). ``num_heads`` / ``num_kv_heads`` stay the model's totals.

    Raises ValueError for non-positive sizes, ``num_heads`` not divisible by ``num_kv_heads``,
    ``hidden_size`` not divisible by ``num_heads`` without ``head_dim``, an odd ``head_dim`` with
    ``rope_theta``, an odd ``rotary_dim``, one above ``head_dim`` or without ``rope_theta``, a
    ``rope_theta``, ``scale`` or ``logit_softcap`` that is not a positive finite number, or a
    ``sliding_window`` without ``causal``;
    :class:`~builder.nn.tensor_parallel.ShardError` when the heads or KV heads do not divide by the shards
    or ``fused_qkv`` goes with more than one shard.
    """

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int | None = None,
                 head_dim: int | None = None, bias: bool = False, out_bias: bool | None = None,
                 key_bias: bool | None = None, rope_theta: float | None = None, causal: bool = False,
                 dtype: str | None = None, tensor_parallel_shards: int = 1, tensor_parallel: bool = True,
                 rope_scaling: dict | None = None, sliding_window: int | None = None,
                 scale: float | None = None, logit_softcap: float | None = None, qk_norm: bool | str = False,
                 qk_norm_eps: float = 1e-6, rotary_dim: int | None = None, fused_qkv: bool = False) -> None:
        hidden_size = _positive_int(hidden_size, "hidden_size")
        num_heads = _positive_int(num_heads, "num_heads")
        num_kv_heads = num_heads if num_kv_heads is None else _positive_int(num_kv_heads, "num_kv_heads")
        if num_heads % num_kv_heads:
            raise ValueError(f"Attention: num_heads ({num_heads}) must be a multiple of num_kv_heads "
                             f"({num_kv_heads})")
        if head_dim is None:
            if hidden_size % num_heads:
                raise ValueError(f"Attention: hidden_size ({hidden_size}) is not divisible by num_heads "
                                 f"({num_heads}); give head_dim")
            head_dim = hidden_size // num_heads
        head_dim = _positive_int(head_dim, "head_dim")
        if rope_theta is not None:
            if (isinstance(rope_theta, bool) or not isinstance(rope_theta, (int, float))
                    or not 0 < float(rope_theta) < math.inf):
                raise ValueError(f"Attention: rope_theta must be a positive finite number or None, got {rope_theta!r}")
            if head_dim % 2:
                raise ValueError(f"Attention: rotary embeddings need an even head_dim, got {head_dim}")
            rope_theta = float(rope_theta)
        if rotary_dim is not None:
            rotary_dim = _positive_int(rotary_dim, "rotary_dim")
            if rope_theta is None or rotary_dim % 2 or rotary_dim > head_dim:
                raise ValueError(f"Attention: rotary_dim must be even and at most head_dim ({head_dim}), with "
                                 f"rope_theta; got {rotary_dim} (rope_theta={rope_theta!r})")
            if rotary_dim == head_dim:
                rotary_dim = None
        self.rotary_dim = rotary_dim
        if rope_scaling is not None:
            if rope_theta is None:
                raise ValueError("Attention: rope_scaling needs rope_theta")
            rope_scaling = dict(rope_scaling)
            op.rope_scaled_inv_freq(np.ones(1, np.float32), rope_scaling)   # checks it (ValueError)
        if sliding_window is not None:
            sliding_window = _positive_int(sliding_window, "sliding_window")
            if not causal:
                raise ValueError("Attention: sliding_window needs causal=True (the window ends at the query's "
                                 "own token)")
        self.sliding_window = sliding_window
        if scale is not None:
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < float(scale) < math.inf:
                raise ValueError(f"Attention: scale must be a positive finite number or None, got {scale!r}")
            scale = float(scale)
        self.scale = scale
        if logit_softcap is not None:
            if (isinstance(logit_softcap, bool) or not isinstance(logit_softcap, (int, float))
                    or not 0 < float(logit_softcap) < math.inf):
                raise ValueError(f"Attention: logit_softcap must be a positive finite number or None, got "
                                 f"{logit_softcap!r}")
            logit_softcap = float(logit_softcap)
        self.logit_softcap = logit_softcap
        self.rope_scaling = rope_scaling
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.rope_theta = rope_theta
        self.causal = bool(causal)
        self.layer_id: int | None = None
        shards = tp.check_shards(tensor_parallel_shards) if tensor_parallel else 1
        self.local_num_heads = tp.split_size(num_heads, shards, "num_heads", "attention splits its heads across "
                                                                             "the workers")
        self.local_num_kv_heads = tp.split_size(num_kv_heads, shards, "num_kv_heads",
                                                f"each worker needs whole KV heads, and a group of "
                                                f"{num_heads // num_kv_heads} query heads shares one (GQA)")
        cols = dict(tensor_parallel="column", tensor_parallel_shards=shards)
        self.fused_qkv = bool(fused_qkv)
        if self.fused_qkv:
            if shards > 1:
                raise tp.ShardError("fused_qkv", f"fused_qkv does not split across {shards} workers: each worker "
                                    "needs rows of the q, k and v blocks of qkv_proj, not one contiguous slice; "
                                    "set tensor_parallel: false or use q_proj / k_proj / v_proj")
            if key_bias is not None and bool(key_bias) != bool(bias):
                raise ValueError("Attention: with fused_qkv one bias covers q, k and v: key_bias must equal bias")
            self.qkv_proj = Linear(hidden_size, (num_heads + 2 * num_kv_heads) * head_dim, bias=bool(bias),
                                   dtype=dtype)
        else:
            self.q_proj = Linear(hidden_size, num_heads * head_dim, bias=bool(bias), dtype=dtype, **cols)
            self.k_proj = Linear(hidden_size, num_kv_heads * head_dim,
                                 bias=bool(bias if key_bias is None else key_bias), dtype=dtype, **cols)
            self.v_proj = Linear(hidden_size, num_kv_heads * head_dim, bias=bool(bias), dtype=dtype, **cols)
        self.o_proj = Linear(num_heads * head_dim, hidden_size, bias=bool(bias if out_bias is None else out_bias),
                             dtype=dtype, tensor_parallel="row", tensor_parallel_shards=shards)
        if qk_norm not in (False, True, "rms"):
            raise ValueError(f"Attention: qk_norm must be a bool or 'rms', got {qk_norm!r}")
        if qk_norm:   # after o_proj: HF Qwen3's parameter order is q/k/v/o_proj, then q_norm, k_norm
            self.q_norm = RMSNorm(head_dim, axes=-1, epsilon=float(qk_norm_eps), bias=False, dtype=dtype)
            self.k_norm = RMSNorm(head_dim, axes=-1, epsilon=float(qk_norm_eps), bias=False, dtype=dtype)
        self.qk_norm = bool(qk_norm)

    def forward(self, x: Tensor, positions: Tensor | None = None, attention_mask: Tensor | None = None,
                cache: Object | None = None, total_seq_len: int | E.PrimExpr | None = None,
                token_indices: Tensor | None = None, position_bias: Tensor | None = None) -> Tensor:
        """x (batch, seq, hidden_size) float -> (batch, seq, hidden_size), x's dtype.

        - ``positions``: integer (seq,) or (batch, seq), the positions of x's tokens for the rotary
          embeddings; default ``arange(seq)`` without a cache, each row's positions after the tokens
          its sequence holds with one (``nn.op.kv_cache_positions``). Only with ``rope_theta``.
        - ``attention_mask``: a padding mask, bool or integer (batch, seq_kv), true / nonzero where a
          key may be attended to (HF's ``attention_mask``: 1 = token, 0 = padding), or a float
          additive mask of x's dtype broadcastable to (batch, num_heads, seq, seq_kv) (0 = attend,
          -inf = masked). ``seq_kv`` is ``seq``, or ``total_seq_len`` with a cache. Combined with the
          causal mask when ``causal``. A query whose keys are all masked gives zeros.
        - ``cache`` and ``total_seq_len`` (together): the runtime KV cache (an ``nn.Object``) and the
          tokens it holds after this call (an int or int64 PrimExpr, e.g. a ``spec.Int`` input);
          needs ``layer_id``. Each row's queries then attend to the keys its sequence holds, causally
          at their positions (:func:`builder.nn.op.paged_attention`); ``attention_mask`` / ``position_bias``
          column ``j`` is the key at position ``j`` (``seq_kv`` = ``total_seq_len``, the most keys a row holds).

        - ``token_indices``: x holds only the real tokens of a padded batch, packed: x (num_tokens,
          hidden_size) -> (num_tokens, hidden_size), ``token_indices`` (num_tokens,) their positions in the
          (batch, seq) layout and ``attention_mask`` (needed) that layout's padding mask, both from
          :func:`builder.nn.op.unpad_input`. The projections compute the packed rows only and the attention
          is one variable-length attention over each row's tokens (:func:`builder.nn.op.attention_var_len`,
          flash-attn's varlen BERT): no padding is computed. Not with a cache.

        - ``position_bias``: an additive bias of x's dtype broadcastable to (batch, num_heads, seq, seq_kv),
          added to the scaled (and capped) scores, before the causal / window mask and the softmax: T5's
          relative position buckets (``T5Attention.compute_bias``), ALiBi's slopes (Press et al. 2022).
          With tensor parallelism its head dim must be 1 (the heads are split across the workers).

        Raises ValueError for an x that is not 3-D (2-D with ``token_indices``) or whose last dim is not
        hidden_size, ``token_indices`` without a padding mask or with a cache, a ``position_bias`` that is
        not 4-D, of another dtype or with packed tokens, ``positions``
        without ``rope_theta``, a padding mask that is not 2-D, only one of ``cache`` /
        ``total_seq_len``, or a cache without ``layer_id``; TypeError for a ``cache`` that is not an
        ``nn.Object`` or a mask of another dtype (and what the ops raise for mismatched shapes).
        """
        if token_indices is not None:
            if x.ndim != 2:
                raise ValueError(f"Attention: with token_indices x holds packed tokens (num_tokens, hidden_size), "
                                 f"got {fmt_shape(x.shape)}")
            if attention_mask is None or attention_mask.ndim != 2 or E.is_float_dtype(attention_mask.dtype):
                raise ValueError("Attention: token_indices needs the padding mask of the batch (attention_mask, "
                                 "bool / integer (batch, seq)) the tokens were packed from")
            if cache is not None:
                raise ValueError("Attention: token_indices (packed tokens) does not go with a KV cache")
            if position_bias is not None:
                raise ValueError("Attention: token_indices (packed tokens) does not go with a position_bias")
            if self.sliding_window is not None or self.logit_softcap is not None:
                raise ValueError("Attention: token_indices (packed tokens) does not go with sliding_window or "
                                 "logit_softcap")
        elif x.ndim != 3:
            raise ValueError(f"Attention: x must be 3-D (batch, seq, hidden_size), got {fmt_shape(x.shape)}")
        if isinstance(x.shape[-1], int) and x.shape[-1] != self.hidden_size:
            raise ValueError(f"Attention: the last dim of x {fmt_shape(x.shape)} must be hidden_size "
                             f"{self.hidden_size}")
        check_cache_call("Attention", cache, total_seq_len, self.layer_id)
        if positions is not None and self.rope_theta is None:
            raise ValueError("Attention: positions are only used by rotary embeddings; this layer has no rope_theta")
        heads, kv_heads = self.local_num_heads, self.local_num_kv_heads
        if token_indices is not None:
            return self._packed(x, positions, attention_mask, token_indices)
        batch, seq = x.shape[0], x.shape[1]
        q, k, v = self._project(x, [batch, seq])
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope_theta is not None:
            if positions is None:
                positions = (op.arange(0, seq, dtype="int64") if cache is None else
                             op.kv_cache_positions(cache, batch, seq, total_seq_len))
            q, k = self._rope(q, positions, "q_rope"), self._rope(k, positions, "k_rope")
        mask = None if attention_mask is None else self._mask(attention_mask)
        if position_bias is not None:
            mask = self._with_position_bias(mask, position_bias, x.dtype)
        if cache is not None:   # the keys are read from the cache's blocks, where the new ones are appended
            k_pool, v_pool, table, lengths = op.kv_cache_append(cache, self.layer_id, k, v, total_seq_len)
            out = op.paged_attention(q, k_pool, v_pool, table, lengths, attn_mask=mask, scale=self.scale,
                                     causal_mask="BottomRight" if self.causal else None,
                                     window_size=self.sliding_window, logit_softcap=self.logit_softcap)
        else:
            out = op.scaled_dot_product_attention(q, k, v, attn_mask=mask, causal_mask="TopLeft" if self.causal
                                                  else None, scale=self.scale, window_size=self.sliding_window,
                                                  logit_softcap=self.logit_softcap)
        return self.o_proj(op.reshape(out, [batch, seq, heads * self.head_dim]))

    def _packed(self, x: Tensor, positions: Tensor | None, attention_mask: Tensor, token_indices: Tensor) -> Tensor:
        """Attention of packed tokens x (n, hidden_size) at ``token_indices`` of the (batch, seq) layout of
        ``attention_mask``: projections of the n rows, RoPE at each token's position in its row (``positions``
        (seq,) or (batch, seq) gathered, default its column), then one variable-length attention over the
        sequences (:func:`builder.nn.op.attention_var_len`; ``seqstart`` the running count of each row's
        tokens), whose output rows are the tokens'."""
        n = x.shape[0]
        batch, seq = attention_mask.shape
        heads, kv_heads, d = self.local_num_heads, self.local_num_kv_heads, self.head_dim
        q, k, v = self._project(x, [n])
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope_theta is not None:
            if positions is None:
                pos = op.floor_mod(token_indices, seq)
            elif positions.ndim == 1:
                pos = op.take(positions, op.floor_mod(token_indices, seq), axis=0)
            else:
                pos = op.take(op.reshape(positions, [batch * seq]), token_indices, axis=0)
            pos = op.reshape(pos, [1, n])
            q = op.reshape(self._rope(op.reshape(q, [1, n, heads, d]), pos, "q_rope"), [n, heads, d])
            k = op.reshape(self._rope(op.reshape(k, [1, n, kv_heads, d]), pos, "k_rope"), [n, kv_heads, d])
        keep = attention_mask if attention_mask.dtype == "bool" else op.not_equal(attention_mask, 0)
        counts = op.cumsum(op.sum(op.astype(keep, "int64"), axis=1), axis=0)
        seqstart = op.concat([op.zeros([1], dtype="int64"), counts], dim=0, name="seqstart")
        out = op.attention_var_len(q, k, v, seqstart, scale=self.scale,
                                   causal_mask="TopLeft" if self.causal else None)
        return self.o_proj(op.reshape(out, [n, heads * d]))

    def _project(self, x: Tensor, lead: list) -> tuple[Tensor, Tensor, Tensor]:
        """q (*lead, heads, head_dim), k and v (*lead, kv_heads, head_dim) of x (*lead, hidden_size): three
        Linears, or with ``fused_qkv`` one ``qkv_proj`` whose output rows are q's, then k's, then v's
        (HF Phi-3's ``qkv_proj``), split after the matmul."""
        heads, kv_heads, d = self.local_num_heads, self.local_num_kv_heads, self.head_dim
        if self.fused_qkv:
            q, k, v = op.split(self.qkv_proj(x), [heads * d, (heads + kv_heads) * d], axis=x.ndim - 1,
                               name="qkv_split")
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return (op.reshape(q, [*lead, heads, d]), op.reshape(k, [*lead, kv_heads, d]),
                op.reshape(v, [*lead, kv_heads, d]))

    def _rope(self, t: Tensor, positions: Tensor, name: str) -> Tensor:
        """Rotary embeddings of t (batch, seq, heads, head_dim) at ``positions``; with ``rotary_dim`` of its
        first ``rotary_dim`` dims only (the frequencies those of a ``rotary_dim``-wide head), the rest passed
        through (HF ``modeling_gpt_neox.apply_rotary_pos_emb``: ``q_rot`` / ``q_pass``)."""
        if self.rotary_dim is None:
            return op.rotary_embedding(t, positions, self.rope_theta, name=name, scaling=self.rope_scaling)
        rot, rest = op.split(t, [self.rotary_dim], axis=3, name=f"{name}_split")
        rot = op.rotary_embedding(rot, positions, self.rope_theta, name=name, scaling=self.rope_scaling)
        return op.concat([rot, rest], dim=3, name=f"{name}_concat")

    def _with_position_bias(self, mask: Tensor | None, bias: Tensor, dtype: str) -> Tensor:
        """The additive mask of the attention op: ``bias`` (4-D, x's dtype), plus ``mask`` (a bool keep-mask:
        -inf where it is false; or an additive float mask)."""
        if bias.ndim != 4 or bias.dtype != dtype:
            raise ValueError(f"Attention: position_bias must be 4-D (batch, num_heads, seq_q, seq_kv) of x's dtype "
                             f"{dtype}, got {fmt_shape(bias.shape)} {bias.dtype}")
        if self.local_num_heads != self.num_heads and bias.shape[1] != 1:
            raise ValueError(f"Attention: with tensor parallelism a position_bias must have 1 head (it is shared "
                             f"by the workers' heads), got {fmt_shape(bias.shape)}")
        if mask is None:
            return bias
        if mask.dtype == "bool":
            return op.where(mask, bias, float("-inf"))
        return op.add(bias, mask)

    @staticmethod
    def _mask(mask: Tensor) -> Tensor:
        """A padding mask (bool / integer (batch, seq_kv)) as a bool (batch, 1, 1, seq_kv) mask; a float
        mask is passed on as it is (the attention op checks its dtype and broadcasting)."""
        if E.is_float_dtype(mask.dtype):
            return mask
        if mask.ndim != 2:
            raise ValueError(f"Attention: a bool / integer attention_mask is a padding mask (batch, seq_kv), got "
                             f"{fmt_shape(mask.shape)}")
        keep = mask if mask.dtype == "bool" else op.not_equal(mask, 0)
        return op.reshape(keep, [mask.shape[0], 1, 1, mask.shape[1]])
