"""``KVCacheLayer``: one layer slot of the runtime KV cache as a layer of its own, for attention written
out in a recipe's ``forward:`` (recipe layer type ``KVCache``). The layer does the attention itself (the
TVM ``PagedKVCache`` / MLC-LLM way, cf. MLC's ``attention_with_fused_qkv``): it takes the queries, keys and
values a recipe computed by hand (a fused ``qkv`` projection split in ``forward:``, RoPE, ...) and returns
the attention output::

    o = kv(q, k, v, cache=cache, total_seq_len=total_seq_len, attn_mask=bias, causal_mask="BottomRight")

With a cache the new tokens' keys and values are appended under the layer's ``layer_id``
(:func:`builder.nn.op.kv_cache_append`) and the queries attend to the keys each row holds, read from the
cache's blocks in place (:func:`builder.nn.op.paged_attention`), so a ragged batch (a server's decode step:
rows of different lengths, ``runtime.PagedKVCache.begin_forward``) needs no mask of its own: each row sees its
own keys only. Without one (``cache=None``: a plain ``forward`` function) it is the ordinary attention over
``k`` and ``v`` (:func:`builder.nn.op.scaled_dot_product_attention`) with the same mask and bias semantics,
so one block serves forward, prefill and decode and they agree. The ``layer_id`` is numbered together with
the ``Attention`` layers' (:data:`CACHE_LAYERS`, which ``builder.recipe`` numbers), so a model may mix both.

Until issue 43 this layer returned padded copies of every key and value held (``vm.builtin.kv_cache_update``,
masked by ``vm.builtin.kv_cache_attention_mask``); the compiler no longer emits those calls, and the runtime
keeps both builtins registered for executables saved before.
"""
from __future__ import annotations

from ..ir import expr as E
from ..ir.op.common import definitely_different, fmt_shape, static_int
from . import op
from . import tensor_parallel as tp
from .attention import Attention, check_cache_call
from .core import Module, Object, Tensor

__all__ = ["KVCacheLayer", "CACHE_LAYERS"]


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"KVCache: {what} must be a positive int, got {value!r}")
    return value


class KVCacheLayer(Module):
    """One layer of the runtime KV cache and the attention over it (no parameters).

    ``KVCacheLayer(num_kv_heads, head_dim, tensor_parallel_shards=1)``: the keys and values it takes
    are (batch, seq, num_kv_heads, head_dim) (BSNH, the layout of ``scaled_dot_product_attention``);
    with ``tensor_parallel_shards=N`` each worker holds ``num_kv_heads / N`` heads (``local_num_kv_heads``,
    as :class:`~builder.nn.attention.Attention` splits them). The query heads are q's (a static multiple
    of the KV heads: grouped-query attention, Ainslie et al. 2023). ``layer_id`` (int or None, settable)
    names the layer's store in the cache.

    Raises ValueError for a non-positive ``num_kv_heads`` / ``head_dim``;
    :class:`~builder.nn.tensor_parallel.ShardError` for heads that do not divide by the shards.
    """

    def __init__(self, num_kv_heads: int, head_dim: int, tensor_parallel_shards: int = 1) -> None:
        self.num_kv_heads = _positive_int(num_kv_heads, "num_kv_heads")
        self.head_dim = _positive_int(head_dim, "head_dim")
        shards = tp.check_shards(tensor_parallel_shards)
        self.local_num_kv_heads = tp.split_size(num_kv_heads, shards, "num_kv_heads",
                                                "each worker keeps whole KV heads")
        self.layer_id: int | None = None

    def forward(self, q: Tensor, k: Tensor, v: Tensor, cache: Object | None = None,
                total_seq_len: int | E.PrimExpr | None = None, attn_mask: Tensor | None = None,
                causal_mask: str | None = None, scale: float | None = None, window_size: int | None = None,
                logit_softcap: float | None = None) -> Tensor:
        """The attention output, (batch, seq, num_heads, head_dim) of q's dtype::

            o[b, i, h] = sum_j softmax_j(q[b, i, h] . k[b, j, h'] * scale + bias[b, h, i, j]) v[b, j, h']

        ``h' = h // (num_heads / num_kv_heads)``, j over the keys query i sees.

        - ``q`` (batch, seq, num_heads, head_dim), ``k`` / ``v`` (batch, seq, num_kv_heads, head_dim): the
          new tokens', of one float dtype.
        - ``cache`` (an ``nn.Object``, at run time a ``runtime.PagedKVCache``) and ``total_seq_len`` (the
          most tokens a row holds after this call: an int or an int64 PrimExpr, e.g. a ``spec.Int`` input),
          together or not at all. With them ``k`` / ``v`` are appended and the keys are every key the row
          holds (:func:`builder.nn.op.paged_attention`: row ``r``'s query ``i`` of ``seq`` sits at
          ``held_r + i``); without them the keys are ``k`` / ``v`` (query ``i`` at ``i``).
        - ``attn_mask``: a bool mask (True attends) or an additive float bias of q's dtype (ALiBi's slopes,
          T5's buckets), broadcastable to (batch, num_heads, seq, seq_kv), column ``j`` the key at position
          ``j`` of the row in both paths. Shape rule: ``seq_kv`` is ``total_seq_len`` with a cache and
          ``seq`` without (or 1); a bias (1, num_heads, 1, total_seq_len) built from positions
          ``arange(total_seq_len)`` serves forward (where ``total_seq_len`` is ``seq``), prefill and decode,
          a ragged batch too (a row holding fewer keys reads the first columns only).
        - ``causal_mask``: None (every key) or ``"BottomRight"``: query ``i`` sees the keys at or before its
          position (the queries are the last keys held; for a plain forward, where q and k are the same
          tokens, that is the usual causal mask).
        - ``scale`` (default ``1 / sqrt(head_dim)``), ``window_size`` ``W`` (with ``causal_mask``: the ``W``
          keys ending at the query's own) and ``logit_softcap`` ``c`` (``c * tanh(s / c)`` of the scaled
          scores, before the bias): as in :func:`builder.nn.op.scaled_dot_product_attention`.

        Raises ValueError for ``q`` / ``k`` / ``v`` that are not 4-D with the layer's KV heads and head dim,
        differ in batch or seq, or q heads that are not a static multiple of the KV heads; a ``causal_mask``
        other than None / ``"BottomRight"``; only one of ``cache`` / ``total_seq_len``, or a cache without
        ``layer_id``; TypeError for a ``cache`` that is not an ``nn.Object`` or ``q`` / ``k`` / ``v`` not of
        one float dtype (and what the attention ops raise for a mask, window or cap that does not fit).
        """
        heads, d = self.local_num_kv_heads, self.head_dim
        for t, what in ((k, "k"), (v, "v")):
            if (t.ndim != 4 or definitely_different(t.shape[2], heads)
                    or definitely_different(t.shape[3], d)):
                raise ValueError(f"KVCache: {what} must be (batch, seq, num_kv_heads={heads}, head_dim={d}), "
                                 f"got {fmt_shape(t.shape)}")
        q_heads = static_int(q.shape[2]) if q.ndim == 4 else None
        if q_heads is None or q_heads % heads or definitely_different(q.shape[3], d):
            raise ValueError(f"KVCache: q must be (batch, seq, num_heads, head_dim={d}) with num_heads a static "
                             f"multiple of num_kv_heads={heads}, got {fmt_shape(q.shape)}")
        for axis, what in ((0, "batch size"), (1, "sequence length")):
            for t, name in ((k, "k"), (v, "v")):
                if definitely_different(q.shape[axis], t.shape[axis]):
                    raise ValueError(f"KVCache: the {what} of q {fmt_shape(q.shape)} differs from that of {name} "
                                     f"{fmt_shape(t.shape)}")
        if not (q.dtype == k.dtype == v.dtype) or not E.is_float_dtype(q.dtype):
            raise TypeError(f"KVCache: q, k and v must have one float dtype, got {q.dtype}, {k.dtype} and "
                            f"{v.dtype}")
        if causal_mask not in (None, "BottomRight"):
            raise ValueError(f"KVCache: causal_mask must be None or 'BottomRight' (the queries are the last keys "
                             f"held), got {causal_mask!r}")
        check_cache_call("KVCache", cache, total_seq_len, self.layer_id)
        options = dict(attn_mask=attn_mask, scale=scale, causal_mask=causal_mask, window_size=window_size,
                       logit_softcap=logit_softcap)
        if cache is None:
            return op.scaled_dot_product_attention(q, k, v, **options)
        k_pool, v_pool, table, lengths = op.kv_cache_append(cache, self.layer_id, k, v, total_seq_len)
        return op.paged_attention(q, k_pool, v_pool, table, lengths, **options)


#: The module classes that hold one layer slot of the KV cache each; ``builder.recipe`` gives them
#: their ``layer_id`` (0, 1, ... in module-tree order).
CACHE_LAYERS: tuple[type[Module], ...] = (Attention, KVCacheLayer)
