"""The int8-activation kernels are exact at the ends of the 8-bit ranges on every x86 vector unit, each built for
an explicit target that this host runs (whatever the host's own vector unit, and whatever ``MB_SIMD`` caps it to):

- AVX2 without VNNI (``x86-64-v3``: an AMD Zen 3, a Haswell): ``vpmaddubsw`` on 4-bit weights (pair sums of at
  most ``2 * 15 * 127``, summed in int16 over at most 16 products: ``30480 < 2**15``) and ``vpmaddwd`` on the
  bytes widened to int16 for 8-bit weights (``vpmaddubsw`` would saturate there: ``2 * 255 * 127 > 2**15``);
- AVX2 with AVX-VNNI (``vpdpbusd`` on ymm); AVX-512 without VNNI (``x86-64-v4``: a Skylake-X; AVX512BW's
  ``vpmaddubsw`` on zmm saturates the same way); AVX-512 with AVX512-VNNI; VNNI emulated (``MB_SIMD_EMULATE``);
- SSE, where the int8 activations fall back to float ones.

Weights at their extremes (4-bit 0 / 15, 8-bit 0 / 255, zero points 7 / 127) against x whose groups quantize to
+-127 exactly (each group's values are +-a): every integer sum is then known, and the reference is numpy's
float64 product of the dequantized values, which a saturated pair sum (a 50% error of a whole lane) misses by far
more than the float32 rounding the test allows (1e-5 of the largest output). The GEMV (1 and 3 rows), the int8
GEMM (40 rows) and the row-tiled kernels (4- and 8-bit weights) all run."""
from __future__ import annotations

import re

import numpy as np
import pytest

from builder import te
from builder.codegen import Target, build, emit_llvm_ir
from builder.codegen.kernels import SimdInfo
from builder.ir.kernel import KERNEL_ATTR, GroupWeight
from builder.quant.packing import tile_rows
from builder.te import topi

HOST = Target.host()
X86 = HOST.triple.split("-")[0] in ("x86_64", "amd64")
_AVX2 = "+avx,+avx2,+fma,+f16c"
_AVX512 = _AVX2 + ",+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512cd"

#: name -> (LLVM cpu, features, int8 dot products expected, VNNI expected)
TARGETS = {
    "avx2": ("x86-64-v3", _AVX2, True, False),
    "avx2+avxvnni": ("x86-64-v3", _AVX2 + ",+avxvnni", True, True),
    "avx512": ("x86-64-v4", _AVX512, True, False),
    "avx512+vnni": ("x86-64-v4", _AVX512 + ",+avx512vnni", True, True),
    "avx2+vnni_emulated": ("x86-64-v3", _AVX2, True, True),
    "sse": ("x86-64", "+sse2", False, False),
}

#: ``vpmaddubsw`` in LLVM IR: ``llvm.x86.avx2.pmadd.ub.sw`` (ymm), ``llvm.x86.avx512.pmaddubs.w.512`` (zmm).
_MADDUBS = re.compile(r"llvm\.x86\.(?:avx2\.pmadd\.ub\.sw|avx512\.pmaddubs\.w\.512)")

pytestmark = [pytest.mark.usefixtures("private_object_cache"),   # tests/codegen/conftest.py
              pytest.mark.skipif(not X86, reason="x86-64 vector units")]


def _host_features() -> set[str]:
    import llvmlite.binding as llvm

    from builder.codegen.llvm_target import init_llvm

    init_llvm()
    return {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}


@pytest.fixture(params=list(TARGETS))
def target(request, monkeypatch):
    """``(name, Target, SimdInfo)`` of one vector unit (skipped where this host cannot run its code); the
    environment's hooks cleared (``MB_SIMD_EMULATE=vnni`` set for the emulated one)."""
    for hook in ("MB_SIMD_SHAPE", "MB_SIMD_EMULATE", "MB_SIMD", "MB_SIMD_OFF"):
        monkeypatch.delenv(hook, raising=False)
    cpu, feats, _, _ = TARGETS[request.param]
    missing = {f[1:] for f in feats.split(",")} - _host_features()
    if missing:
        pytest.skip(f"this host lacks {', '.join(sorted(missing))}")
    if request.param.endswith("vnni_emulated"):
        monkeypatch.setenv("MB_SIMD_EMULATE", "vnni")
    t = Target(HOST.triple, cpu, feats)
    return request.param, t, SimdInfo.from_target(t.triple, t.features)


def _case(M, N, K, bits, gs, row_tile, rng, zp=None):
    """A linear kernel of ``bits``-bit group-quantized weights with int8 activations and its data at the
    extremes: ``(func, x, q words, scales, float64 reference)``; weights row 0 all at the top of the range,
    row 1 all at 0, x row 0 all +a, row 1 all -a per group (a differs per group), the rest random ends.
    ``zp``: the zero point (default ``2 ** (bits - 1) - 1``); when given, the random weights take the zero
    point as a third value, and the reference sums the integer products in int64 per group before the
    float64 scales."""
    levels = [0, 2 ** bits - 1] if zp is None else [0, zp, 2 ** bits - 1]
    zp = 2 ** (bits - 1) - 1 if zp is None else zp
    top = 2 ** bits - 1
    per_word = 32 // bits
    groups = K // gs
    x = te.placeholder((te.var("b"), K), "float32", name="x")
    if row_tile:
        q = te.placeholder((N // row_tile, K // per_word, row_tile), "uint32", name="q")
        s = te.placeholder((N // row_tile, groups, row_tile), "float32", name="s")
    else:
        q = te.placeholder((N, K // per_word), "uint32", name="q")
        s = te.placeholder((N, groups), "float32", name="s")
    spec = []
    out = topi.linear_kernel(x, q, s, weights=[GroupWeight(1, 2, bits, gs, zp, K, "int8", row_tile)], spec=spec)
    f = te.create_prim_func([x, q, s, out])
    f.attrs[KERNEL_ATTR] = spec[0]
    vals = rng.choice(levels, (N, K)).astype(np.uint64)
    vals[0], vals[1] = top, 0
    Q = np.zeros((N, K // per_word), np.uint64)
    for j in range(per_word):
        Q |= vals[:, j::per_word] << np.uint64(j * bits)
    Q = Q.astype(np.uint32)
    S = (rng.random((N, groups)) * 0.1 + 0.01).astype(np.float32)
    a = np.repeat((rng.random((M, groups)) * 2 + 0.5).astype(np.float32), gs, axis=1)
    sign = rng.choice([-1.0, 1.0], (M, K)).astype(np.float32)
    sign[0] = 1
    if M > 1:
        sign[1] = -1
    X = (sign * a).astype(np.float32)
    # x's quantization: q = +-127 exactly, d = float32(a / 127)
    d = (a / np.float32(127)).astype(np.float32).astype(np.float64)
    # per group the integer sum of (+-127) * (q - zero_point) in int64, then times scale * d in float64
    qx = (sign.astype(np.int64) * 127).reshape(M, groups, gs)
    qw = (vals.astype(np.int64) - zp).reshape(N, groups, gs)
    isum = np.einsum("mgk,ngk->mng", qx, qw)
    ref = np.einsum("mng,ng,mg->mn", isum.astype(np.float64), S.astype(np.float64), d[:, ::gs])
    if row_tile:
        Q, S = tile_rows(Q, row_tile), tile_rows(S, row_tile)
    return f, X, Q, S, ref


def _check(name, target, simd, bits, gs, row_tile, rows, zp=None):
    rng = np.random.default_rng(bits * 100 + gs + row_tile)
    N, K = 48, 256
    f = _case(1, N, K, bits, gs, row_tile, rng, zp)[0]
    text, meta = emit_llvm_ir({"f": f}, target)
    kernel = meta["f"]["kernel"]
    _, _, int8, vnni = TARGETS[name]
    if int8:
        assert ("+vnni" in kernel) == vnni, kernel
        if not vnni:   # the AVX2 / AVX512BW multiply-adds, not vpdpbusd
            assert "vpdpbusd" not in text and "pmadd" in text
            # 8-bit weights never on vpmaddubsw (its u8 x s8 pair sums would saturate)
            assert bool(_MADDUBS.search(text)) == (bits == 4), kernel
        elif name.endswith("emulated"):
            assert "vpdpbusd" not in text
        else:
            assert "vpdpbusd" in text
    else:
        assert "notes" in meta["f"] and "float activations" in meta["f"]["notes"][0]
    lib = build({"f": f}, target).load()
    for M in rows:
        _, X, Q, S, ref = _case(M, N, K, bits, gs, row_tile, rng, zp)
        y = np.full((M, N), np.nan, np.float32)
        lib["f"](X, Q, S, y)
        np.testing.assert_allclose(y, ref, rtol=0, atol=1e-5 * np.abs(ref).max(), err_msg=f"{name} {kernel} M={M}")
    return kernel


@pytest.mark.parametrize("gs,zp", [(32, None), (64, None), (32, 8), (32, 0), (64, 15)])
def test_row_major_4bit_gemv_and_gemm(target, gs, zp):
    """4-bit weights in row-major words: the int8 GEMV (1 and 3 rows) and the int8 GEMM (40 rows); at the
    default zero point 7, and at 8 (the ``q4*`` presets'), 0 and 15 with weights at the zero point too."""
    name, t, simd = target
    kernel = _check(name, t, simd, 4, gs, 0, (1, 3, 40), zp)
    assert "tiles" not in kernel


@pytest.mark.parametrize("bits", [4, 8])
def test_row_tiled(target, bits):
    """Weights in row tiles of 16 rows: the row-tiled int8 kernel at 1, 3, 5, 9, 13, 16 and 40 rows (a decode
    batch of 1-16 sequences is a block of 8 rows or sums of the helpers' 1-4 and 8); 8-bit weights of byte
    255 against x of +-127 (``2 * 255 * 127`` per pair: past int16)."""
    name, t, simd = target
    kernel = _check(name, t, simd, bits, 32, 16, (1, 3, 5, 9, 13, 16, 40))
    assert "tiles" in kernel


@pytest.mark.parametrize("bits,zp", [(4, 0), (4, 8), (4, 15), (8, 0), (8, 128), (8, 255)])
def test_row_tiled_zero_points(target, bits, zp):
    """The row-tiled int8 kernel at the presets' zero points (8 / 128: ``q4*`` / ``q8f32_1``) and at both ends
    of the range, weights at 0, the zero point and the top (``q - zero_point`` from ``-top`` to ``top``; a
    whole row at the top, one at 0), x at +-127 in every group (x's quantization is symmetric: a group of
    -a gives -127, never -128), at 1 and 2 input rows (on AVX2 without VNNI one call takes both 8-row halves
    of a tile: ``tile_pair_rows_i8``), 3 and 9; against the integer sums in int64 times the float64
    scales. The largest int16 partial sum of the 4-bit path (16 products of 15 * 127 = 30480) and 8-bit
    pairs of 255 * 127 (past int16 when summed) occur in rows 0 / 1."""
    name, t, simd = target
    kernel = _check(name, t, simd, bits, 32, 16, (1, 2, 3, 9), zp)
    assert "tiles" in kernel


def test_mb_simd_off_vnni_gives_a_zen3_target(monkeypatch):
    """``MB_SIMD=avx2 MB_SIMD_OFF=vnni`` makes the host's target an AVX2 CPU without any VNNI (what a Zen 3 runs:
    no AVX-512, no AVX-VNNI), ``MB_SIMD_OFF=vnni`` alone one without VNNI at the host's own width; the
    int8 kernels then take ``vpmaddubsw`` / ``vpmaddwd`` and stay exact at the extremes."""
    from builder.codegen.kernels.simd import capped_features, features_off

    monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
    monkeypatch.delenv("MB_SIMD_EMULATE", raising=False)
    feats = "+avx,+avx2,+fma,+avxvnni,+avx512f,+avx512bw,+avx512vl,+avx512vnni,+avx10.1-512,+amx-tile,+avx512bf16"
    assert capped_features(HOST.triple, feats, "avx2", frozenset({"vnni"})) == \
        "+avx,+avx2,+fma,-avxvnni,-avx512f,-avx512bw,-avx512vl,-avx512vnni,-avx10.1-512,-amx-tile,-avx512bf16"
    assert capped_features(HOST.triple, feats, "avx512", frozenset({"vnni"})) == \
        "+avx,+avx2,+fma,-avxvnni,+avx512f,+avx512bw,+avx512vl,-avx512vnni,-avx10.1-512,+amx-tile,+avx512bf16"
    assert capped_features("aarch64-unknown-linux-gnu", "+neon", None, frozenset({"vnni"})) == "+neon"
    monkeypatch.setenv("MB_SIMD_OFF", "vnni, AMX")
    assert features_off() == {"vnni", "amx"}
    monkeypatch.setenv("MB_SIMD_OFF", "vnni,avx3")
    with pytest.raises(ValueError, match="MB_SIMD_OFF: unknown feature.*avx3"):
        features_off()
    monkeypatch.setenv("MB_SIMD_OFF", "vnni")
    monkeypatch.setenv("MB_SIMD", "avx2")
    host = Target.host()
    plus = {f[1:] for f in host.features.split(",") if f.startswith("+")}
    assert not {f for f in plus if re.match(r"avx512|avx10|avxvnni|amx", f)}
    simd = SimdInfo.from_target(host.triple, host.features)
    assert not simd.vnni and not simd.vnni_512 and simd.lanes <= 8
    if simd.int8_dot:
        f, X, Q, S, ref = _case(3, 48, 256, 8, 32, 16, np.random.default_rng(0))
        text, meta = emit_llvm_ir({"f": f}, host)
        assert "+vnni" not in meta["f"]["kernel"] and "vpdpbusd" not in text
        y = np.empty((3, 48), np.float32)
        build({"f": f}, host).load()["f"](X, Q, S, y)
        np.testing.assert_allclose(y, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
