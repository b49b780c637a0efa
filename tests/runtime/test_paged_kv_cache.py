"""runtime.PagedKVCache (issue 43): sequences that come and go (add / fork / remove, reference-counted blocks),
the budget (KVCacheFullError before anything changes, blocks freed), begin_forward's ragged calls (total_seq_len,
each row's keys right-aligned with zeros before them, positions and the attention mask), fork's copy-on-write,
and the bounds of every argument. The reference is a plain dict of each sequence's tokens, concatenated."""
import numpy as np
import pytest

import runtime.memory
from runtime import ContiguousKVCache, KVCacheFullError, PagedKVCache
from runtime.builtins import _BUILTINS
from runtime.memory import MemoryLimitError

RNG = np.random.default_rng(43)
HEADS, DIM, DIM_V = 2, 3, 5


def kv(batch, seq, dtype="float32"):
    return (RNG.standard_normal((batch, seq, HEADS, DIM)).astype(dtype),
            RNG.standard_normal((batch, seq, HEADS, DIM_V)).astype(dtype))


class Reference:
    """Each sequence's keys / values per layer, as lists of (seq, heads, dim) arrays."""

    def __init__(self):
        self.k, self.v = {}, {}

    def append(self, layer, sid, k, v):
        self.k.setdefault((layer, sid), []).append(k)
        self.v.setdefault((layer, sid), []).append(v)

    def fork(self, parent, child, layers):
        for layer in layers:
            self.k[(layer, child)] = list(self.k[(layer, parent)])
            self.v[(layer, child)] = list(self.v[(layer, parent)])

    def full(self, layer, sid):
        return np.concatenate(self.k[(layer, sid)]), np.concatenate(self.v[(layer, sid)])


def step(cache, ref, sids, seq, layers=(0, 1)):
    """One declared call of ``layers`` appending ``seq`` tokens to ``sids``; checks every returned row against
    the reference (right-aligned, zeros before) and returns total_seq_len."""
    held = [cache.seq_len(s) for s in sids]
    total = cache.begin_forward(sids, seq)
    assert total == max(held) + seq
    assert [cache.seq_len(s) for s in sids] == [h + seq for h in held]
    np.testing.assert_array_equal(cache.positions(len(sids), seq, total),
                                  [np.arange(h, h + seq) for h in held])
    mask = cache.attention_mask(len(sids), total)
    for layer in layers:
        k, v = kv(len(sids), seq)
        k_all, v_all = cache.update(layer, k, v, total)
        assert k_all.shape == (len(sids), total, HEADS, DIM) and v_all.shape == (len(sids), total, HEADS, DIM_V)
        assert k_all.flags.c_contiguous and not k_all.flags.writeable
        for r, sid in enumerate(sids):
            ref.append(layer, sid, k[r], v[r])
            want_k, want_v = ref.full(layer, sid)
            n = len(want_k)
            np.testing.assert_array_equal(mask[r], np.arange(total) >= total - n)
            np.testing.assert_array_equal(k_all[r, total - n:], want_k)
            np.testing.assert_array_equal(v_all[r, total - n:], want_v)
            assert not k_all[r, : total - n].any() and not v_all[r, : total - n].any()
    return total


def test_ragged_calls_return_every_row_right_aligned_with_zeros_before():
    cache, ref = PagedKVCache(max_tokens=200, block_size=4), Reference()
    for sid, length in zip((7, 2, 30), (5, 9, 1)):
        cache.add_sequence(sid)
        assert step(cache, ref, [sid], length) == length      # a prefill, alone
    assert cache.sequences == [2, 7, 30]
    for _ in range(3):                                          # decode together: total is the longest + 1
        step(cache, ref, [7, 2, 30], 1)
    assert [cache.seq_len(s) for s in (7, 2, 30)] == [8, 12, 4]
    step(cache, ref, [30, 7], 3)                                # a subset of the rows, in another order, seq 3
    for sid in (2, 7, 30):                                      # what each sequence holds, layer by layer
        for layer in (0, 1):
            k, v = cache.view(layer, sid)
            np.testing.assert_array_equal(k[0], ref.full(layer, sid)[0])
            np.testing.assert_array_equal(v[0], ref.full(layer, sid)[1])
    # 8 + 3, 12 and 4 + 3 tokens in blocks of 4: 3 + 3 + 2 blocks
    assert cache.free_blocks == 50 - 8 and cache.num_blocks == 50
    assert cache.capacity(0) >= 8 * 4 and cache.capacity(1) == cache.capacity(0)   # pools grown by doubling
    assert cache.nbytes == 2 * cache.capacity(0) * HEADS * (DIM + DIM_V) * 4
    with pytest.raises(ValueError, match="sequences hold different numbers of tokens"):
        cache.view(0)


def test_the_budget_refuses_a_call_before_anything_changes_and_removal_frees_blocks():
    cache, ref = PagedKVCache(max_tokens=40, block_size=4), Reference()
    assert (cache.num_blocks, cache.free_blocks) == (10, 10)
    for sid in range(3):
        cache.add_sequence(sid)
        step(cache, ref, [sid], 10)                             # 3 blocks each
    assert cache.free_blocks == 1
    assert cache.blocks_needed([0], 3) == 1 and cache.blocks_needed([0, 1], 2) == 0 and cache.blocks_needed([0, 1], 3) == 2
    step(cache, ref, [0], 3)                                    # 13 tokens: a 4th block
    assert cache.free_blocks == 0
    capacity = cache.capacity(0)
    for args in (([1], 3), ([1, 2], 3), ([2], 100)):
        with pytest.raises(KVCacheFullError, match=r"begin_forward: \d+ new tokens need \d+ new blocks of 4 tokens, "
                                                   r"but only 0 of the 10 blocks are free \(max_tokens 40\)"):
            cache.begin_forward(*args)
    assert [cache.seq_len(s) for s in range(3)] == [13, 10, 10] and cache.free_blocks == 0
    step(cache, ref, [0, 1, 2], 1)                              # 14, 11, 11 tokens: still in their blocks
    cache.remove_sequence(2)
    assert cache.sequences == [0, 1] and cache.free_blocks == 3
    step(cache, ref, [1], 3)                                    # a freed block, reused: the pools do not grow
    assert cache.free_blocks == 2 and cache.capacity(0) == capacity
    with pytest.raises(KeyError, match="no sequence 2"):
        cache.seq_len(2)
    for sid in (0, 1):
        cache.remove_sequence(sid)
    assert cache.free_blocks == 10 and cache.sequences == []


def test_fork_shares_full_blocks_and_copies_the_partial_one():
    cache, ref = PagedKVCache(max_tokens=64, block_size=4), Reference()
    cache.add_sequence(0)
    step(cache, ref, [0], 6)                                    # one full block, one partial (2 of 4)
    cache.fork_sequence(0, 1)
    ref.fork(0, 1, (0, 1))
    assert cache.seq_len(1) == 6 and cache.free_blocks == 16 - 3     # the full block shared, the partial copied
    step(cache, ref, [1], 1)                                    # the child appends into its copy ...
    step(cache, ref, [0], 1)                                    # ... the parent into its own block
    step(cache, ref, [0, 1], 3)
    for layer in (0, 1):                                        # neither changed the other
        for sid in (0, 1):
            np.testing.assert_array_equal(cache.view(layer, sid)[0][0], ref.full(layer, sid)[0])
    assert not np.array_equal(ref.full(0, 0)[0][6:], ref.full(0, 1)[0][6:])
    cache.fork_sequence(1, 2)                                   # 10 tokens: 2 full blocks shared, 1 copied
    ref.fork(1, 2, (0, 1))
    cache.remove_sequence(1)                                    # the shared blocks stay with the fork
    step(cache, ref, [2, 0], 2)
    cache.remove_sequence(0)
    cache.remove_sequence(2)
    assert cache.free_blocks == 16
    cache.add_sequence(5)
    cache.fork_sequence(5, 6)                                   # an empty parent: nothing to share or copy
    assert cache.seq_len(6) == 0 and cache.free_blocks == 16
    full = PagedKVCache(max_tokens=8, block_size=4)
    full.add_sequence(0)
    full.begin_forward([0], 7)
    full.update(0, *kv(1, 7), 7)
    with pytest.raises(KVCacheFullError, match="fork_sequence: 3 new tokens need 1 new blocks"):
        full.fork_sequence(0, 1)
    assert full.sequences == [0] and full.free_blocks == 0


def test_a_call_is_checked_against_what_begin_forward_declared():
    cache = PagedKVCache(block_size=4)
    for sid in (0, 1):
        cache.add_sequence(sid)
        cache.begin_forward([sid], 2 + sid)
        cache.update(0, *kv(1, 2 + sid), 2 + sid)
    total = cache.begin_forward([0, 1], 1)
    assert total == 4
    for args, match in [((kv(1, 1), 4), "the batch size 1, seq 1 and total_seq_len 4 differ from the call "
                                        r"begin_forward declared \(2 rows appending 1, total_seq_len 4\)"),
                        ((kv(2, 2), 4), "the batch size 2, seq 2 and total_seq_len 4 differ"),
                        ((kv(2, 1), 5), "the batch size 2, seq 1 and total_seq_len 5 differ")]:
        with pytest.raises(ValueError, match=f"kv_cache_update: layer 0: {match}"):
            cache.update(0, *args[0], args[1])
    with pytest.raises(ValueError, match="layer 1: the layer holds none of the tokens the sequences hold"):
        cache.update(1, *kv(2, 1), 4)
    cache.update(0, *kv(2, 1), 4)
    with pytest.raises(ValueError, match="layer 0: the layer was updated already in this call"):
        cache.update(0, *kv(2, 1), 4)
    with pytest.raises(ValueError, match="kv_cache_positions: the batch size 3"):
        cache.positions(3, 1, 4)
    with pytest.raises(ValueError, match="kv_cache_attention_mask: batch 2 and total_seq_len 3 differ"):
        cache.attention_mask(2, 3)
    with pytest.raises(ValueError, match="rows hold \\[2, 3\\] tokens"):     # the shared positions of old code
        cache.query_positions(0, 1, 4)
    cache.end_forward()
    for call in (lambda: cache.update(0, *kv(2, 1), 5), lambda: cache.positions(2, 1, 5),
                 lambda: cache.attention_mask(2, 5), lambda: cache.query_positions(0, 1, 5)):
        with pytest.raises(ValueError, match="call begin_forward"):
            call()
    assert [cache.seq_len(s) for s in (0, 1)] == [3, 4]
    total = cache.begin_forward([1, 0], 1)                      # one length: the shared positions work
    cache.begin_forward([0], 2)                                 # a new begin_forward ends the previous call
    np.testing.assert_array_equal(cache.query_positions(3, 2, 6), [4, 5])


def test_sequence_arguments_are_checked():
    cache = PagedKVCache(max_tokens=64, block_size=4, max_seq_len=10)
    cache.add_sequence(0)
    with pytest.raises(ValueError, match="holds a sequence 0 already"):
        cache.add_sequence(0)
    for bad in (-1, 1 << 63):
        with pytest.raises(ValueError, match="a sequence id must be an int in 0..2\\*\\*63-1"):
            cache.add_sequence(bad)
    for bad in ("1", 1.0, True, None):
        with pytest.raises(TypeError, match="add_sequence: a sequence id must be an int"):
            cache.add_sequence(bad)
    with pytest.raises(KeyError, match="remove_sequence: the cache holds no sequence 4"):
        cache.remove_sequence(4)
    with pytest.raises(KeyError, match="fork_sequence: the cache holds no sequence 4"):
        cache.fork_sequence(4, 5)
    with pytest.raises(ValueError, match="fork_sequence: the cache holds a sequence 0 already"):
        cache.fork_sequence(0, 0)
    cache.add_sequence(1)
    for args, err, match in [
            (([], 1), ValueError, "at least one row"),
            (([0, 0], 1), ValueError, "repeats a sequence"),
            (([0, 1, 2], 1), ValueError, "3 rows, but the cache holds 2 sequences"),
            (([0, 9], 1), KeyError, "no sequence 9"),
            (([0, 1], [1, 2]), ValueError, "append one number of tokens"),
            (([0, 1], [1]), ValueError, "1 append lengths for 2 rows"),
            (([0], 0), ValueError, "must be positive"),
            (([0], -3), ValueError, "must be positive"),
            (([0], 11), ValueError, "sequence 0 would hold 11 tokens, above the cache's max_seq_len 10"),
            (([0], 1 << 60), ValueError, "max_seq_len"),
            (("01", 1), TypeError, "seq_ids must be a sequence of ints"),
            ((0, 1), TypeError, "seq_ids must be a sequence of ints"),
            (([0.0], 1), TypeError, "a sequence id must be an int"),
            (([0], 1.0), TypeError, "append_lengths must be an int or a sequence of ints"),
            (([0], [True]), TypeError, "an append length must be an int")]:
        with pytest.raises(err, match=match):
            cache.begin_forward(*args)
        with pytest.raises(err, match=match):
            cache.blocks_needed(*args)
    assert cache.free_blocks == 16 and [cache.seq_len(s) for s in (0, 1)] == [0, 0]
    assert cache.begin_forward(np.array([1, 0]), np.array([2, 2])) == 2      # numpy ids and lengths


def test_huge_lengths_without_a_budget_are_refused_by_the_memory_check(monkeypatch):
    cache = PagedKVCache()
    cache.add_sequence(0)
    with pytest.raises(MemoryLimitError, match="begin_forward: 1099511627776 new tokens of the KV cache"):
        cache.begin_forward([0], 1 << 40)
    assert cache.seq_len(0) == 0 and cache.free_blocks is None
    cache.begin_forward([0], 3)
    cache.update(0, *kv(1, 3), 3)
    monkeypatch.setattr(runtime.memory, "available_memory", lambda: 1000)
    with pytest.raises(MemoryLimitError, match="kv_cache_positions: the positions of 1000 x 1000 tokens"):
        PagedKVCache().positions(1000, 1000, 1000)
    with pytest.raises(MemoryLimitError, match="kv_cache_attention_mask: the mask of 1000 x 2000 keys"):
        PagedKVCache().attention_mask(1000, 2000)
    many = PagedKVCache(block_size=4)
    for sid in range(2):
        many.add_sequence(sid)
    many.begin_forward([0], 3)
    many.update(0, *kv(1, 3), 3)
    monkeypatch.setattr(runtime.memory, "available_memory", lambda: 1 << 30)
    total = many.begin_forward([1, 0], 1 << 13)
    monkeypatch.setattr(runtime.memory, "available_memory", lambda: 1000)
    with pytest.raises(MemoryLimitError, match="layer 0: the keys and values of 2 rows x 8195 columns"):
        many.update(0, *kv(2, 1 << 13), total)   # 2 x 8195 x 2 x 8 x 4 bytes > 1000
    assert many.layer_seq_len(0) == 8195 and many.capacity(0) == 4   # the pool did not grow


def test_constructor_arguments_are_checked():
    for kwargs, match in [(dict(max_tokens=0), "max_tokens must be a positive int or None"),
                          (dict(max_tokens=2.5), "max_tokens"), (dict(block_size=0), "block_size must be an int"),
                          (dict(block_size=1 << 17), "block_size"), (dict(block_size=True), "block_size"),
                          (dict(max_layers=0), "max_layers"), (dict(max_seq_len=-1), "max_seq_len")]:
        with pytest.raises(ValueError, match=f"PagedKVCache: {match}"):
            PagedKVCache(**kwargs)
    assert PagedKVCache(max_tokens=17, block_size=16).num_blocks == 2


def test_implicit_mode_makes_sequences_0_to_batch_and_refuses_mixing():
    cache = PagedKVCache(block_size=4)
    np.testing.assert_array_equal(cache.positions(2, 3, 3), [[0, 1, 2], [0, 1, 2]])
    assert cache.attention_mask(2, 3).all() and cache.attention_mask(2, 3).shape == (2, 3)
    k, v = kv(2, 3)
    k_all, _ = cache.update(0, k, v, 3)
    np.testing.assert_array_equal(k_all, k)
    assert cache.sequences == [0, 1] and cache.seq_len(1) == 3
    np.testing.assert_array_equal(cache.positions(2, 2, 5), [[3, 4], [3, 4]])
    with pytest.raises(ValueError, match="kv_cache_positions: the batch size is 3, but the cache holds 2"):
        cache.positions(3, 2, 5)
    with pytest.raises(ValueError, match="kv_cache_positions: the sequences hold 3 tokens, 2 are appended, so they "
                                         "would hold 5, but total_seq_len is 6"):
        cache.positions(2, 2, 6)
    cache.add_sequence(9)                                       # from now on: explicit
    with pytest.raises(ValueError, match="kv_cache_update: layer 0: the cache's sequences are managed explicitly"):
        cache.update(0, *kv(3, 1), 4)
    total = cache.begin_forward([9, 0], 1)
    assert total == 4
    np.testing.assert_array_equal(cache.attention_mask(2, 4), [[False, False, False, True], [True] * 4])
    cache.reset()
    assert cache.sequences == [] and cache.nbytes == 0
    cache.update(0, *kv(5, 1), 1)                               # implicit again after reset, another batch
    assert cache.sequences == [0, 1, 2, 3, 4]


def test_contiguous_cache_is_the_implicit_paged_cache_and_a_lone_sequence_comes_back_without_a_copy():
    cache = ContiguousKVCache(max_seq_len=100)
    assert isinstance(cache, PagedKVCache) and cache.block_size == 16 and cache.max_seq_len == 100
    ks = []
    for seq in (20, 1, 15):
        k, v = kv(1, seq)
        ks.append(k)
        total = sum(a.shape[1] for a in ks)
        k_all, _ = cache.update(0, k, v, total)
        np.testing.assert_array_equal(k_all, np.concatenate(ks, axis=1))
        assert k_all.base is not None                          # a slice of the pool's consecutive blocks


def test_the_builtins_are_registered_under_the_shared_names():
    from core.kv_cache_builtins import (KV_CACHE_ATTENTION_MASK, KV_CACHE_POSITIONS, KV_CACHE_QUERY_POSITIONS,
                                        KV_CACHE_UPDATE)
    cache = PagedKVCache()
    cache.add_sequence(3)
    cache.begin_forward([3], 2)
    k, v = kv(1, 2)
    k_all, _ = _BUILTINS[KV_CACHE_UPDATE](cache, 0, k, v, 2)
    np.testing.assert_array_equal(k_all, k)
    np.testing.assert_array_equal(_BUILTINS[KV_CACHE_POSITIONS](cache, 1, 2, 2), [[0, 1]])
    np.testing.assert_array_equal(_BUILTINS[KV_CACHE_ATTENTION_MASK](cache, 1, 2), [[True, True]])
    np.testing.assert_array_equal(_BUILTINS[KV_CACHE_QUERY_POSITIONS](cache, 0, 2, 2), [0, 1])


def _gathered(pool, table, lengths, r):
    """Row ``r``'s keys read through the block table, in token order (as the paged attention reads them)."""
    bs = pool.shape[1]
    return np.stack([pool[table[r, j // bs], j % bs] for j in range(int(lengths[r]))])


def test_append_hands_over_the_pools_block_table_and_lengths_without_a_copy():
    """``append`` (vm.builtin.kv_cache_append) writes as ``update`` does and returns the layer's own pools
    (read-only views of the current arrays, also after they grew), the rows' block table (int32, the blocks in
    token order, not contiguous after forks and removals; 0 past a row's blocks) and lengths ``held + seq``; every
    layer's pool holds one number of blocks; the layers of a call share the table. The pool views are the same
    objects call after call until a pool is replaced (a kernel run checks them once), new ones after."""
    from core.kv_cache_builtins import KV_CACHE_APPEND
    cache, ref = PagedKVCache(max_tokens=400, block_size=4), Reference()
    seen: dict = {}                       # layer -> (pool arrays, views) of the last call
    for sid, n in ((0, 6), (1, 3), (2, 9)):
        cache.add_sequence(sid)
        step(cache, ref, [sid], n)
    cache.fork_sequence(2, 3)
    ref.fork(2, 3, (0, 1))
    cache.remove_sequence(1)
    replaced: list = []
    for rows, seq in (([3, 0, 2], 1), ([0, 3], 5), ([2], 30), ([3, 2, 0], 1)):   # [2] 30: the pools double
        held = [cache.seq_len(s) for s in rows]
        total = cache.begin_forward(rows, seq)
        tables = []
        for layer in (0, 1):
            k, v = kv(len(rows), seq)
            k_pool, v_pool, table, lengths = _BUILTINS[KV_CACHE_APPEND](cache, layer, k, v, total)
            own = cache._layers[layer]
            assert np.shares_memory(k_pool, own.k) and k_pool.shape == own.k.shape and not k_pool.flags.writeable
            assert np.shares_memory(v_pool, own.v) and v_pool.shape == own.v.shape and not v_pool.flags.writeable
            if layer in seen:
                same_pools = seen[layer][0][0] is own.k and seen[layer][0][1] is own.v
                assert (seen[layer][1][0] is k_pool and seen[layer][1][1] is v_pool) == same_pools
                replaced.append(not same_pools)
            seen[layer] = ((own.k, own.v), (k_pool, v_pool))
            assert table.dtype == lengths.dtype == np.int32 and not table.flags.writeable
            np.testing.assert_array_equal(lengths, [h + seq for h in held])
            assert table.shape == (len(rows), max(-(-int(n) // 4) for n in lengths))
            for r, sid in enumerate(rows):
                ref.append(layer, sid, k[r], v[r])
                used = -(-int(lengths[r]) // 4)
                assert (table[r, used:] == 0).all() and (table[r, :used] < k_pool.shape[0]).all()
                np.testing.assert_array_equal(_gathered(k_pool, table, lengths, r), ref.full(layer, sid)[0])
                np.testing.assert_array_equal(_gathered(v_pool, table, lengths, r), ref.full(layer, sid)[1])
            tables.append(table)
        assert tables[0] is tables[1]
        assert cache.capacity(0) == cache.capacity(1)
    assert np.diff(table[1, :9]).tolist() != [1] * 8       # sequence 2's blocks: not one run of ids
    assert replaced[:2] == [False, False] and replaced[2:4] == [True, True]   # [2] 30 grew the pools
    # a call that failed between its layers' appends leaves a pool behind: the next one catches it up
    cache.begin_forward([2], 100)
    cache.append(0, *kv(1, 100), cache.seq_len(2))
    cache.begin_forward([2], 1)
    assert cache.capacity(1) < cache.capacity(0)
    for layer in (1, 0):
        cache.append(layer, *kv(1, 1), cache.seq_len(2))
    assert cache.capacity(0) == cache.capacity(1)


def test_the_implicit_mode_hands_over_its_pools_too():
    """builder.generation's plain loop (ContiguousKVCache, no begin_forward) takes the same path: rows 0 ..
    batch-1 of one length, their table and lengths; the same errors as update."""
    cache = ContiguousKVCache()
    ks = []
    for seq in (20, 1, 15):
        k, v = kv(2, seq)
        ks.append(k)
        total = sum(a.shape[1] for a in ks)
        k_pool, _, table, lengths = cache.append(0, k, v, total)
        np.testing.assert_array_equal(lengths, [total, total])
        for r in range(2):
            np.testing.assert_array_equal(_gathered(k_pool, table, lengths, r), np.concatenate(ks, axis=1)[r])
    with pytest.raises(ValueError, match="kv_cache_append: layer 0: the layer holds 36 tokens, 1 are appended, so "
                                         "it would hold 37, but total_seq_len is 5"):
        cache.append(0, *kv(2, 1), 5)
    with pytest.raises(TypeError, match="kv_cache_append: the cache argument must be a runtime.PagedKVCache"):
        _BUILTINS["vm.builtin.kv_cache_append"]([], 0, *kv(2, 1), 5)
