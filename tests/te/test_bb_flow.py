"""The TE + BlockBuilder flow of the MLC course chapter "Integration with ML frameworks":
te.placeholder / te.compute / te.reduce_axis / te.sum / te.max / te.create_prim_func, then
bb.function / bb.dataflow / bb.emit_te / bb.emit_output / bb.emit_func_output, printed in our
TVMScript style, compiled and run through the VM."""
import numpy as np
import pytest

import runtime
from builder import compile as build
from builder import te
from builder.ir import (BlockBuilder, DataflowVar, IRModule, TensorStructInfo, Var, assert_structural_equal,
                        parse)
from builder.ir import relax as rx
from builder.ir import tir
from builder.ir.expr import Var as SymVar


def te_matmul(A: te.Tensor, B: te.Tensor) -> te.Tensor:
    assert A.shape[1] == B.shape[0]
    n = A.shape[0]
    m = B.shape[1]
    k = te.reduce_axis((0, A.shape[1]), name="k")
    return te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul")


def te_relu(A: te.Tensor) -> te.Tensor:
    return te.compute(A.shape, lambda *i: te.max(A(*i), 0), name="relu")


def te_bias_add(A: te.Tensor, b: te.Tensor) -> te.Tensor:
    return te.compute(A.shape, lambda i, j: A[i, j] + b[j], name="bias_add")


def tensor(name, shape, dtype="float32"):
    return Var(name, TensorStructInfo(shape, dtype))


# -- 5.3.1 tensor expressions -------------------------------------------------------------------

def test_placeholder_shape_dtype_and_fused_prim_func():
    A = te.placeholder((128, 128), name="A", dtype="float32")
    B = te.placeholder((128, 128), name="B", dtype="float32")
    assert isinstance(A, te.Tensor)
    assert [int(d) for d in A.shape] == [128, 128] and A.dtype == "float32"
    C = te_matmul(A, B)
    D = te_relu(C)
    # intermediate C becomes a T.alloc_buffer of the root block when it is not an argument
    fused = te.create_prim_func([A, B, D]).script()
    assert '    matmul = T.alloc_buffer([128, 128], dtype="float32")' in fused
    # passing C makes it a parameter instead
    split = te.create_prim_func([A, B, C, D]).script()
    assert "alloc_buffer" not in split
    assert ('def main(A: T.Buffer[(128, 128), "float32"], B: T.Buffer[(128, 128), "float32"], '
            'matmul: T.Buffer[(128, 128), "float32"], relu: T.Buffer[(128, 128), "float32"]) -> None:'
            ) in split


def test_relu_on_one_and_two_dims():
    X1 = te.placeholder((10,), name="X1", dtype="float32")
    text = te.create_prim_func([X1, te_relu(X1)]).script()
    assert "    for i0 in T.serial(10):" in text
    assert "            i0_1 = T.axis.spatial(10, i0)" in text
    assert "            relu[i0_1] = T.max(X1[i0_1], T.float32(0))" in text
    X2 = te.placeholder((10, 20), name="X1", dtype="float32")
    text = te.create_prim_func([X2, te_relu(X2)]).script()
    assert "    for i0, i1 in T.grid(10, 20):" in text
    assert '            i0_1, i1_1 = T.axis.remap("SS", [i0, i1])' in text


# -- 5.3.2 BlockBuilder ---------------------------------------------------------------------

CHAPTER_MODULE = '''\
# from tvm.script import ir as I
# from tvm.script import tir as T
# from tvm.script import relax as R

@I.ir_module
class Module:
    @T.prim_func
    def te_matmul(A: T.Buffer[(128, 128), "float32"], B: T.Buffer[(128, 128), "float32"], matmul: T.Buffer[(128, 128), "float32"]) -> None:
        # function attr dict
        T.func_attr({"global_symbol": "te_matmul", "tir.noalias": True})
        # body
        # with T.block("root")
        for i0, i1, i2 in T.grid(128, 128, 128):
            with T.block("matmul"):
                i, j, k = T.axis.remap("SSR", [i0, i1, i2])
                T.reads(A[i, k], B[k, j])
                T.writes(matmul[i, j])
                with T.init():
                    matmul[i, j] = T.float32(0)
                matmul[i, j] = matmul[i, j] + A[i, k] * B[k, j]

    @T.prim_func
    def te_relu(lv: T.Buffer[(128, 128), "float32"], relu: T.Buffer[(128, 128), "float32"]) -> None:
        # function attr dict
        T.func_attr({"global_symbol": "te_relu", "tir.noalias": True})
        # body
        # with T.block("root")
        for i0, i1 in T.grid(128, 128):
            with T.block("relu"):
                i0_1, i1_1 = T.axis.remap("SS", [i0, i1])
                T.reads(lv[i0_1, i1_1])
                T.writes(relu[i0_1, i1_1])
                relu[i0_1, i1_1] = T.max(lv[i0_1, i1_1], T.float32(0))

    @R.function
    def main(A: R.Tensor((128, 128), dtype="float32"), B: R.Tensor((128, 128), dtype="float32")) -> R.Tensor((128, 128), dtype="float32"):
        with R.dataflow():
            lv: R.Tensor((128, 128), dtype="float32") = R.call_tir(cls.te_matmul, (A, B), out_sinfo=R.Tensor((128, 128), dtype="float32"))
            lv1: R.Tensor((128, 128), dtype="float32") = R.call_tir(cls.te_relu, (lv,), out_sinfo=R.Tensor((128, 128), dtype="float32"))
            gv: R.Tensor((128, 128), dtype="float32") = lv1
            R.output(gv)
        return gv
'''


def chapter_module(params_first: bool = False):
    A = tensor("A", (128, 128))
    B = tensor("B", (128, 128))
    bb = BlockBuilder()
    with bb.function("main", params=[A, B] if params_first else None):
        with bb.dataflow():
            C = bb.emit_te(te_matmul, A, B)
            D = bb.emit_te(te_relu, C)
            R = bb.emit_output(D)
        bb.emit_func_output(R, params=None if params_first else [A, B])
    return bb.get(), C, D, R


def test_chapter_module_prints_in_our_style():
    mod, C, D, R = chapter_module()
    assert isinstance(mod, IRModule)
    assert mod.script() == CHAPTER_MODULE
    assert type(C) is DataflowVar and isinstance(C, Var)
    assert type(R) is Var
    assert list(mod.functions) == ["te_matmul", "te_relu", "main"]
    assert isinstance(mod["te_matmul"], tir.PrimFunc)


def test_params_given_at_the_start_build_the_same_module():
    a, *_ = chapter_module(params_first=False)
    b, *_ = chapter_module(params_first=True)
    assert a.script() == b.script()
    assert_structural_equal(a, b)


def test_chapter_module_parses_back():
    mod, *_ = chapter_module()
    back = parse(mod.script())
    assert back.script() == CHAPTER_MODULE
    assert_structural_equal(mod, back)


def test_emit_te_names_placeholders_after_arguments_and_dedups():
    x = tensor("x", (4, 4))
    w = tensor("w", (4, 2))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_te(te_matmul, x, x)          # same var twice: x, x_1
            z = bb.emit_te(te_matmul, y, x)          # the same computation: te_matmul again (TVM's add_func dedup)
            u = bb.emit_te(te_matmul, z, w)          # other shapes: a second PrimFunc, te_matmul1
            gv = bb.emit_output(u)
        bb.emit_func_output(gv)
    mod = bb.get()
    assert [b.name for b in mod["te_matmul"].params] == ["x", "x_1", "matmul"]
    assert [b.name for b in mod["te_matmul1"].params] == ["lv1", "w", "matmul"]
    text = mod.script()
    assert "R.call_tir(cls.te_matmul, (lv, x), out_sinfo=" in text and "cls.te_matmul1, (lv1, w)" in text
    assert sorted(n for n, f in mod.functions.items() if n != "main") == ["te_matmul", "te_matmul1"]


def test_emit_te_keeps_symbolic_dims_and_runs():
    n = SymVar("n", "int64")
    x = tensor("x", (n, 16))
    w = tensor("w", (16, 8))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            gv = bb.emit_output(bb.emit_te(te_relu, bb.emit_te(te_matmul, x, w)))
        bb.emit_func_output(gv)
    mod = bb.get()
    text = mod.script()
    assert 'def main(x: R.Tensor(("n", 16), dtype="float32"), w: R.Tensor((16, 8), dtype="float32"))' in text
    assert 'lv: R.Tensor((n, 8), dtype="float32") = R.call_tir(cls.te_matmul, (x, w)' in text
    assert_structural_equal(mod, parse(text))
    vm = runtime.VirtualMachine(build(mod))
    rng = np.random.default_rng(0)
    wv = rng.standard_normal((16, 8)).astype("float32")
    for rows in (1, 5):
        xv = rng.standard_normal((rows, 16)).astype("float32")
        np.testing.assert_allclose(vm["main"](xv, wv), np.maximum(xv @ wv, 0), rtol=1e-5, atol=1e-5)


def test_emit_te_outside_dataflow_and_mixed_with_emit():
    x = tensor("x", (3, 3))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        a = bb.emit_te(te_relu, x)
        b = bb.emit(rx.Call(rx.Op.get("nn.silu"), [a]))
        bb.emit_func_output(b)
    mod = bb.get()
    assert type(a) is Var
    text = mod.script()
    assert 'lv: R.Tensor((3, 3), dtype="float32") = R.call_tir(cls.te_relu, (x,), ' in text
    assert 'lv1: R.Tensor((3, 3), dtype="float32") = R.nn.silu(lv)' in text
    assert_structural_equal(mod, parse(text))
    xv = np.linspace(-2, 2, 9, dtype="float32").reshape(3, 3)
    out = runtime.VirtualMachine(build(mod))["main"](xv)
    r = np.maximum(xv, 0)
    np.testing.assert_allclose(out, r / (1 + np.exp(-r)), rtol=1e-5, atol=1e-6)


def test_builder_scope_errors():
    x = tensor("x", (2,))
    bb = BlockBuilder()
    with pytest.raises(RuntimeError, match="outside"):
        bb.emit_te(te_relu, x)
    with pytest.raises(RuntimeError, match="once per function"):
        with bb.function("main", [x]):
            y = bb.emit_te(te_relu, x)
            bb.emit_func_output(y)
            bb.emit_func_output(y)
    bb = BlockBuilder()
    with pytest.raises(RuntimeError, match="inside `with bb.dataflow"):
        with bb.function("main", [x]):
            bb.emit_output(x)


# -- 5.5 the FashionMNIST MLP: 784 -> 128 -> ReLU -> 10, built with emit_te -----------------

def mlp_module(weights=None, batch=1):
    """Parameters as function inputs (weights=None) or as constants (the chapter's meta
    constants)."""
    x = tensor("x", (batch, 784))
    names_shapes = [("w0", (784, 128)), ("b0", (128,)), ("w1", (128, 10)), ("b1", (10,))]
    params = [x]
    if weights is None:
        consts = [tensor(n, s) for n, s in names_shapes]
        params += consts
    else:
        consts = [rx.const(w) for w in weights]
    w0, b0, w1, b1 = consts
    bb = BlockBuilder()
    with bb.function("main"):
        with bb.dataflow():
            lv0 = bb.emit_te(te_matmul, x, w0)
            lv1 = bb.emit_te(te_bias_add, lv0, b0)
            lv2 = bb.emit_te(te_relu, lv1)
            lv3 = bb.emit_te(te_matmul, lv2, w1)
            lv4 = bb.emit_te(te_bias_add, lv3, b1)
            gv = bb.emit_output(lv4)
        bb.emit_func_output(gv, params=params)
    return bb.get()


def _mlp_weights():
    rng = np.random.default_rng(42)
    return [(rng.standard_normal(s) * 0.05).astype("float32")
            for s in [(784, 128), (128,), (128, 10), (10,)]]


def _mlp_ref(x, w0, b0, w1, b1):
    x, w0, b0, w1, b1 = (a.astype(np.float64) for a in (x, w0, b0, w1, b1))
    return np.maximum(x @ w0 + b0, 0) @ w1 + b1


def test_mlp_with_parameters_matches_numpy():
    mod = mlp_module()
    assert list(mod.functions) == ["te_matmul", "te_bias_add", "te_relu", "te_matmul1", "te_bias_add1", "main"]
    exe = build(mod)
    vm = runtime.VirtualMachine(exe)
    weights = _mlp_weights()
    img = np.random.default_rng(1).random((1, 784)).astype("float32")
    out = vm["main"](img, *weights)
    assert out.shape == (1, 10) and out.dtype == np.float32
    np.testing.assert_allclose(out, _mlp_ref(img, *weights), rtol=1e-4, atol=1e-5)
    assert int(np.argmax(out)) == int(np.argmax(_mlp_ref(img, *weights)))
    assert_structural_equal(mod, parse(mod.script()))


def test_mlp_with_constant_weights_matches_numpy():
    weights = _mlp_weights()
    mod = mlp_module(weights, batch=2)
    exe = build(mod)
    assert exe.get_function_params("main") == ["x"]
    assert len(exe.constants) == 4
    img = np.random.default_rng(2).random((2, 784)).astype("float32")
    out = runtime.VirtualMachine(exe)["main"](img)
    np.testing.assert_allclose(out, _mlp_ref(img, *weights), rtol=1e-4, atol=1e-5)


def test_emit_te_reuses_a_primfunc_only_for_the_same_computation():
    """Reuse needs the same te function, the same other arguments and the same symbolic variables
    (not only the same names): ``axis`` changes the softmax, and two ``n``\\ s are two variables."""
    from builder.te import topi

    n1, n2 = SymVar("n", "int64"), SymVar("n", "int64")
    x, y = tensor("x", (n1, 8)), tensor("y", (n2, 8))
    bb = BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            a = bb.emit_te(topi.softmax, x, axis=-1)
            b = bb.emit_te(topi.softmax, a, axis=-1)     # same computation as a's: reused
            c = bb.emit_te(topi.softmax, b, axis=0)      # another axis: a new PrimFunc
            d = bb.emit_te(topi.softmax, y, axis=-1)     # another variable n: a new PrimFunc
            gv = bb.emit_output(rx.Tuple([c, d]))
        bb.emit_func_output(gv)
    mod = bb.get()
    assert len([f for f in mod.functions.values() if not isinstance(f, rx.Function)]) == 3
    vm = runtime.VirtualMachine(build(mod))
    xv = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    yv = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)

    def softmax(v, axis):
        e = np.exp(v - v.max(axis, keepdims=True))
        return e / e.sum(axis, keepdims=True)

    got_c, got_d = vm["main"](xv, yv)
    want_c = softmax(softmax(softmax(xv.astype(np.float64), -1), -1), 0)
    np.testing.assert_allclose(got_c, want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_d, softmax(yv.astype(np.float64), -1), rtol=1e-5, atol=1e-6)
