"""The names of the VM builtins of the runtime KV cache, written once: the compiler emits calls of them
(``builder.nn.op.attention``; all but the two kept for older executables) and the runtime registers them
(``runtime.kv_cache``, ``runtime.builtins``).

Arguments (``cache`` an ``R.Object``, the others int64 prim values unless said; see
``runtime.kv_cache.PagedKVCache``):

- :data:`KV_CACHE_APPEND` ``(cache, layer_id, k, v, total_seq_len) -> (k_pool, v_pool, block_table,
  lengths)``: append the keys / values ``(batch, seq, kv_heads, head_dim)`` of one layer and hand over, without
  a copy, the layer's pools ``(num_blocks, block_size, kv_heads, head_dim)``, the rows' block table int32
  ``(batch, max_blocks)`` and their lengths int32 ``(batch,)`` (keys held before the call + seq), which
  ``nn.paged_attention`` reads; an impure call (it writes the cache). The attention layers use it;
- :data:`KV_CACHE_UPDATE` ``(cache, layer_id, k, v, total_seq_len) -> (k_all, v_all)``: append the keys /
  values ``(batch, seq, kv_heads, head_dim)`` of one layer, read back ``(batch, total_seq_len, ...)``, every
  row's keys right-aligned (zeros before them), a copy; an impure call (it writes the cache). No longer
  emitted (the ``KVCache`` layer attends over the blocks in place since issue 43); registered still for
  executables saved before;
- :data:`KV_CACHE_POSITIONS` ``(cache, batch, seq, total_seq_len) -> int64 (batch, seq)``: each row's new
  tokens' positions, ``arange(held_r, held_r + seq)``;
- :data:`KV_CACHE_ATTENTION_MASK` ``(cache, batch, total_seq_len) -> bool (batch, total_seq_len)``: True at
  a row's real keys, False at its left padding (the mask of :data:`KV_CACHE_UPDATE`'s copies); no longer
  emitted either, registered for executables saved before;
- :data:`KV_CACHE_QUERY_POSITIONS` ``(cache, layer_id, seq, total_seq_len) -> int64 (seq,)``: the positions
  shared by every row (MLC-LLM's ``get_query_positions``; code compiled before the ragged calls).
"""
from __future__ import annotations

__all__ = ["KV_CACHE_APPEND", "KV_CACHE_UPDATE", "KV_CACHE_POSITIONS", "KV_CACHE_ATTENTION_MASK",
           "KV_CACHE_QUERY_POSITIONS"]

KV_CACHE_APPEND = "vm.builtin.kv_cache_append"
KV_CACHE_UPDATE = "vm.builtin.kv_cache_update"
KV_CACHE_POSITIONS = "vm.builtin.kv_cache_positions"
KV_CACHE_ATTENTION_MASK = "vm.builtin.kv_cache_attention_mask"
KV_CACHE_QUERY_POSITIONS = "vm.builtin.kv_cache_query_positions"
