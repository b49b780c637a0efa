"""Correctness of the quantized linear kernels (never timed): group-quantized weights of every format
(bits, group size, zero point, storage and scale dtypes), their prefetches and accumulator chains, and
the int8-activation GEMV / GEMM (VNNI or not, AVX2 steps, rows sharing x, NaN / inf, the float
fallback without AVX2); checked against float64 references of the same quantization."""
from __future__ import annotations

import re

import numpy as np
import pytest

from builder.codegen import emit_llvm_ir
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.linear import TUNING, Int8Rows

from helpers.linear_kernels import linear_func as _linear_func
from helpers.linear_cases import HOST, HOST_SIMD
from helpers.linear_cases import as_f32 as _as_f32
from helpers.linear_cases import np_dtype as _np_dtype
from helpers.linear_cases import tol as _tol
from helpers.linear_cases import build_kernel as _build
from helpers.linear_cases import quant_case as _quant_case
from helpers.linear_cases import int8_activation_reference as _int8_activation_reference
from helpers.linear_cases import group_weights as _group_weights
from helpers.linear_cases import x86_target as _x86_target

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/helpers/fixtures.py


@pytest.mark.parametrize("K", [96, 80])
@pytest.mark.parametrize("bits,zp", [(4, 7), (8, 127)])
def test_group_quantized(K, bits, zp):
    lib = None
    for M in (1, 2, 3, 8, 9, 14):   # GEMV (fast packed path), GEMM (unpacking pack)
        f, odt, X, Q, S, ref = _quant_case(M, 37, K, bits, 32, zp, "uint32", "float32", "float32", M + K)
        if lib is None:
            kernel, lib = _build(f)
            assert kernel.startswith("linear/") == HOST_SIMD.usable
        y = np.empty((M, 37), np.float32)
        lib["f"](X, Q, S, y)
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("case", [
    dict(bits=4, gs=32, zp=7, storage="uint32", sdt="float16", xdt="float16"),
    dict(bits=4, gs=32, zp=7, storage="uint32", sdt="bfloat16", xdt="bfloat16"),
    dict(bits=4, gs=64, zp=7, storage="uint8", sdt="float32", xdt="float32"),
    dict(bits=8, gs=16, zp=0, storage="int8", sdt="float32", xdt="float32"),
    dict(bits=8, gs=160, zp=0, storage="int8", sdt="float32", xdt="float32"),   # per-channel
    dict(bits=2, gs=32, zp=1, storage="uint32", sdt="float32", xdt="float32"),
])
def test_group_quantized_formats(case):
    lib = None
    for M in (1, 5, 12):
        f, odt, X, Q, S, ref = _quant_case(M, 19, 160, case["bits"], case["gs"], case["zp"],
                                           case["storage"], case["sdt"], case["xdt"], M)
        if lib is None:
            _, lib = _build(f)
        y = np.empty((M, 19), _np_dtype(odt))
        lib["f"](X, Q, S, y)
        tol = _tol(odt)
        np.testing.assert_allclose(_as_f32(y, odt), ref, rtol=tol, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("fmt", ["float32", "float16", "q4", "q8", "q2"])
def test_gemm_prefetches_the_next_weight_block(fmt, monkeypatch):
    """The float GEMM prefetches the next block of weights (the next KC columns of the panel,
    or the first ones of the next panel, rows clamped to N) while a block's micro-kernels run:
    the hints are in the code, and many blocks (small KC, K not a multiple of it), partial
    panels and partial micro-kernel tiles give the reference results."""
    from builder.codegen import emit_llvm_ir

    monkeypatch.setitem(TUNING, "kc_bytes", 2048)
    N, K = 37, 352
    if fmt in ("float32", "float16"):
        f, _ = _linear_func(K, N, "float32", fmt, ("linear", 0))
    else:
        bits, storage, zp = {"q4": (4, "uint32", 7), "q8": (8, "int8", 0), "q2": (2, "uint32", 1)}[fmt]
        f = _quant_case(1, N, K, bits, 32, zp, storage, "float16", "float32")[0]
    text, _ = emit_llvm_ir({"f": f})
    if HOST_SIMD.usable:
        assert "llvm.prefetch" in text
    _, lib = _build(f)
    for M in (25, 31, 64):
        y = np.empty((M, N), np.float32)
        if fmt in ("float32", "float16"):
            rng = np.random.default_rng(M)
            x = rng.standard_normal((M, K), dtype=np.float32)
            w = rng.standard_normal((N, K), dtype=np.float32).astype(fmt)
            lib["f"](x, w, y)
            ref = x.astype(np.float64) @ w.astype(np.float64).T
            np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.sqrt(K))
        else:
            _, _, X, Q, S, ref = _quant_case(M, N, K, bits, 32, zp, storage, "float16", "float32", M)
            lib["f"](X, Q, S, y)
            np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("wdt", ["float32", "float16"])
def test_gemv_prefetches_every_line_it_reads(wdt):
    """The dense GEMV's loop prefetches, ``prefetch`` bytes ahead, each 64-byte line of each
    weight row its step reads (a step of 4 vectors reads 2-4 lines per row; one prefetch per step
    left half to three quarters of the lines to the hardware: float16 LlamaMLP batch 1 9.8 ->
    8.4 ms on an Intel Xeon); checked in the row-dot helper's IR, then the results."""
    from builder.codegen import emit_llvm_ir

    if not HOST_SIMD.usable:
        pytest.skip("no vector unit")
    N, K = 9, 1000
    f, _ = _linear_func(K, N, "float32", wdt, ("linear", 0))
    text, _ = emit_llvm_ir({"f": f})
    L, esize, R = HOST_SIMD.lanes, (4 if wdt == "float32" else 2), TUNING["gemv_rows"]
    dot = re.search(r'^define [^\n]*@"mb\.dot\.[^"]*\.mt(\d+)\.r%d"\(.*?^}$' % R, text, re.S | re.M)
    expected = 0
    for t in range(1, int(dot.group(1)) + 1):   # the helper's tiles of t input rows, unroll U (its rule)
        U = 1
        while U < 4 and R * t * U * 2 <= max(HOST_SIMD.registers - 6, 4):
            U *= 2
        expected += R * max(1, L * U * esize // 64)
    assert dot.group(0).count("@\"llvm.prefetch.p0\"(") == expected
    _, lib = _build(f)
    rng = np.random.default_rng(3)
    for M in (1, 2, 5):
        x = rng.standard_normal((M, K), dtype=np.float32)
        w = rng.standard_normal((N, K), dtype=np.float32).astype(wdt)
        y = np.empty((M, N), np.float32)
        lib["f"](x, w, y)
        np.testing.assert_allclose(y, x.astype(np.float64) @ w.astype(np.float64).T, rtol=2e-5,
                                   atol=2e-5 * np.sqrt(K))


@pytest.mark.parametrize("chains", [1, 2, 4])
def test_packed_gemv_accumulator_chains(chains, monkeypatch):
    """The packed-weight float GEMV spreads its groups over ``gemv_chains_q`` accumulators per
    (weight row, input row): group counts that are not a multiple of the chains (7 and 13 groups
    of 32, a 5-column float tail), 1 to 8 input rows, 4- and 8-bit weights, all give the
    float64 reference."""
    monkeypatch.setitem(TUNING, "gemv_chains_q", chains)
    for bits, storage, zp, K in ((4, "uint32", 7, 7 * 32 + 5), (8, "uint32", 127, 13 * 32)):
        f = _quant_case(1, 21, K, bits, 32, zp, storage, "float16", "float32")[0]
        _, lib = _build(f)
        for M in (1, 3, 8):
            _, _, X, Q, S, ref = _quant_case(M, 21, K, bits, 32, zp, storage, "float16", "float32", M)
            y = np.empty((M, 21), np.float32)
            lib["f"](X, Q, S, y)
            np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("bits,gs,storage,zp,per_line", [(4, 32, "uint32", 7, 4), (8, 32, "uint32", 127, 2),
                                                       (4, 128, "uint32", 7, 1)])
def test_packed_gemv_prefetches_once_per_line(bits, gs, storage, zp, per_line):
    """The packed-weight GEMV prefetches a row's next lines from every ``64 / group bytes``-th
    group only (a 4-bit group of 32 is a quarter line), so one prefetch per line; results
    unchanged (K with a partial last line and a float tail)."""
    from builder.codegen import emit_llvm_ir

    if not HOST_SIMD.usable:
        pytest.skip("no vector unit")
    N, K = 11, 8 * gs + 8
    f = _quant_case(1, N, K, bits, gs, zp, storage, "float16", "float32")[0]
    text, _ = emit_llvm_ir({"f": f})
    dots = re.findall(r'^define [^\n]*@"mb\.dot\.[^"]*\.q"\(.*?^}$', text, re.S | re.M)
    assert dots and all(("qpf.then" in d) == (per_line > 1) for d in dots)
    _, lib = _build(f)
    for M in (1, 3):
        _, _, X, Q, S, ref = _quant_case(M, N, K, bits, gs, zp, storage, "float16", "float32", M)
        y = np.empty((M, N), np.float32)
        lib["f"](X, Q, S, y)
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="int8 GEMV needs AVX2")
@pytest.mark.parametrize("K,gs,storage,sdt,xdt", [
    (4192, 32, "uint32", "float16", "float32"),   # 65 steps: one 32-column float tail
    (640, 64, "uint8", "float32", "float32"),
    (640, 128, "uint32", "bfloat16", "bfloat16"),  # groups span two steps
    (200, 16, "uint16", "float32", "float16"),    # 4 groups per step, 8-column tail
    (72, 8, "uint32", "float32", "float32"),
    (96, 32, "uint32", "float32", "float32"),     # one step, 32 float columns
    (384, 32, "uint32", "float16", "float32"),    # 16 lanes: 3 steps of 128 columns, 4 groups each
    (1280, 256, "uint8", "float32", "float32"),   # 16 lanes: groups span two 128-column steps
])
@pytest.mark.parametrize("vnni", [False, True])
def test_int8_activation_gemv(K, gs, storage, sdt, xdt, vnni, monkeypatch, chains=None, target=None):
    """``activation: int8`` weights: batches up to 32 quantize x per group and use integer dot
    products; the result matches a float64 emulation of that quantization (odd and even
    batches, tiles of 4 weight rows and a partial one, a group of zeros included). Larger
    batches take the int8 GEMM, which quantizes the same columns. ``vnni``: the ``vpdpbusd``
    kernels of AVX-VNNI hosts (emulated where the host lacks it, ``MB_SIMD_EMULATE``).
    ``chains``: accumulator chains per weight row (``gemv_acc_i8``, default when None);
    ``target``: build for it instead of the host."""
    if vnni:
        monkeypatch.setenv("MB_SIMD_EMULATE", "vnni")
    if chains is not None:
        monkeypatch.setitem(TUNING, "gemv_acc_i8", chains)
    lib = None
    for M in (1, 3, 4, 9, 32, 33):
        f, odt, X, Q, S, _ = _quant_case(M, 13, K, 4, gs, 7, storage, sdt, xdt, seed=M + K,
                                         activation="int8")
        if M >= 3:
            X[1, :gs] = 0    # a group of zeros: d = 0, contributes nothing
        if lib is None:
            kernel, lib = _build(f, target)
            if target is None:
                _check_int8_kernel(kernel, gs, vnni)
        rel = _run_int8_case(lib, X, Q, S, 13, K, gs, storage, sdt, xdt, odt)
        if K >= 128:
            assert 1e-3 < rel < 2e-2, rel   # really the int8 path: about 0.5% from the float result


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="int8 GEMV needs AVX2")
@pytest.mark.parametrize("chains", [1, 3])
@pytest.mark.parametrize("K,gs,storage,sdt,xdt", [
    (4192, 32, "uint32", "float16", "float32"),   # 65 steps: 3 chains end with a partial round
    (200, 16, "uint16", "float32", "float16"),    # 3 steps
])
def test_int8_activation_gemv_chains(K, gs, storage, sdt, xdt, chains, monkeypatch):
    """The int8 GEMV with 1 or 3 accumulator chains per weight row (``gemv_acc_i8``; the default
    2 is the test above): the same float64 emulation of the quantization."""
    test_int8_activation_gemv(K, gs, storage, sdt, xdt, False, monkeypatch, chains=chains)


@pytest.mark.skipif(not HOST_SIMD.int8_dot or "+fma" not in HOST.features, reason="int8 GEMV needs AVX2")
@pytest.mark.parametrize("vnni", [False, True])
@pytest.mark.parametrize("K,gs,storage,sdt,xdt", [
    (640, 64, "uint8", "float32", "float32"),
    (384, 32, "uint32", "float16", "float32"),
    (1280, 256, "uint16", "bfloat16", "bfloat16"),
])
def test_int8_activation_gemv_wide_steps_on_avx2(K, gs, storage, sdt, xdt, vnni, monkeypatch):
    """The 512-bit int8 GEMV (128-column steps, 16 int32 lanes) built for an AVX2 target with
    the 16-lane kernel shape (``MB_SIMD_SHAPE=avx512``): each 512-bit integer multiply-add is
    two 256-bit ones (:meth:`KFunc.by_256`), so the layout and the lane tables of AVX-512 hosts
    are checked on any AVX2 host; the same float64 emulation of the quantization."""
    monkeypatch.setenv("MB_SIMD_SHAPE", "avx512")
    target = _x86_target("haswell", "+avx2,+fma,+f16c,+avx")
    simd = SimdInfo.from_target(target.triple, target.features)
    assert simd.lanes == 16 and not simd.int8_512
    assert Int8Rows.for_lanes(K, gs, simd.lanes).step == 128
    test_int8_activation_gemv(K, gs, storage, sdt, xdt, vnni, monkeypatch, target=target)


def test_int8_rows_step_choice():
    """128-column steps only where they quantize the columns 64-column steps do (the int8 GEMM
    and the other batch sizes then compute the same); the tables follow the step."""
    assert Int8Rows.for_lanes(4096, 32, 16).step == 128
    assert Int8Rows.for_lanes(4096, 32, 8).step == 64
    assert Int8Rows.for_lanes(4192, 32, 16).step == 64     # 65 steps of 64: 4160 columns
    assert Int8Rows.for_lanes(1280, 256, 16).columns == Int8Rows(1280, 256).columns == 1280
    wide = Int8Rows(4096, 32, 128)
    assert (wide.steps, wide.lanes, wide.groups) == (32, 16, 128)
    assert wide.d_off == 4096 and wide.inv_off == 4096 + 4 * 128 + 16
    assert wide.row_bytes % 64 == 0 and wide.row_bytes >= wide.dsum_off + 4 * wide.groups


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="int8 GEMV needs AVX2")
@pytest.mark.parametrize("rows", [2, 3])
def test_int8_activation_gemv_rows_sharing_x(rows, monkeypatch):
    """``gemv_rows_step_i8``: 2 or 3 weight rows per step loop sharing each load of x (3 leaves a
    tile of 4 rows with a 1-row group): the same float64 emulation of the quantization."""
    monkeypatch.setitem(TUNING, "gemv_rows_step_i8", rows)
    test_int8_activation_gemv(640, 64, "uint8", "float32", "float32", False, monkeypatch)


def _check_int8_kernel(kernel: str, gs: int, vnni: bool) -> None:
    """The built ``kernel`` label is the int8-activation kernel (with ``+vnni`` where the host
    has VNNI or it is emulated), planned for 8 float32 lanes where the host's vectors are wider
    than a group (8 columns on AVX-512)."""
    name = HOST_SIMD.name if gs % HOST_SIMD.lanes == 0 else "avx2"
    assert kernel == f"linear/{name}" + ("+vnni" if vnni or HOST_SIMD.vnni else "")


def _run_int8_case(lib, X, Q, S, N, K, gs, storage, sdt, xdt, odt) -> float:
    """Run a built int8-activation case (``_quant_case``'s arrays, 4-bit weights with zero
    point 7) and compare it with the float64 emulation of the quantization; returns the
    relative distance (2-norm) from the exact float result."""
    y = np.empty((X.shape[0], N), _np_dtype(odt))
    lib["f"](X, Q, S, y)
    xf = _as_f32(X, xdt)
    W = _group_weights(Q, S, storage, sdt, gs, K)
    want = _int8_activation_reference(xf, W, gs)
    tol = _tol(odt) if odt != "float32" else 2e-5
    np.testing.assert_allclose(_as_f32(y, odt), want, rtol=tol, atol=tol * np.abs(want).max())
    exact = xf.astype(np.float64) @ W.T.astype(np.float64)
    return float(np.linalg.norm(_as_f32(y, odt) - exact) / np.linalg.norm(exact))


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="int8 GEMM needs AVX2")
@pytest.mark.parametrize("K,gs,storage,sdt,xdt,tune", [
    (640, 64, "uint8", "float32", "float32", {}),
    (640, 128, "uint32", "bfloat16", "bfloat16", {}),
    (256, 32, "uint32", "float16", "float16", {}),
    (192, 8, "uint32", "float32", "float32", {}),
    (2048, 256, "uint16", "float32", "float32", {}),        # two column blocks of 1024
    (200, 16, "uint16", "float32", "float16", {}),          # 8 float columns
    (330, 64, "uint32", "float16", "float32", {}),          # 10 float columns, a partial group
    (448, 16, "uint32", "float16", "float32", {"nv_i8": 1, "mr_i8": 5, "kc_i8": 128, "qu_i8": 1}),
    (512, 32, "uint32", "float32", "float32", {"nv_i8": 4, "mr_i8": 2, "kc_i8": 64, "qu_i8": 8}),
])
@pytest.mark.parametrize("vnni", [False, True])
def test_int8_activation_gemm(K, gs, storage, sdt, xdt, tune, vnni, monkeypatch):
    """Batches past ``gemv_max_rows_qig`` take the int8 GEMM (panels of nibbles in k-quad
    order, ``vpmaddubsw`` micro-kernels, or ``vpdpbusd`` ones with ``vnni``, emulated where the
    host lacks it): the same float64 emulation of the quantization as the GEMV, for full and
    partial panels (N = 37 and 13), row counts that are and are not multiples of the
    micro-kernel's, several column blocks, float tail columns (past whole 64-column steps of
    whole groups), other panel widths / row counts / unrolls."""
    if vnni:
        monkeypatch.setenv("MB_SIMD_EMULATE", "vnni")
    for key, value in tune.items():
        monkeypatch.setitem(TUNING, key, value)
    for N in (37, 13):
        lib = None
        for M in (9, 10, 35, 70):
            f, odt, X, Q, S, _ = _quant_case(M, N, K, 4, gs, 7, storage, sdt, xdt, seed=M + K + N,
                                             activation="int8")
            X[1, :gs] = 0
            X[M - 1, -gs:] = 0
            if lib is None:
                kernel, lib = _build(f)
                _check_int8_kernel(kernel, gs, vnni)
            rel = _run_int8_case(lib, X, Q, S, N, K, gs, storage, sdt, xdt, odt)
            assert 1e-3 < rel < 2e-2, rel   # the int8 path, not the float one


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="int8 GEMV needs AVX2")
def test_int8_activation_propagates_nan_and_inf():
    """A NaN or an infinity in a row of x makes that row's outputs NaN (as float activations
    would), the other rows stay exact; large finite values are clamped, not wrapped."""
    f, odt, X, Q, S, ref = _quant_case(3, 9, 256, 4, 32, 7, "uint32", "float32", "float32", seed=3,
                                       activation="int8")
    _, lib = _build(f)
    X[0, 5] = np.nan
    X[1, 200] = np.inf
    y = np.empty((3, 9), np.float32)
    lib["f"](X, Q, S, y)
    assert np.isnan(y[0]).all() and np.isnan(y[1]).all()
    np.testing.assert_allclose(y[2], ref[2], rtol=2e-5, atol=2e-5 * np.abs(ref[2]).max())


def test_int8_activation_falls_back_to_float_without_avx2(monkeypatch):
    """Where the host has no AVX2 (``MB_SIMD=avx`` here), ``activation: int8`` weights run the
    float kernels: exact float results."""
    monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)   # (the shape hook overrides the cap)
    monkeypatch.setenv("MB_SIMD", "avx")
    f, odt, X, Q, S, _ = _quant_case(2, 11, 256, 4, 32, 7, "uint32", "float32", "float32", seed=5,
                                     activation="int8")
    _, lib = _build(f)
    y = np.empty((2, 11), np.float32)
    lib["f"](X, Q, S, y)
    f2, _, _, _, _, exact = _quant_case(2, 11, 256, 4, 32, 7, "uint32", "float32", "float32", seed=5)
    np.testing.assert_allclose(y, exact, rtol=2e-5, atol=2e-5 * np.abs(exact).max())
