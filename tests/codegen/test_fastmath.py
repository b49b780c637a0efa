"""Vectorizable float32 ``erf``, ``exp`` and ``tanh`` (builder/codegen/fastmath.py) and ``erf`` / ``tanh``
end to end as op records: ``nn.op.erf``, ``erf`` in a recipe's ``forward:``, exact and tanh-approximated
GELU in vector code, each against ``math.erf`` / ``numpy.tanh`` in float64."""
import math

import numpy as np
import pytest

import builder
from builder import nn, te
from builder.codegen import build

ERF = np.vectorize(math.erf)


def _ulps(got: np.ndarray, want: np.ndarray, dtype) -> np.ndarray:
    """|got - want| in units of the spacing of ``dtype`` at ``want`` (float64 reference)."""
    spacing = np.spacing(np.abs(want.astype(dtype))).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


@pytest.fixture(scope="module")
def erf_lib():
    n = te.var("n")
    fs = {}
    for dtype in ("float32", "float16"):
        x = te.placeholder((n,), dtype, name="x")
        fs[f"erf_{dtype}"] = te.create_prim_func([x, te.compute((n,), lambda i: te.erf(x[i]), name="y")])
        fs[f"tanh_{dtype}"] = te.create_prim_func([x, te.compute((n,), lambda i: te.tanh(x[i]), name="y")])
    x = te.placeholder((n,), "float32", name="x")
    fs["exp_float32"] = te.create_prim_func([x, te.compute((n,), lambda i: te.exp(x[i]), name="y")])
    return build(fs)


def test_exp_float32_within_2_ulp_and_its_special_values(erf_lib):
    x = np.concatenate([np.linspace(-87.3, 88.72, 400_001), np.linspace(-1, 1, 10_001)]).astype(np.float32)
    y = np.empty_like(x)
    erf_lib.load().call("exp_float32", [x, y])
    assert _ulps(y, np.exp(x.astype(np.float64)), np.float32).max() <= 2.0
    s = np.array([np.inf, -np.inf, np.nan, 88.73, 1e30, -87.4, -1e30, 0.0], np.float32)
    got = np.empty_like(s)
    erf_lib.load().call("exp_float32", [s, got])
    assert got[0] == np.inf and got[1] == 0.0 and np.isnan(got[2]) and got[3] == np.inf and got[4] == np.inf
    assert got[5] == 0.0 and got[6] == 0.0 and got[7] == 1.0


def _erf(lib, x):
    y = np.empty_like(x)
    lib.load().call(f"erf_{x.dtype}", [x, y])
    return y


def test_erf_float32_within_3_ulp_everywhere(erf_lib):
    tiny = np.geomspace(1e-38, 1.0, 4000)
    x = np.concatenate([np.linspace(-7, 7, 300_001), tiny, -tiny, [0.0, 0.921875, -0.921875, 3.9, 4.0, 1e30]])
    x = x.astype(np.float32)
    got = _erf(erf_lib, x)
    want = ERF(x.astype(np.float64))
    assert _ulps(got, want, np.float32).max() <= 3.0
    assert np.all(np.sign(got) == np.sign(x)) and np.all(np.abs(got) <= 1.0)


def test_erf_special_values(erf_lib):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, 1e-45, 10.0, -10.0], np.float32)
    got = _erf(erf_lib, x)
    assert got[0] == 1.0 and got[1] == -1.0 and np.isnan(got[2]) and got[3] == 0.0
    assert got[5] == 1.0 and got[6] == -1.0
    assert got[4] == np.float32(1e-45 * 2 / math.sqrt(math.pi))    # denormal input: x * 2/sqrt(pi), rounded


def test_erf_float16_within_1_ulp(erf_lib):
    x = np.linspace(-5, 5, 20_001).astype(np.float16)
    got = _erf(erf_lib, x)
    assert _ulps(got, ERF(x.astype(np.float64)), np.float16).max() <= 1.0


def test_erf_loop_is_vector_code(erf_lib):
    """No libm call per element: the loop vectorizer turned the loop into SIMD code."""
    text = erf_lib.llvm_ir
    assert "erff" not in text
    assert "@llvm.copysign.v" in text     # the sign copy of a vector of floats


def _tanh(lib, x):
    y = np.empty_like(x)
    lib.load().call(f"tanh_{x.dtype}", [x, y])
    return y


def test_tanh_float32_within_2_ulp_everywhere(erf_lib):
    """Both branches (the odd polynomial below 0.625, ``1 - 2 / (exp(2a) + 1)`` above), the tiny
    inputs returned as they are (denormals included), and the saturation to +-1 (float32 ``tanh``
    is 1 from 9.011 on: a clamp at 9 would give 0.99999994 there)."""
    tiny = np.geomspace(1e-45, 1.0, 4000)
    x = np.concatenate([np.linspace(-12, 12, 1_200_001), tiny, -tiny,
                        [0.0, 0.625, -0.625, 9.0, 9.02, 2.0 ** -12, 1e30]]).astype(np.float32)
    got = _tanh(erf_lib, x)
    assert _ulps(got, np.tanh(x.astype(np.float64)), np.float32).max() <= 2.0
    assert np.all(np.sign(got) == np.sign(x)) and np.all(np.abs(got) <= 1.0)


def test_tanh_special_values_and_float16(erf_lib):
    s = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, 20.0, -20.0], np.float32)
    got = _tanh(erf_lib, s)
    assert got[0] == 1.0 and got[1] == -1.0 and np.isnan(got[2]) and got[3] == 0.0
    assert np.signbit(got[4]) and got[5] == np.float32(1e-45) and got[6] == 1.0 and got[7] == -1.0
    x = np.linspace(-6, 6, 20_001).astype(np.float16)
    assert _ulps(_tanh(erf_lib, x), np.tanh(x.astype(np.float64)), np.float16).max() <= 1.0
    assert "tanhf" not in erf_lib.llvm_ir   # vector code, no libm call per element


class _GeluTanh(nn.Module):
    def forward(self, x):
        return nn.op.gelu(x, approximate="tanh"), nn.op.tanh(x)


def test_tanh_gelu_uses_the_vector_tanh():
    """``gelu(x, approximate="tanh")`` (Hendrycks & Gimpel 2016: ``0.5 x (1 + tanh(sqrt(2 / pi) (x +
    0.044715 x**3)))``) and ``tanh`` in a model: no ``tanhf`` call, values of the float64 formula."""
    spec = {"forward": {"x": nn.spec.Tensor(["n", 37], "float32")}}
    irmod, _ = _GeluTanh().export_tvm(spec)
    exe = builder.compile(irmod)
    assert "tanhf" not in exe.llvm_ir
    x = np.random.default_rng(1).standard_normal((5, 37)).astype(np.float32) * 3
    gelu, th = _GeluTanh().jit(spec)["forward"](x)
    xd = x.astype(np.float64)
    want = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
    np.testing.assert_allclose(th, np.tanh(xd), rtol=3e-7, atol=1e-8)
    np.testing.assert_allclose(gelu, want, rtol=2e-6, atol=1e-7)


class _Gelu(nn.Module):
    def forward(self, x):
        return nn.op.gelu(x), nn.op.erf(x)


def test_nn_op_erf_and_exact_gelu_use_the_vector_erf():
    spec = {"forward": {"x": nn.spec.Tensor(["n", 37], "float32")}}
    irmod, _ = _Gelu().export_tvm(spec)
    assert "R.erf(x)" in irmod.script() and "R.nn.gelu(x)" in irmod.script()
    exe = builder.compile(irmod)
    assert "erff" not in exe.llvm_ir and "@llvm.copysign.v" in exe.llvm_ir
    x = np.random.default_rng(0).standard_normal((5, 37)).astype(np.float32) * 3
    gelu, erf = _Gelu().jit(spec)["forward"](x)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(erf, ERF(xd), rtol=4e-7, atol=1e-7)
    np.testing.assert_allclose(gelu, xd * 0.5 * (1 + ERF(xd / math.sqrt(2))), rtol=1e-6, atol=1e-7)


RECIPE = """
name: erf_recipe
model:
  layers: {}
  forward: |
    return erf(x) * 0.5 + gelu(x)
functions:
  forward:
    x: {shape: [batch_size, 8], dtype: float32}
"""


def test_erf_in_a_recipe(tmp_path):
    path = tmp_path / "erf.yaml"
    path.write_text(RECIPE)
    model = builder.build(path)
    x = np.linspace(-4, 4, 24, dtype=np.float32).reshape(3, 8)
    xd = x.astype(np.float64)
    want = ERF(xd) * 0.5 + xd * 0.5 * (1 + ERF(xd / math.sqrt(2)))
    np.testing.assert_allclose(model["forward"](x), want, rtol=1e-6, atol=1e-6)


def test_exp_of_nonpositive_arguments_within_2_ulp():
    """``exp_f32(..., nonpositive=True)`` (the attention softmax's ``exp(s - max)``: no upper clamp,
    ``2**n`` in one multiply) within 2 ulp on [-87.3, 0], 0 below and at ``-inf``, NaN kept."""
    import ctypes

    import llvmlite.binding as llvm
    from llvmlite import ir

    from builder.codegen import Target
    from builder.codegen.fastmath import exp_f32
    from builder.codegen.kernels.simd import KFunc, vec
    from builder.codegen.llvm_emit import F32, I64, PTR

    module = ir.Module()
    module.triple = Target.host().triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64]), "exp_nonpositive")
    kf = KFunc(module, fn)
    x, y, n = fn.args

    class Em:
        b = kf.b

        @staticmethod
        def fcall(base, args):
            return kf.b.call(kf.intrinsic(base, args[0].type, len(args)), args)

    with kf.loop(0, n, 16, "i") as i:
        kf.store(exp_f32(Em, kf.load(vec(F32, 16), x, i, align=4), nonpositive=True), y, i, align=4)
    kf.b.ret_void()
    kf.finish()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), Target.host().target_machine())
    engine.finalize_object()
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("exp_nonpositive"))

    def run(values: np.ndarray) -> np.ndarray:
        xs = np.zeros(-(-values.size // 16) * 16, np.float32)
        xs[:values.size] = values
        ys = np.empty_like(xs)
        call(xs.ctypes.data, ys.ctypes.data, xs.size)
        return ys[:values.size]

    xs = np.concatenate([np.linspace(-87.3, 0.0, 400_000), np.linspace(-1, 0, 10_000)]).astype(np.float32)
    assert _ulps(run(xs), np.exp(xs.astype(np.float64)), np.float32).max() <= 2.0
    got = run(np.array([-np.inf, np.nan, 0.0, -0.0, -87.4, -1e30, -1e-30], np.float32))
    assert got[0] == 0.0 and np.isnan(got[1]) and got[2] == 1.0 and got[3] == 1.0
    assert got[4] == 0.0 and got[5] == 0.0 and got[6] == 1.0
