"""runtime.ContiguousKVCache (issue 14; since issue 43 the implicit mode of runtime.PagedKVCache): appends
per layer, pools growing by doubling, the checks made before anything changes, memory limits, and the VM
builtins ``vm.builtin.kv_cache_update`` / ``kv_cache_query_positions`` called from compiled code (an
``R.Object`` argument, a tuple result, the update an impure ``R.call_packed``), also after a save / load of
the executable and from tampered bytecode."""
import numpy as np
import pytest

import runtime.memory
from builder import compile as build
from builder import nn
from builder.ir.parser import parse
from builder.ir.structural import assert_structural_equal
from builder.nn import spec
from helpers.legacy_kv_cache import kv_cache_update
from runtime import ContiguousKVCache, Executable, VirtualMachine
from runtime.memory import MemoryLimitError
from runtime.builtins import _BUILTINS

RNG = np.random.default_rng(14)


def kv(batch, seq, heads=2, dim=4, dtype="float32", dim_v=None):
    return (RNG.standard_normal((batch, seq, heads, dim)).astype(dtype),
            RNG.standard_normal((batch, seq, heads, dim if dim_v is None else dim_v)).astype(dtype))


@pytest.mark.parametrize("batch", [1, 3])
def test_appends_return_every_token_held_contiguous_and_grow_by_doubling(batch):
    cache = ContiguousKVCache()
    assert cache.sequences == [] and cache.num_layers == 0 and cache.capacity(0) == 0
    ks, vs, returned = [], [], []
    for step, seq in enumerate([5, 1, 1, 14, 1]):
        k, v = kv(batch, seq, dim_v=3)
        ks.append(k)
        vs.append(v)
        total = sum(a.shape[1] for a in ks)
        k_all, v_all = cache.update(0, k, v, total)
        assert k_all.shape == (batch, total, 2, 4) and v_all.shape == (batch, total, 2, 3)
        assert k_all.flags.c_contiguous and v_all.flags.c_contiguous
        np.testing.assert_array_equal(k_all, np.concatenate(ks, axis=1))
        np.testing.assert_array_equal(v_all, np.concatenate(vs, axis=1))
        returned.append((k_all, np.concatenate(ks, axis=1)))
        assert cache.sequences == list(range(batch))
        assert cache.seq_len(batch - 1) == total == cache.layer_seq_len(0)
        assert not k_all.flags.writeable
    # blocks of 16 tokens: the prompt takes one per sequence, 22 tokens two, so the pool doubles
    assert cache.capacity(0) == 2 * batch * 16
    for got, want in returned:     # later appends never changed what was handed out
        np.testing.assert_array_equal(got, want)
    k_view, v_view = cache.view(0)
    assert k_view.shape == (batch, 22, 2, 4) and not k_view.flags.writeable
    np.testing.assert_array_equal(k_view, np.concatenate(ks, axis=1))
    assert cache.nbytes == 2 * batch * 16 * 2 * (4 + 3) * 4


def test_layers_are_independent_and_reset_frees_them():
    cache = ContiguousKVCache()
    k0, v0 = kv(2, 3)
    k1, v1 = kv(2, 3, heads=1, dim=8, dtype="float64")
    cache.update(0, k0, v0, 3)
    assert cache.seq_len(1) == 3 and cache.layer_seq_len(1) == 0
    cache.update(1, k1, v1, 3)
    assert cache.layer_ids == [0, 1] and cache.num_layers == 2
    np.testing.assert_array_equal(cache.view(1)[0], k1)
    cache.reset()
    assert cache.sequences == [] and cache.num_layers == 0 and cache.nbytes == 0
    cache.update(0, *kv(5, 2, heads=3), 2)     # a new batch size after reset
    with pytest.raises(KeyError, match="no layer 1"):
        cache.view(1)


@pytest.mark.parametrize("change, message", [
    (dict(batch=3), "the batch size is 3, but the cache holds 2 sequences"),
    (dict(heads=4), "the number of kv heads is 4, but the layer holds 2"),
    (dict(dim=8), "the key head dim is 8, but the layer holds 4"),
    (dict(dim_v=5), "the value head dim is 5, but the layer holds 4"),
    (dict(dtype="float64"), "k / v have dtype float64, but the layer holds float32"),
])
def test_a_mismatch_with_what_the_layer_holds_is_a_value_error_naming_the_layer(change, message):
    cache = ContiguousKVCache()
    first = kv(2, 3)
    cache.update(7, *first, 3)
    args = dict(batch=2, seq=1, heads=2, dim=4, dtype="float32", dim_v=None) | change
    with pytest.raises(ValueError, match=f"layer 7: {message}"):
        cache.update(7, *kv(**args), 4)
    assert cache.layer_seq_len(7) == 3       # nothing changed
    np.testing.assert_array_equal(cache.view(7)[0], first[0])


def test_total_seq_len_must_be_what_the_layer_holds_after_the_append():
    cache = ContiguousKVCache()
    with pytest.raises(ValueError, match="layer 0: the layer holds 0 tokens, 3 are appended, so it would hold 3, "
                                         "but total_seq_len is 4"):
        cache.update(0, *kv(1, 3), 4)
    assert cache.num_layers == 0
    cache.update(0, *kv(1, 3), 3)
    with pytest.raises(ValueError, match="holds 3 tokens, 1 are appended, so it would hold 4, but total_seq_len is 3"):
        cache.update(0, *kv(1, 1), 3)
    assert cache.seq_len(0) == 3


def test_malformed_arguments_are_refused_before_anything_changes():
    cache = ContiguousKVCache(max_layers=4)
    k, v = kv(1, 2)
    with pytest.raises(TypeError, match="layer_id must be an int"):
        cache.update("0", k, v, 2)
    with pytest.raises(TypeError, match="layer_id must be an int"):
        cache.update(True, k, v, 2)
    with pytest.raises(ValueError, match="layer 4: the layer id must be in 0..3"):
        cache.update(4, k, v, 2)
    with pytest.raises(ValueError, match="layer -1"):
        cache.update(-1, k, v, 2)
    with pytest.raises(TypeError, match="total_seq_len must be an int"):
        cache.update(0, k, v, 2.0)
    with pytest.raises(TypeError, match="k must be a numpy array"):
        cache.update(0, k.tolist(), v, 2)
    with pytest.raises(ValueError, match="v must be 4-D"):
        cache.update(0, k, v[0], 2)
    with pytest.raises(ValueError, match="must agree in batch, seq, kv_heads and dtype"):
        cache.update(0, k, v[:, :1], 2)
    with pytest.raises(ValueError, match="must agree"):
        cache.update(0, k, v.astype("float64"), 2)
    with pytest.raises(ValueError, match="must hold numbers"):
        cache.update(0, k.astype(object), v.astype(object), 2)
    assert cache.num_layers == 0
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_seq_len"):
            ContiguousKVCache(max_seq_len=bad)
    for bad in (0, 1 << 13, "2"):
        with pytest.raises(ValueError, match="max_layers"):
            ContiguousKVCache(max_layers=bad)


def test_max_seq_len_bounds_the_tokens_and_the_capacity():
    cache = ContiguousKVCache(max_seq_len=6)
    cache.update(0, *kv(1, 4), 4)
    cache.update(0, *kv(1, 1), 5)
    cache.update(0, *kv(1, 1), 6)
    with pytest.raises(ValueError, match="layer 0: 7 tokens exceed the cache's max_seq_len 6"):
        cache.update(0, *kv(1, 1), 7)
    with pytest.raises(ValueError, match="exceed the cache's max_seq_len 6"):
        cache.query_positions(0, 1, 7)
    assert cache.seq_len(0) == 6 and cache.capacity(0) == 16


def test_allocations_are_checked_against_the_memory_available(monkeypatch):
    cache = ContiguousKVCache()
    cache.update(0, *kv(1, 4), 4)
    monkeypatch.setattr(runtime.memory, "available_memory", lambda: 100)
    cache.update(0, *kv(1, 1), 5)              # in the first block: nothing to allocate
    with pytest.raises(MemoryLimitError, match="layer 0: a KV pool of 2 blocks of 16 tokens"):
        cache.update(0, *kv(1, 12), 17)        # a second block: the pool of 2 blocks, 2048 bytes > 100
    assert cache.seq_len(0) == 5 and cache.capacity(0) == 16 and cache.layer_seq_len(0) == 5
    with pytest.raises(MemoryLimitError, match="layer 0: 262144 new tokens of the KV cache"):
        cache.update(0, *kv(1, 1 << 18), 5 + (1 << 18))   # the tokens' index entries and keys: 18 MiB
    with pytest.raises(MemoryLimitError, match="layer 1: a KV pool"):
        cache.update(1, *kv(1, 4), 4)
    with pytest.raises(MemoryLimitError, match="the positions of 262144 tokens"):
        cache.query_positions(2, 1 << 18, 1 << 18)   # 2 MiB (a few bytes are not asked for)


def test_query_positions_continue_after_the_tokens_held():
    cache = ContiguousKVCache()
    np.testing.assert_array_equal(cache.query_positions(0, 3, 3), [0, 1, 2])
    cache.update(0, *kv(2, 3), 3)
    pos = cache.query_positions(0, 2, 5)
    assert pos.dtype == np.int64
    np.testing.assert_array_equal(pos, [3, 4])
    np.testing.assert_array_equal(cache.query_positions(1, 2, 2), [0, 1])   # layer 1 holds nothing yet
    with pytest.raises(ValueError, match="layer 0: the layer holds 3 tokens and 2 are added, so it would hold 5, "
                                         "but total_seq_len is 4"):
        cache.query_positions(0, 2, 4)
    with pytest.raises(ValueError, match="would hold 2"):
        cache.query_positions(0, -1, 2)
    with pytest.raises(TypeError, match="seq must be an int"):
        cache.query_positions(0, "2", 5)


def test_the_builtins_refuse_something_that_is_not_a_cache():
    k, v = kv(1, 1)
    with pytest.raises(TypeError, match="the cache argument must be a runtime.PagedKVCache, got ndarray"):
        _BUILTINS["vm.builtin.kv_cache_update"](k, 0, k, v, 1)
    with pytest.raises(TypeError, match="must be a runtime.PagedKVCache, got NoneType"):
        _BUILTINS["vm.builtin.kv_cache_query_positions"](None, 0, 1, 1)
    with pytest.raises(TypeError, match="kv_cache_positions: the cache argument must be a runtime.PagedKVCache"):
        _BUILTINS["vm.builtin.kv_cache_positions"](None, 1, 1, 1)
    with pytest.raises(TypeError, match="kv_cache_attention_mask: the cache argument must be a runtime.PagedKVCache"):
        _BUILTINS["vm.builtin.kv_cache_attention_mask"]([], 1, 1)


class CacheUser(nn.Module):
    """y = k_all - v_all with k, v two halves of a projection of x, positions as int64 output: the builtins an
    executable saved before issue 43 calls (the compiler emits ``kv_cache_append`` now; the runtime keeps
    ``kv_cache_update``)."""

    def __init__(self):
        self.proj = nn.Linear(4, 16, bias=False)

    def step(self, x, cache, total_seq_len):
        b, s = x.shape[0], x.shape[1]
        pos = nn.op.kv_cache_query_positions(cache, 3, s, total_seq_len)
        k, v = nn.op.split(nn.op.reshape(self.proj(x), [b, s, 4, 4]), 2, axis=2)
        k_all, v_all = kv_cache_update(cache, 3, k, v, total_seq_len)
        return k_all - v_all, pos


@pytest.fixture(scope="module")
def cache_exe():
    mod, params = CacheUser().export_tvm(spec={"step": {
        "x": spec.Tensor(["batch", "seq", 4], "float32"), "cache": spec.Object(), "total_seq_len": spec.Int()}})
    return mod, build(mod)


def test_export_takes_the_cache_as_an_object_and_the_length_as_a_shape(cache_exe):
    mod, exe = cache_exe
    text = mod.script()
    assert ('def step(x: R.Tensor(("batch", "seq", 4), dtype="float32"), cache: R.Object, '
            'total_seq_len: R.Shape(["total_seq_len_1"]), proj_weight: R.Tensor((16, 4), dtype="float32"))') in text
    assert ('R.call_packed("vm.builtin.kv_cache_update", cache, R.prim_value(3), split_0, split_1, '
            'R.prim_value(total_seq_len_1), sinfo_args=R.Tuple(R.Tensor((batch, total_seq_len_1, 2, 4), '
            'dtype="float32"), R.Tensor((batch, total_seq_len_1, 2, 4), dtype="float32")))') in text
    assert "@R.function(pure=False)\n    def step(" in text     # the update is impure: it writes the cache
    assert_structural_equal(parse(text), mod)
    assert ('R.call_pure_packed("vm.builtin.kv_cache_query_positions", cache, R.prim_value(3), R.prim_value(seq), '
            'R.prim_value(total_seq_len_1), sinfo_args=(R.Tensor((seq,), dtype="int64"),))') in text
    assert exe.get_function_params("step") == ["x", "cache", "total_seq_len", "proj_weight"]
    assert "call_builtin vm.builtin.kv_cache_update(%1, 3, " in exe.bytecode


@pytest.mark.parametrize("reload", [False, True])
def test_compiled_code_updates_the_cache_across_calls(cache_exe, reload):
    _, exe = cache_exe
    if reload:
        exe = Executable.load(exe.save())
    vm = VirtualMachine(exe)
    w = RNG.standard_normal((16, 4)).astype("float32")
    cache = ContiguousKVCache()
    xs = [RNG.standard_normal((2, s, 4)).astype("float32") for s in (3, 1, 2)]
    total = 0
    for x in xs:
        total += x.shape[1]
        y, pos = vm["step"](x, cache, total, w)
        np.testing.assert_array_equal(pos, np.arange(total - x.shape[1], total))
    kv_all = (np.concatenate(xs, axis=1) @ w.T).reshape(2, total, 4, 4)
    np.testing.assert_allclose(y, kv_all[:, :, :2] - kv_all[:, :, 2:], rtol=1e-5, atol=1e-6)
    assert cache.layer_ids == [3] and cache.seq_len(1) == 6
    with pytest.raises(ValueError, match="layer 3: the layer holds 6 tokens and 1 are added, so it would hold 7, "
                                         "but total_seq_len is 6"):
        vm["step"](xs[1], cache, 6, w)
    with pytest.raises(TypeError, match="must be a runtime.PagedKVCache, got str"):
        vm["step"](xs[1], "cache", 7, w)


def _tampered(exe, builtin, edit):
    """``exe`` with the arguments of its call of ``builtin`` edited, saved and loaded back."""
    fn = exe.functions["step"]
    bad = {**fn, "instructions": [[*i[:3], [list(a) for a in i[3]]] if i[0] == "call_builtin" else list(i)
                                  for i in fn["instructions"]]}
    for ins in bad["instructions"]:
        if ins[0] == "call_builtin" and ins[2] == builtin:
            edit(ins[3])
    tampered = Executable({"step": bad}, exe.kernels, exe.object_code, exe.constants, exe.target)
    return VirtualMachine(Executable.load(tampered.save()))    # well-formed bytecode: accepted on load


def test_tampered_bytecode_reaches_the_builtin_checks_not_a_crash(cache_exe):
    _, exe = cache_exe
    x = np.zeros((1, 2, 4), "float32")
    w = np.zeros((16, 4), "float32")

    def x_as_cache(args):
        args[0] = ["reg", 0]

    vm = _tampered(exe, "vm.builtin.kv_cache_update", x_as_cache)
    with pytest.raises(TypeError, match="kv_cache_update: the cache argument must be a runtime.PagedKVCache"):
        vm["step"](x, ContiguousKVCache(), 2, w)

    def huge(args):
        args[2] = args[3] = ["int", 1 << 40]

    vm = _tampered(exe, "vm.builtin.kv_cache_query_positions", huge)
    with pytest.raises(MemoryLimitError, match="kv_cache_query_positions: layer 3: the positions of 1099511627776"):
        vm["step"](x, ContiguousKVCache(), 2, w)

    def huge_total(args):
        args[4] = ["int", 1 << 40]

    vm = _tampered(exe, "vm.builtin.kv_cache_update", huge_total)
    with pytest.raises(ValueError, match="kv_cache_update: layer 3: the layer holds 0 tokens, 2 are appended"):
        vm["step"](x, ContiguousKVCache(), 2, w)
