"""Kernels of other vector shapes (never timed): the 16-lane and 4-lane kernels on this host, the
bfloat16 dot-product kernels and the recipe that takes them, the ``MB_SIMD_EMULATE`` hook, kernel
selection without FuseOps, zmm loops on every AVX-512 CPU, and the GELU epilogue in vectors; checked
against numpy."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from builder.codegen import Target, build
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.linear import TUNING
from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits

from helpers.linear_kernels import linear_func as _linear_func
from helpers.linear_kernels import silu as _silu
from helpers.linear_cases import HOST, HOST_SIMD, ROOT
from helpers.linear_cases import as_f32 as _as_f32
from helpers.linear_cases import np_dtype as _np_dtype
from helpers.linear_cases import build_kernel as _build
from helpers.linear_cases import quant_case as _quant_case
from helpers.fixtures import SIMD_HOOKS

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/helpers/fixtures.py


@pytest.mark.parametrize("shape", ["avx512", "sse"])
def test_other_vector_shapes_run_correctly(shape, monkeypatch):
    """The 16-lane (AVX-512) and 4-lane kernels, generated for this host's target (LLVM splits
    or widens the vectors), compute the same results: the AVX-512 code paths are exercised on
    any machine."""
    monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    f, _ = _linear_func(100, 70, "float32", "bfloat16", ("multiply", ("silu", ("linear", 0)), ("linear", 1)),
                        nweights=2)
    kernel, lib = _build(f)
    assert kernel == f"linear/{shape}"
    rng = np.random.default_rng(5)
    w0, w1 = (float32_to_bfloat16_bits(rng.standard_normal((70, 100), dtype=np.float32)) for _ in range(2))
    for M in (1, 7, 30):
        x = rng.standard_normal((M, 100), dtype=np.float32)
        y = np.empty((M, 70), np.float32)
        lib["f"](x, w0, w1, y)
        ref = _silu(x @ bfloat16_bits_to_float32(w0).T) * (x @ bfloat16_bits_to_float32(w1).T)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    fq = None
    for M in (1, 3, 9):
        f2, odt, X, Q, S, ref = _quant_case(M, 37, 160, 4, 32, 7, "uint32", "float16", "float16", M)
        if fq is None:
            k2, fq = _build(f2)
            assert k2 == f"linear/{shape}"
        y = np.empty((M, 37), np.float16)
        fq["f"](X, Q, S, y)
        np.testing.assert_allclose(y.astype(np.float32), ref, rtol=4e-3, atol=4e-3 * np.abs(ref).max())
    if not HOST_SIMD.int8_dot:
        return
    fi = None
    for M in (1, 5, 8, 20):   # the int8-activation GEMV and GEMM inside 16- / 4-lane kernels
        f3, odt, X, Q, S, ref = _quant_case(M, 21, 320, 4, 32, 7, "uint32", "float32", "float32", M,
                                            activation="int8")
        if fi is None:
            _, fi = _build(f3)
        y = np.empty((M, 21), np.float32)
        fi["f"](X, Q, S, y)
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("gemm", [1, 2])
@pytest.mark.parametrize("shape", ["avx512", "avx2"])
def test_bf16_dot_product_kernels(shape, gemm, monkeypatch):
    """bfloat16 x and weights on AVX512-BF16 (``vdpbf16ps``): the GEMV and GEMM that multiply
    pairs of columns, emulated with the same arithmetic in generic IR (``MB_SIMD_EMULATE``) so
    they run here; batch 1 to 37 (GEMV tiles, GEMM tiles and their remainders), several column
    blocks and a partial one (K = 546), a panel remainder (N = 70), a column tail past the last
    full vector pair, the gated epilogue, bfloat16 output and symbolic batch. Odd K keeps the
    float32 kernels. ``gemm_bf16dot`` 2 puts the GEMM on vdpbf16ps too; 1 leaves it to the CPU
    (``+bf16gemv``: the GEMM widens x and the weights to float32, as on Intel's cores)."""
    monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    monkeypatch.setenv("MB_SIMD_EMULATE", "avx512bf16")
    monkeypatch.setitem(TUNING, "gemm_bf16dot", gemm)
    tag = "+bf16dot" if gemm == 2 or SimdInfo.from_target(HOST.triple, HOST.features).bf16dot_gemm else "+bf16gemv"
    N, K = 70, 546
    epi = ("multiply", ("silu", ("linear", 0)), ("linear", 1))
    rng = np.random.default_rng(11)
    for odt in ("float32", "bfloat16"):
        f, _ = _linear_func(K, N, "bfloat16", "bfloat16", epi, nweights=2, out_dtype=odt)
        kernel, lib = _build(f)
        assert kernel == f"linear/{shape}{tag}"
        w0, w1 = (float32_to_bfloat16_bits(rng.standard_normal((N, K), dtype=np.float32)) for _ in range(2))
        wf0, wf1 = (bfloat16_bits_to_float32(w).astype(np.float64) for w in (w0, w1))
        for M in (1, 3, 8, 25, 31, 37):
            x = float32_to_bfloat16_bits(rng.standard_normal((M, K), dtype=np.float32))
            xf = bfloat16_bits_to_float32(x).astype(np.float64)
            ref = _silu(xf @ wf0.T) * (xf @ wf1.T)
            y = np.empty((M, N), _np_dtype(odt))
            lib["f"](x, w0, w1, y)
            tol = 1e-5 if odt == "float32" else 8e-3   # float32 sums; bfloat16: one rounding
            np.testing.assert_allclose(_as_f32(y, odt), ref, rtol=tol, atol=tol * np.abs(ref).max())
    for k in (10, 33):   # shorter than one vector pair; odd K (no vdpbf16ps: float32 kernels)
        f, _ = _linear_func(k, 9, "bfloat16", "bfloat16", ("linear", 0), out_dtype="float32")
        kernel, lib = _build(f)
        assert kernel == f"linear/{shape}" + (tag if k % 2 == 0 else "")
        for M in (2, 30):
            x = float32_to_bfloat16_bits(rng.standard_normal((M, k), dtype=np.float32))
            w = float32_to_bfloat16_bits(rng.standard_normal((9, k), dtype=np.float32))
            y = np.empty((M, 9), np.float32)
            lib["f"](x, w, y)
            ref = bfloat16_bits_to_float32(x).astype(np.float64) @ bfloat16_bits_to_float32(w).T.astype(np.float64)
            np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    # 3-D x (two symbolic leading dims) with a bias and a residual in the epilogue
    epi = ("add", ("add", ("linear", 0), ("tensor", 1)), ("tensor", 2))
    f, _ = _linear_func(64, 20, "bfloat16", "bfloat16", epi,
                        extra=[("bias", (20,), "float32"), ("resid", ("lead", "lead", 20), "float32")],
                        lead=("a", "b"), out_dtype="float32")
    kernel, lib = _build(f)
    assert kernel == f"linear/{shape}{tag}"
    for a, bdim in ((1, 1), (2, 3), (5, 7)):   # GEMV and GEMM
        x = float32_to_bfloat16_bits(rng.standard_normal((a, bdim, 64), dtype=np.float32))
        w = float32_to_bfloat16_bits(rng.standard_normal((20, 64), dtype=np.float32))
        bias = rng.standard_normal(20, dtype=np.float32)
        resid = rng.standard_normal((a, bdim, 20), dtype=np.float32)
        y = np.empty((a, bdim, 20), np.float32)
        lib["f"](x, w, bias, resid, y)
        ref = (bfloat16_bits_to_float32(x).astype(np.float64) @ bfloat16_bits_to_float32(w).T.astype(np.float64)
               + bias + resid)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_bf16_recipe_takes_the_dot_product_kernels(monkeypatch):
    """``build recipes/llama_mlp.yaml dtype=bfloat16`` on an AVX512-BF16 CPU (emulated here):
    both fused matmuls take the vdpbf16ps kernels and the MLP matches a float64 reference of
    the same bfloat16 values (the intermediate is rounded to bfloat16 once, as the graph says); on a
    host with AMX tiles the GEMM runs on them (``+amx``)."""
    import builder

    monkeypatch.setenv("MB_SIMD_EMULATE", "avx512bf16")
    m = builder.build(ROOT / "recipes" / "llama_mlp.yaml",
                      ["dtype=bfloat16", "hidden_size=72", "intermediate_size=200"])
    simd = SimdInfo.from_target(HOST.triple, HOST.features)
    tag = ("+bf16dot" if simd.bf16dot_gemm else "+bf16gemv") + ("+amx" if simd.amx else "")
    assert {meta["kernel"] for meta in m.exe.kernels.values()} == {f"linear/{HOST_SIMD.name}{tag}"}
    wg, wu, wd = (bfloat16_bits_to_float32(m.params[n]).astype(np.float64) for n in m.param_names)
    for b in (1, 30):
        x = float32_to_bfloat16_bits(np.random.default_rng(b).standard_normal((b, 72), dtype=np.float32))
        xf = bfloat16_bits_to_float32(x).astype(np.float64)
        h = bfloat16_bits_to_float32(float32_to_bfloat16_bits((_silu(xf @ wg.T) * (xf @ wu.T)).astype(np.float32)))
        ref = h.astype(np.float64) @ wd.T
        y = bfloat16_bits_to_float32(m(x))
        np.testing.assert_allclose(y, ref, rtol=1.6e-2, atol=1.6e-2 * np.abs(ref).max())


def test_simd_emulate_hook(monkeypatch):
    """``MB_SIMD_EMULATE`` names features to emit as generic IR; an unknown one is an error, and
    the kernels of a host that lacks a feature only take its path under the hook."""
    monkeypatch.delenv("MB_SIMD_EMULATE", raising=False)
    plain = SimdInfo.from_target(HOST.triple, HOST.features)
    assert not plain.emulated
    monkeypatch.setenv("MB_SIMD_EMULATE", "avx512bf16,vnni")
    info = SimdInfo.from_target(HOST.triple, HOST.features)
    if plain.usable:
        assert info.avx512bf16
        assert info.native("avx512bf16") == plain.avx512bf16
    if plain.int8_dot:
        assert info.vnni and info.native("vnni") == plain.vnni
    monkeypatch.setenv("MB_SIMD_EMULATE", "sme")
    with pytest.raises(ValueError, match="MB_SIMD_EMULATE: unknown feature.*sme"):
        SimdInfo.from_target(HOST.triple, HOST.features)


def test_legalize_alone_uses_the_matmul_kernels():
    """Kernel selection without FuseOps still gives a Linear (plain or quantized) the kernel
    attribute, and the code generator takes it."""
    from builder import codegen, nn
    from builder.ir import relax as rx
    from builder.quant import GroupQuantization
    from builder.quant.quantize import quantize_mutator
    from builder.transform import LegalizeOps, SelectKernels

    class Net(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(64, 24, bias=False)

        def forward(self, x):
            return self.fc(x)

    spec = {"forward": {"x": nn.spec.Tensor(["n", 64], "float32")}}
    for net in (Net(), quantize_mutator(GroupQuantization(model_dtype="float32")).visit("", Net())):
        irmod, _ = net.export_tvm(spec)
        legal = LegalizeOps()(SelectKernels()(irmod))
        prims = {n: f for n, f in legal.functions.items() if not isinstance(f, rx.Function)}
        assert len(prims) == 1
        lib = codegen.build(prims)
        (meta,) = lib.functions.values()
        assert meta["kernel"].startswith("linear/") == HOST_SIMD.usable, meta["kernel"]


@pytest.mark.parametrize("cpu", ["sapphirerapids", "rocketlake", "znver4"])
def test_vectorized_loops_use_zmm_on_every_avx512_cpu(cpu):
    """LLVM tunes Intel's AVX-512 cores (and ``rocketlake``, as it names some virtualized Xeons) to
    prefer 256-bit vectors; the target machine turns that off, so an elementwise loop (here a GELU
    epilogue, 40 outputs) is vectorized on zmm as the hand-written kernels are, whichever CPU."""
    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    epi = ("gelu", ("add", ("linear", 0), ("tensor", 1)))
    f, _ = _linear_func(37, 40, "float32", "float32", epi, extra=[("bias", (40,), "float32")])
    t = Target(HOST.triple, cpu, "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx2,+fma,+f16c")
    body = re.search(r"^define [^\n]*@f\.epi\(.*?^}$", build({"f": f}, t).llvm_ir, re.S | re.M).group(0)
    assert "fmuladd.v16f32" in body and "fmuladd.v8f32" not in body


@pytest.mark.parametrize("N", [4, 7, 21, 40])
def test_gelu_epilogue_vectorized_gemv_and_gemm(N):
    """Issue 15: the epilogue's ``erf`` runs in vectors on GEMV tiles (4 outputs per call, below
    the 8 lanes: LLVM's 4-wide remainder loop) and GEMM panels, with tails (``N`` not a multiple of
    4 / 16) and a symbolic batch; checked against a float64 reference."""
    from math import erf, sqrt
    K = 37
    epi = ("gelu", ("add", ("linear", 0), ("tensor", 1)))
    f, _ = _linear_func(K, N, "float32", "float32", epi, extra=[("bias", (N,), "float32")])
    lib = build({"f": f})
    if HOST_SIMD.usable and not any(os.environ.get(h) for h in SIMD_HOOKS):   # (LLVM vectorizes for the host)
        body = re.search(r"^define [^\n]*@f\.epi\(.*?^}$", lib.llvm_ir, re.S | re.M).group(0)
        assert "fmuladd.v4f32" in body and f"fmuladd.v{HOST_SIMD.lanes}f32" in body
    fn = lib.load()["f"]
    rng = np.random.default_rng(N)
    w = rng.standard_normal((N, K), dtype=np.float32) * 0.3
    bias = rng.standard_normal(N).astype(np.float32)
    for M in (1, 3, 24, 31):   # GEMV (M <= gemv_max_rows) and GEMM
        x = rng.standard_normal((M, K), dtype=np.float32)
        y = np.empty((M, N), np.float32)
        fn(x, w, bias, y)
        h = x.astype(np.float64) @ w.T.astype(np.float64) + bias
        ref = 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.sqrt(K))
