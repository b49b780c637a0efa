"""builder.te.topi: every op compiled to native code and checked against float64 numpy references.

All kernels are built once, in a single ``codegen.build`` call (module fixture). Symbolic dims are
bound at run time to several sizes (1, 7, 33: not multiples of 8 / 16).
"""
import math
from pathlib import Path

import numpy as np
import pytest

from builder import te
from builder.codegen import build
from builder.te import topi

RNG = np.random.default_rng(1234)
DATA = Path(__file__).resolve().parents[1] / "data"
SIZES = [1, 7, 33]
F64 = np.float64

UNARY = ["relu", "silu", "gelu", "gelu_tanh", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid",
         "sin", "cos", "erf", "negative", "abs"]
POSITIVE_ONLY = {"log", "sqrt", "rsqrt"}
ARITH = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power"]
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]

_erf = np.vectorize(math.erf, otypes=[F64])


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


UNARY_REF = {
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                    * (x + 0.044715 * x ** 3))),
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": _sigmoid, "sin": np.sin, "cos": np.cos, "erf": _erf,
    "negative": np.negative, "abs": np.abs,
}
ARITH_REF = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
             "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum,
             "power": np.power}
COMPARE_REF = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less,
               "less_equal": np.less_equal, "greater": np.greater,
               "greater_equal": np.greater_equal}


# ---------------------------------------------------------------------------------------------
# bfloat16 helpers (numpy has no bfloat16: the runtime takes raw uint16 bits)


def f32_to_bf16_bits(x):
    """Round-to-nearest-even float32 -> bfloat16 bits."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_f64(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(F64)


# ---------------------------------------------------------------------------------------------
# kernels


def _kernels():
    fs = {}

    def add(name, args):
        fs[name] = te.create_prim_func(args, name=name)

    n, m, b, s, k = (te.var(v) for v in ("n", "m", "b", "s", "k"))

    # unary: float32 / float16 / float64 on a fully symbolic 2-D shape; ints where they apply
    for dt in ("float32", "float16", "float64"):
        x = te.placeholder((n, m), dt, name="x")
        for op in UNARY:
            add(f"{op}_{dt}", [x, getattr(topi, op)(x)])
    xi = te.placeholder((n, m), "int32", name="x")
    for op in ("relu", "negative", "abs"):
        add(f"{op}_int32", [xi, getattr(topi, op)(xi)])

    # binary with broadcasting: (n, 1, m) op (k, 1) -> (n, k, m)
    for dt in ("float32", "float16", "int32"):
        lhs = te.placeholder((n, 1, m), dt, name="lhs")
        rhs = te.placeholder((k, 1), dt, name="rhs")
        for op in ARITH + COMPARE:
            if dt == "int32" and op == "power":
                continue
            add(f"{op}_{dt}", [lhs, rhs, getattr(topi, op)(lhs, rhs)])
    x = te.placeholder((n, m), "float32", name="x")
    add("add_scalar", [x, topi.add(x, 2.5)])
    add("rsub_scalar", [x, topi.subtract(3, x)])
    y = te.placeholder((m,), "float32", name="y")
    add("multiply_same_sym", [x, y, topi.multiply(x, y)])  # (n, m) * (m,)
    ia, ib = te.placeholder((n,), "int32", name="a"), te.placeholder((n,), "int32", name="b")
    add("divide_i32_zero", [ia, ib, topi.divide(ia, ib)])
    add("floor_divide_i32", [ia, ib, topi.floor_divide(ia, ib)])
    add("floor_divide_f32", [x, y, topi.floor_divide(x, y)])

    # astype
    pairs = [("float32", "float16"), ("float16", "float32"), ("float32", "int32"),
             ("int32", "float32"), ("float32", "bool"), ("bool", "float32"),
             ("float64", "float16"), ("int64", "int8"), ("float16", "int32"),
             ("float32", "bfloat16"), ("bfloat16", "float32"), ("int32", "float16")]
    for src, dst in pairs:
        xs = te.placeholder((n,), src, name="x")
        add(f"astype_{src}_{dst}", [xs, topi.astype(xs, dst)])

    # permute_dims / reshape / take (exact data movement)
    x3 = te.placeholder((n, 4, m), "float32", name="x")
    add("permute_201", [x3, topi.permute_dims(x3, [2, 0, 1])])
    add("permute_none", [x3, topi.permute_dims(x3)])
    add("permute_neg", [x3, topi.permute_dims(x3, [0, -1, -2])])
    r2 = te.placeholder((n, 12), "float32", name="x")
    add("reshape_split", [r2, topi.reshape(r2, (n, 3, 4))])
    r3 = te.placeholder((n, 3, 4), "float32", name="x")
    add("reshape_infer", [r3, topi.reshape(r3, (-1, 4))])
    add("reshape_flat", [r3, topi.reshape(r3, (-1,))])
    r4 = te.placeholder((2, n, 6), "float32", name="x")
    add("reshape_swap", [r4, topi.reshape(r4, (n, 2, 6))])
    r5 = te.placeholder((6, 4), "float32", name="x")
    add("reshape_static", [r5, topi.reshape(r5, (4, 3, 2))])
    ids = te.placeholder((b, s), "int32", name="ids")
    add("reshape_ids", [ids, topi.reshape(ids, (b * s,))])
    r6 = te.placeholder((n, 1, m), "float16", name="x")
    add("reshape_unit", [r6, topi.reshape(r6, (n, m, 1))])
    emb = te.placeholder((50, m), "float32", name="weight")
    add("take_embedding", [emb, ids, topi.take(emb, ids, axis=0)])
    tx = te.placeholder((4, n), "float16", name="x")
    tidx = te.placeholder((k,), "int64", name="idx")
    add("take_axis_last", [tx, tidx, topi.take(tx, tidx, axis=-1)])
    add("take_clip", [tx, tidx, topi.take(tx, tidx, axis=1, mode="clip")])
    add("take_wrap", [tx, tidx, topi.take(tx, tidx, axis=1, mode="wrap")])

    # matmul
    a = te.placeholder((n, 33), "float32", name="a")
    w = te.placeholder((33, m), "float32", name="b")
    add("mm_f32", [a, w, topi.matmul(a, w)])
    ab = te.placeholder((b, 1, n, 7), "float32", name="a")
    bb = te.placeholder((3, 7, 5), "float32", name="b")
    add("mm_batch", [ab, bb, topi.matmul(ab, bb)])
    v7 = te.placeholder((7,), "float32", name="v")
    bv = te.placeholder((b, 7, 5), "float32", name="b")
    add("mm_vec_left", [v7, bv, topi.matmul(v7, bv)])
    an7 = te.placeholder((n, 7), "float32", name="a")
    add("mm_vec_right", [an7, v7, topi.matmul(an7, v7)])
    u7 = te.placeholder((7,), "float32", name="u")
    add("mm_vec_vec", [u7, v7, topi.matmul(u7, v7)])
    ah = te.placeholder((n, 64), "float16", name="a")
    bh = te.placeholder((64, m), "float16", name="b")
    add("mm_f16", [ah, bh, topi.matmul(ah, bh)])
    add("mm_f16_out_f32", [ah, bh, topi.matmul(ah, bh, out_dtype="float32")])
    ai = te.placeholder((n, 9), "int32", name="a")
    bi = te.placeholder((9, 5), "int32", name="b")
    add("mm_i32", [ai, bi, topi.matmul(ai, bi)])
    a8 = te.placeholder((n, 9), "int8", name="a")
    b8 = te.placeholder((9, 5), "int8", name="b")
    add("mm_i8_i32", [a8, b8, topi.matmul(a8, b8, out_dtype="int32")])

    # linear
    xl = te.placeholder((b, s, 33), "float32", name="x")
    wl = te.placeholder((17, 33), "float32", name="weight")
    bl = te.placeholder((17,), "float32", name="bias")
    add("linear_f32", [xl, wl, bl, topi.linear(xl, wl, bl)])
    x1 = te.placeholder((33,), "float32", name="x")
    add("linear_1d", [x1, wl, topi.linear(x1, wl)])
    xh = te.placeholder((n, 64), "float16", name="x")
    wh = te.placeholder((m, 64), "float16", name="weight")
    bh1 = te.placeholder((m,), "float16", name="bias")
    add("linear_f16", [xh, wh, bh1, topi.linear(xh, wh, bh1)])
    add("linear_f16_nobias", [xh, wh, topi.linear(xh, wh)])

    # layer_norm / rms_norm / softmax
    xn = te.placeholder((n, m), "float32", name="x")
    g = te.placeholder((m,), "float32", name="gamma")
    be = te.placeholder((m,), "float32", name="beta")
    add("ln_f32", [xn, g, be, topi.layer_norm(xn, g, be, axes=[-1], epsilon=1e-5)])
    add("ln_noaffine", [xn, topi.layer_norm(xn, None, None, axes=[1], epsilon=1e-6)])
    x56 = te.placeholder((n, 5, 6), "float32", name="x")
    g56 = te.placeholder((5, 6), "float32", name="gamma")
    b56 = te.placeholder((5, 6), "float32", name="beta")
    add("ln_2axes", [x56, g56, b56, topi.layer_norm(x56, g56, b56, axes=[-2, 2], epsilon=1e-5)])
    for dt, width in (("float16", 64), ("float64", 16)):
        xd = te.placeholder((n, width), dt, name="x")
        gd = te.placeholder((width,), dt, name="gamma")
        bd = te.placeholder((width,), dt, name="beta")
        add(f"ln_{dt}", [xd, gd, bd, topi.layer_norm(xd, gd, bd, axes=[-1], epsilon=1e-5)])
    xr = te.placeholder((b, s, m), "float32", name="x")
    wr = te.placeholder((m,), "float32", name="weight")
    add("rms_f32", [xr, wr, topi.rms_norm(xr, wr, axes=[-1], epsilon=1e-5)])
    for dt in ("float16", "bfloat16"):
        xd = te.placeholder((n, 64), dt, name="x")
        wd = te.placeholder((64,), dt, name="weight")
        add(f"rms_{dt}", [xd, wd, topi.rms_norm(xd, wd, axes=[-1], epsilon=1e-6)])
    add("softmax_f32", [xn, topi.softmax(xn, axis=-1)])
    x53 = te.placeholder((n, 5, 3), "float32", name="x")
    add("softmax_axis0", [x53, topi.softmax(x53, axis=0)])
    xs16 = te.placeholder((n, 64), "float16", name="x")
    add("softmax_f16", [xs16, topi.softmax(xs16)])

    # conv1d (symbolic batch and width)
    for name, dt, c, o, kk, kw in (
            ("conv_f32", "float32", 6, 8, 3, dict(padding=(1, 1))),
            ("conv_general", "float32", 4, 6, 3,
             dict(strides=[2], padding=[2, 1], dilation=2, groups=2)),
            ("conv_nopad", "float32", 3, 4, 5, dict(strides=3)),
            ("conv_depthwise", "float32", 4, 4, 3, dict(padding=1, groups=4)),
            ("conv_f16", "float16", 6, 8, 3, dict(padding=[1, 1]))):
        xc = te.placeholder((n, c, m), dt, name="x")
        wc = te.placeholder((o, c // kw.get("groups", 1), kk), dt, name="weight")
        add(name, [xc, wc, topi.conv1d(xc, wc, **kw)])

    # reductions
    x3r = te.placeholder((n, 5, m), "float32", name="x")
    add("sum_all", [x3r, topi.sum(x3r)])
    add("sum_keep", [x3r, topi.sum(x3r, axis=1, keepdims=True)])
    add("mean_02", [x3r, topi.mean(x3r, axis=(0, 2))])
    add("max_last", [x3r, topi.max(x3r, axis=-1)])
    add("min_first_keep", [x3r, topi.min(x3r, axis=0, keepdims=True)])
    xr16 = te.placeholder((n, 64), "float16", name="x")
    add("sum_f16", [xr16, topi.sum(xr16, axis=-1)])
    add("mean_f16", [xr16, topi.mean(xr16, axis=-1, keepdims=True)])
    add("max_f16", [xr16, topi.max(xr16, axis=1)])
    xri = te.placeholder((n, 5, m), "int32", name="x")
    add("sum_i32", [xri, topi.sum(xri, axis=[1, 2])])

    # kernels for the PyTorch / HF reference data in tests/data
    xs = te.placeholder((b, s, m), "float32", name="x")
    add("ref_softmax", [xs, topi.softmax(xs, axis=-1)])
    for name, width, eps in (("ref_layernorm", 384, 1e-12), ("ref_rmsnorm", 256, 1e-6)):
        xw = te.placeholder((b, s, width), "float32", name="x")
        ww = te.placeholder((width,), "float32", name="weight")
        if name == "ref_layernorm":
            bw = te.placeholder((width,), "float32", name="bias")
            add(name, [xw, ww, bw, topi.layer_norm(xw, ww, bw, axes=[-1], epsilon=eps)])
        else:
            add(name, [xw, ww, topi.rms_norm(xw, ww, axes=[-1], epsilon=eps)])
    xc = te.placeholder((b, 80, m), "float32", name="x")
    wc = te.placeholder((64, 80, 3), "float32", name="weight")
    bc = te.placeholder((64,), "float32", name="bias")
    for stride in (1, 2):  # conv1d + bias broadcast (1, 64, 1), as the nn frontend emits it
        conv = topi.conv1d(xc, wc, strides=[stride], padding=[1, 1], dilation=[1], groups=1)
        add(f"ref_conv1d_s{stride}", [xc, wc, bc, topi.add(conv, topi.reshape(bc, (1, 64, 1)))])
    we = te.placeholder((1000, 64), "float32", name="weight")
    ide = te.placeholder((b, s), "int64", name="ids")
    add("ref_embedding", [we, ide, topi.take(we, ide, axis=0)])
    return fs


KERNELS = _kernels()


@pytest.fixture(scope="module")
def lib():
    return build(KERNELS).load()


# ---------------------------------------------------------------------------------------------
# helpers


def out_dtype(lib, name):
    dt = lib.functions[name]["params"][-1]["dtype"]
    return np.dtype(np.uint16) if dt == "bfloat16" else np.dtype(dt)


def run(lib, name, inputs, shape):
    out = np.empty(shape, out_dtype(lib, name))
    lib.call(name, [np.ascontiguousarray(a) for a in inputs] + [out])
    return out


def rand(shape, dtype="float32", scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def tol(dtype):
    return {"float32": (1e-5, 1e-6), "float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2),
            "float64": (1e-12, 1e-14)}[str(dtype)]


def check(out, ref, dtype=None, rtol=None, atol=None):
    """``out`` (in its own dtype) against a float64 reference rounded to the output dtype."""
    dtype = str(dtype or out.dtype)
    r, a = tol(dtype)
    rtol = r if rtol is None else rtol
    atol = a if atol is None else atol
    ref = np.asarray(ref, F64)
    if dtype == "bfloat16":
        got = bf16_bits_to_f64(out)
    else:
        got = out.astype(F64)
        with np.errstate(over="ignore"):
            ref = ref.astype(dtype).astype(F64)  # overflow to inf exactly as the output dtype
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# unary


def _unary_input(op, shape, dtype):
    x = rand(shape, "float64", 3.0)
    if op in POSITIVE_ONLY:
        x = np.abs(x) + 0.05
    special = [-100.0, 100.0, -20.0, 20.0, 0.0, -0.5] if op not in POSITIVE_ONLY else [1e-3, 400.0]
    flat = x.reshape(-1)
    flat[:len(special)] = special[:flat.size]
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("op", UNARY)
def test_unary(lib, op, dtype):
    for shape in [(1, 1), (7, 33), (3, 5)]:
        x = _unary_input(op, shape, dtype)
        out = run(lib, f"{op}_{dtype}", [x], shape)
        with np.errstate(over="ignore"):
            ref = UNARY_REF[op](x.astype(F64))
        check(out, ref)


def test_unary_int(lib):
    x = RNG.integers(-50, 50, (7, 33)).astype("int32")
    np.testing.assert_array_equal(run(lib, "relu_int32", [x], x.shape), np.maximum(x, 0))
    np.testing.assert_array_equal(run(lib, "negative_int32", [x], x.shape), -x)
    np.testing.assert_array_equal(run(lib, "abs_int32", [x], x.shape), np.abs(x))


def test_sigmoid_silu_no_overflow(lib):
    x = np.array([[-1e4, -500.0, -89.0, -88.0, 0.0, 88.0, 89.0, 500.0, 1e4]], "float32")
    sig = run(lib, "sigmoid_float32", [x], x.shape)
    assert np.all(np.isfinite(sig))
    check(sig, _sigmoid(x.astype(F64)))
    silu = run(lib, "silu_float32", [x], x.shape)
    assert np.all(np.isfinite(silu))
    check(silu, x.astype(F64) * _sigmoid(x.astype(F64)))
    th = run(lib, "tanh_float32", [x], x.shape)
    np.testing.assert_array_equal(th[0, [0, 1, -2, -1]], [-1, -1, 1, 1])


def test_gelu_exact_vs_tanh_reference_values(lib):
    """Reference data: GELU(1) = 0.8413447460685429 (erf form), 0.8411919906082768 (tanh form);
    the two ops must not be swapped (they differ by 1.5e-4 at x = 1)."""
    x = np.array([[-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0]], "float64")
    exact = run(lib, "gelu_float64", [x], x.shape)
    approx = run(lib, "gelu_tanh_float64", [x], x.shape)
    np.testing.assert_allclose(exact[0, 5], 0.8413447460685429, rtol=1e-14)
    np.testing.assert_allclose(approx[0, 5], 0.8411919906082768, rtol=1e-14)
    np.testing.assert_allclose(exact[0, 1], -0.15865525393145707, rtol=1e-13)
    np.testing.assert_allclose(approx[0, 1], -0.15880800939172324, rtol=1e-13)
    np.testing.assert_allclose(exact[0, 6], 2.99595030590511, rtol=1e-13)
    np.testing.assert_allclose(approx[0, 6], 2.996362607918227, rtol=1e-13)
    assert abs(exact[0, 5] - approx[0, 5]) > 1e-4
    x32 = x.astype("float32")
    e32 = run(lib, "gelu_float32", [x32], x.shape)
    t32 = run(lib, "gelu_tanh_float32", [x32], x.shape)
    check(e32, exact)
    check(t32, approx)
    assert abs(float(e32[0, 5]) - float(t32[0, 5])) > 1e-4


# ---------------------------------------------------------------------------------------------
# binary


def _binary_inputs(op, dtype, na, nb_shape):
    if dtype == "int32":
        a = RNG.integers(-20, 21, na).astype("int32")
        bb = RNG.integers(1, 8, nb_shape) * RNG.choice([-1, 1], nb_shape)
        if op in COMPARE:
            bb = RNG.integers(-3, 4, nb_shape)
            a = RNG.integers(-3, 4, na).astype("int32")
        return a, bb.astype("int32")
    if op in COMPARE:  # small integers: equal pairs occur
        return (RNG.integers(-2, 3, na).astype(dtype), RNG.integers(-2, 3, nb_shape).astype(dtype))
    a = rand(na, "float64", 2.0)
    bb = rand(nb_shape, "float64", 2.0)
    if op == "divide":
        bb = np.sign(bb) * (np.abs(bb) + 0.5)
    if op == "power":
        a = np.abs(a) + 0.1
    return a.astype(dtype), bb.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("op", ARITH + COMPARE)
def test_binary_broadcast(lib, op, dtype):
    if dtype == "int32" and op == "power":
        pytest.skip("power is defined for floats here")
    for nn, kk, mm in [(1, 1, 1), (7, 3, 33), (2, 33, 7)]:
        a, bb = _binary_inputs(op, dtype, (nn, 1, mm), (kk, 1))
        out = run(lib, f"{op}_{dtype}", [a, bb], (nn, kk, mm))
        if op in COMPARE:
            assert out.dtype == np.bool_
            np.testing.assert_array_equal(out, COMPARE_REF[op](a, bb))
        elif dtype == "int32":
            if op == "divide":  # C division: truncates toward zero
                ref = np.trunc(a.astype(F64) / bb).astype("int32")
            else:
                ref = ARITH_REF[op](a, bb)
            np.testing.assert_array_equal(out, ref)
        else:
            check(out, ARITH_REF[op](a.astype(F64), bb.astype(F64)))


def test_binary_scalars_and_same_symbolic_dim(lib):
    x = rand((7, 33))
    check(run(lib, "add_scalar", [x], x.shape), x.astype(F64) + 2.5)
    check(run(lib, "rsub_scalar", [x], x.shape), 3.0 - x.astype(F64))
    y = rand((33,))
    check(run(lib, "multiply_same_sym", [x, y], x.shape), x.astype(F64) * y)


def test_integer_division_by_zero_and_floor_divide(lib):
    a = np.array([7, -7, 7, -7, 5, 0, -3], "int32")
    bb = np.array([2, 2, -2, -2, 0, 0, 0], "int32")
    np.testing.assert_array_equal(run(lib, "divide_i32_zero", [a, bb], a.shape),
                                  [3, -3, -3, 3, 0, 0, 0])
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(run(lib, "floor_divide_i32", [a, bb], a.shape),
                                      np.floor_divide(a, bb))
    x, y = rand((7, 33), scale=5.0), np.abs(rand((33,))) + np.float32(0.5)
    np.testing.assert_array_equal(run(lib, "floor_divide_f32", [x, y], x.shape),
                                  np.floor(x / y))


def test_binary_errors():
    a = te.placeholder((3, 4), name="a")
    bb = te.placeholder((5,), name="b")
    with pytest.raises(ValueError, match="broadcast"):
        topi.add(a, bb)
    with pytest.raises(TypeError):
        topi.add(1, 2)


# ---------------------------------------------------------------------------------------------
# astype / layout


def test_astype(lib):
    def go(src, dst, x):
        return run(lib, f"astype_{src}_{dst}", [x], x.shape)

    f = np.concatenate([rand((30,), "float64", 1000.0), [1e5, -1e5, 0.5, -0.5, 2.5, -0.0]])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(go("float32", "float16", f.astype("f4")),
                                      f.astype("f4").astype("f2"))
        # float64 -> float16 needs one correct rounding (no double rounding through float32)
        f = np.concatenate([f, [1 + 2.0 ** -11 + 2.0 ** -40, 1 + 2.0 ** -11, 65519.99, 65520.0]])
        np.testing.assert_array_equal(go("float64", "float16", f), f.astype("f2"))
    h = rand((33,), "float16", 100.0)
    np.testing.assert_array_equal(go("float16", "float32", h), h.astype("f4"))
    np.testing.assert_array_equal(go("float16", "int32", h), h.astype("int32"))
    g = rand((33,), "float32", 1e6)
    np.testing.assert_array_equal(go("float32", "int32", g), g.astype("int32"))
    i = np.concatenate([RNG.integers(-2**31, 2**31 - 1, 30), [2**24 + 1, -(2**24 + 3), 0]])
    np.testing.assert_array_equal(go("int32", "float32", i.astype("int32")),
                                  i.astype("int32").astype("f4"))
    i16 = RNG.integers(-3000, 3000, 33).astype("int32")
    np.testing.assert_array_equal(go("int32", "float16", i16), i16.astype("f2"))
    z = np.array([0.0, -0.0, 0.25, -3.0, np.nan, np.inf, 1e-40], "float32")
    np.testing.assert_array_equal(go("float32", "bool", z), z.astype(bool))
    bl = RNG.integers(0, 2, 7).astype(bool)
    np.testing.assert_array_equal(go("bool", "float32", bl), bl.astype("f4"))
    big = RNG.integers(-2**40, 2**40, 33).astype("int64")
    np.testing.assert_array_equal(go("int64", "int8", big), big.astype("int8"))
    x = np.concatenate([rand((30,)), [1.00390625, 1.01171875, -3.0e38]]).astype("f4")
    np.testing.assert_array_equal(go("float32", "bfloat16", x), f32_to_bf16_bits(x))
    bits = f32_to_bf16_bits(rand((33,), scale=10.0))
    np.testing.assert_array_equal(go("bfloat16", "float32", bits),
                                  bf16_bits_to_f64(bits).astype("f4"))


@pytest.mark.parametrize("n,m", [(1, 1), (7, 33), (33, 2)])
def test_permute_dims(lib, n, m):
    x = rand((n, 4, m))
    np.testing.assert_array_equal(run(lib, "permute_201", [x], (m, n, 4)), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(run(lib, "permute_none", [x], (m, 4, n)), x.transpose())
    np.testing.assert_array_equal(run(lib, "permute_neg", [x], (n, m, 4)), x.transpose(0, 2, 1))


@pytest.mark.parametrize("n", SIZES)
def test_reshape(lib, n):
    x = rand((n, 12))
    np.testing.assert_array_equal(run(lib, "reshape_split", [x], (n, 3, 4)), x.reshape(n, 3, 4))
    y = rand((n, 3, 4))
    np.testing.assert_array_equal(run(lib, "reshape_infer", [y], (3 * n, 4)), y.reshape(-1, 4))
    np.testing.assert_array_equal(run(lib, "reshape_flat", [y], (12 * n,)), y.reshape(-1))
    z = rand((2, n, 6))
    np.testing.assert_array_equal(run(lib, "reshape_swap", [z], (n, 2, 6)), z.reshape(n, 2, 6))
    w = rand((6, 4))
    np.testing.assert_array_equal(run(lib, "reshape_static", [w], (4, 3, 2)), w.reshape(4, 3, 2))
    ids = RNG.integers(0, 50, (n, 3)).astype("int32")
    np.testing.assert_array_equal(run(lib, "reshape_ids", [ids], (3 * n,)), ids.reshape(-1))
    u = rand((n, 1, 5), "float16")
    np.testing.assert_array_equal(run(lib, "reshape_unit", [u], (n, 5, 1)), u.reshape(n, 5, 1))


def test_reshape_shapes_and_errors():
    n = te.var("n")
    x = te.placeholder((n, 3, 4), name="x")
    assert str(topi.reshape(x, (-1, 4)).shape[0]) == "n * 3"
    assert [int(d) for d in topi.reshape(te.placeholder((6, 4)), (2, -1, 3)).shape] == [2, 4, 3]
    with pytest.raises(ValueError):
        topi.reshape(te.placeholder((6, 4)), (5, 5))
    with pytest.raises(ValueError):
        topi.reshape(x, (-1, -1))
    with pytest.raises(ValueError):
        topi.permute_dims(x, [0, 0, 1])


@pytest.mark.parametrize("bsz,seq", [(1, 1), (7, 3), (2, 33)])
def test_take(lib, bsz, seq):
    m = 5
    wt = rand((50, m))
    ids = RNG.integers(0, 50, (bsz, seq)).astype("int32")
    np.testing.assert_array_equal(run(lib, "take_embedding", [wt, ids], (bsz, seq, m)), wt[ids])
    x = rand((4, seq + 2), "float16")
    idx = RNG.integers(0, seq + 2, bsz).astype("int64")
    np.testing.assert_array_equal(run(lib, "take_axis_last", [x, idx], (4, bsz)), x[:, idx])
    wild = RNG.integers(-3 * (seq + 2), 3 * (seq + 2), bsz).astype("int64")
    np.testing.assert_array_equal(run(lib, "take_clip", [x, wild], (4, bsz)),
                                  np.take(x, wild, axis=1, mode="clip"))
    np.testing.assert_array_equal(run(lib, "take_wrap", [x, wild], (4, bsz)),
                                  np.take(x, wild, axis=1, mode="wrap"))
    with pytest.raises(TypeError):
        topi.take(te.placeholder((3, 4)), te.placeholder((2,), "float32"))


# ---------------------------------------------------------------------------------------------
# matmul / linear


def check_dot(out, ref, terms_abs, dtype=None):
    """Dot products: relative tolerance plus an absolute one scaled by sum |a_k b_k|."""
    dtype = str(dtype or out.dtype)
    rtol = tol(dtype)[0]
    check(out, ref, dtype, rtol=rtol, atol=rtol * max(float(np.max(terms_abs, initial=0)), 1e-30))


@pytest.mark.parametrize("n", SIZES)
def test_matmul(lib, n):
    m = {1: 1, 7: 17, 33: 5}[n]
    a, bb = rand((n, 33)), rand((33, m))
    a64, b64 = a.astype(F64), bb.astype(F64)
    check_dot(run(lib, "mm_f32", [a, bb], (n, m)), a64 @ b64, np.abs(a64) @ np.abs(b64))
    # broadcast batch dims: (b, 1, n, 7) @ (3, 7, 5)
    ab, b3 = rand((2, 1, n, 7)), rand((3, 7, 5))
    ref = np.matmul(ab.astype(F64), b3.astype(F64))
    check_dot(run(lib, "mm_batch", [ab, b3], (2, 3, n, 5)), ref,
              np.matmul(np.abs(ab).astype(F64), np.abs(b3)))
    v, bv = rand((7,)), rand((n, 7, 5))
    check_dot(run(lib, "mm_vec_left", [v, bv], (n, 5)), np.matmul(v.astype(F64), bv),
              np.matmul(np.abs(v).astype(F64), np.abs(bv)))
    an = rand((n, 7))
    check_dot(run(lib, "mm_vec_right", [an, v], (n,)), an.astype(F64) @ v,
              np.abs(an).astype(F64) @ np.abs(v))
    u = rand((7,))
    check_dot(run(lib, "mm_vec_vec", [u, v], ()), u.astype(F64) @ v,
              np.abs(u).astype(F64) @ np.abs(v))
    # float16 with float32 accumulation, float16 and float32 outputs
    ah, bh = rand((n, 64), "float16"), rand((64, m), "float16")
    ref = ah.astype(F64) @ bh.astype(F64)
    terms = np.abs(ah).astype(F64) @ np.abs(bh).astype(F64)
    check_dot(run(lib, "mm_f16", [ah, bh], (n, m)), ref, terms)
    out32 = run(lib, "mm_f16_out_f32", [ah, bh], (n, m))
    assert out32.dtype == np.float32
    check_dot(out32, ref, terms)
    # integers: exact (int8 inputs accumulate in the int32 out_dtype)
    ai, bi = RNG.integers(-1000, 1000, (n, 9)).astype("int32"), RNG.integers(-1000, 1000, (9, 5))
    np.testing.assert_array_equal(run(lib, "mm_i32", [ai, bi.astype("int32")], (n, 5)),
                                  ai.astype("int64") @ bi)
    a8, b8 = (RNG.integers(-128, 128, (n, 9)).astype("int8"),
              RNG.integers(-128, 128, (9, 5)).astype("int8"))
    out = run(lib, "mm_i8_i32", [a8, b8], (n, 5))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a8.astype("int64") @ b8.astype("int64"))


def test_matmul_float16_accumulates_in_float32(lib):
    """Partial sums of 2048 * 64 overflow float16 (max 65504) but the exact result fits."""
    a = np.concatenate([np.full(32, 2048.0), np.full(32, -2048.0)]).reshape(1, 64)
    a[0, 0] = 2050.0
    bb = np.full((64, 3), 64.0)
    out = run(lib, "mm_f16", [a.astype("f2"), bb.astype("f2")], (1, 3))
    np.testing.assert_array_equal(out, np.full((1, 3), 128.0, "f2"))


def test_matmul_structure_and_errors():
    a = te.placeholder((4, 8), "float16", name="a")
    bb = te.placeholder((8, 3), "float16", name="b")
    c = topi.matmul(a, bb)
    assert c.name == "matmul" and c.dtype == "float16"
    acc = c.op.input_tensors[0]
    assert acc.name == "matmul_acc" and acc.dtype == "float32"
    assert topi.matmul(a, bb, out_dtype="float32").op.input_tensors == [a, bb]
    with pytest.raises(ValueError, match="reduction"):
        topi.matmul(a, te.placeholder((7, 3), "float16"))
    with pytest.raises(ValueError, match="broadcast"):
        topi.matmul(te.placeholder((2, 4, 8)), te.placeholder((3, 8, 5)))


@pytest.mark.parametrize("bsz,seq", [(1, 1), (7, 3), (2, 33)])
def test_linear(lib, bsz, seq):
    x, w, bias = rand((bsz, seq, 33)), rand((17, 33)), rand((17,))
    x64, w64 = x.astype(F64), w.astype(F64)
    terms = np.abs(x64) @ np.abs(w64).T + np.abs(bias)
    check_dot(run(lib, "linear_f32", [x, w, bias], (bsz, seq, 17)), x64 @ w64.T + bias, terms)
    check_dot(run(lib, "linear_1d", [x[0, 0], w], (17,)), x64[0, 0] @ w64.T, terms[0, 0])
    n, m = bsz * seq, {1: 1, 3: 7, 33: 33}[seq]
    xh, wh, bh = rand((n, 64), "float16"), rand((m, 64), "float16"), rand((m,), "float16")
    ref = xh.astype(F64) @ wh.astype(F64).T
    terms = np.abs(xh).astype(F64) @ np.abs(wh).astype(F64).T
    check_dot(run(lib, "linear_f16", [xh, wh, bh], (n, m)), ref + bh, terms + np.abs(bh))
    check_dot(run(lib, "linear_f16_nobias", [xh, wh], (n, m)), ref, terms)


def test_linear_errors():
    with pytest.raises(ValueError):
        topi.linear(te.placeholder((2, 8)), te.placeholder((4, 7)))
    with pytest.raises(ValueError):
        topi.linear(te.placeholder((2, 8)), te.placeholder((8,)))


# ---------------------------------------------------------------------------------------------
# normalization / softmax


def layer_norm_ref(x, gamma, beta, axes, eps):
    x = x.astype(F64)
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if gamma is not None:
        y = y * gamma.astype(F64)
    if beta is not None:
        y = y + beta.astype(F64)
    return y


def rms_norm_ref(x, w, eps):
    x = x.astype(F64)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w.astype(F64)


@pytest.mark.parametrize("n", SIZES)
def test_layer_norm(lib, n):
    m = {1: 1, 7: 33, 33: 7}[n]
    # a large common offset: a one-pass E[x^2] - E[x]^2 variance loses everything in float32
    x = (1000.0 + rand((n, m), "float64")).astype("f4")
    g, b = rand((m,)), rand((m,))
    check(run(lib, "ln_f32", [x, g, b], (n, m)), layer_norm_ref(x, g, b, -1, 1e-5),
          rtol=1e-4, atol=2e-3)
    y = rand((n, m), scale=3.0)
    check(run(lib, "ln_f32", [y, g, b], (n, m)), layer_norm_ref(y, g, b, -1, 1e-5),
          rtol=1e-5, atol=1e-5)
    check(run(lib, "ln_noaffine", [y], (n, m)), layer_norm_ref(y, None, None, -1, 1e-6),
          rtol=1e-5, atol=1e-5)
    x3, g3, b3 = rand((n, 5, 6)), rand((5, 6)), rand((5, 6))
    check(run(lib, "ln_2axes", [x3, g3, b3], (n, 5, 6)),
          layer_norm_ref(x3, g3, b3, (1, 2), 1e-5), rtol=1e-5, atol=1e-5)
    xh, gh, bh = rand((n, 64), "float16", 4.0), rand((64,), "float16"), rand((64,), "float16")
    check(run(lib, "ln_float16", [xh, gh, bh], (n, 64)), layer_norm_ref(xh, gh, bh, -1, 1e-5))
    xd, gd, bd = rand((n, 16), "f8", 5.0), rand((16,), "f8"), rand((16,), "f8")
    check(run(lib, "ln_float64", [xd, gd, bd], (n, 16)), layer_norm_ref(xd, gd, bd, -1, 1e-5),
          rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", SIZES)
def test_rms_norm(lib, n):
    m = {1: 1, 7: 33, 33: 4096 // 64}[n]
    x, w = rand((2, n, m), scale=2.0), rand((m,))
    check(run(lib, "rms_f32", [x, w], (2, n, m)), rms_norm_ref(x, w, 1e-5), atol=1e-5)
    xh, wh = rand((n, 64), "float16", 30.0), rand((64,), "float16")
    check(run(lib, "rms_float16", [xh, wh], (n, 64)), rms_norm_ref(xh, wh, 1e-6))
    xb = f32_to_bf16_bits(rand((n, 64), scale=30.0))
    wb = f32_to_bf16_bits(rand((64,)))
    out = run(lib, "rms_bfloat16", [xb, wb], (n, 64))
    check(out, rms_norm_ref(bf16_bits_to_f64(xb), bf16_bits_to_f64(wb), 1e-6), "bfloat16")


def softmax_ref(x, axis):
    x = x.astype(F64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("n", SIZES)
def test_softmax(lib, n):
    m = {1: 1, 7: 33, 33: 7}[n]
    x = rand((n, m), scale=3.0)
    check(run(lib, "softmax_f32", [x], (n, m)), softmax_ref(x, -1), atol=1e-7)
    # +80 shift: exp(x) alone would overflow float32 (exp(88.8) = inf)
    big = (rand((n, m), scale=4.0) + 80.0).astype("f4")
    big[:, 0] = 100.0
    out = run(lib, "softmax_f32", [big], (n, m))
    assert np.all(np.isfinite(out))
    check(out, softmax_ref(big, -1), atol=1e-7)
    np.testing.assert_allclose(out.astype(F64).sum(axis=-1), 1.0, rtol=1e-5)
    x3 = rand((n, 5, 3), scale=3.0)
    check(run(lib, "softmax_axis0", [x3], (n, 5, 3)), softmax_ref(x3, 0), atol=1e-7)
    xh = (rand((n, 64), "float16", 3.0) + np.float16(80.0)).astype("f2")
    out = run(lib, "softmax_f16", [xh], (n, 64))
    assert np.all(np.isfinite(out.astype(F64)))
    check(out, softmax_ref(xh, -1), atol=1e-4)


def test_norm_stage_names():
    x = te.placeholder((4, 8), "float16", name="x")
    out = topi.softmax(x)
    script = te.create_prim_func([x, out]).script()
    for stage in ("T_softmax_maxelem", "T_softmax_exp", "T_softmax_expsum", "T_softmax_norm"):
        assert f'T.block("{stage}")' in script
    assert 'T_softmax_exp = T.alloc_buffer([4, 8], dtype="float32")' in script
    g = te.placeholder((8,), "float16", name="g")
    g_out = topi.rms_norm(x, g, [-1], 1e-5)
    script = te.create_prim_func([x, g, g_out]).script()
    assert g_out.name == "T_rms_norm"
    assert 'T_rms_norm_sumsq = T.alloc_buffer([4], dtype="float32")' in script
    with pytest.raises(ValueError):
        topi.layer_norm(x, te.placeholder((7,), "float16"), None, [-1], 1e-5)
    with pytest.raises(TypeError):
        topi.softmax(te.placeholder((4, 8), "int32"))


# ---------------------------------------------------------------------------------------------
# conv1d


def conv1d_ref(x, w, stride=1, pad=(0, 0), dil=1, groups=1):
    x, w = x.astype(F64), w.astype(F64)
    nb, c, width = x.shape
    o, cg, kk = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), tuple(pad)))
    wo = (width + pad[0] + pad[1] - dil * (kk - 1) - 1) // stride + 1
    out = np.zeros((nb, o, wo))
    og = o // groups
    for g in range(groups):
        xs, ws = xp[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
        for t in range(wo):
            win = xs[:, :, t * stride + np.arange(kk) * dil]
            out[:, g * og:(g + 1) * og, t] = np.einsum("nck,ock->no", win, ws)
    return out


CONV_CASES = {
    "conv_f32": (6, 8, 3, dict(pad=(1, 1)), "float32"),
    "conv_general": (4, 6, 3, dict(stride=2, pad=(2, 1), dil=2, groups=2), "float32"),
    "conv_nopad": (3, 4, 5, dict(stride=3), "float32"),
    "conv_depthwise": (4, 4, 3, dict(pad=(1, 1), groups=4), "float32"),
    "conv_f16": (6, 8, 3, dict(pad=(1, 1)), "float16"),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv1d(lib, name):
    c, o, kk, kw, dt = CONV_CASES[name]
    groups = kw.get("groups", 1)
    min_width = kw.get("dil", 1) * (kk - 1) + 1 - sum(kw.get("pad", (0, 0)))
    for nb, width in [(1, max(min_width, 1)), (2, 7), (3, 33)]:
        x, w = rand((nb, c, width), dt), rand((o, c // groups, kk), dt)
        ref = conv1d_ref(x, w, **kw)
        terms = conv1d_ref(np.abs(x), np.abs(w), **kw)
        check_dot(run(lib, name, [x, w], ref.shape), ref, terms)


def test_conv1d_shapes_and_errors():
    n, width = te.var("n"), te.var("w")
    x = te.placeholder((n, 80, width), name="x")
    w = te.placeholder((384, 80, 3), name="weight")
    out = topi.conv1d(x, w, strides=[1], padding=[1, 1], dilation=[1], groups=1)
    assert out.shape[2] is width and out.name == "conv1d_ncw"
    assert int(topi.conv1d(te.placeholder((1, 80, 3000)), w, 2, 1).shape[2]) == 1500
    with pytest.raises(ValueError, match="channels"):
        topi.conv1d(x, te.placeholder((384, 40, 3)), groups=1)
    with pytest.raises(ValueError):
        topi.conv1d(te.placeholder((80, 3000)), w)


# ---------------------------------------------------------------------------------------------
# reductions


@pytest.mark.parametrize("n,m", [(1, 1), (7, 33), (33, 2)])
def test_reductions(lib, n, m):
    x = rand((n, 5, m))
    x64 = x.astype(F64)
    check(run(lib, "sum_all", [x], ()), x64.sum(), atol=1e-5 * np.abs(x64).sum())
    check(run(lib, "sum_keep", [x], (n, 1, m)), x64.sum(axis=1, keepdims=True), atol=1e-5)
    check(run(lib, "mean_02", [x], (5,)), x64.mean(axis=(0, 2)), atol=1e-6)
    np.testing.assert_array_equal(run(lib, "max_last", [x], (n, 5)), x.max(axis=-1))
    np.testing.assert_array_equal(run(lib, "min_first_keep", [x], (1, 5, m)),
                                  x.min(axis=0, keepdims=True))
    xh = rand((n, 64), "float16", 100.0)
    xh[:, :32] = 3000.0  # float16 partial sums would overflow (> 65504) ...
    xh[:, 32:] = -3000.0  # ... while the exact sums are 0
    xh[:, 7] = 3001.0
    ref = xh.astype(F64).sum(axis=-1)
    np.testing.assert_array_equal(run(lib, "sum_f16", [xh], (n,)), ref.astype("f2"))
    check(run(lib, "mean_f16", [xh], (n, 1)), xh.astype(F64).mean(axis=-1, keepdims=True))
    xh2 = rand((n, 64), "float16", 100.0)
    np.testing.assert_array_equal(run(lib, "max_f16", [xh2], (n,)), xh2.max(axis=1))
    xi = RNG.integers(-1000, 1000, (n, 5, m)).astype("int32")
    np.testing.assert_array_equal(run(lib, "sum_i32", [xi], (n,)), xi.sum(axis=(1, 2)))


def test_reduction_errors():
    x = te.placeholder((3, 4), name="x")
    with pytest.raises(ValueError):
        topi.sum(x, axis=2)
    with pytest.raises(ValueError):
        topi.mean(x, axis=[1, -1])
    assert topi.sum(x, axis=[0, 1]).shape == ()



# ---------------------------------------------------------------------------------------------
# PyTorch / HF reference data (tests/data/*.npz)


def ref_data(name):
    return np.load(DATA / f"{name}.npz", allow_pickle=False)


@pytest.mark.parametrize("name,kernel,other", [("gelu_exact", "gelu_float32", "gelu_tanh"),
                                               ("gelu_tanh", "gelu_tanh_float32", "gelu_exact")])
def test_reference_gelu(lib, name, kernel, other):
    d = ref_data(name)
    out = run(lib, kernel, [d["x"]], d["x"].shape)
    check(out, d["y"], rtol=1e-5, atol=1e-6)
    # the other formula's data must NOT match: exact and tanh GELU really differ
    assert np.abs(out.astype(F64) - ref_data(other)["y"]).max() > 1e-4


def test_reference_softmax_large_shift(lib):
    d = ref_data("softmax")
    assert int(d["dim"]) == -1 and d["x"].max() > 80.0  # rows shifted by +80: exp would overflow
    for rows in (slice(None), slice(1, 2)):
        x = np.ascontiguousarray(d["x"][rows])
        out = run(lib, "ref_softmax", [x], x.shape)
        assert np.all(np.isfinite(out))
        check(out, d["y"][rows], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_reference_norms(lib, name):
    d = ref_data(name)
    params = [d["weight"], d["bias"]] if name == "layernorm" else [d["weight"]]
    for sl in (np.s_[:], np.s_[:1, :3]):
        x = np.ascontiguousarray(d["x"][sl])
        out = run(lib, f"ref_{name}", [x] + params, x.shape)
        check(out, d["y"][sl], rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("stride", [1, 2])
def test_reference_conv1d(lib, stride):
    d = ref_data(f"conv1d_s{stride}")
    assert int(d["stride"]) == stride and int(d["padding"]) == 1 and int(d["kernel_size"]) == 3
    for nb in (2, 1):
        x = np.ascontiguousarray(d["x"][:nb])
        out = run(lib, f"ref_conv1d_s{stride}", [x, d["weight"], d["bias"]], d["y"][:nb].shape)
        check(out, d["y"][:nb], rtol=1e-5, atol=1e-5)


def test_reference_embedding(lib):
    d = ref_data("embedding")
    for sl in (np.s_[:], np.s_[:1, :1]):
        ids = np.ascontiguousarray(d["ids"][sl])
        out = run(lib, "ref_embedding", [d["weight"], ids], ids.shape + (64,))
        np.testing.assert_array_equal(out, d["y"][sl])
