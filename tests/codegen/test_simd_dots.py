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


def _u8s8_cases() -> list:
    """(bytes, native vpdpbusd, zmm instructions) the host can run: 32 and 64 bytes, emulated
    and native, 64 bytes as one zmm instruction or two ymm ones."""
    out = []
    for native in _natives(HOST_SIMD.vnni and HOST_SIMD.native("vnni")):
        out += [(32, native, False), (64, native, False)]
        if native and HOST_SIMD.vnni_512 or not native and HOST_SIMD.int8_512:
            out.append((64, native, True))
    return out


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="the emulation uses AVX2's vpmaddwd")
@pytest.mark.parametrize("n,native,zmm", _u8s8_cases())
def test_dot_u8s8_matches_numpy(n, native, zmm):
    """``acc + sum of four u8 x s8 products`` per int32 lane, over the whole byte ranges
    (255 x -128 included), exactly; 64-byte operands as one 512-bit instruction or two halves."""
    def body(kf, out, a, w):
        acc = kf.load(vec(I32, n // 4), out, None, align=4)
        av = kf.load(vec(I8, n), a, None, align=1)
        wv = kf.load(vec(I8, n), w, None, align=1)
        kf.store(kf.dot_u8s8(acc, av, wv, native, zmm), out, None, align=4)

    engine, f = _jit(body, 3)
    rng = np.random.default_rng(n)
    for trial in range(20):
        a = rng.integers(0, 256, n, dtype=np.uint8)
        w = rng.integers(-128, 128, n, dtype=np.int8)
        if trial == 0:
            a[:], w[:] = 255, -128
        acc = rng.integers(-(1 << 20), 1 << 20, n // 4, dtype=np.int32)
        want = acc.astype(np.int64) + (a.astype(np.int64) * w.astype(np.int64)).reshape(n // 4, 4).sum(1)
        out = acc.copy()
        f(_ptr(out), _ptr(a), _ptr(w))
        np.testing.assert_array_equal(out, want)
    del engine


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="AVX2's vpmaddubsw")
@pytest.mark.parametrize("n,zmm", [(32, False), (64, False)] + ([(64, True)] if HOST_SIMD.int8_512 else []))
def test_maddubs_and_madd_wd_match_numpy(n, zmm):
    """``vpmaddubsw`` (u8 x s8 pairs, saturated to int16) then ``vpmaddwd`` by ones: pair sums
    per int16 lane (saturation at 255 x 127 x 2 included) and their pairwise int32 sums."""
    def body(kf, out, a, w):
        av = kf.load(vec(I8, n), a, None, align=1)
        wv = kf.load(vec(I8, n), w, None, align=1)
        p = kf.maddubs(av, wv, zmm)
        ones = kf.b.bitcast(kf.load(vec(I8, n), a, None, align=1), p.type)
        ones = kf.b.and_(ones, ir.Constant(p.type, [0] * (n // 2)))
        ones = kf.b.add(ones, ir.Constant(p.type, [1] * (n // 2)))
        kf.store(kf.madd_wd(p, ones, zmm), out, None, align=4)

    engine, f = _jit(body, 3)
    rng = np.random.default_rng(n + zmm)
    for trial in range(10):
        a = rng.integers(0, 256, n, dtype=np.uint8)
        w = rng.integers(-128, 128, n, dtype=np.int8)
        if trial == 0:
            a[:], w[:] = 255, 127     # 2 * 255 * 127 saturates to 32767 per pair
        pairs = np.clip((a.astype(np.int64) * w.astype(np.int64)).reshape(-1, 2).sum(1), -32768, 32767)
        want = pairs.reshape(-1, 2).sum(1)
        out = np.zeros(n // 4, np.int32)
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
