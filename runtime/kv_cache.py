"""``PagedKVCache``: the key / value cache of batched, multi-layer autoregressive decoding, in blocks
(vLLM's PagedAttention, Kwon et al. 2023; MLC-LLM's ``PagedKVCache``), with sequences that come and go.

Storage: every layer has a pool of blocks, ``k`` (blocks, block_size, kv_heads, head_dim) and ``v``
(blocks, block_size, kv_heads, head_dim_v), allocated on the layer's first update from the shapes it gets
and grown by doubling. A block id is valid in every layer; a sequence holds a list of block ids (its block
table) and a length, token ``p`` of the sequence in slot ``p % block_size`` of its block ``p //
block_size``. Blocks are reference-counted: :meth:`PagedKVCache.fork_sequence` shares the parent's full
blocks with the child and copies its last, partial one (so no block that is written is ever shared).

A compiled model (a ``spec.Object()`` cache input, ``total_seq_len`` a ``spec.Int()``) calls the builtins
named in :mod:`core.kv_cache_builtins`: once per call ``vm.builtin.kv_cache_positions``, and once per attention
layer::

    k_pool, v_pool, block_table, lengths = R.call_packed("vm.builtin.kv_cache_append", cache,
        R.prim_value(layer_id), k, v, R.prim_value(total_seq_len), sinfo_args=...)

which appends the new keys / values and hands over, without a copy, the layer's pools, the rows' block table
and their lengths (:meth:`PagedKVCache.append`) that the paged attention (``nn.paged_attention``) reads in
place. Every layer's pool holds one number of blocks (attention written out in a recipe, the ``KVCache``
layer, calls it too). Executables saved before issue 43 may call ``vm.builtin.kv_cache_update`` instead, which
returns every row's keys as a padded copy (below), and ``vm.builtin.kv_cache_attention_mask`` for its padding:
both stay registered, though the compiler no longer emits them.

Two ways to drive it:

- **explicit** (a server): :meth:`~PagedKVCache.add_sequence` / ``remove_sequence`` / ``fork_sequence``,
  then before each compiled call :meth:`~PagedKVCache.begin_forward` ``(seq_ids, seq)``: row ``r`` of the
  call's batch is sequence ``seq_ids[r]``, which holds ``h_r`` tokens and appends ``seq``; it reserves the
  blocks and returns ``total_seq_len = max_r(h_r) + seq`` for the call. Each layer's append then hands over
  row ``r``'s length ``h_r + seq`` and its blocks (an update returns (B, total_seq_len, ...) with row ``r``'s
  ``h_r + seq`` keys right-aligned and zeros before them, left padding, which the attention mask of the call
  marks), and the positions of row ``r``'s new tokens are ``arange(h_r, h_r + seq)``;
- **implicit** (``builder.generation``, a plain loop): updates with no ``begin_forward`` in effect on a
  cache never driven explicitly; the rows are sequences 0 .. batch-1 (created on first use) of one length,
  each layer appending ``seq`` tokens to the ``held`` it holds, with ``held + seq == total_seq_len``. This
  is the contract of the contiguous cache it replaces (:class:`ContiguousKVCache`).

Bounds: ``max_tokens`` (the budget, llama.cpp's context size) caps the blocks that may exist at once
(:class:`KVCacheFullError` before anything changes when a call needs more); ``max_seq_len`` the tokens of
one sequence; ``max_layers`` the layer ids; every allocation (pools, index arrays, results) is checked
first with :func:`runtime.memory.check_allocation`, so that an executable (which may come from an
untrusted file) cannot make the cache exhaust memory.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.kv_cache_builtins import (KV_CACHE_APPEND, KV_CACHE_ATTENTION_MASK, KV_CACHE_POSITIONS,
                                    KV_CACHE_QUERY_POSITIONS, KV_CACHE_UPDATE)

from .memory import check_allocation

__all__ = ["PagedKVCache", "ContiguousKVCache", "KVCacheFullError", "kv_cache_append", "kv_cache_update",
           "kv_cache_positions",
           "kv_cache_attention_mask", "kv_cache_query_positions", "BUILTINS", "MAX_LAYERS", "MAX_BLOCK_SIZE"]

#: The most layers one cache holds (layer ids are 0 .. MAX_LAYERS - 1).
MAX_LAYERS = 1 << 12
#: The largest block (tokens).
MAX_BLOCK_SIZE = 1 << 16
#: The largest sequence id.
_MAX_SEQ_ID = (1 << 63) - 1
#: Index arrays and results above this many bytes are checked against the memory available first (a check
#: reads /proc/meminfo, about 0.1 ms: not for the few bytes of every decode step); pools always are.
_CHECKED_BYTES = 1 << 20


def _check(nbytes: int, what: str) -> None:
    if nbytes > _CHECKED_BYTES:
        check_allocation(nbytes, what)


class KVCacheFullError(MemoryError):
    """A call needs more blocks than the cache's budget (``max_tokens``) has free; raised before anything
    changes. The message says how many blocks (and tokens) were needed and how many are free."""


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _int(where: str, what: str, value: Any) -> int:
    if not _is_int(value):
        raise TypeError(f"{where}: {what} must be an int, got {type(value).__name__}")
    return int(value)


class _Layer:
    """The pool of one layer: ``k`` (blocks, block_size, kv_heads, head_dim_k), ``v`` (blocks, block_size,
    kv_heads, head_dim_v); ``length``: in implicit mode, the tokens per sequence the layer holds.
    :meth:`views` are read-only views of the two pools, the same objects until a pool is replaced (so that a
    kernel run that saw them last step skips their checks, :class:`runtime.kernel_runs.KernelRun`)."""

    __slots__ = ("k", "v", "length", "_views")

    def __init__(self, k: np.ndarray, v: np.ndarray) -> None:
        self.k = k
        self.v = v
        self.length = 0
        self._views: tuple | None = None     # (k, v, k's view, v's view)

    def views(self) -> tuple[np.ndarray, np.ndarray]:
        """Read-only views of ``k`` and ``v``, made once per pool."""
        got = self._views
        if got is None or got[0] is not self.k or got[1] is not self.v:
            views = []
            for pool in (self.k, self.v):
                view = pool.view()
                view.flags.writeable = False
                views.append(view)
            got = self._views = (self.k, self.v, views[0], views[1])
        return got[2], got[3]


class _Sequence:
    __slots__ = ("blocks", "length")

    def __init__(self, blocks: list[int] | None = None, length: int = 0) -> None:
        self.blocks = [] if blocks is None else blocks
        self.length = length


class _Rows:
    """Where the rows of one call live: row ``r`` (block ids ``blocks[r]``) holds ``held[r]`` tokens before
    the call and appends ``seq``; the call's keys are ``total`` columns, row ``r``'s right-aligned after
    ``total - held[r] - seq`` padding columns. ``positions`` (B, seq) the new tokens' positions, ``keep``
    (B, total) the real columns, ``max_block`` the largest block id. Each row's tokens are runs of consecutive
    pool slots (blocks of consecutive ids merge); :meth:`write` stores a call's new keys and :meth:`read`
    gathers every row's, a slice copy per run (a lone row of one run comes back as a view of the pool)."""

    __slots__ = ("held", "seq", "total", "block_size", "max_block", "_runs", "_view", "_blocks", "_tables", "_slots")

    def __init__(self, blocks: list[list[int]], held: np.ndarray, seq: int, total: int, block_size: int) -> None:
        self.held, self.seq, self.total, self.block_size = held, seq, total, block_size
        self.max_block = max((max(b) for b in blocks if b), default=-1)
        self._blocks = blocks
        self._tables: tuple[np.ndarray, np.ndarray] | None = None
        self._slots: np.ndarray | slice | None = None
        self._runs = []      # per row: [(first pool slot, tokens), ...] covering its held + seq tokens in order
        for b, h in zip(blocks, held.tolist()):
            n, runs = h + seq, []
            for j, block in enumerate(b[: -(-(h + seq) // block_size)]):
                length = min(block_size, n - j * block_size)
                if runs and runs[-1][0] + runs[-1][1] == block * block_size:
                    runs[-1][1] += length
                else:
                    runs.append([block * block_size, length])
            self._runs.append(runs)
        self._view = len(blocks) == 1 and len(self._runs[0]) == 1 and self._runs[0][0][1] == total

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(block_table, lengths)`` of the rows for :func:`kv_cache_append`: int32 (B, max_blocks), row ``r``'s
        first ``ceil(lengths[r] / block_size)`` block ids in token order, 0 after them; int32 (B,), ``held + seq``.
        Made once per call (the layers share them), read-only."""
        if self._tables is None:
            lengths = self.held + self.seq
            need = -(-lengths // self.block_size)
            _check(4 * len(self._blocks) * (int(need.max()) + 1), "kv_cache_append: the block table")
            table = np.zeros((len(self._blocks), int(need.max())), np.int32)
            for r, (b, n) in enumerate(zip(self._blocks, need.tolist())):
                table[r, :n] = b[:n]
            lengths = lengths.astype(np.int32)
            table.flags.writeable = lengths.flags.writeable = False
            self._tables = (table, lengths)
        return self._tables

    @property
    def positions(self) -> np.ndarray:
        """The new tokens' positions, int64 (B, seq)."""
        return self.held[:, None] + np.arange(self.seq, dtype=np.int64)[None, :]

    @property
    def keep(self) -> np.ndarray:
        """The real columns, bool (B, total)."""
        return np.arange(self.total, dtype=np.int64)[None, :] >= (self.total - (self.held + self.seq))[:, None]

    def slots(self) -> np.ndarray | slice:
        """The pool slots of the call's new tokens, row by row in token order: int64 (B * seq,), or a slice
        when they are consecutive (a lone row's tokens in one run). Made once per call (the layers and both
        pools share it)."""
        if self._slots is None:
            slots = []
            for runs, held in zip(self._runs, self.held.tolist()):
                begin = 0        # the row's token where the run begins
                for start, length in runs:
                    end = begin + length
                    if end > held:
                        lo = max(begin, held)    # the first new token in the run
                        slots.append(np.arange(start + lo - begin, start + length, dtype=np.int64))
                    begin = end
            idx = np.concatenate(slots) if slots else np.zeros(0, np.int64)
            if len(idx) and bool((np.diff(idx) == 1).all()):
                self._slots = slice(int(idx[0]), int(idx[0]) + len(idx))
            else:
                self._slots = idx
        return self._slots

    def write(self, flat: np.ndarray, new: np.ndarray) -> None:
        """Store ``new`` (B, seq, ...) at the rows' new tokens in ``flat`` (the pool as (slots, ...)): one
        slice or indexed assignment (:meth:`slots`)."""
        flat[self.slots()] = new.reshape(-1, *new.shape[2:])

    def read(self, pool: np.ndarray) -> np.ndarray:
        """Every row's tokens of ``pool`` (blocks, block_size, ...), right-aligned: (B, total, ...), zeros in the
        padding; read-only."""
        flat = pool.reshape(-1, *pool.shape[2:])
        if self._view:
            start = self._runs[0][0][0]
            out = flat[start:start + self.total][None]
        else:
            out = np.empty((len(self._runs), self.total, *pool.shape[2:]), pool.dtype)
            for r, runs in enumerate(self._runs):
                col = self.total - int(self.held[r]) - self.seq
                out[r, :col] = 0
                for start, length in runs:
                    out[r, col:col + length] = flat[start:start + length]
                    col += length
        out.flags.writeable = False
        return out


class PagedKVCache:
    """A paged KV cache of sequences that come and go (see the module docstring for the two modes).

    ``PagedKVCache(max_tokens=None, block_size=16, max_layers=MAX_LAYERS, max_seq_len=None)``:
    ``max_tokens`` the budget, at most ``ceil(max_tokens / block_size)`` blocks (``num_blocks``; None: bounded
    only by memory); ``block_size`` tokens per block (1 .. MAX_BLOCK_SIZE); layer ids below ``max_layers``;
    ``max_seq_len`` (None: no bound but the budget) the most tokens one sequence may hold. Sequence ids are
    non-negative ints.

    Raises ValueError for a ``max_tokens``, ``block_size``, ``max_layers`` or ``max_seq_len`` that is not a
    positive int in range.
    """

    def __init__(self, max_tokens: int | None = None, block_size: int = 16, max_layers: int = MAX_LAYERS,
                 max_seq_len: int | None = None) -> None:
        who = type(self).__name__
        if max_tokens is not None and (not _is_int(max_tokens) or max_tokens <= 0):
            raise ValueError(f"{who}: max_tokens must be a positive int or None, got {max_tokens!r}")
        if not _is_int(block_size) or not 0 < block_size <= MAX_BLOCK_SIZE:
            raise ValueError(f"{who}: block_size must be an int in 1..{MAX_BLOCK_SIZE}, got {block_size!r}")
        if not _is_int(max_layers) or not 0 < max_layers <= MAX_LAYERS:
            raise ValueError(f"{who}: max_layers must be an int in 1..{MAX_LAYERS}, got {max_layers!r}")
        if max_seq_len is not None and (not _is_int(max_seq_len) or max_seq_len <= 0):
            raise ValueError(f"{who}: max_seq_len must be a positive int or None, got {max_seq_len!r}")
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        self.block_size = int(block_size)
        self.num_blocks = None if max_tokens is None else -(-int(max_tokens) // self.block_size)
        self.max_layers = int(max_layers)
        self.max_seq_len = None if max_seq_len is None else int(max_seq_len)
        self.reset()

    # -- state -----------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget every sequence and token and free the pools (the cache is as new: either mode may follow)."""
        self._layers: dict[int, _Layer] = {}
        self._largest_pool = 0             # blocks of the largest layer pool (pools only grow until reset)
        self._seqs: dict[int, _Sequence] = {}
        self._ref: list[int] = []          # reference count of each block id ever made
        self._free: list[int] = []         # heap of the ids with count 0
        self._mode: str | None = None      # None (new), "implicit" or "explicit"
        self._forward: _Rows | None = None
        self._forward_ids: tuple[int, ...] = ()
        self._updated: set[int] = set()
        self._implicit: tuple[tuple, _Rows] | None = None   # the rows of the implicit step, by (batch, seq, total)

    @property
    def free_blocks(self) -> int | None:
        """Blocks the budget still has free (None without a budget)."""
        if self.num_blocks is None:
            return None
        return self.num_blocks - (len(self._ref) - len(self._free))

    @property
    def sequences(self) -> list[int]:
        """The ids of the sequences held, ascending."""
        return sorted(self._seqs)

    def seq_len(self, seq_id: int) -> int:
        """Tokens sequence ``seq_id`` holds (after :meth:`begin_forward`: with the call's new tokens).
        Raises KeyError for an unknown id."""
        return self._seq("seq_len", seq_id).length

    @property
    def num_layers(self) -> int:
        """The number of layers that have been updated at least once."""
        return len(self._layers)

    @property
    def layer_ids(self) -> list[int]:
        """The ids of the layers held, ascending."""
        return sorted(self._layers)

    def layer_seq_len(self, layer_id: int) -> int:
        """Tokens per sequence layer ``layer_id`` holds in implicit mode (0 for a layer never updated); in
        explicit mode, where the layers share the sequences' lengths, the most any sequence holds."""
        layer = self._layers.get(layer_id)
        if layer is None:
            return 0
        if self._mode == "explicit":
            return max((s.length for s in self._seqs.values()), default=0)
        return layer.length

    def capacity(self, layer_id: int) -> int:
        """Tokens the pool of layer ``layer_id`` has room for before it grows (0 for a layer never updated)."""
        layer = self._layers.get(layer_id)
        return 0 if layer is None else layer.k.shape[0] * self.block_size

    @property
    def nbytes(self) -> int:
        """Bytes allocated by all layers' pools."""
        return sum(layer.k.nbytes + layer.v.nbytes for layer in self._layers.values())

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(sequences={self.sequences}, layers={self.layer_ids}, "
                f"block_size={self.block_size}, free_blocks={self.free_blocks}, nbytes={self.nbytes})")

    def view(self, layer_id: int, seq_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The keys and values layer ``layer_id`` holds, two read-only copies: of sequence ``seq_id``
        (1, seq_len, kv_heads, head_dim), or (``seq_id`` None) of every sequence in id order (batch, seq_len,
        kv_heads, head_dim), which must hold one number of tokens (in implicit mode: the layer's). Raises
        KeyError for a layer never updated or an unknown sequence; ValueError for sequences of different
        lengths without ``seq_id``."""
        layer = self._layers.get(layer_id)
        if layer is None:
            raise KeyError(f"the KV cache holds no layer {layer_id!r}; it holds {self.layer_ids}")
        ids = self.sequences if seq_id is None else [self._seq_id("view", seq_id, exists=True)]
        lengths = {self._seqs[i].length for i in ids}
        if len(lengths) > 1:
            raise ValueError(f"view: the sequences hold different numbers of tokens {sorted(lengths)}; give seq_id")
        n = layer.length if self._mode == "implicit" and seq_id is None else lengths.pop() if lengths else 0
        if not ids or n == 0:
            shape = (len(ids), 0)
            return np.empty(shape + layer.k.shape[2:], layer.k.dtype), np.empty(shape + layer.v.shape[2:], layer.v.dtype)
        rows = _Rows([self._seqs[i].blocks for i in ids], np.full(len(ids), n, np.int64), 0, n, self.block_size)
        out = []
        for pool in (layer.k, layer.v):
            a = rows.read(pool).copy()
            a.flags.writeable = False
            out.append(a)
        return out[0], out[1]

    # -- sequences -----------------------------------------------------------------------------------------
    def add_sequence(self, seq_id: int) -> None:
        """Add an empty sequence ``seq_id``. Raises TypeError for a non-int id; ValueError for a negative or
        too large id or one that exists."""
        seq_id = self._seq_id("add_sequence", seq_id, exists=False)
        self._mode = "explicit"
        self._seqs[seq_id] = _Sequence()

    def remove_sequence(self, seq_id: int) -> None:
        """Remove sequence ``seq_id`` and release its blocks (a block shared with a fork stays with it).
        Ends a call declared by :meth:`begin_forward`. Raises TypeError for a non-int id; KeyError for an
        unknown one."""
        seq_id = self._seq_id("remove_sequence", seq_id, exists=True)
        self.end_forward()
        self._implicit = None
        self._mode = "explicit"
        for b in self._seqs.pop(seq_id).blocks:
            self._ref[b] -= 1
            if self._ref[b] == 0:
                heapq.heappush(self._free, b)

    def fork_sequence(self, parent_id: int, child_id: int) -> None:
        """Add sequence ``child_id`` holding what ``parent_id`` holds: the parent's full blocks are shared
        (reference-counted) and its last, partial block is copied in every layer, so that the appends of
        either never change the other. Ends a call declared by :meth:`begin_forward`. Raises TypeError for
        non-int ids; KeyError for an unknown parent; ValueError for a child id that exists (or is out of
        range); :class:`KVCacheFullError` when the copy needs a block the budget does not have (nothing
        changes); :class:`~runtime.memory.MemoryLimitError` when a pool cannot grow."""
        parent = self._seq("fork_sequence", parent_id)
        child_id = self._seq_id("fork_sequence", child_id, exists=False)
        full, partial = divmod(parent.length, self.block_size)
        blocks = list(parent.blocks[:full])
        if partial:
            self._check_fits("fork_sequence", 1, partial)
            new = self._next_block_ids(1)
            for layer_id, layer in self._layers.items():
                self._grow(layer_id, layer, new[0])
            self._take(new)
            for layer in self._layers.values():
                for pool in (layer.k, layer.v):
                    pool[new[0]] = pool[parent.blocks[full]]
            blocks.append(new[0])
        self.end_forward()
        for b in blocks[:full]:
            self._ref[b] += 1
        self._mode = "explicit"
        self._seqs[child_id] = _Sequence(blocks, parent.length)

    def blocks_needed(self, seq_ids: Sequence[int], append_lengths: Sequence[int] | int) -> int:
        """The new blocks :meth:`begin_forward` ``(seq_ids, append_lengths)`` would take (it raises what
        that raises for bad arguments)."""
        ids, seq = self._rows_args("blocks_needed", seq_ids, append_lengths)
        return self._new_blocks([self._seqs[i] for i in ids], seq)

    def begin_forward(self, seq_ids: Sequence[int], append_lengths: Sequence[int] | int) -> int:
        """Declare the rows of the next compiled call: row ``r`` is sequence ``seq_ids[r]``, appending
        ``append_lengths[r]`` tokens (one int, or one per row, all equal: the call's seq dim, >= 1). Ends the
        previous call, reserves the blocks and counts the new tokens in the sequences' lengths; returns
        ``total_seq_len`` for the call, ``max_r(held_r) + seq``, which every layer's update of the call is
        checked against.

        Raises TypeError for ids / lengths that are not ints (or a ``seq_ids`` that is not a sequence);
        ValueError for no rows, a repeated id, lengths that differ, are not positive or do not match the
        rows, or a sequence that would exceed ``max_seq_len``; KeyError for an unknown id;
        :class:`KVCacheFullError` when the blocks needed are more than the free ones, and
        :class:`~runtime.memory.MemoryLimitError` when the tokens cannot fit in memory (both before
        anything changes). A compiled call that fails after it leaves the rows' new tokens counted but not
        (all) written: remove those sequences (or reset the cache)."""
        ids, seq = self._rows_args("begin_forward", seq_ids, append_lengths)
        seqs = [self._seqs[i] for i in ids]
        self._check_fits("begin_forward", self._new_blocks(seqs, seq), len(seqs) * seq)
        self.end_forward()
        self._mode = "explicit"
        held = np.array([s.length for s in seqs], np.int64)
        for s in seqs:
            self._reserve(s, s.length + seq)
            s.length += seq
        total = int(held.max()) + seq
        self._forward = _Rows([s.blocks for s in seqs], held, seq, total, self.block_size)
        self._forward_ids = tuple(ids)
        self._updated = set()
        return total

    def end_forward(self) -> None:
        """End the call declared by :meth:`begin_forward` (optional: the next ``begin_forward``,
        ``remove_sequence`` or ``fork_sequence`` ends it). Updates after it need a new ``begin_forward``."""
        self._forward = None
        self._forward_ids = ()
        self._updated = set()

    # -- the builtins' methods -------------------------------------------------------------------------
    def append(self, layer_id: int, k: np.ndarray, v: np.ndarray,
               total_seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Append ``k`` / ``v`` to layer ``layer_id`` for the rows of the call, as :meth:`update` does (the
        same checks and errors), and hand the compiled code what the paged attention
        (``nn.op.paged_attention``) reads, without copying a key: ``(k_pool, v_pool, block_table, lengths)``,
        the layer's pools as they are after this append (read-only views of the cache's own arrays, (num_blocks,
        block_size, kv_heads, head_dim[_v]); a pool that grows later is a new array, so these stay valid and
        unchanged for the call), the rows' block table int32 (batch, max_blocks) and their lengths int32
        (batch,) ``held_r + seq`` (:meth:`_Rows.tables`). Every block id of a row's first ``ceil(lengths[r] /
        block_size)`` entries is below ``num_blocks`` and every length at most ``max_blocks * block_size`` (the
        kernel checks them again)."""
        layer, rows = self._append("kv_cache_append", layer_id, k, v, total_seq_len)
        table, lengths = rows.tables()
        k_pool, v_pool = layer.views()
        return k_pool, v_pool, table, lengths

    def update(self, layer_id: int, k: np.ndarray, v: np.ndarray,
               total_seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Append ``k`` (batch, seq, kv_heads, head_dim) and ``v`` (batch, seq, kv_heads, head_dim_v) to
        layer ``layer_id`` for the rows of the call (see the module docstring) and return ``(k_all, v_all)``,
        C-contiguous (batch, total_seq_len, kv_heads, head_dim[_v]): row ``r``'s keys oldest first,
        right-aligned, zeros in the columns before them. The arrays are read-only and are not changed by
        later updates (only the release of the row's blocks and their reuse may).

        Everything is checked before the cache changes. Raises TypeError when ``k`` / ``v`` are not numpy
        arrays or ``layer_id`` / ``total_seq_len`` not ints; ValueError (naming the layer) when ``layer_id``
        is out of range, ``k`` / ``v`` are not 4-D, differ from each other in batch, seq, heads or dtype, or
        from what the layer holds in heads, head dims or dtype, when the batch, seq or ``total_seq_len``
        differ from the call :meth:`begin_forward` declared (or, in implicit mode, when ``held + seq`` is
        not ``total_seq_len``, the batch is not the sequences', or the cache is driven explicitly and no call
        is declared), when the layer was updated already in this call, or a sequence would exceed
        ``max_seq_len``; :class:`KVCacheFullError` (implicit mode) when the budget has too few blocks;
        :class:`~runtime.memory.MemoryLimitError` when a pool cannot grow.
        """
        layer, rows = self._append("kv_cache_update", layer_id, k, v, total_seq_len, results=True)
        return rows.read(layer.k), rows.read(layer.v)

    def _append(self, who: str, layer_id: int, k: np.ndarray, v: np.ndarray, total_seq_len: int,
                results: bool = False) -> tuple[_Layer, _Rows]:
        """The checks and the write of :meth:`update` / :meth:`append` (``who`` names the builtin in errors;
        ``results``: the padded copies of every row's keys come back, their memory checked first): the
        layer and the rows of the call."""
        layer_id = _int(who, "layer_id", layer_id)
        where = f"{who}: layer {layer_id}"
        if not 0 <= layer_id < self.max_layers:
            raise ValueError(f"{where}: the layer id must be in 0..{self.max_layers - 1}")
        total = _int(where, "total_seq_len", total_seq_len)
        for name, a in (("k", k), ("v", v)):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{where}: {name} must be a numpy array, got {type(a).__name__}")
            if a.ndim != 4:
                raise ValueError(f"{where}: {name} must be 4-D (batch, seq, kv_heads, head_dim), got shape {a.shape}")
        if k.dtype.hasobject:
            raise ValueError(f"{where}: k / v must hold numbers, got dtype {k.dtype}")
        if k.shape[:3] != v.shape[:3] or k.dtype != v.dtype:
            raise ValueError(f"{where}: k {k.dtype}{list(k.shape)} and v {v.dtype}{list(v.shape)} must agree "
                             "in batch, seq, kv_heads and dtype")
        batch, seq = k.shape[:2]
        layer = self._layers.get(layer_id)
        if layer is not None:
            for what, got, have in (("number of kv heads", k.shape[2], layer.k.shape[2]),
                                    ("key head dim", k.shape[3], layer.k.shape[3]),
                                    ("value head dim", v.shape[3], layer.v.shape[3])):
                if got != have:
                    raise ValueError(f"{where}: the {what} is {got}, but the layer holds {have} (k {list(k.shape)} "
                                     f"against a pool of {list(layer.k.shape)}); reset() the cache for another model")
            if k.dtype != layer.k.dtype:
                raise ValueError(f"{where}: k / v have dtype {k.dtype}, but the layer holds {layer.k.dtype}")
        if self._forward is not None:
            rows = self._declared_rows(where, layer_id, layer, batch, seq, total)
            max_block = rows.max_block
        else:
            seqs, new_ids = self._implicit_plan(where, layer, batch, seq, total)
            max_block = max([len(self._ref) - 1, *new_ids])    # pools hold every id made
        if results and batch > 1:          # the results (a lone row is mostly a view of the pool)
            _check(batch * total * (math.prod(k.shape[2:]) + math.prod(v.shape[2:])) * k.dtype.itemsize,
                   f"{where}: the keys and values of {batch} rows x {total} columns")
        if layer is None:      # pools first: a refused allocation leaves the cache as it was
            new_layer = _Layer(*self._allocate(where, k.shape[2:], v.shape[2:], k.dtype, self._pool_blocks(max_block)))
        else:
            self._grow(layer_id, layer, max_block, who)
        if self._forward is not None:
            self._updated.add(layer_id)
        else:
            rows = self._implicit_rows(seqs, seq, total)
        if layer is None:
            layer = self._layers[layer_id] = new_layer
            self._largest_pool = max(self._largest_pool, layer.k.shape[0])
        if self._forward is None:
            layer.length = total
        for pool, new in ((layer.k, k), (layer.v, v)):
            rows.write(pool.reshape(-1, *pool.shape[2:]), new)
        return layer, rows

    def positions(self, batch: int, seq: int, total_seq_len: int) -> np.ndarray:
        """The positions of the call's new tokens, int64 (batch, seq): row ``r``'s ``arange(held_r, held_r +
        seq)`` (implicit mode: ``arange(total_seq_len - seq, total_seq_len)`` for every row). Nothing changes.
        Raises TypeError for non-int arguments; ValueError when they differ from the declared call (or, in
        implicit mode, are negative, the batch is not the sequences' or ``total_seq_len - seq`` is not what
        they hold); :class:`~runtime.memory.MemoryLimitError` for a result that cannot fit."""
        where = "kv_cache_positions"
        batch, seq, total = (_int(where, w, x) for w, x in (("batch", batch), ("seq", seq),
                                                            ("total_seq_len", total_seq_len)))
        if self._forward is not None:
            self._check_declared(where, batch, seq, total)
            return self._forward.positions
        self._check_implicit(where, batch, seq, total)
        _check(8 * batch * seq, f"{where}: the positions of {batch} x {seq} tokens")
        return np.broadcast_to(np.arange(total - seq, total, dtype=np.int64), (batch, seq)).copy()

    def attention_mask(self, batch: int, total_seq_len: int) -> np.ndarray:
        """The keys of the call's rows, bool (batch, total_seq_len): True at row ``r``'s real keys (its last
        ``held_r + seq`` columns), False at its left padding; all True in implicit mode. Nothing changes.
        Raises TypeError for non-int arguments; ValueError when they differ from the declared call (or, in
        implicit mode, are negative or the batch is not the sequences');
        :class:`~runtime.memory.MemoryLimitError` for a result that cannot fit."""
        where = "kv_cache_attention_mask"
        batch, total = _int(where, "batch", batch), _int(where, "total_seq_len", total_seq_len)
        if self._forward is not None:
            if batch != len(self._forward_ids) or total != self._forward.total:
                raise ValueError(f"{where}: batch {batch} and total_seq_len {total} differ from the call begin_forward "
                                 f"declared ({len(self._forward_ids)} rows, total_seq_len {self._forward.total})")
            return self._forward.keep
        self._check_implicit(where, batch, 0, total, lengths=False)
        _check(batch * total, f"{where}: the mask of {batch} x {total} keys")
        return np.ones((batch, total), dtype=bool)

    def query_positions(self, layer_id: int, seq: int, total_seq_len: int) -> np.ndarray:
        """The positions of ``seq`` new tokens of layer ``layer_id`` shared by every row, int64 (seq,)
        (MLC-LLM's ``get_query_positions``; compiled code before :meth:`positions`): implicit mode
        ``arange(held, held + seq)``, ``held`` what the layer holds, ``held + seq == total_seq_len``; a
        declared call whose rows all hold one length: that length onwards. Nothing changes.

        Raises TypeError for non-int arguments; ValueError (naming the layer) for a layer id out of range, a
        negative ``seq``, a ``total_seq_len`` that is not ``held + seq`` (or the call's), rows of different
        lengths, or more than ``max_seq_len`` tokens; :class:`~runtime.memory.MemoryLimitError` for a result
        that cannot fit.
        """
        for what, value in (("layer_id", layer_id), ("seq", seq), ("total_seq_len", total_seq_len)):
            _int("kv_cache_query_positions", what, value)
        layer_id, seq, total = int(layer_id), int(seq), int(total_seq_len)
        where = f"kv_cache_query_positions: layer {layer_id}"
        if not 0 <= layer_id < self.max_layers:
            raise ValueError(f"{where}: the layer id must be in 0..{self.max_layers - 1}")
        if self._forward is not None:
            rows = self._forward
            if seq != rows.seq or total != rows.total or (rows.held != rows.held[0]).any():
                raise ValueError(f"{where}: the declared call's rows hold {rows.held.tolist()} tokens and append "
                                 f"{rows.seq} (total_seq_len {rows.total}), not one length and {seq} "
                                 f"(total_seq_len {total}); compiled code for ragged calls uses kv_cache_positions")
            return rows.positions[0]
        if self._mode == "explicit":
            raise ValueError(f"{where}: no call is declared; call begin_forward(seq_ids, seq) before each call")
        layer = self._layers.get(layer_id)
        held = 0 if layer is None else layer.length
        if seq < 0 or held + seq != total:
            raise ValueError(f"{where}: the layer holds {held} tokens and {seq} are added, so it would hold "
                             f"{held + seq}, but total_seq_len is {total}")
        if self.max_seq_len is not None and total > self.max_seq_len:
            raise ValueError(f"{where}: {total} tokens exceed the cache's max_seq_len {self.max_seq_len}")
        _check(8 * seq, f"{where}: the positions of {seq} tokens")
        return np.arange(held, total, dtype=np.int64)

    # -- helpers -----------------------------------------------------------------------------------------
    def _seq_id(self, where: str, seq_id: Any, exists: bool) -> int:
        seq_id = _int(where, "a sequence id", seq_id)
        if exists and seq_id not in self._seqs:
            raise KeyError(f"{where}: the cache holds no sequence {seq_id}; it holds {self.sequences}")
        if not exists:
            if not 0 <= seq_id <= _MAX_SEQ_ID:
                raise ValueError(f"{where}: a sequence id must be an int in 0..2**63-1, got {seq_id}")
            if seq_id in self._seqs:
                raise ValueError(f"{where}: the cache holds a sequence {seq_id} already")
        return seq_id

    def _seq(self, where: str, seq_id: Any) -> _Sequence:
        return self._seqs[self._seq_id(where, seq_id, exists=True)]

    def _rows_args(self, where: str, seq_ids: Any, append_lengths: Any) -> tuple[list[int], int]:
        """The checked ids (existing, distinct, at least one) and the one append length of a call."""
        if isinstance(seq_ids, (str, bytes)) or not isinstance(seq_ids, (Sequence, np.ndarray)):
            raise TypeError(f"{where}: seq_ids must be a sequence of ints, got {type(seq_ids).__name__}")
        if len(seq_ids) == 0:
            raise ValueError(f"{where}: a call needs at least one row (seq_ids is empty)")
        if len(seq_ids) > len(self._seqs):
            raise ValueError(f"{where}: {len(seq_ids)} rows, but the cache holds {len(self._seqs)} sequences")
        ids = [self._seq_id(where, i, exists=True) for i in seq_ids]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{where}: seq_ids repeats a sequence: {ids}")
        if _is_int(append_lengths):
            lengths = [int(append_lengths)]
        elif isinstance(append_lengths, (Sequence, np.ndarray)) and not isinstance(append_lengths, (str, bytes)):
            if len(append_lengths) != len(ids):
                raise ValueError(f"{where}: {len(append_lengths)} append lengths for {len(ids)} rows")
            lengths = [_int(where, "an append length", n) for n in append_lengths]
        else:
            raise TypeError(f"{where}: append_lengths must be an int or a sequence of ints, got "
                            f"{type(append_lengths).__name__}")
        if len(set(lengths)) != 1:
            raise ValueError(f"{where}: the rows of one call append one number of tokens (its seq dim), got {lengths}")
        seq = lengths[0]
        if seq <= 0:
            raise ValueError(f"{where}: the append length must be positive, got {seq}")
        if self.max_seq_len is not None:
            for i in ids:
                if self._seqs[i].length + seq > self.max_seq_len:
                    raise ValueError(f"{where}: sequence {i} would hold {self._seqs[i].length + seq} tokens, above "
                                     f"the cache's max_seq_len {self.max_seq_len}")
        return ids, seq

    def _new_blocks(self, seqs: list[_Sequence], seq: int, ahead: bool = False) -> int:
        """The blocks ``seqs`` take to append ``seq`` tokens each (:meth:`_reservation`)."""
        return sum(self._reservation(s, s.length + seq, ahead) for s in seqs)

    def _reservation(self, s: _Sequence, length: int, ahead: bool) -> int:
        """The blocks ``s`` takes to hold ``length`` tokens: the ones missing; ``ahead`` (implicit mode without a
        budget) at least as many as it has, so that a row's blocks are a few runs of consecutive ids (read as a
        few slices) while the rows of a batch grow together."""
        n = -(-length // self.block_size) - len(s.blocks)
        if n <= 0:
            return 0
        return max(n, len(s.blocks)) if ahead and self.num_blocks is None else n

    def _check_fits(self, where: str, blocks: int, tokens: int) -> None:
        """KVCacheFullError when ``blocks`` new blocks exceed the free ones; MemoryLimitError when ``tokens``
        new tokens (their index entries and, in the pools there are, their keys and values) cannot fit."""
        free = self.free_blocks
        if free is not None and blocks > free:
            raise KVCacheFullError(f"{where}: {tokens} new tokens need {blocks} new blocks of {self.block_size} "
                                   f"tokens, but only {free} of the {self.num_blocks} blocks are free "
                                   f"(max_tokens {self.max_tokens})")
        if tokens:
            per_token = 8 + sum((layer.k[0, 0].nbytes + layer.v[0, 0].nbytes) for layer in self._layers.values())
            _check(tokens * per_token, f"{where}: {tokens} new tokens of the KV cache")

    def _next_block_ids(self, n: int) -> list[int]:
        """The ids the next ``n`` new blocks get (the lowest free ones, then new ids); nothing changes."""
        free = heapq.nsmallest(n, self._free)
        return free + list(range(len(self._ref), len(self._ref) + n - len(free)))

    def _take(self, ids: list[int]) -> None:
        for b in ids:
            if b < len(self._ref):
                heapq.heappop(self._free)   # the ids are the smallest free ones, in order
            else:
                self._ref.append(0)
            self._ref[b] = 1

    def _reserve(self, s: _Sequence, length: int, ahead: bool = False) -> None:
        """Give ``s`` the blocks to hold ``length`` tokens (:meth:`_reservation`; checked before by
        :meth:`_check_fits`)."""
        n = self._reservation(s, length, ahead)
        if n > 0:
            self._implicit = None
            ids = self._next_block_ids(n)
            self._take(ids)
            s.blocks.extend(ids)

    def _check_declared(self, where: str, batch: int, seq: int, total: int) -> None:
        rows = self._forward
        if (batch, seq, total) != (len(self._forward_ids), rows.seq, rows.total):
            raise ValueError(f"{where}: the batch size {batch}, seq {seq} and total_seq_len {total} differ from the "
                             f"call begin_forward declared ({len(self._forward_ids)} rows appending {rows.seq}, "
                             f"total_seq_len {rows.total})")

    def _check_implicit(self, where: str, batch: int, seq: int, total: int, lengths: bool = True) -> None:
        """The checks of an implicit call's builtins: not an explicitly driven cache, non-negative sizes within
        ``max_seq_len``, the batch the sequences' (when there are any), ``total - seq`` what they hold."""
        if self._mode == "explicit":
            raise ValueError(f"{where}: the cache's sequences are managed explicitly (add_sequence / begin_forward) "
                             "and no call is declared; call begin_forward(seq_ids, seq) before each call")
        if self._seqs and len(self._seqs) != batch:
            raise ValueError(f"{where}: the batch size is {batch}, but the cache holds {len(self._seqs)} "
                             "sequences; reset() the cache to start a new batch")
        held = max((s.length for s in self._seqs.values()), default=0)
        during = self._seqs and held == total >= seq       # some layers of the call updated already
        if lengths and held != total - seq and not during:
            raise ValueError(f"{where}: the sequences hold {held} tokens, {seq} are appended, so they would hold "
                             f"{held + seq}, but total_seq_len is {total}")
        if batch < 0 or seq < 0 or total < seq:
            raise ValueError(f"{where}: batch {batch}, seq {seq} and total_seq_len {total} must be non-negative, "
                             "total_seq_len at least seq")
        if self.max_seq_len is not None and total > self.max_seq_len:
            raise ValueError(f"{where}: {total} tokens exceed the cache's max_seq_len {self.max_seq_len}")

    def _declared_rows(self, where: str, layer_id: int, layer: _Layer | None, batch: int, seq: int,
                       total: int) -> _Rows:
        rows = self._forward
        self._check_declared(where, batch, seq, total)
        if layer_id in self._updated:
            raise ValueError(f"{where}: the layer was updated already in this call; call begin_forward before "
                             "the next call")
        if layer is None and rows.held.any():
            raise ValueError(f"{where}: the layer holds none of the tokens the sequences hold "
                             f"({rows.held.tolist()}); every call must update every layer")
        return rows

    def _implicit_plan(self, where: str, layer: _Layer | None, batch: int, seq: int,
                       total: int) -> tuple[list[_Sequence], list[int]]:
        """The checks of an implicit update (rows: sequences 0 .. batch-1, made on first use): the rows'
        sequences (new ones not yet added) and the ids of the blocks they would take; nothing changes."""
        if self._mode == "explicit":
            raise ValueError(f"{where}: the cache's sequences are managed explicitly (add_sequence / begin_forward) "
                             "and no call is declared; call begin_forward(seq_ids, seq) before each call")
        if self._seqs and len(self._seqs) != batch:
            raise ValueError(f"{where}: the batch size is {batch}, but the cache holds {len(self._seqs)} sequences; "
                             "reset() the cache to start a new batch")
        if batch == 0:
            raise ValueError(f"{where}: the batch is empty")
        held = 0 if layer is None else layer.length
        if held + seq != total:
            raise ValueError(f"{where}: the layer holds {held} tokens, {seq} are appended, so it would hold "
                             f"{held + seq}, but total_seq_len is {total}")
        if self.max_seq_len is not None and total > self.max_seq_len:
            raise ValueError(f"{where}: {total} tokens exceed the cache's max_seq_len {self.max_seq_len}")
        seqs = [self._seqs[i] for i in range(batch)] if self._seqs else [_Sequence() for _ in range(batch)]
        grow = total - seqs[0].length
        if grow <= 0:                        # a later layer of the step: the blocks are there
            return seqs, []
        blocks = self._new_blocks(seqs, grow, ahead=True)
        self._check_fits(where, blocks, batch * grow)
        return seqs, self._next_block_ids(blocks)

    def _implicit_rows(self, seqs: list[_Sequence], seq: int, total: int) -> _Rows:
        """The rows of a planned implicit update (:meth:`_implicit_plan`), their blocks reserved for ``total``
        tokens; the layers of one step share them (kept until the blocks change)."""
        self._mode = "implicit"
        if total > seqs[0].length:
            for i, s in enumerate(seqs):
                self._seqs[i] = s
                self._reserve(s, total, ahead=True)
                s.length = total
        key = (len(seqs), seq, total)
        if self._implicit is None or self._implicit[0] != key:
            rows = _Rows([s.blocks for s in seqs], np.full(len(seqs), total - seq, np.int64), seq, total,
                         self.block_size)
            self._implicit = (key, rows)
        return self._implicit[1]

    def _pool_blocks(self, max_block: int) -> int:
        """The blocks a pool that must hold block id ``max_block`` has: at least those of the largest pool, so
        that every layer's pool holds one number of blocks (the compiled code binds one ``num_blocks`` for all
        layers of a call, :func:`kv_cache_append`), even after a call that failed between two layers' updates."""
        return max(max_block + 1, self._largest_pool)

    def _grow(self, layer_id: int, layer: _Layer, max_block: int, who: str = "fork_sequence") -> None:
        """Grow ``layer``'s pools (doubling, at most ``num_blocks``) to hold block id ``max_block``, and to the
        size of the largest pool (:meth:`_pool_blocks`)."""
        have = layer.k.shape[0]
        least = self._pool_blocks(max_block)
        if least <= have:
            return
        blocks = max(2 * have, least) if max_block >= have else least
        if self.num_blocks is not None:
            blocks = min(blocks, self.num_blocks)
        where = f"{who}: layer {layer_id}"
        k, v = self._allocate(where, layer.k.shape[2:], layer.v.shape[2:], layer.k.dtype, blocks)
        k[:have] = layer.k
        v[:have] = layer.v
        layer.k, layer.v = k, v
        self._largest_pool = max(self._largest_pool, blocks)

    def _allocate(self, where: str, k_unit: tuple, v_unit: tuple, dtype: np.dtype,
                  blocks: int) -> tuple[np.ndarray, np.ndarray]:
        """Pools of ``blocks`` blocks for units ``k_unit`` / ``v_unit`` (kv_heads, head_dim), after checking
        that they fit in memory."""
        k_shape = (blocks, self.block_size, *k_unit)
        v_shape = (blocks, self.block_size, *v_unit)
        nbytes = (math.prod(k_shape) + math.prod(v_shape)) * dtype.itemsize
        check_allocation(nbytes, f"{where}: a KV pool of {blocks} blocks of {self.block_size} tokens (K "
                                 f"{list(k_shape)}, V {list(v_shape)} {dtype})")
        return np.empty(k_shape, dtype=dtype), np.empty(v_shape, dtype=dtype)


class ContiguousKVCache(PagedKVCache):
    """The cache of one batch of sequences of one length (implicit mode, :mod:`builder.generation`): a
    :class:`PagedKVCache` without a budget, blocks of 16 tokens (a lone sequence's blocks are consecutive, so
    its keys come back as one slice of the pool, no copy).

    ``ContiguousKVCache(max_seq_len=None, max_layers=MAX_LAYERS)``: ``max_seq_len`` (None: no bound but
    memory) the most tokens a sequence may hold; layer ids below ``max_layers``. Raises ValueError for a
    ``max_seq_len`` or ``max_layers`` that is not a positive int."""

    def __init__(self, max_seq_len: int | None = None, max_layers: int = MAX_LAYERS) -> None:
        super().__init__(None, 16, max_layers, max_seq_len)


def _cache(where: str, cache: Any) -> PagedKVCache:
    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"{where}: the cache argument must be a runtime.PagedKVCache, got {type(cache).__name__}")
    return cache


def kv_cache_append(cache: Any, layer_id: Any, k: Any, v: Any,
                    total_seq_len: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The VM builtin ``vm.builtin.kv_cache_append``: :meth:`PagedKVCache.append` of ``cache``.
    Raises TypeError when ``cache`` is not a :class:`PagedKVCache` (and what ``append`` raises)."""
    return _cache("kv_cache_append", cache).append(layer_id, k, v, total_seq_len)


def kv_cache_update(cache: Any, layer_id: Any, k: Any, v: Any, total_seq_len: Any) -> tuple[np.ndarray, np.ndarray]:
    """The VM builtin ``vm.builtin.kv_cache_update``: :meth:`PagedKVCache.update` of ``cache``.
    Raises TypeError when ``cache`` is not a :class:`PagedKVCache` (and what ``update`` raises)."""
    return _cache("kv_cache_update", cache).update(layer_id, k, v, total_seq_len)


def kv_cache_positions(cache: Any, batch: Any, seq: Any, total_seq_len: Any) -> np.ndarray:
    """The VM builtin ``vm.builtin.kv_cache_positions``: :meth:`PagedKVCache.positions`. Raises TypeError
    when ``cache`` is not a :class:`PagedKVCache` (and what the method raises)."""
    return _cache("kv_cache_positions", cache).positions(batch, seq, total_seq_len)


def kv_cache_attention_mask(cache: Any, batch: Any, total_seq_len: Any) -> np.ndarray:
    """The VM builtin ``vm.builtin.kv_cache_attention_mask``: :meth:`PagedKVCache.attention_mask`. Raises
    TypeError when ``cache`` is not a :class:`PagedKVCache` (and what the method raises)."""
    return _cache("kv_cache_attention_mask", cache).attention_mask(batch, total_seq_len)


def kv_cache_query_positions(cache: Any, layer_id: Any, seq: Any, total_seq_len: Any) -> np.ndarray:
    """The VM builtin ``vm.builtin.kv_cache_query_positions``: :meth:`PagedKVCache.query_positions`. Raises
    TypeError when ``cache`` is not a :class:`PagedKVCache` (and what the method raises)."""
    return _cache("kv_cache_query_positions", cache).query_positions(layer_id, seq, total_seq_len)


#: The VM builtins of the cache, by name (:mod:`core.kv_cache_builtins`), for ``runtime.builtins``.
BUILTINS = {KV_CACHE_APPEND: kv_cache_append, KV_CACHE_UPDATE: kv_cache_update, KV_CACHE_POSITIONS: kv_cache_positions,
            KV_CACHE_ATTENTION_MASK: kv_cache_attention_mask, KV_CACHE_QUERY_POSITIONS: kv_cache_query_positions}
