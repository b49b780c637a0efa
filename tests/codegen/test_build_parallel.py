"""Build time (issue 14): identical kernels across layers compiled once, LLVM split into modules
compiled on threads and merged into one object (same bytes whatever the thread count), the
progress callback of ``builder.compile``, reductions in registers. No timing is asserted."""
import numpy as np
import pytest

import builder
from builder import codegen, nn, te
from builder.codegen import build
from builder.codegen.accumulate import promote_accumulators
from builder.codegen.lower import lower
from builder.codegen.objmerge import merge_objects
from builder.compile import BuildProgress
from builder.nn import spec
from runtime.elf import read_object


class _Layer(nn.Module):
    def __init__(self, hidden: int, heads: int):
        self.heads, self.hd = heads, hidden // heads
        self.norm = nn.RMSNorm(hidden, axes=-1, bias=False)
        self.q, self.k, self.v = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.up = nn.Linear(hidden, 2 * hidden, bias=False)
        self.down = nn.Linear(2 * hidden, hidden, bias=False)

    def forward(self, x):
        b, n, h = x.shape
        y = self.norm(x)
        q, k, v = (nn.op.reshape(lin(y), [b, n, self.heads, self.hd]) for lin in (self.q, self.k, self.v))
        x = x + nn.op.reshape(nn.op.scaled_dot_product_attention(q, k, v, is_causal=True), [b, n, h])
        return x + self.down(nn.op.silu(self.up(self.norm(x))))


class _Decoder(nn.Module):
    def __init__(self, layers: int, hidden: int = 16, heads: int = 2):
        self.layers = nn.ModuleList([_Layer(hidden, heads) for _ in range(layers)])
        self.head = nn.Linear(hidden, 8, bias=False)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)

    def prefill(self, x):
        return self.forward(x)


SPEC = {"forward": {"x": spec.Tensor([1, "seq", 16], "float32")}}
#: two functions: each has its own symbolic ``seq``, so their kernels are twins (equal up to names)
TWO = {"forward": {"x": spec.Tensor([1, "seq", 16], "float32")},
       "prefill": {"x": spec.Tensor([1, "seq", 16], "float32")}}


def _weighted(net):
    rng = np.random.default_rng(0)
    for _, p in net.named_parameters():
        p.data = (rng.standard_normal([int(d) for d in p.shape]) * 0.3).astype(np.float32)
    return net


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MB_CACHE_DIR", str(tmp_path / "objects"))
    return tmp_path


def test_repeated_layers_compile_as_many_kernels_as_one_layer(fresh_cache):
    one = builder.compile(_Decoder(1).export_tvm(TWO)[0]).build_stats
    four = builder.compile(_Decoder(4).export_tvm(TWO)[0]).build_stats
    assert four["kernels"] == one["kernels"]              # identical layers share their PrimFuncs (legalize) ...
    assert four["distinct"] == one["distinct"]            # ... and only one layer's worth is compiled
    assert one["distinct"] < one["kernels"]               # the two functions' kernels are twins


def test_twins_are_aliases_not_bodies(fresh_cache):
    exe = builder.compile(_Decoder(3).export_tvm(TWO)[0])
    ir_text = exe.llvm_ir
    aliases = [line for line in ir_text.splitlines() if " = alias " in line]
    assert len(aliases) == exe.build_stats["kernels"] - exe.build_stats["distinct"] > 0
    # every kernel is callable by its own name in the loaded object
    lib = codegen.CompiledLibrary(exe.object_code, ir_text, exe.kernels, exe.target).load()
    assert all(name in lib for name in exe.kernels)


def _outputs(net, x):
    return net.jit(SPEC)["forward"](x)


def test_multi_module_build_matches_one_module_and_numpy_shapes(fresh_cache, monkeypatch):
    net = _weighted(_Decoder(3))
    x = np.random.default_rng(1).standard_normal((1, 5, 16)).astype(np.float32)
    monkeypatch.setattr(codegen, "MIN_SPLIT_INSTRUCTIONS", 0)
    split = _outputs(net, x)
    monkeypatch.setattr(codegen, "MAX_PARTS", 1)
    single = _outputs(net, x)
    assert split.shape == (1, 5, 8)
    np.testing.assert_array_equal(split, single)


def test_object_bytes_do_not_depend_on_the_thread_count(tmp_path, monkeypatch):
    monkeypatch.setattr(codegen, "MIN_SPLIT_INSTRUCTIONS", 0)
    mod = _Decoder(2).export_tvm(SPEC)[0]
    objects = []
    for threads in ("1", "2", "2"):
        monkeypatch.setenv("MB_CACHE_DIR", str(tmp_path / f"cache{len(objects)}"))   # always cold
        monkeypatch.setenv("MB_BUILD_THREADS", threads)
        exe = builder.compile(mod)
        assert exe.build_stats["parts"] > 1 and not exe.build_stats["cached"]
        objects.append(exe.object_code)
    assert objects[0] == objects[1] == objects[2]


def test_build_threads_rejects_a_bad_value(monkeypatch):
    monkeypatch.setenv("MB_BUILD_THREADS", "0")
    with pytest.raises(ValueError, match="MB_BUILD_THREADS"):
        codegen.build_threads()
    monkeypatch.setenv("MB_BUILD_THREADS", "3")
    assert codegen.build_threads() == 3


def _scale(factor: float):
    n = te.var("n")
    x = te.placeholder((n, 16), "float32", name="x")
    return te.create_prim_func([x, te.compute((n, 16), lambda i, j: x[i, j] * factor + 1.0, name="y")])


def test_merge_refuses_two_definitions_of_a_symbol(monkeypatch):
    monkeypatch.setenv("MB_CACHE", "0")
    a, b = build({"a": _scale(2.0)}), build({"b": _scale(3.0)})
    assert merge_objects([a.object_code]) == a.object_code
    with pytest.raises(ValueError, match="'__mb_manifest' is defined by two"):   # each has a manifest
        merge_objects([a.object_code, b.object_code])


def test_split_build_runs_every_kernel(monkeypatch):
    monkeypatch.setenv("MB_CACHE", "0")
    monkeypatch.setattr(codegen, "MIN_SPLIT_INSTRUCTIONS", 0)
    monkeypatch.setattr(codegen, "MAX_PARTS", 4)
    funcs = {f"k{i}": _scale(float(i)) for i in range(5)}      # 5 distinct kernels -> several modules
    lib = build(funcs)
    assert 2 < lib.stats["parts"] <= 4 and lib.stats["distinct"] == 5   # filled in order, by estimated size
    assert build(funcs).object_code == lib.object_code            # deterministic
    assert {f"k{i}" for i in range(5)} <= set(read_object(lib.object_code).defined_functions)
    native = lib.load()
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    for i in range(5):
        y = np.empty_like(x)
        native.call(f"k{i}", [x, y])
        np.testing.assert_array_equal(y, x * np.float32(i) + np.float32(1.0))


def test_progress_reports_every_phase_in_order(fresh_cache):
    mod = _Decoder(2).export_tvm(SPEC)[0]
    events: list[BuildProgress] = []
    exe = builder.compile(mod, progress=events.append)
    phases = [e.phase for e in events]
    order = ["passes", "kernels", "llvm", "bytecode", "done"]
    assert [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p] == order
    kernels = [e for e in events if e.phase == "kernels"]
    assert [e.done for e in kernels] == list(range(len(exe.kernels) + 1))
    assert all(e.total == len(exe.kernels) for e in kernels)
    assert {e.item for e in kernels[1:]} == set(exe.kernels)
    passes = [e.item for e in events if e.phase == "passes" and e.done]
    assert passes == ["eliminate_common_subexpr", "rewrite_attention", "conv_to_gemm", "select_kernels", "tile_weights", "fuse_ops", "legalize_ops", "dead_code_elimination"]
    llvm = [e for e in events if e.phase == "llvm"]
    assert llvm[-1].done == llvm[-1].total == exe.build_stats["parts"]
    assert all(a.elapsed <= b.elapsed for a, b in zip(events, events[1:]))
    # a second build hits the cache and says so
    again: list[BuildProgress] = []
    builder.compile(mod, progress=again.append)
    assert [(e.done, e.total, e.item) for e in again if e.phase == "llvm"] == [(1, 1, "cached")]


def test_progress_callback_can_abort_the_build(fresh_cache):
    mod = _Decoder(1).export_tvm(SPEC)[0]

    def stop(event):
        if event.phase == "kernels" and event.done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        builder.compile(mod, progress=stop)


def _dot(k: int):
    n = te.var("n")
    a = te.placeholder((n, k), "float32", name="a")
    b = te.placeholder((n, k), "float32", name="b")
    r = te.reduce_axis((0, k), name="r")
    return te.create_prim_func([a, b, te.compute((n,), lambda i: te.sum(a[i, r] * b[i, r], axis=r), name="s")])


@pytest.mark.parametrize("k", [5, 32, 300])
def test_reductions_accumulate_in_a_register_with_the_same_results(k, monkeypatch):
    monkeypatch.setenv("MB_CACHE", "0")
    f = _dot(k)
    text = promote_accumulators(lower(f)).script()
    assert "s_acc[0] = s_acc[0] + a[" in text
    assert ("llvm.loop.unroll.disable" in text) == (8 <= k <= 256)
    native = build({"dot": f}).load()
    rng = np.random.default_rng(k)
    a, b = (rng.standard_normal((7, k)).astype(np.float32) for _ in range(2))
    out = np.empty(7, np.float32)
    native.call("dot", [a, b, out])
    np.testing.assert_allclose(out, (a.astype(np.float64) * b).sum(axis=1), rtol=1e-4, atol=1e-4)


def test_reduction_reading_other_elements_is_left_alone():
    from builder.ir import tir
    from builder.ir.expr import IntImm, Var
    a = tir.Buffer("A", (4,), "float32")
    s = tir.Buffer("S", (2,), "float32")
    i, k = Var("i"), Var("k")
    body = tir.For(i, 0, 2, "serial", tir.SeqStmt([
        tir.BufferStore(s, 0.0, [i]),
        tir.For(k, 0, 4, "serial", tir.BufferStore(s, s[i] + a[k] + s[IntImm(0, "int64")], [i]))]))
    f = tir.PrimFunc([a, s], body, name="odd")
    assert "S_acc" not in promote_accumulators(f).script()


def test_the_first_module_goes_to_llvm_while_the_next_is_emitted(monkeypatch):
    """``emit_llvm_parts(on_part=...)`` hands each module but the last over as soon as it is complete (its
    final text), after some kernels and before the others; ``build`` compiles it meanwhile."""
    monkeypatch.setattr(codegen, "MIN_SPLIT_INSTRUCTIONS", 0)
    funcs = {f"k{i}": _scale(float(i)) for i in range(4)}
    events = []
    parts = codegen.emit_llvm_parts(funcs, max_parts=2, progress=lambda phase, done, total, name: events.append(
        ("kernel", name)), on_part=lambda k, text: events.append(("part", k, text)))
    handed = [e for e in events if e[0] == "part"]
    assert len(parts.texts) == 2 and [e[1] for e in handed] == [0] and handed[0][2] == parts.texts[0]
    assert 0 < events.index(handed[0]) < len(events) - 1
    assert sorted(name for kind, name, *_ in events if kind == "kernel") == sorted(funcs)


def _llvm_threads():
    import threading
    return [t for t in threading.enumerate() if t.name.startswith("mb-llvm")]


def test_an_abort_or_a_cache_hit_after_a_module_went_to_llvm_leaves_nothing_running(tmp_path, monkeypatch):
    """A progress callback that raises once a module is with LLVM aborts the build after that work ends; a
    build whose IR the cache holds (its input key changed, its IR not) returns the cached object at once and
    lets the module already handed over finish on its thread."""
    import time

    monkeypatch.setenv("MB_CACHE_DIR", str(tmp_path / "objects"))
    monkeypatch.setenv("MB_BUILD_THREADS", "2")
    monkeypatch.setattr(codegen, "MIN_SPLIT_INSTRUCTIONS", 0)
    funcs = {f"k{i}": _scale(float(i)) for i in range(4)}

    def stop(phase, done, total, name):
        if phase == "kernels" and done == total:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build(funcs, progress=stop)
    assert not _llvm_threads()
    first = build(funcs)
    assert not first.cached and first.stats["parts"] == 2
    monkeypatch.setenv("MB_TEST_UNRELATED_SETTING", "1")       # a new input key, the same IR
    again = build(funcs)
    assert again.cached and again.object_code == first.object_code
    deadline = time.monotonic() + 60
    while _llvm_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _llvm_threads()
    native = again.load()
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    y = np.empty_like(x)
    native.call("k3", [x, y])
    np.testing.assert_array_equal(y, x * np.float32(3) + np.float32(1.0))


def test_kernels_are_grouped_with_their_twins_and_specializations():
    """codegen.parts.plan_kernels: a structurally equal function joins its twin's group as an alias, one with a
    symbolic dim fixed joins the general kernel's as an entry (same label), the rest are heads of their own;
    the groups come in the order of their heads."""
    from builder.codegen.parts import plan_kernels

    def scaled(rows, factor):
        x = te.placeholder((rows, 16), "float32", name="x")
        return te.create_prim_func([x, te.compute((rows, 16), lambda i, j: x[i, j] * factor + 1.0, name="y")])

    funcs = [("general", scaled(te.var("n"), 2.0)), ("twin", scaled(te.var("m"), 2.0)),
             ("other", scaled(te.var("n"), 3.0)), ("fixed", scaled(8, 2.0)), ("fixed_twin", scaled(8, 2.0))]
    groups = plan_kernels(funcs, lambda f: "loops", lambda f: False)
    assert [g.name for g in groups] == ["general", "other"]
    assert [(name, kind, of) for name, kind, of, _ in groups[0].members] == [
        ("twin", "alias", "general"), ("fixed", "entry", "general"), ("fixed_twin", "alias", "fixed")]
    assert groups[0].members[1][3] == [8] and not groups[1].members
    labels = {id(funcs[3][1]): "loops (linear: another label)"}   # a specialization compiled otherwise
    groups = plan_kernels(funcs, lambda f: labels.get(id(f), "loops"), lambda f: False)
    assert [g.name for g in groups] == ["general", "other", "fixed"]
