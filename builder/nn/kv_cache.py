"""``KVCacheLayer``: one layer slot of the runtime KV cache as a layer of its own, for attention written
out in a recipe's ``forward:`` (recipe layer type ``KVCache``).

:class:`~builder.nn.attention.Attention` appends to the cache itself; a recipe that computes q, k, v
by hand (a fused ``qkv`` projection split in ``forward:``, a position bias, ...) calls this layer
between its projections and its ``scaled_dot_product_attention``::

    k_all, v_all = kv(k, v, cache=cache, total_seq_len=total_seq_len)

With a cache the new tokens' keys and values are appended under the layer's ``layer_id`` and every
key and value held comes back as a padded copy (:func:`builder.nn.op.kv_cache_update`, ``runtime.PagedKVCache``:
in a ragged batch each row right-aligned, which ``kv_cache_attention_mask(cache, batch, total_seq_len)`` marks
for the attention's mask; the ``Attention`` layer reads the cache's blocks in place instead,
:func:`builder.nn.op.paged_attention`);
without one (``cache=None``: a plain ``forward`` function) ``k`` and ``v`` come back unchanged, so one
block serves forward, prefill and decode. The ``layer_id`` is numbered together with the ``Attention``
layers' (:data:`CACHE_LAYERS`, which ``builder.recipe`` numbers), so a model may mix both.
"""
from __future__ import annotations

from ..ir import expr as E
from ..ir.op.common import definitely_different, fmt_shape
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
    """One layer of the runtime KV cache (no parameters).

    ``KVCacheLayer(num_kv_heads, head_dim, tensor_parallel_shards=1)``: the keys and values it takes
    are (batch, seq, num_kv_heads, head_dim) (BSNH, the layout of ``scaled_dot_product_attention``);
    with ``tensor_parallel_shards=N`` each worker holds ``num_kv_heads / N`` heads (``local_num_kv_heads``,
    as :class:`~builder.nn.attention.Attention` splits them). ``layer_id`` (int or None, settable) names
    the layer's store in the cache.

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

    def forward(self, k: Tensor, v: Tensor, cache: Object | None = None,
                total_seq_len: int | E.PrimExpr | None = None) -> tuple[Tensor, Tensor]:
        """``(k_all, v_all)``: ``k``, ``v`` (batch, seq, num_kv_heads, head_dim) of one float dtype ->
        with ``cache`` (an ``nn.Object``, at run time a ``runtime.PagedKVCache``) and
        ``total_seq_len`` (the tokens held after this call: an int or an int64 PrimExpr, e.g. a
        ``spec.Int`` input), every key and value the layer holds, (batch, total_seq_len, num_kv_heads,
        head_dim); without them ``k`` and ``v`` themselves.

        Raises ValueError for ``k`` / ``v`` that are not (batch, seq, num_kv_heads, head_dim) or differ
        in batch or seq, only one of ``cache`` / ``total_seq_len``, or a cache without ``layer_id``;
        TypeError for a ``cache`` that is not an ``nn.Object`` or ``k`` / ``v`` not of one float dtype.
        """
        heads, d = self.local_num_kv_heads, self.head_dim
        for t, what in ((k, "k"), (v, "v")):
            if (t.ndim != 4 or definitely_different(t.shape[2], heads)
                    or definitely_different(t.shape[3], d)):
                raise ValueError(f"KVCache: {what} must be (batch, seq, num_kv_heads={heads}, head_dim={d}), "
                                 f"got {fmt_shape(t.shape)}")
        for axis, what in ((0, "batch size"), (1, "sequence length")):
            if definitely_different(k.shape[axis], v.shape[axis]):
                raise ValueError(f"KVCache: the {what} of k {fmt_shape(k.shape)} differs from that of v "
                                 f"{fmt_shape(v.shape)}")
        if k.dtype != v.dtype or not E.is_float_dtype(k.dtype):
            raise TypeError(f"KVCache: k and v must have one float dtype, got {k.dtype} and {v.dtype}")
        check_cache_call("KVCache", cache, total_seq_len, self.layer_id)
        if cache is None:
            return k, v
        return op.kv_cache_update(cache, self.layer_id, k, v, total_seq_len)


#: The module classes that hold one layer slot of the KV cache each; ``builder.recipe`` gives them
#: their ``layer_id`` (0, 1, ... in module-tree order).
CACHE_LAYERS: tuple[type[Module], ...] = (Attention, KVCacheLayer)
