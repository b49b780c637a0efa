"""``ContiguousKVCache``: the key / value cache of batched, multi-layer autoregressive decoding.

The role of MLC-LLM's ``PagedKVCache``, simpler: one contiguous, growable store per attention layer
(no pages, no per-sequence lengths: every sequence of the batch holds the same number of tokens).
A model exported with a cache input (``spec.Object()``) calls, once per attention layer and step::

    k_all, v_all = R.call_pure_packed("vm.builtin.kv_cache_update", cache, R.prim_value(layer_id),
                                      k, v, R.prim_value(total_seq_len), sinfo_args=...)

which appends the new tokens' keys and values (batch, seq, kv_heads, head_dim) to layer
``layer_id`` and returns every key and value held, (batch, total_seq_len, kv_heads, head_dim) each;
before it, ``vm.builtin.kv_cache_query_positions(cache, layer_id, seq, total_seq_len)`` gives the
new tokens' positions (``arange(held, total_seq_len)``, int64), for rotary embeddings.
The caller (``builder.generation.greedy_generate``, or a serving loop) creates one cache per batch
of sequences, passes it to every prefill / decode call, and calls :meth:`ContiguousKVCache.reset`
(or makes a new cache) to start over.

Memory: a layer's store is allocated on its first update, from the shapes it gets, with room for at
least the tokens given; when an append does not fit, the capacity doubles (or grows to the tokens
needed, when more). Every allocation is checked first with :func:`runtime.memory.check_allocation`
(:class:`~runtime.memory.MemoryLimitError` when it cannot fit), and ``max_seq_len`` / ``max_layers``
bound what a cache may hold, so that an executable (which may come from an untrusted file) cannot
make the cache exhaust memory.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .memory import check_allocation

__all__ = ["ContiguousKVCache", "kv_cache_update", "kv_cache_query_positions", "MAX_LAYERS"]

#: The most layers one cache holds (layer ids are 0 .. MAX_LAYERS - 1).
MAX_LAYERS = 1 << 12


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


class _Layer:
    """The store of one layer: ``k`` (batch, capacity, kv_heads, head_dim_k), ``v`` (batch,
    capacity, kv_heads, head_dim_v), the first ``length`` tokens of the capacity filled."""

    __slots__ = ("k", "v", "length")

    def __init__(self, k: np.ndarray, v: np.ndarray) -> None:
        self.k = k
        self.v = v
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[1]


class ContiguousKVCache:
    """A KV cache for batched, multi-layer decoding (see the module docstring).

    ``ContiguousKVCache(max_seq_len=None, max_layers=MAX_LAYERS)``: ``max_seq_len`` (None: no bound
    but memory) is the most tokens a layer may hold; layer ids must be below ``max_layers``.
    Each layer ``i`` holds K (batch, capacity, kv_heads, head_dim) and V (batch, capacity, kv_heads,
    head_dim_v) arrays, fixed in batch, heads, head dims and dtype by the layer's first update.

    Raises ValueError for a ``max_seq_len`` or ``max_layers`` that is not a positive int.
    """

    def __init__(self, max_seq_len: int | None = None, max_layers: int = MAX_LAYERS) -> None:
        if max_seq_len is not None and (not _is_int(max_seq_len) or max_seq_len <= 0):
            raise ValueError(f"ContiguousKVCache: max_seq_len must be a positive int or None, got {max_seq_len!r}")
        if not _is_int(max_layers) or not 0 < max_layers <= MAX_LAYERS:
            raise ValueError(f"ContiguousKVCache: max_layers must be an int in 1..{MAX_LAYERS}, got {max_layers!r}")
        self.max_seq_len = None if max_seq_len is None else int(max_seq_len)
        self.max_layers = int(max_layers)
        self._layers: dict[int, _Layer] = {}

    # -- state -----------------------------------------------------------------------------------
    @property
    def seq_len(self) -> int:
        """Tokens held (per sequence of the batch): the most any layer holds, 0 when empty. Between
        two complete forward calls every layer holds the same number."""
        return max((layer.length for layer in self._layers.values()), default=0)

    @property
    def num_layers(self) -> int:
        """The number of layers that have been updated at least once."""
        return len(self._layers)

    @property
    def layer_ids(self) -> list[int]:
        """The ids of the layers held, ascending."""
        return sorted(self._layers)

    def layer_seq_len(self, layer_id: int) -> int:
        """Tokens held by layer ``layer_id`` (0 for a layer never updated)."""
        layer = self._layers.get(layer_id)
        return 0 if layer is None else layer.length

    def capacity(self, layer_id: int) -> int:
        """Tokens layer ``layer_id`` can hold before it grows (0 for a layer never updated)."""
        layer = self._layers.get(layer_id)
        return 0 if layer is None else layer.capacity

    @property
    def nbytes(self) -> int:
        """Bytes allocated by all layers' stores."""
        return sum(layer.k.nbytes + layer.v.nbytes for layer in self._layers.values())

    def reset(self) -> None:
        """Forget every token and free the stores (the next update allocates again, so a new batch
        size or model may use the cache)."""
        self._layers.clear()

    def view(self, layer_id: int) -> tuple[np.ndarray, np.ndarray]:
        """The keys and values held by layer ``layer_id``: two read-only views, (batch, seq_len,
        kv_heads, head_dim). Raises KeyError for a layer never updated."""
        layer = self._layers.get(layer_id)
        if layer is None:
            raise KeyError(f"the KV cache holds no layer {layer_id!r}; it holds {self.layer_ids}")
        k, v = layer.k[:, : layer.length], layer.v[:, : layer.length]
        k.flags.writeable = False
        v.flags.writeable = False
        return k, v

    def __repr__(self) -> str:
        return (f"ContiguousKVCache(layers={self.layer_ids}, seq_len={self.seq_len}, "
                f"nbytes={self.nbytes})")

    def query_positions(self, layer_id: int, seq: int, total_seq_len: int) -> np.ndarray:
        """The positions of ``seq`` new tokens of layer ``layer_id``: ``arange(held, held + seq)``
        int64 (seq,), where ``held`` is the tokens the layer holds (MLC-LLM's
        ``get_query_positions``); ``held + seq`` must be ``total_seq_len``. Nothing changes.

        Raises TypeError for non-int arguments; ValueError (naming the layer) for a layer id out of
        range, a negative ``seq`` or a ``total_seq_len`` that is not ``held + seq``.
        """
        for what, value in (("layer_id", layer_id), ("seq", seq), ("total_seq_len", total_seq_len)):
            if not _is_int(value):
                raise TypeError(f"kv_cache_query_positions: {what} must be an int, got {type(value).__name__}")
        layer_id, seq, total_seq_len = int(layer_id), int(seq), int(total_seq_len)
        where = f"kv_cache_query_positions: layer {layer_id}"
        if not 0 <= layer_id < self.max_layers:
            raise ValueError(f"{where}: the layer id must be in 0..{self.max_layers - 1}")
        held = self.layer_seq_len(layer_id)
        if seq < 0 or held + seq != total_seq_len:
            raise ValueError(f"{where}: the layer holds {held} tokens and {seq} are added, so it would hold "
                             f"{held + seq}, but total_seq_len is {total_seq_len}")
        if self.max_seq_len is not None and total_seq_len > self.max_seq_len:
            raise ValueError(f"{where}: {total_seq_len} tokens exceed the cache's max_seq_len {self.max_seq_len}")
        check_allocation(8 * seq, f"{where}: the positions of {seq} tokens")
        return np.arange(held, total_seq_len, dtype=np.int64)

    # -- update ------------------------------------------------------------------------------------
    def update(self, layer_id: int, k: np.ndarray, v: np.ndarray,
               total_seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Append ``k`` (batch, seq, kv_heads, head_dim) and ``v`` (batch, seq, kv_heads, head_dim_v)
        to layer ``layer_id``; returns ``(k_all, v_all)``, C-contiguous arrays of shape (batch,
        total_seq_len, kv_heads, head_dim[_v]) holding every token of the layer, oldest first.
        Later updates never change arrays returned earlier.

        Everything is checked before the cache changes. Raises TypeError when ``k`` / ``v`` are not
        numpy arrays or ``layer_id`` / ``total_seq_len`` not ints; ValueError (naming the layer) when
        ``layer_id`` is out of range, ``k`` / ``v`` are not 4-D, differ from each other in batch, seq,
        heads or dtype, or from what the layer holds in batch, heads, head dims or dtype, when the
        tokens held after the append would not be ``total_seq_len``, or would exceed
        ``max_seq_len``; :class:`runtime.memory.MemoryLimitError` when a store cannot be allocated.
        """
        if not _is_int(layer_id):
            raise TypeError(f"kv_cache_update: layer_id must be an int, got {type(layer_id).__name__}")
        layer_id = int(layer_id)
        where = f"kv_cache_update: layer {layer_id}"
        if not 0 <= layer_id < self.max_layers:
            raise ValueError(f"{where}: the layer id must be in 0..{self.max_layers - 1}")
        if not _is_int(total_seq_len):
            raise TypeError(f"{where}: total_seq_len must be an int, got {type(total_seq_len).__name__}")
        total_seq_len = int(total_seq_len)
        for name, a in (("k", k), ("v", v)):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{where}: {name} must be a numpy array, got {type(a).__name__}")
            if a.ndim != 4:
                raise ValueError(f"{where}: {name} must be 4-D (batch, seq, kv_heads, head_dim), "
                                 f"got shape {a.shape}")
        if k.dtype.hasobject:
            raise ValueError(f"{where}: k / v must hold numbers, got dtype {k.dtype}")
        if k.shape[:3] != v.shape[:3] or k.dtype != v.dtype:
            raise ValueError(f"{where}: k {k.dtype}{list(k.shape)} and v {v.dtype}{list(v.shape)} must agree "
                             "in batch, seq, kv_heads and dtype")
        batch, seq, heads, _ = k.shape
        layer = self._layers.get(layer_id)
        held = 0 if layer is None else layer.length
        if layer is not None:
            for what, got, have in (("batch size", batch, layer.k.shape[0]),
                                    ("number of kv heads", heads, layer.k.shape[2]),
                                    ("key head dim", k.shape[3], layer.k.shape[3]),
                                    ("value head dim", v.shape[3], layer.v.shape[3])):
                if got != have:
                    raise ValueError(f"{where}: the {what} is {got}, but the layer holds {have} "
                                     f"(k {list(k.shape)} against a store of {list(layer.k.shape)}); "
                                     "reset() the cache to start a new batch")
            if k.dtype != layer.k.dtype:
                raise ValueError(f"{where}: k / v have dtype {k.dtype}, but the layer holds {layer.k.dtype}")
        if held + seq != total_seq_len:
            raise ValueError(f"{where}: the layer holds {held} tokens, {seq} are appended, so it would hold "
                             f"{held + seq}, but total_seq_len is {total_seq_len}")
        if self.max_seq_len is not None and total_seq_len > self.max_seq_len:
            raise ValueError(f"{where}: {total_seq_len} tokens exceed the cache's max_seq_len {self.max_seq_len}")
        if layer is None:
            layer = self._layers[layer_id] = _Layer(*self._allocate(where, k, v, max(seq, 1)))
        elif total_seq_len > layer.capacity:
            capacity = max(2 * layer.capacity, total_seq_len)
            if self.max_seq_len is not None:
                capacity = min(capacity, self.max_seq_len)
            new_k, new_v = self._allocate(where, layer.k, layer.v, capacity)
            new_k[:, :held] = layer.k[:, :held]
            new_v[:, :held] = layer.v[:, :held]
            layer.k, layer.v = new_k, new_v
        layer.k[:, held:total_seq_len] = k
        layer.v[:, held:total_seq_len] = v
        layer.length = total_seq_len
        # with batch 1 the filled prefix is already contiguous (a view: later appends write past it,
        # growing copies into new stores); otherwise a copy
        return (np.ascontiguousarray(layer.k[:, :total_seq_len]),
                np.ascontiguousarray(layer.v[:, :total_seq_len]))

    def _allocate(self, where: str, k: np.ndarray, v: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
        """Stores of ``capacity`` tokens shaped like ``k`` / ``v`` (batch, *, heads, head_dim), after
        checking that they fit in memory."""
        k_shape = (k.shape[0], capacity, k.shape[2], k.shape[3])
        v_shape = (v.shape[0], capacity, v.shape[2], v.shape[3])
        nbytes = (math.prod(k_shape) + math.prod(v_shape)) * k.dtype.itemsize
        check_allocation(nbytes, f"{where}: a KV store of {capacity} tokens (K {list(k_shape)}, "
                                 f"V {list(v_shape)} {k.dtype})")
        return np.empty(k_shape, dtype=k.dtype), np.empty(v_shape, dtype=v.dtype)


def kv_cache_update(cache: Any, layer_id: Any, k: Any, v: Any, total_seq_len: Any) -> tuple[np.ndarray, np.ndarray]:
    """The VM builtin ``vm.builtin.kv_cache_update``: :meth:`ContiguousKVCache.update` of ``cache``.

    Raises TypeError when ``cache`` is not a :class:`ContiguousKVCache` (and what ``update`` raises).
    """
    if not isinstance(cache, ContiguousKVCache):
        raise TypeError(f"kv_cache_update: the cache argument must be a runtime.ContiguousKVCache, got "
                        f"{type(cache).__name__}")
    return cache.update(layer_id, k, v, total_seq_len)


def kv_cache_query_positions(cache: Any, layer_id: Any, seq: Any, total_seq_len: Any) -> np.ndarray:
    """The VM builtin ``vm.builtin.kv_cache_query_positions``: :meth:`ContiguousKVCache.query_positions`.

    Raises TypeError when ``cache`` is not a :class:`ContiguousKVCache` (and what the method raises).
    """
    if not isinstance(cache, ContiguousKVCache):
        raise TypeError(f"kv_cache_query_positions: the cache argument must be a runtime.ContiguousKVCache, "
                        f"got {type(cache).__name__}")
    return cache.query_positions(layer_id, seq, total_seq_len)
