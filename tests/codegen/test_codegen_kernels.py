"""Compiled TE kernels against numpy float64 references."""
import math
import re

import numpy as np
import pytest

from builder import te
from builder.codegen import build, build_prim_func

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def _kernels():
    """name -> PrimFunc; compiled together once (one object file)."""
    fs = {}
    # elementwise unary / binary with broadcasting expressed in TE
    A = te.placeholder((4, 5), name="A")
    b = te.placeholder((5,), name="b")
    fs["add_bcast"] = te.create_prim_func(
        [A, b, te.compute((4, 5), lambda i, j: A[i, j] * 2.0 - b[j], name="out")])
    fs["unary"] = te.create_prim_func(
        [A, te.compute((4, 5), lambda i, j: te.sqrt(te.abs(A[i, j])) + te.floor(A[i, j])
                       + te.power(te.abs(A[i, j]), 1.5) - te.rsqrt(A[i, j] * A[i, j] + 1.0),
                       name="u")])
    X = te.placeholder((64,), name="X")
    fs["transcendental"] = te.create_prim_func(
        [X,
         te.compute((64,), lambda i: te.exp(X[i]), name="e"),
         te.compute((64,), lambda i: te.tanh(X[i]), name="t"),
         te.compute((64,), lambda i: te.erf(X[i]), name="r"),
         te.compute((64,), lambda i: te.sigmoid(X[i]) + te.log(te.abs(X[i]) + 1.0)
                    + te.sin(X[i]) * te.cos(X[i]), name="s")])
    Xd = te.placeholder((16,), "float64", name="Xd")
    fs["tanh_erf_f64"] = te.create_prim_func(
        [Xd, te.compute((16,), lambda i: te.tanh(Xd[i]) + te.erf(Xd[i]), name="y")])
    # matmul, static and symbolic
    M = te.placeholder((16, 24), name="M")
    N = te.placeholder((24, 8), name="N")
    k = te.reduce_axis((0, 24), name="k")
    fs["matmul"] = te.create_prim_func(
        [M, N, te.compute((16, 8), lambda i, j: te.sum(M[i, k] * N[k, j], axis=k), name="C")])
    n = te.var("n")
    P = te.placeholder((n, 24), name="P")
    k2 = te.reduce_axis((0, 24), name="k")
    mm = te.compute((n, 8), lambda i, j: te.sum(P[i, k2] * N[k2, j], axis=k2), name="matmul")
    fs["matmul_dyn"] = te.create_prim_func([P, N, mm])
    # matmul then relu in one PrimFunc: an intermediate buffer (heap: symbolic size)
    relu = te.compute((n, 8), lambda i, j: te.max(mm[i, j], 0.0), name="relu")
    fs["matmul_relu_dyn"] = te.create_prim_func([P, N, relu])
    relu_s = te.compute((16, 8), lambda i, j: te.max(fs_mm_static(M, N)[i, j], 0.0), name="relu")
    fs["matmul_relu"] = te.create_prim_func([M, N, relu_s])
    # reductions: sum, max (rows containing -inf), min, over two axes
    R = te.placeholder((n, 7, 3), name="R")
    ra, rb = te.reduce_axis((0, 7), name="a"), te.reduce_axis((0, 3), name="b")
    fs["reduce_sum2"] = te.create_prim_func(
        [R, te.compute((n,), lambda i: te.sum(R[i, ra, rb], axis=[ra, rb]), name="s")])
    S = te.placeholder((n, 33), name="S")
    rk = te.reduce_axis((0, 33), name="k")
    fs["reduce_max"] = te.create_prim_func(
        [S, te.compute((n,), lambda i: te.max(S[i, rk], axis=rk), name="m")])
    rk2 = te.reduce_axis((0, 33), name="k")
    fs["reduce_min_where"] = te.create_prim_func(
        [S, te.compute((n,), lambda i: te.min(S[i, rk2], axis=rk2, where=rk2 < 10), name="m")])
    # float16 inputs, float32 accumulation
    H = te.placeholder((8, 32), "float16", name="H")
    G = te.placeholder((32, 4), "float16", name="G")
    kh = te.reduce_axis((0, 32), name="k")
    acc = te.compute((8, 4), lambda i, j: te.sum(H[i, kh].astype("float32")
                                                  * G[kh, j].astype("float32"), axis=kh),
                     name="acc")
    fs["fp16_matmul"] = te.create_prim_func(
        [H, G, te.compute((8, 4), lambda i, j: acc[i, j].astype("float16"), name="out")])
    # gather (embedding)
    idx = te.placeholder((n,), "int32", name="idx")
    W = te.placeholder((50, 6), name="W")
    fs["embedding"] = te.create_prim_func(
        [idx, W, te.compute((n, 6), lambda i, j: W[idx[i], j], name="emb")])
    # conditional pad (reads out of bounds only when the condition is false)
    I = te.placeholder((n, 5), name="I")
    fs["pad"] = te.create_prim_func(
        [I, te.compute((n + 2, 7), lambda i, j: te.if_then_else(
            te.all(i >= 1, i < n + 1, j >= 1, j < 6), I[i - 1, j - 1], -1.0), name="pad")])
    # softmax with -inf entries (max reduction, exp, sum, division)
    L = te.placeholder((n, 10), name="L")
    km = te.reduce_axis((0, 10), name="k")
    mx = te.compute((n,), lambda i: te.max(L[i, km], axis=km), name="mx")
    ex = te.compute((n, 10), lambda i, j: te.exp(L[i, j] - mx[i]), name="ex")
    ks = te.reduce_axis((0, 10), name="k")
    sm = te.compute((n,), lambda i: te.sum(ex[i, ks], axis=ks), name="sm")
    fs["softmax"] = te.create_prim_func(
        [L, te.compute((n, 10), lambda i, j: ex[i, j] / sm[i], name="softmax")])
    # integer and bool dtypes, floor division / modulo on negatives
    Z = te.placeholder((12,), "int32", name="Z")
    fs["int_ops"] = te.create_prim_func(
        [Z,
         te.compute((12,), lambda i: Z[i] // 3 + Z[i] % 5 * 7, name="q"),
         te.compute((12,), lambda i: Z[i] > 0, name="pos"),
         te.compute((12,), lambda i: te.max(Z[i].astype("int8"), te.const(-3, "int8")),
                    name="i8")])
    Bo = te.placeholder((6,), "bool", name="Bo")
    U = te.placeholder((6,), "uint8", name="U")
    fs["bool_uint8"] = te.create_prim_func(
        [Bo, U, te.compute((6,), lambda i: te.if_then_else(Bo[i], U[i] // 2, U[i] + 200),
                           name="o")])
    # symbolic compound dims: output of length 2 * n
    T2 = te.placeholder((n,), name="T2")
    fs["concat2"] = te.create_prim_func(
        [T2, te.compute((n * 2,), lambda i: te.if_then_else(i < n, T2[i % n], -T2[i % n]),
                        name="cat")])
    # one-hot with an explicit equality (``==`` on expressions is structural, see tir.equal)
    fs["one_hot"] = te.create_prim_func(
        [idx, te.compute((n, 6), lambda i, j: te.if_then_else(te.equal(idx[i], j), 1.0, 0.0),
                         name="oh")])
    return fs


def fs_mm_static(M, N):
    k = te.reduce_axis((0, 24), name="k")
    return te.compute((16, 8), lambda i, j: te.sum(M[i, k] * N[k, j], axis=k), name="matmul")


@pytest.fixture(scope="module")
def lib():
    return build(_kernels()).load()


def test_elementwise_broadcast(lib):
    a, b = rand(4, 5), rand(5)
    out = np.empty((4, 5), "float32")
    lib.call("add_bcast", [a, b, out])
    np.testing.assert_allclose(out, a.astype("f8") * 2 - b, rtol=1e-6, atol=1e-6)


def test_unary(lib):
    a = rand(4, 5)
    out = np.empty_like(a)
    lib.call("unary", [a, out])
    x = a.astype("f8")
    ref = np.sqrt(np.abs(x)) + np.floor(x) + np.abs(x) ** 1.5 - 1 / np.sqrt(x * x + 1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_exp_tanh_erf(lib):
    x = np.linspace(-4, 4, 64).astype("float32")
    e, t, r, s = (np.empty(64, "float32") for _ in range(4))
    lib.call("transcendental", [x, e, t, r, s])
    xd = x.astype("f8")
    np.testing.assert_allclose(e, np.exp(xd), rtol=1e-5)
    np.testing.assert_allclose(t, np.tanh(xd), rtol=1e-5, atol=1e-6)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(r, erf(xd), rtol=1e-5, atol=1e-6)
    ref = 1 / (1 + np.exp(-xd)) + np.log(np.abs(xd) + 1) + np.sin(xd) * np.cos(xd)
    np.testing.assert_allclose(s, ref, rtol=1e-5, atol=1e-5)
    xd16 = np.linspace(-2, 2, 16)
    y = np.empty(16)
    lib.call("tanh_erf_f64", [xd16, y])
    np.testing.assert_allclose(y, np.tanh(xd16) + erf(xd16), rtol=1e-12)


def test_matmul_static(lib):
    m, nn = rand(16, 24), rand(24, 8)
    c = np.empty((16, 8), "float32")
    lib.call("matmul", [m, nn, c])
    np.testing.assert_allclose(c, m.astype("f8") @ nn, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [1, 7, 33])
def test_matmul_symbolic(lib, n):
    p, nn = rand(n, 24), rand(24, 8)
    c = np.empty((n, 8), "float32")
    lib.call("matmul_dyn", [p, nn, c])
    np.testing.assert_allclose(c, p.astype("f8") @ nn, rtol=1e-4, atol=1e-4)
    r = np.empty((n, 8), "float32")
    lib.call("matmul_relu_dyn", [p, nn, r])
    np.testing.assert_allclose(r, np.maximum(p.astype("f8") @ nn, 0), rtol=1e-4, atol=1e-4)


def test_matmul_relu_static_intermediate(lib):
    m, nn = rand(16, 24), rand(24, 8)
    r = np.empty((16, 8), "float32")
    lib.call("matmul_relu", [m, nn, r])
    np.testing.assert_allclose(r, np.maximum(m.astype("f8") @ nn, 0), rtol=1e-4, atol=1e-4)


def test_reductions(lib):
    x = rand(5, 7, 3)
    s = np.empty(5, "float32")
    lib.call("reduce_sum2", [x, s])
    np.testing.assert_allclose(s, x.astype("f8").sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)
    y = rand(9, 33)
    y[2, :] = -np.inf
    y[3, 5] = np.inf
    m = np.empty(9, "float32")
    lib.call("reduce_max", [y, m])
    np.testing.assert_array_equal(m[[0, 1, 4, 5, 6, 7, 8]], y.max(axis=1)[[0, 1, 4, 5, 6, 7, 8]])
    assert m[3] == np.inf
    assert m[2] == np.float32(-3.4028234663852886e38)  # TVM's identity: lowest finite value
    lib.call("reduce_min_where", [y, m])
    np.testing.assert_array_equal(m, y[:, :10].min(axis=1))


def test_float16_inputs_float32_accumulation(lib):
    h, g = rand(8, 32, dtype="float16"), rand(32, 4, dtype="float16")
    out = np.empty((8, 4), "float16")
    lib.call("fp16_matmul", [h, g, out])
    ref = (h.astype("f8") @ g.astype("f8")).astype("float16")
    np.testing.assert_allclose(out.astype("f8"), ref.astype("f8"), rtol=2e-3, atol=2e-3)


def test_embedding_gather(lib):
    idx = np.array([3, 0, 49, 3, 17], "int32")
    w = rand(50, 6)
    out = np.empty((5, 6), "float32")
    lib.call("embedding", [idx, w, out])
    np.testing.assert_array_equal(out, w[idx])


def test_one_hot_equal(lib):
    idx = np.array([2, 0, 5], "int32")
    out = np.empty((3, 6), "float32")
    lib.call("one_hot", [idx, out])
    np.testing.assert_array_equal(out, np.eye(6, dtype="float32")[idx])
    with pytest.raises(TypeError, match="tir.equal"):
        te.if_then_else(te.var("i") == 0, 1.0, 0.0)


def test_conditional_pad(lib):
    for n in (1, 4):
        x = rand(n, 5)
        out = np.empty((n + 2, 7), "float32")
        lib.call("pad", [x, out])
        np.testing.assert_array_equal(out, np.pad(x, 1, constant_values=-1.0))


def test_softmax_with_neg_inf(lib):
    x = rand(3, 10)
    x[1, :4] = -np.inf
    out = np.empty_like(x)
    lib.call("softmax", [x, out])
    xd = x.astype("f8")
    e = np.exp(xd - xd.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert np.all(out[1, :4] == 0)


def test_int_bool_dtypes(lib):
    z = np.arange(-6, 6, dtype="int32") * 7
    q = np.empty(12, "int32")
    pos = np.empty(12, "bool")
    i8 = np.empty(12, "int8")
    lib.call("int_ops", [z, q, pos, i8])
    np.testing.assert_array_equal(q, z // 3 + z % 5 * 7)  # floor semantics, as Python / TVM
    np.testing.assert_array_equal(pos, z > 0)
    np.testing.assert_array_equal(i8, np.maximum(z.astype("int8"), -3))
    bo = np.array([True, False, True, False, True, True])
    u = np.array([0, 1, 100, 55, 255, 7], "uint8")
    o = np.empty(6, "uint8")
    lib.call("bool_uint8", [bo, u, o])
    np.testing.assert_array_equal(o, np.where(bo, u // 2, (u.astype(int) + 200) % 256))


def test_compound_symbolic_dim(lib):
    t = rand(5)
    out = np.empty(10, "float32")
    lib.call("concat2", [t, out])
    np.testing.assert_array_equal(out, np.concatenate([t, -t]))
    with pytest.raises(ValueError, match=r"dim 0: expected n \* 2 \(n from argument 'T2' dim 0\), "
                                         r"got shape \(9,\)"):
        lib.call("concat2", [t, np.empty(9, "float32")])


def test_bfloat16_roundtrip():
    A = te.placeholder((4,), "bfloat16", name="A")
    f = te.create_prim_func(
        [A, te.compute((4,), lambda i: (A[i].astype("float32") * 3.0).astype("bfloat16"),
                       name="B")])
    lib = build_prim_func(f, "bf16").load()
    bits = np.array([0x3F80, 0x4000, 0xC040, 0x0000], "uint16")  # 1, 2, -3, 0
    out = np.empty(4, "uint16")
    lib.call("bf16", [bits, out])
    as_f32 = (out.astype("uint32") << 16).view("float32")
    np.testing.assert_array_equal(as_f32, [3.0, 6.0, -9.0, 0.0])


def test_llvm_ir_is_optimized_and_vectorized():
    M = te.placeholder((64, 64), name="M")
    k = te.reduce_axis((0, 64), name="k")
    f = te.create_prim_func(
        [M, te.compute((64,), lambda i: te.sum(M[i, k], axis=k), name="rowsum")])
    out = build({"rowsum": f})
    assert re.search(r"define .*i32 @rowsum\(ptr .*%data, ptr .*%shapes\)", out.llvm_ir)
    assert "ptrtoint" not in out.llvm_ir
    assert "fadd reassoc nsz contract" in out.llvm_ir
    assert "<" in out.llvm_ir and "x float>" in out.llvm_ir  # vector code
    assert isinstance(out.object_code, bytes) and len(out.object_code) > 0
    assert out.target["cpu"]
