"""The dot-product helpers of :class:`builder.codegen.kernels.simd.KFunc` against numpy: the
generic IR that stands in for ``vdpbf16ps`` / ``vpdpbusd`` where the host lacks them
(``MB_SIMD_EMULATE``), and the instructions themselves where it has them."""
from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from builder.codegen import Target
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.simd import KFunc, vec
from builder.codegen.llvm_emit import F32, I8, I32, PTR
from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits

HOST = Target.host()
HOST_SIMD = SimdInfo.from_target(HOST.triple, HOST.features)


def _jit(build_body, args: int):
    """``void f(ptr out, ptr a, ptr w)`` JIT-compiled for the host; returns (engine, cfunc)."""
    mod = ir.Module("dots")
    mod.triple = HOST.triple
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PTR] * args), name="f")
    kf = KFunc(mod, fn)
    build_body(kf, *fn.args)
    kf.b.ret_void()
    kf.finish()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), HOST.target_machine())
    engine.finalize_object()
    cfunc = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * args)(engine.get_function_address("f"))
    return engine, cfunc


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _natives(feature_flag: bool) -> list[bool]:
    return [False, True] if feature_flag else [False]


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="the emulation uses AVX2's vpmaddwd")
@pytest.mark.parametrize("native", _natives(HOST_SIMD.vnni and HOST_SIMD.native("vnni")))
def test_dot_u8s8_matches_numpy(native):
    """``acc + sum of four u8 x s8 products`` per int32 lane, over the whole byte ranges
    (255 x -128 included), exactly."""
    def body(kf, out, a, w):
        acc = kf.load(vec(I32, 8), out, None, align=4)
        av = kf.load(vec(I8, 32), a, None, align=1)
        wv = kf.load(vec(I8, 32), w, None, align=1)
        kf.store(kf.dot_u8s8(acc, av, wv, native), out, None, align=4)

    engine, f = _jit(body, 3)
    rng = np.random.default_rng(0)
    for trial in range(20):
        a = rng.integers(0, 256, 32, dtype=np.uint8)
        w = rng.integers(-128, 128, 32, dtype=np.int8)
        if trial == 0:
            a[:], w[:] = 255, -128
        acc = rng.integers(-(1 << 20), 1 << 20, 8, dtype=np.int32)
        want = acc.astype(np.int64) + (a.astype(np.int64) * w.astype(np.int64)).reshape(8, 4).sum(1)
        out = acc.copy()
        f(_ptr(out), _ptr(a), _ptr(w))
        np.testing.assert_array_equal(out, want)
    del engine


@pytest.mark.skipif(not HOST_SIMD.usable, reason="no vector unit")
@pytest.mark.parametrize("native", _natives(HOST_SIMD.avx512bf16 and HOST_SIMD.native("avx512bf16")))
def test_dot_bf16_matches_numpy(native):
    """``acc + a[2i+1] w[2i+1] + a[2i] w[2i]`` per float32 lane for bfloat16 pairs: the
    products are exact, each of the two additions rounds once (odd pair first)."""
    n = 8 if not native else 16

    def body(kf, out, a, w):
        acc = kf.load(vec(F32, n), out, None, align=4)
        av = kf.load(vec(I32, n), a, None, align=2)
        wv = kf.load(vec(I32, n), w, None, align=2)
        kf.store(kf.dot_bf16(acc, av, wv, native), out, None, align=4)

    engine, f = _jit(body, 3)
    rng = np.random.default_rng(1)
    for _ in range(20):
        a = float32_to_bfloat16_bits(rng.standard_normal(2 * n, dtype=np.float32))
        w = float32_to_bfloat16_bits(rng.standard_normal(2 * n, dtype=np.float32))
        acc = rng.standard_normal(n, dtype=np.float32)
        af, wf = bfloat16_bits_to_float32(a), bfloat16_bits_to_float32(w)
        odd = (acc + af[1::2] * wf[1::2]).astype(np.float32)       # float32 rounding per step
        want = (odd + af[0::2] * wf[0::2]).astype(np.float32)
        out = acc.copy()
        f(_ptr(out), _ptr(a), _ptr(w))
        np.testing.assert_array_equal(out, want)
    del engine
