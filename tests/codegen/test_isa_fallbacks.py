"""The ISA fallbacks and caps (never timed): AVX2 -> SSE -> scalar loops compute the same results,
a capped feature turns off the levels above it, an AVX2 cap compiles only what an AVX2 CPU runs,
groups narrower than the vectors take narrower kernels, and the AVX-512 code generation."""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from builder.codegen import Target, build, emit_llvm_ir
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.simd import capped_features
from builder.codegen.kernels.linear import TUNING

from helpers.linear_kernels import linear_func as _linear_func
from helpers.linear_kernels import silu as _silu
from helpers.linear_cases import HOST, HOST_SIMD
from helpers.linear_cases import build_kernel as _build
from helpers.linear_cases import quant_case as _quant_case
from helpers.linear_cases import x86_target as _x86_target

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/helpers/fixtures.py


@pytest.mark.skipif(not HOST.triple.startswith("x86_64"), reason="x86-64 fallbacks")
@pytest.mark.parametrize("target", [
    ("x86-64", "+sse2,+sse4.1"),             # 4 lanes, no FMA, no F16C (half via libgcc)
    ("haswell", "+avx2,+fma,+f16c,+avx"),   # the AVX2 kernels on any AVX2 host
])
def test_fallback_isas_run_correctly(target):
    feats = {f[1:] for f in HOST.features.split(",") if f.startswith("+")}
    need = {f[1:] for f in target[1].split(",")}
    if not need <= feats:
        pytest.skip(f"host lacks {need - feats}")
    t = _x86_target(*target)
    simd = SimdInfo.from_target(t.triple, t.features)
    f, _ = _linear_func(45, 37, "float32", "float16", ("silu", ("linear", 0)))
    kernel, lib = _build(f, t)
    assert kernel == f"linear/{simd.name}"
    fq, odt, X, Q, S, ref = _quant_case(5, 37, 96, 4, 32, 7, "uint32", "float32", "float32")
    kq, libq = _build(fq, t)
    assert kq == f"linear/{simd.name}"
    rng = np.random.default_rng(0)
    for M in (1, 7):
        x = rng.standard_normal((M, 45), dtype=np.float32)
        w = rng.standard_normal((37, 45), dtype=np.float32).astype(np.float16)
        y = np.empty((M, 37), np.float32)
        lib["f"](x, w, y)
        np.testing.assert_allclose(y, _silu(x @ w.astype(np.float32).T), rtol=1e-4, atol=1e-4)
    y = np.empty((5, 37), np.float32)
    libq["f"](X, Q, S, y)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


def test_capped_features_turn_off_the_levels_above(monkeypatch):
    """``capped_features``: the x86 features above a vector level off (AVX-512, AVX10, AMX above
    ``avx2``; AVX2, FMA, AVX-VNNI above ``avx``; AVX and F16C above ``sse``), the rest as given;
    nothing changes without a cap, at ``avx512`` or for another architecture; an unknown level or
    ``MB_SIMD`` is an error. (``MB_SIMD_OFF``'s feature groups: tests/codegen/test_int8_exact.py.)"""
    monkeypatch.delenv("MB_SIMD_OFF", raising=False)
    x86 = "x86_64-unknown-linux-gnu"
    feats = "+sse2,+avx,+avx2,+fma,+f16c,+avxvnni,+avx512f,+avx512vl,+avx512vnni,+avx10.1,+evex512,+amx-tile,-sha,+vaes"

    def on(s):
        return {f[1:] for f in s.split(",") if f.startswith("+")}

    assert on(capped_features(x86, feats, "avx2")) == {"sse2", "avx", "avx2", "fma", "f16c", "avxvnni", "vaes"}
    assert "-avx512f" in capped_features(x86, feats, "avx2").split(",")
    assert on(capped_features(x86, feats, "avx")) == {"sse2", "avx", "f16c"}
    assert on(capped_features(x86, feats, "sse")) == on(capped_features(x86, feats, "scalar")) == {"sse2"}
    assert "-sha" in capped_features(x86, feats, "sse").split(",")
    assert capped_features(x86, feats, "avx512") == feats
    assert capped_features("aarch64-unknown-linux-gnu", "+neon,+sve", "sse") == "+neon,+sve"
    with pytest.raises(ValueError, match="unknown vector level"):
        capped_features(x86, feats, "avx3")
    monkeypatch.delenv("MB_SIMD", raising=False)
    assert capped_features(x86, feats) == feats
    monkeypatch.setenv("MB_SIMD", "avx2")
    assert on(capped_features(x86, feats)) == on(capped_features(x86, feats, "avx2"))
    monkeypatch.setenv("MB_SIMD", "avx3")
    with pytest.raises(ValueError, match="MB_SIMD must be one of"):
        capped_features(x86, feats)


#: What only AVX-512 code has in x86 assembly (AT&T syntax): zmm and ymm / xmm 16-31 registers, mask
#: registers, embedded broadcasts.
_EVEX = re.compile(r"%zmm\d|\{1to\d+\}|%k[1-7]\b|%[xy]mm(1[6-9]|2\d|3[01])\b")


def test_avx2_cap_compiles_what_an_avx2_cpu_runs(monkeypatch, own_features):
    """``MB_SIMD=avx2`` on an AVX-512 host compiles the 8-lane kernels for an AVX2 CPU (the host's target
    with the features above AVX2 off): no AVX-512 registers or encodings in the assembly, where the same
    kernel compiled for the host has them; the capped kernel matches numpy."""
    host = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
    if not {"avx512f", "avx512bw", "avx512vl"} <= host:
        pytest.skip("an AVX-512 host")
    fq, odt, X, Q, S, ref = _quant_case(5, 37, 96, 4, 32, 7, "uint32", "float32", "float32")

    def assembly(target):
        text, _ = emit_llvm_ir({"f": fq}, target)
        return target.target_machine().emit_assembly(llvm.parse_assembly(text))

    assert _EVEX.search(assembly(Target.host()))
    monkeypatch.setenv("MB_SIMD", "avx2")
    capped = Target.host()
    assert not [f for f in capped.features.split(",") if f.startswith(("+avx512", "+amx"))]
    assert SimdInfo.from_target(capped.triple, capped.features).name == "avx2"
    found = _EVEX.search(assembly(capped))
    assert found is None, found
    kernel, lib = _build(fq)
    assert kernel == "linear/avx2"
    y = np.empty((5, 37), np.float32)
    lib["f"](X, Q, S, y)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="x86 with AVX2")
@pytest.mark.parametrize("shape,gs,storage,narrow", [("avx512", 8, "uint32", "avx2"),
                                                     ("avx2", 4, "uint16", "sse")])
def test_groups_narrower_than_the_vectors_use_narrower_kernels(shape, gs, storage, narrow, monkeypatch):
    """4-bit groups of 8 columns with 16-lane vectors (or 4 with 8 lanes) are planned for the
    next narrower x86 vectors, not left to the reference loops; GEMV and GEMM match numpy."""
    monkeypatch.setenv("MB_SIMD_SHAPE", shape)
    lib = None
    for M in (1, 3, 30):
        f, odt, X, Q, S, ref = _quant_case(M, 21, 64, 4, gs, 7, storage, "float32", "float32", M)
        if lib is None:
            kernel, lib = _build(f)
            assert kernel == f"linear/{narrow}"
        y = np.empty((M, 21), np.float32)
        lib["f"](X, Q, S, y)
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


def test_scalar_cap_uses_the_reference_loops(monkeypatch):
    monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
    monkeypatch.setenv("MB_SIMD", "scalar")
    f, _ = _linear_func(20, 9, "float32", "float32", ("relu", ("linear", 0)))
    kernel, lib = _build(f)
    assert kernel.startswith("loops (linear: no vector unit")
    x = np.random.default_rng(0).standard_normal((3, 20), dtype=np.float32)
    w = np.random.default_rng(1).standard_normal((9, 20), dtype=np.float32)
    y = np.empty((3, 9), np.float32)
    lib["f"](x, w, y)
    np.testing.assert_allclose(y, np.maximum(x @ w.T, 0), rtol=1e-5, atol=1e-5)


def test_avx512_code_generation(monkeypatch, own_features):
    """The AVX-512 kernels compile for a Zen 4 / Zen 5 target everywhere; they run (and are
    checked) only on a host that has AVX-512."""
    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    t = _x86_target("znver4", "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512bf16,+avx2,+fma,+f16c,+avx")
    assert SimdInfo.from_target(t.triple, t.features).lanes == 16
    # the GEMM takes vdpbf16ps on AMD's cores (sse4a in the features), not on Intel's (below)
    assert SimdInfo.from_target(t.triple, t.features + ",+sse4a").bf16dot_gemm
    assert not SimdInfo.from_target(t.triple, t.features).bf16dot_gemm
    monkeypatch.setitem(TUNING, "gemm_bf16dot", 2)   # as on an AMD host (this host may lack sse4a)
    f, _ = _linear_func(100, 70, "float32", "bfloat16", ("multiply", ("silu", ("linear", 0)), ("linear", 1)),
                        nweights=2)
    fq, odt, X, Q, S, ref = _quant_case(9, 70, 160, 4, 32, 7, "uint32", "float16", "float16")
    fb, _ = _linear_func(546, 70, "bfloat16", "bfloat16", ("multiply", ("silu", ("linear", 0)), ("linear", 1)),
                         nweights=2)
    lib = build({"f": f, "q": fq, "b": fb}, t)
    assert lib.functions["f"]["kernel"] == "linear/avx512"
    assert lib.functions["q"]["kernel"] == "linear/avx512"
    # bfloat16 x and weights: vdpbf16ps in the GEMV and GEMM (the object was emitted, so LLVM
    # selected the instruction for the target)
    assert lib.functions["b"]["kernel"] == "linear/avx512+bf16dot"
    assert "@llvm.x86.avx512bf16.dpbf16ps.512" in lib.llvm_ir
    assert "mb.micro_bf16.v16x4.t" in lib.llvm_ir
    # an Intel AVX512-BF16 core (no sse4a): vdpbf16ps in the GEMV only, the GEMM on float32
    monkeypatch.setitem(TUNING, "gemm_bf16dot", 1)
    intel = _x86_target("sapphirerapids", "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512bf16,+avx2,+fma,+f16c,+avx")
    lib_i = build({"b": fb}, intel)
    assert lib_i.functions["b"]["kernel"] == "linear/avx512+bf16gemv"
    assert "@llvm.x86.avx512bf16.dpbf16ps.512" in lib_i.llvm_ir
    assert "mb.micro.v16x4.t" in lib_i.llvm_ir and "mb.micro_bf16" not in lib_i.llvm_ir
    no_bf16 = _x86_target("skylake-avx512", "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx2,+fma,+f16c,+avx")
    fi = _quant_case(40, 70, 320, 4, 32, 7, "uint32", "float32", "float32", activation="int8")[0]
    lib2 = build({"b": fb, "i": fi}, no_bf16)
    assert lib2.functions["b"]["kernel"] == "linear/avx512"
    assert "dpbf16ps" not in lib2.llvm_ir
    # int8 activations: vpdpbusd in the GEMV and GEMM with AVX512-VNNI (or AVX-VNNI)
    assert lib2.functions["i"]["kernel"] == "linear/avx512" and "vpdpbusd" not in lib2.llvm_ir
    vnni = _x86_target("znver4", "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512vnni,+avx2,+fma,+f16c,+avx")
    lib3 = build({"i": fi}, vnni)
    assert lib3.functions["i"]["kernel"] == "linear/avx512+vnni"
    assert "@llvm.x86.avx512.vpdpbusd.256" in lib3.llvm_ir and "pmadd.ub.sw" not in lib3.llvm_ir
    if not {"+avx512f", "+avx512bw", "+avx512vl"} <= set(HOST.features.split(",")):
        return   # (the host's own features: MB_SIMD_SHAPE=avx512 does not make it run AVX-512)
    loaded = lib.load()
    y = np.empty((9, 70), np.float16)
    loaded["q"](X, Q, S, y)
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=4e-3, atol=4e-3 * np.abs(ref).max())
