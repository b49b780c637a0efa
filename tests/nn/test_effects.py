"""Effects: the KV cache (TVM's ``nn.KVCache`` export text, VM builtins, state across calls) and
the IO effect (``nn.op.print_`` / ``debug_func`` under ``debug=True``), exported and run."""
import numpy as np
import pytest

import runtime
from builder import nn
from builder.ir.verifier import IRVerifyError
from builder.nn import spec
from runtime.vm import AttentionKVCache

RNG = np.random.default_rng(1)

# TVM's test_kv_cache (tests/python/relax/test_frontend_nn_modules.py), as TVM prints it
KV_CACHE_EXPECTED = '''# from tvm.script import ir as I
# from tvm.script import relax as R

@I.ir_module
class Module:
    @R.function
    def _initialize_effect() -> R.Tuple(R.Object, R.Object):
        with R.dataflow():
            _io: R.Object = R.null_value()
            lv: R.Tensor((8, 2, 4), dtype="float32") = R.zeros(R.shape([8, 2, 4]), dtype="float32")
            cache: R.Object = R.call_pure_packed("vm.builtin.attention_kv_cache_create", lv, R.shape([8, 2, 4]), R.prim_value(0), sinfo_args=(R.Object,))
            lv1: R.Tuple(R.Object, R.Object) = _io, cache
            gv: R.Tuple(R.Object, R.Object) = lv1
            R.output(gv)
        return gv

    @R.function
    def forward(x: R.Tensor((2, 4), dtype="float32"), _io: R.Object, cache: R.Object) -> R.Tuple(R.Tensor((4, 2, 4), dtype="float32"), R.Tuple(R.Object, R.Object)):
        R.func_attr({"num_input": 3})
        with R.dataflow():
            lv2: R.Object = R.call_inplace_packed("vm.builtin.attention_kv_cache_append", cache, x, inplace_indices=[0], sinfo_args=(R.Object,))
            lv3: R.Tensor((4, 2, 4), dtype="float32") = R.call_pure_packed("vm.builtin.attention_kv_cache_view", lv2, R.shape([4, 2, 4]), sinfo_args=(R.Tensor((4, 2, 4), dtype="float32"),))
            gv1: R.Tuple(R.Tensor((4, 2, 4), dtype="float32"), R.Tuple(R.Object, R.Object)) = lv3, (_io, lv2)
            R.output(gv1)
        return gv1
'''


class KVCacheTest(nn.Module):
    def __init__(self):
        self.cache = nn.KVCache(8, [2, 4])

    def forward(self, x):
        self.cache.append(x)
        return self.cache.view(4)


def test_kv_cache_export_matches_tvm():
    mod, params = KVCacheTest().export_tvm(spec={"forward": {"x": spec.Tensor((2, 4), "float32")}},
                                           debug=True)
    assert mod.script() == KV_CACHE_EXPECTED
    assert params == []


class Decoder(nn.Module):
    """Keys of every step so far, projected: a cache that grows across calls."""

    def __init__(self):
        self.proj = nn.Linear(3, 3, bias=False)
        self.layers = nn.ModuleList([_CacheLayer()])

    def forward(self, x, total):
        return self.layers[0](self.proj(x), total)


class _CacheLayer(nn.Module):
    def __init__(self):
        self.k_cache = nn.KVCache(2, [3])

    def forward(self, k, total):
        self.k_cache.append(k)
        return self.k_cache.view(total) * 2.0


DECODER_SPEC = {"forward": {"x": spec.Tensor(("n", 3), "float32"), "total": int}}


def test_kv_cache_names_inputs_by_path_and_counts_effects():
    mod, _ = Decoder().export_tvm(spec=DECODER_SPEC)
    text = mod.script()
    assert ("def forward(x: R.Tensor((\"n\", 3), dtype=\"float32\"), total: R.Shape([\"total_1\"]), "
            "layers_0_k_cache: R.Object, proj_weight: R.Tensor((3, 3), dtype=\"float32\"))") in text
    assert 'R.func_attr({"num_input": 3})' in text
    assert ('layers_0_k_cache: R.Object = R.call_pure_packed("vm.builtin.attention_kv_cache_create", '
            'lv, R.shape([2, 3]), R.prim_value(0), sinfo_args=(R.Object,))') in text
    assert 'R.shape([total_1, 3]), sinfo_args=(R.Tensor((total_1, 3), dtype="float32"),))' in text


def test_kv_cache_state_persists_across_calls():
    m = Decoder()
    m.proj.weight.data = RNG.standard_normal((3, 3)).astype("float32")
    f = m.jit(spec=DECODER_SPEC)
    w = m.proj.weight.data.astype(np.float64)
    seen = np.zeros((0, 3))
    for step, n in enumerate([1, 2, 3, 1]):                      # 7 rows: grows past 2 and 4
        x = RNG.standard_normal((n, 3)).astype("float32")
        seen = np.concatenate([seen, x.astype(np.float64) @ w.T])
        np.testing.assert_allclose(f["forward"](x, len(seen)), seen * 2.0, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="requested 3 rows, but the cache holds 8"):
        f["forward"](np.zeros((1, 3), "float32"), 3)
    f.reset_effects()
    x = np.ones((2, 3), "float32")
    np.testing.assert_allclose(f["forward"](x, 2), 2.0 * (x @ w.T), rtol=1e-5, atol=1e-5)


def test_kv_cache_rejects_another_dtype_and_use_outside_export():
    class M(nn.Module):
        def __init__(self):
            self.c = nn.KVCache(4, [2], dtype="float16")

        def forward(self, x):
            self.c.append(x)
            return x

    with pytest.raises(TypeError, match='KVCache has been set to use dtype "float16", but got "float32"'):
        M().export_tvm(spec={"forward": {"x": spec.Tensor((1, 2), "float32")}})
    with pytest.raises(RuntimeError, match="only available inside an exported method"):
        nn.KVCache(4, [2]).view(1)
    cache = nn.KVCache(4, [2])
    cache.to("float16")
    assert cache.dtype == "float16"


def test_attention_kv_cache_builtin():
    c = AttentionKVCache(np.zeros((2, 3), "float32"), (2, 3), 0)
    assert c.fill_count == 0 and c.view().shape == (0, 3)
    c.append(np.arange(3, dtype="float32"))                                # one row
    c.append(np.arange(6, dtype="float32").reshape(2, 3) + 10)             # two rows: past the reservation
    assert c.fill_count == 3
    first = c.view((3, 3))
    np.testing.assert_array_equal(first, [[0, 1, 2], [10, 11, 12], [13, 14, 15]])
    rows = np.arange(40 * 3, dtype="float32").reshape(40, 3)
    c.append(rows)                                                         # over several blocks of the paged cache
    np.testing.assert_array_equal(c.view(), np.concatenate([first, rows]))
    np.testing.assert_array_equal(first, [[0, 1, 2], [10, 11, 12], [13, 14, 15]])   # a view stays as it was
    assert isinstance(c._cache, runtime.PagedKVCache) and c._cache.seq_len(0) == 43
    units = AttentionKVCache(np.zeros((1, 2, 2), "float16"), (8, 2, 2), 0)  # rows of any shape
    units.append(np.ones((2, 2), "float16")).append(np.full((1, 2, 2), 2, "float16"))
    np.testing.assert_array_equal(units.view(), [np.ones((2, 2)), np.full((2, 2), 2)])
    assert units.view().dtype == np.float16
    with pytest.raises(ValueError, match="dtype mismatch: cache float32, value float64"):
        c.append(np.zeros((1, 3)))
    with pytest.raises(ValueError, match=r"value of shape \(1, 4\) does not fit rows of shape \(3,\)"):
        c.append(np.zeros((1, 4), "float32"))
    with pytest.raises(ValueError, match=r"requested rows of shape \(2,\)"):
        c.view((43, 2))
    huge = AttentionKVCache(np.zeros((1, 3), "float32"), (1 << 50, 3), 0)   # an executable's reservation
    assert huge.append(np.ones(3, "float32")).view().shape == (1, 3)        # is not allocated up front
    prefilled = AttentionKVCache(np.ones((2, 3), "float32"), (4, 3), 2)
    np.testing.assert_array_equal(prefilled.view(), np.ones((2, 3)))


# ---------------------------------------------------------------------------------------------
# IO effect


class Printer(nn.Module):
    def forward(self, x):
        y = x * 2.0
        nn.op.print_(y)
        return y + 1.0


def test_print_export_threads_the_io_effect():
    mod, _ = Printer().export_tvm(spec={"forward": {"x": spec.Tensor((2,), "float32")}}, debug=True)
    lines = [ln.strip() for ln in mod.script().splitlines()]
    call = next(ln for ln in lines if ln.startswith("_io1"))
    assert call.startswith('_io1: R.Object = R.call_pure_packed("vm.builtin.invoke_debug_func", _io, '
                           'R.str("vm.builtin.debug_print"), R.str("')
    assert call.endswith(f'test_effects.py:{Printer.forward.__code__.co_firstlineno + 2}"), mul, '
                         'sinfo_args=(R.Object,))')
    assert 'gv1: R.Tuple(R.Tensor((2,), dtype="float32"), R.Tuple(R.Object)) = add, (_io1,)' in lines
    assert 'R.func_attr({"num_input": 2})' in lines


def test_print_runs_in_the_vm(capsys):
    f = Printer().jit(spec={"forward": {"x": spec.Tensor((2,), "float32")}}, debug=True)
    out = f["forward"](np.array([1.0, -2.0], "float32"))          # effects are threaded for us
    np.testing.assert_allclose(out, [3.0, -3.0])
    printed = capsys.readouterr().out
    assert "test_effects.py:" in printed
    assert "shape = (2,), dtype = float32, data =\n[ 2. -4.]" in printed


def test_print_needs_debug_mode():
    with pytest.raises(RuntimeError, match="export with debug=True"):
        Printer().export_tvm(spec={"forward": {"x": spec.Tensor((2,), "float32")}})


def test_debug_func_passes_every_argument_kind():
    calls = []
    runtime.register_extern("testing.nn.debug_probe", lambda *a: calls.append(a), override=True)

    class Layer(nn.Module):
        def forward(self, x, v):
            nn.op.debug_func("testing.nn.debug_probe", x, 1, 2.0, "test", v, _line_info="here:1")
            nn.debug_func("testing.nn.debug_probe", v * 2)
            return x

    s = {"forward": {"x": spec.Tensor((10, 5), "float32"), "v": "int"}}
    text = Layer().export_tvm(spec=s, debug=True)[0].script()
    assert ('R.call_pure_packed("vm.builtin.invoke_debug_func", _io, R.str("testing.nn.debug_probe"), '
            'R.str("here:1"), x, R.prim_value(1), R.prim_value(T.float32(2)), R.str("test"), '
            'R.prim_value(v_1), sinfo_args=(R.Object,))') in text
    f = Layer().jit(spec=s, debug=True)
    x = RNG.standard_normal((10, 5)).astype("float32")
    np.testing.assert_array_equal(f["forward"](x, 8), x)
    (line, tensor, i, fl, st, var), (line2, doubled) = calls
    assert line == "here:1" and "test_effects.py:" in line2
    np.testing.assert_array_equal(tensor, x)
    assert (i, fl, st, var, doubled) == (1, 2.0, "test", 8, 16)


def test_debug_func_unknown_name_fails_at_run_time():
    class Layer(nn.Module):
        def forward(self, x):
            nn.op.debug_func("testing.nn.not_registered", x)
            return x

    f = Layer().jit(spec={"forward": {"x": spec.Tensor((1,), "float32")}}, debug=True)
    with pytest.raises(ValueError, match="debug function 'testing.nn.not_registered' is not registered"):
        f["forward"](np.zeros(1, "float32"))


def test_io_effect_print_method(capsys):
    class Layer(nn.Module):
        def forward(self, x):
            from builder.nn.exporter import Exporter

            Exporter.current().io_effect.print_(x)
            return x

    f = Layer().jit(spec={"forward": {"x": spec.Tensor((1, 2), "float32")}}, debug=True)
    f["forward"](np.array([[5.0, 6.0]], "float32"))
    assert "effect.print: shape = (1, 2), dtype = float32, data =\n[[5. 6.]]" in capsys.readouterr().out


def test_effect_modes_through_jit():
    m = Decoder()
    m.proj.weight.data = np.eye(3, dtype="float32")
    packed = m.jit(spec={"forward": dict(DECODER_SPEC["forward"], **{"$": {"effect_mode": "packed"}})})
    x = np.ones((1, 3), "float32")
    packed["forward"](x, 1)
    np.testing.assert_allclose(packed["forward"](x, 2), np.full((2, 3), 2.0))
    with pytest.raises(IRVerifyError, match="'layers_0_k_cache' is used before it is defined"):
        m.export_tvm(spec={"forward": dict(DECODER_SPEC["forward"], **{"$": {"effect_mode": "none"}})})


def test_kv_cache_executable_survives_save_and_load(tmp_path):
    from builder.compile import compile as build

    m = Decoder()
    m.proj.weight.data = np.eye(3, dtype="float32")
    mod, _ = m.export_tvm(spec=DECODER_SPEC)
    path = tmp_path / "kv.exe"
    build(mod).save(path)
    vm = runtime.VirtualMachine(runtime.Executable.load(path))
    state = vm["_initialize_effect"]()
    rows = RNG.standard_normal((3, 3)).astype("float32")
    for i in range(3):                                          # spec.Int takes an int or (int,)
        y, state = vm["forward"](rows[i:i + 1], i + 1 if i % 2 else (i + 1,), *state, m.proj.weight.data)
    np.testing.assert_allclose(y, 2.0 * rows, rtol=1e-6)
    (cache,) = state
    assert isinstance(cache, AttentionKVCache) and cache.fill_count == 3 and cache.view().shape == (3, 3)
    with pytest.raises(ValueError, match=r"argument 'total' \(#1\) must be 1 int\(s\)"):
        vm["forward"](rows[:1], "4", *state, m.proj.weight.data)
