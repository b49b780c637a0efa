"""ABI, metadata and the native loader: shape checks never crash, errors are readable."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builder import te
from builder.codegen import build, dim_to_json, lower
from builder.ir import tir
from builder.ir.expr import IntImm, Var
from runtime.native import NativeLibrary, dim_from_json, dim_to_str, eval_dim

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled():
    n = te.var("n")
    A = te.placeholder((n, 128), name="rxplaceholder")
    B = te.placeholder((128, 4), name="rxplaceholder")
    k = te.reduce_axis((0, 128), name="k")
    C = te.compute((n, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul")
    f = te.create_prim_func([A, B, C], name="mm")
    X = te.placeholder((n, 3), "float16", name="X")
    Y = te.compute((n * 2 + 1, 3), lambda i, j: X[i // 2 % n, j], name="Y")
    g = te.create_prim_func([X, Y], name="stretch")
    return build({"mm": f, "stretch": g})


@pytest.fixture(scope="module")
def lib(compiled):
    # metadata survives a JSON round trip; the loader needs nothing from builder
    return NativeLibrary(compiled.object_code, json.loads(json.dumps(compiled.functions)))


def test_metadata(compiled):
    meta = compiled.functions["mm"]
    assert meta["name"] == "mm"
    assert meta["sym_vars"] == ["n"]
    assert meta["params"] == [
        {"name": "rxplaceholder", "dtype": "float32", "shape": [["var", "n"], 128], "written": False},
        {"name": "rxplaceholder", "dtype": "float32", "shape": [128, 4], "written": False},
        {"name": "matmul", "dtype": "float32", "shape": [["var", "n"], 4], "written": True},
    ]
    assert meta["errors"][1] == "argument 'rxplaceholder' (param 0) dim 1: expected 128"
    assert meta["errors"][0] == "argument 'rxplaceholder' (param 0) dim 0: expected n >= 0"
    y_shape = compiled.functions["stretch"]["params"][1]["shape"]
    assert y_shape == [["add", ["mul", ["var", "n"], 2], 1], 3]


def test_dim_json_helpers():
    n, m = Var("n"), Var("m")
    tree = dim_to_json((n * 2 + m // 3) % 5)
    assert dim_from_json(tree) == ("floormod", ("add", ("mul", ("var", "n"), 2),
                                                ("floordiv", ("var", "m"), 3)), 5)
    assert eval_dim(tree, {"n": 4, "m": 7}) == (4 * 2 + 7 // 3) % 5
    assert eval_dim(dim_to_json(tir.maximum(n, 3) - 1), {"n": 1}) == 2
    assert dim_to_str(tree) == "((n * 2) + (m // 3)) % 5"
    with pytest.raises(KeyError, match="'n'"):
        eval_dim(["var", "n"], {})
    with pytest.raises(ValueError):
        dim_from_json(["pow", 2, 3])


def test_calls_and_symbolic_binding(lib):
    for n in (0, 1, 5):
        a = np.random.rand(n, 128).astype("float32")
        b = np.random.rand(128, 4).astype("float32")
        c = np.full((n, 4), np.nan, "float32")
        lib.call("mm", [a, b, c])
        np.testing.assert_allclose(c, a.astype("f8") @ b, rtol=1e-4)
    x = np.arange(12, dtype="float16").reshape(4, 3)
    x.flags.writeable = False  # read-only inputs take the slow data-pointer path
    y = np.empty((9, 3), "float16")
    lib["stretch"](x, y)
    np.testing.assert_array_equal(y, x[(np.arange(9) // 2) % 4])


def test_wrong_shapes_raise_value_error(lib):
    a = np.zeros((3, 128), "float32")
    b = np.zeros((128, 4), "float32")
    with pytest.raises(ValueError, match=r"^mm: argument 'rxplaceholder' \(param 0\) dim 1: "
                                         r"expected 128, got shape \(3, 127\)$"):
        lib.call("mm", [np.zeros((3, 127), "float32"), b, np.zeros((3, 4), "float32")])
    with pytest.raises(ValueError, match=r"argument 'matmul' \(param 2\) dim 0: expected n "
                                         r"\(n from argument 'rxplaceholder' dim 0\), got shape \(2, 4\)"):
        lib.call("mm", [a, b, np.zeros((2, 4), "float32")])
    with pytest.raises(ValueError, match=r"stretch: argument 'Y' \(param 1\) dim 0: expected "
                                         r"n \* 2 \+ 1 .*got shape \(8, 3\)"):
        lib.call("stretch", [np.zeros((4, 3), "float16"), np.zeros((8, 3), "float16")])


def test_read_only_output_is_an_error_not_a_write(lib):
    """An output (a param the function writes) must be writeable: a read-only array there is
    refused before the kernel runs (a read-only memory map would otherwise crash), and is left
    untouched; read-only inputs are fine."""
    a = np.ones((2, 128), "float32")
    b = np.ones((128, 4), "float32")
    a.flags.writeable = b.flags.writeable = False
    c = np.zeros((2, 4), "float32")
    c.flags.writeable = False
    with pytest.raises(ValueError, match=r"^mm: argument 'matmul' \(param 2\) is an output the "
                                         r"function writes, but the array is read-only$"):
        lib.call("mm", [a, b, c])
    assert not c.any()
    out = np.zeros((2, 4), "float32")
    lib.call("mm", [a, b, out])
    np.testing.assert_array_equal(out, np.full((2, 4), 128, "float32"))


def test_loader_checks(lib):
    a = np.zeros((3, 128), "float32")
    b = np.zeros((128, 4), "float32")
    c = np.zeros((3, 4), "float32")
    with pytest.raises(ValueError, match=r"expected 3 arrays"):
        lib.call("mm", [a, b])
    with pytest.raises(ValueError, match=r"'rxplaceholder' \(param 1\) has dtype float64, "
                                         r"expected float32"):
        lib.call("mm", [a, b.astype("float64"), c])
    with pytest.raises(ValueError, match=r"has 1 dims, expected 2 \(shape \[n, 4\]\)"):
        lib.call("mm", [a, b, np.zeros(12, "float32")])
    with pytest.raises(ValueError, match="C-contiguous"):
        lib.call("mm", [np.zeros((128, 3), "float32").T, b, c])
    with pytest.raises(KeyError):
        lib.call("nope", [])
    assert "mm" in lib and lib.functions["mm"]["sym_vars"] == ["n"]


def test_runtime_native_does_not_import_builder(compiled, tmp_path):
    (tmp_path / "lib.o").write_bytes(compiled.object_code)
    (tmp_path / "meta.json").write_text(json.dumps(compiled.functions))
    script = f"""
import sys, json, numpy as np
sys.path.insert(0, {str(ROOT)!r})
from runtime.native import NativeLibrary
lib = NativeLibrary(open({str(tmp_path / 'lib.o')!r}, 'rb').read(),
                    json.load(open({str(tmp_path / 'meta.json')!r})))
x = np.ones((2, 3), np.float16); y = np.zeros((5, 3), np.float16)
lib.call("stretch", [x, y])
assert y.sum() == 15
assert not any(m == "builder" or m.startswith("builder.") for m in sys.modules), "builder imported"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_init_hoisted_in_front_of_reduction_loops():
    n = te.var("n")
    A = te.placeholder((n, 4, 5), name="A")
    r1, r2 = te.reduce_axis((0, 4), name="r1"), te.reduce_axis((0, 5), name="r2")
    s = te.compute((n,), lambda i: te.sum(A[i, r1, r2], axis=[r1, r2]), name="s")
    text = lower(te.create_prim_func([A, s])).script()
    assert ("    for i0 in T.serial(n):\n"
            "        s[i0] = T.float32(0)\n"
            "        for i1, i2 in T.grid(4, 5):\n"
            "            s[i0] = s[i0] + A[i0, i1, i2]") in text


def test_init_guarded_when_nest_is_not_perfect():
    A = tir.Buffer("A", (3, 4), "float32")
    S = tir.Buffer("S", (3,), "float32")
    i, k = Var("i"), Var("k")
    vi, vk = Var("vi"), Var("vk")
    block = tir.Block("s", [tir.IterVar(vi, (0, 3), "S"), tir.IterVar(vk, (0, 4), "R")],
                      [tir.BufferRegion.point(A, [vi, vk])], [tir.BufferRegion.point(S, [vi])],
                      tir.BufferStore(S, S[vi] + A[vi, vk], [vi]),
                      init=tir.BufferStore(S, 1.0, [vi]))
    # reduction loop outside the spatial loop: init cannot be hoisted, it is guarded
    body = tir.For(k, 0, 4, "serial", tir.For(i, 0, 3, "serial", tir.BlockRealize(
        [i, k], IntImm(1, "bool"), block)))
    f = tir.PrimFunc([A, S], body, name="colsum")
    text = lower(f).script()
    assert "if k == 0:" in text
    lib = build({"colsum": f}).load()
    a = np.random.rand(3, 4).astype("float32")
    out = np.zeros(3, "float32")
    lib.call("colsum", [a, out])
    np.testing.assert_allclose(out, 1 + a.astype("f8").sum(axis=1), rtol=1e-6)


def test_int32_symbolic_var():
    m = te.var("m", "int32")
    A = te.placeholder((m, 2), name="A")
    B = te.compute((m, 2), lambda i, j: A[i, j] * 3.0, name="B")
    f = te.create_prim_func([A, B], name="scale")
    assert "    m = T.int32()" in f.script()
    lib = build({"scale": f}).load()
    a = np.random.rand(5, 2).astype("float32")
    b = np.empty_like(a)
    lib.call("scale", [a, b])
    np.testing.assert_allclose(b, a * 3, rtol=1e-6)


def test_float64_to_float16_is_correctly_rounded_without_libcalls():
    n = te.var("n")
    x = te.placeholder((n,), "float64", name="x")
    f = te.create_prim_func([x, te.compute((n,), lambda i: x[i].astype("float16"), name="y")])
    out = build({"f64_to_f16": f})
    assert "__truncdfhf2" not in out.llvm_ir
    lib = out.load()
    h = np.linspace(-3, 3, 257).astype("float16").astype("float64")
    ulp = np.spacing(h.astype("float16")).astype("float64")
    # just above / exactly at / just below the midpoint: double rounding through float32 would
    # get the first and last wrong
    a = np.concatenate([h + ulp / 2 + ulp * 2.0 ** -30, h + ulp / 2, h - ulp / 2 - ulp * 2.0 ** -30,
                        [np.inf, -np.inf, 1e300, -0.0, 65519.99]])
    y = np.empty(a.size, "float16")
    lib.call("f64_to_f16", [a, y])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(y, a.astype("float16"))


def test_unresolved_external_symbol_is_an_error_not_a_crash():
    import llvmlite.binding as llvm

    from builder.codegen import Target, manifest_ir

    target = Target.host()
    tm = target.target_machine()
    meta = {"f": {"name": "f", "params": [], "sym_vars": [], "errors": [], "error_params": []}}
    mod = llvm.parse_assembly(
        'declare i32 @no_such_symbol_in_this_process(i32)\n'
        'define i32 @f(ptr %d, ptr %s) {\n'
        '  %r = call i32 @no_such_symbol_in_this_process(i32 1)\n  ret i32 %r\n}\n' + manifest_ir("test", meta))
    mod.triple = target.triple
    obj = tm.emit_object(mod)
    with pytest.raises(ValueError, match="no_such_symbol_in_this_process"):
        NativeLibrary(obj, meta)


def test_kernels_named_like_libm_functions_do_not_call_themselves():
    """A standalone float64 ``exp`` kernel lowers ``llvm.exp.f64`` to a call of libm's ``exp``; were the
    kernel's own symbol ``exp``, it would call itself until the stack overflowed (a crash). Kernel symbols
    avoid the C library's names (``exp_kernel``) and the bytecode calls them by that symbol."""
    import numpy as np

    from builder import nn
    from builder.codegen.abi import RESERVED_SYMBOLS, kernel_symbols

    class Scalars(nn.Module):
        def forward(self, x):
            return nn.op.exp(x), nn.op.sin(x), nn.op.cos(x), nn.op.tanh(x), nn.op.log(nn.op.exp(x))

    f = Scalars().jit(spec={"forward": {"x": nn.spec.Tensor(["n"], "float64")}})
    x = np.linspace(-2.0, 2.0, 7)
    for got, want in zip(f["forward"](x), [np.exp(x), np.sin(x), np.cos(x), np.tanh(x), x]):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
    assert {"exp", "expf", "sin", "tanh", "tanhf", "memcpy"} <= RESERVED_SYMBOLS
    assert kernel_symbols(["exp", "exp_kernel", "add"]) == {"exp": "exp_kernel1", "exp_kernel": "exp_kernel",
                                                            "add": "add"}
