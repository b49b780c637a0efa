"""Correctness of the fast code paths (never timed): GEMV / GEMM kernels with every weight format
and epilogue, shapes that are not multiples of the tile sizes, batch 1 and symbolic batch, the
ISA fallbacks (AVX2 -> SSE -> scalar loops), FuseOps, row fusion and parallel loops, the thread
pool and the object cache."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

from builder import te
from builder.codegen import Target, build, emit_llvm_ir
from builder.codegen.kernels import SimdInfo
from builder.codegen.kernels.simd import capped_features
from builder.codegen.kernels.linear import TUNING, Int8Rows
from builder.codegen.lower import lower
from builder.codegen.schedule import schedule
from builder.ir.kernel import KERNEL_ATTR, GroupWeight
from builder.te import topi
from runtime import threadpool
from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits

from helpers.linear_kernels import check_gated as _check_gated
from helpers.linear_kernels import epilogue as _epilogue
from helpers.linear_kernels import linear_func as _linear_func
from helpers.linear_kernels import silu as _silu

ROOT = Path(__file__).resolve().parents[2]
HOST = Target.host()
HOST_SIMD = SimdInfo.from_target(HOST.triple, HOST.features)


pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/codegen/conftest.py


def _as_f32(a: np.ndarray, dtype: str) -> np.ndarray:
    return bfloat16_bits_to_float32(a) if dtype == "bfloat16" else a.astype(np.float32)


def _from_f32(a: np.ndarray, dtype: str) -> np.ndarray:
    return float32_to_bfloat16_bits(a) if dtype == "bfloat16" else a.astype(dtype)


def _np_dtype(dtype: str):
    return np.uint16 if dtype == "bfloat16" else np.dtype(dtype)


def _tol(*dtypes) -> float:
    if "bfloat16" in dtypes:
        return 2e-2
    if "float16" in dtypes:
        return 4e-3
    return 2e-5


def _build(f, target=None):
    lib = build({"f": f}, target)
    return lib.functions["f"]["kernel"], lib.load()


# ---------------------------------------------------------------------------------------------
# dense GEMV / GEMM


@pytest.mark.parametrize("short_k", [None, 0])
@pytest.mark.parametrize("N,K", [(37, 45), (16, 64), (1, 7), (9, 300)])
def test_linear_f32_shapes(N, K, short_k, monkeypatch):
    """Float32 GEMV and GEMM tiles and remainders against numpy; ``short_k=0`` turns off the
    rule that sends more than 8 rows of short (K <= 512) rows to the GEMM, so the GEMV's
    9-24-row tiles are checked on these K too."""
    if short_k is not None:
        monkeypatch.setitem(TUNING, "gemv_short_k", short_k)
    f, _ = _linear_func(K, N, "float32", "float32", ("linear", 0))
    kernel, lib = _build(f)
    assert kernel.startswith("linear/") == HOST_SIMD.usable
    for M in (1, 2, 3, 5, 8, 9, 13, 37):   # GEMV tiles, GEMM tiles and their remainders
        rng = np.random.default_rng(M * 1000 + N + K)
        x = rng.standard_normal((M, K), dtype=np.float32)
        w = rng.standard_normal((N, K), dtype=np.float32)
        y = np.empty((M, N), np.float32)
        lib["f"](x, w, y)
        np.testing.assert_allclose(y, x @ w.T, rtol=2e-5, atol=2e-5 * np.sqrt(K))


@pytest.mark.parametrize("xdt,wdt", [("float32", "float16"), ("float16", "float16"),
                                     ("bfloat16", "bfloat16"), ("float32", "bfloat16")])
def test_linear_low_precision(xdt, wdt):
    N, K = 29, 72
    f, odt = _linear_func(K, N, xdt, wdt, ("linear", 0))
    kernel, lib = _build(f)
    for M in (1, 3, 8, 11):
        rng = np.random.default_rng(M)
        x32 = rng.standard_normal((M, K), dtype=np.float32)
        w32 = rng.standard_normal((N, K), dtype=np.float32)
        x, w = _from_f32(x32, xdt), _from_f32(w32, wdt)
        y = np.empty((M, N), _np_dtype(odt))
        lib["f"](x, w, y)
        ref = _as_f32(x, xdt) @ _as_f32(w, wdt).T
        np.testing.assert_allclose(_as_f32(y, odt), ref, rtol=_tol(odt), atol=_tol(odt) * np.sqrt(K))


def _gated_linear(K, N):
    """``silu(x @ w0.T + b) * (x @ w1.T) + r``: ``(kernel family, loaded library)``."""
    epi = ("add", ("multiply", ("silu", ("add", ("linear", 0), ("tensor", 2))), ("linear", 1)),
           ("tensor", 3))
    f, _ = _linear_func(K, N, "float32", "float32", epi, nweights=2,
                        extra=[("bias", (N,), "float32"), ("resid", ("lead", N), "float32")])
    return _build(f)


def test_gated_mlp_epilogue_and_bias_residual():
    N, K = 23, 40
    kernel, lib = _gated_linear(K, N)
    assert kernel.startswith("linear/") == HOST_SIMD.usable
    for M in (1, 4, 10):
        _check_gated(lib, M, N, K)


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_epilogue_runs_per_row_block_after_the_last_k_block(threads, monkeypatch):
    """The GEMM runs each row block's epilogue right after its micro-kernel in the last block of
    ``K`` of the last weight: with 4 blocks of 32 columns, two weights (the gated form, the first
    weight's sums complete before the second's last block), a partial last panel and every row
    remainder of the micro-kernel, each output is the float64 reference's."""
    monkeypatch.setitem(TUNING, "gemv_max_rows", 0)     # the GEMM from one row
    monkeypatch.setitem(TUNING, "gemv_short_k", 0)
    monkeypatch.setitem(TUNING, "kc_bytes", 4 * 32 * (64 if HOST_SIMD.registers >= 32 else 16))   # KC = 32
    N, K = 70, 100
    kernel, lib = _gated_linear(K, N)
    assert kernel.startswith("linear/") == HOST_SIMD.usable
    old = threadpool.set_num_threads(threads)
    try:
        for M in (1, 5, 6, 7, 13, 50):
            _check_gated(lib, M, N, K)
    finally:
        threadpool.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_row_chunks_each_through_every_panel(threads, monkeypatch):
    """x larger than ``gemm_chunk_bytes`` runs the GEMM in row chunks (a task per chunk, through
    every panel; its accumulators and epilogue rows offset by the chunk's first row): 2 chunks of
    at least 128 rows for M = 257 / 300 / 311 with 64000-byte chunks of 100 columns, 4 for M =
    1000 with 120000, the last chunk shorter and every kind of micro-kernel remainder in it,
    4 blocks of K, two weights, a bias and a residual: each output is the float64 reference's."""
    monkeypatch.setitem(TUNING, "gemv_max_rows", 0)
    monkeypatch.setitem(TUNING, "gemv_short_k", 0)
    monkeypatch.setitem(TUNING, "kc_bytes", 4 * 32 * (64 if HOST_SIMD.registers >= 32 else 16))   # KC = 32
    N, K = 70, 100
    libs = {}
    for chunk in (64000, 120000):
        monkeypatch.setitem(TUNING, "gemm_chunk_bytes", chunk)
        libs[chunk] = _gated_linear(K, N)[1]
    old = threadpool.set_num_threads(threads)
    try:
        for chunk, M in ((64000, 257), (64000, 300), (64000, 311), (120000, 1000)):
            _check_gated(libs[chunk], M, N, K)
    finally:
        threadpool.set_num_threads(old)


@pytest.mark.parametrize("xdt,wdt,bf16dot", [("float32", "float16", 1), ("bfloat16", "bfloat16", 2)])
def test_gemm_row_chunks_low_precision(xdt, wdt, bf16dot, monkeypatch):
    """The row chunks with 16-bit weights (converted when packed) and with bfloat16 x and weights
    (the vdpbf16ps GEMM where the host has AVX512-BF16: x's chunk offsets in 16-bit elements),
    a residual added by row: 2 chunks of 150 rows at M = 300 and M = 299 (the last one 149 rows),
    against float64 on the rounded inputs."""
    monkeypatch.setitem(TUNING, "gemv_max_rows", 0)
    monkeypatch.setitem(TUNING, "gemv_short_k", 0)
    monkeypatch.setitem(TUNING, "gemm_bf16dot", bf16dot)
    N, K = 70, 100
    monkeypatch.setitem(TUNING, "gemm_chunk_bytes", 150 * K * (2 if xdt == "bfloat16" else 4))
    f, odt = _linear_func(K, N, xdt, wdt, ("add", ("linear", 0), ("tensor", 1)),
                          extra=[("resid", ("lead", N), "float32")])
    lib = _build(f)[1]
    for threads in (1, 2):
        old = threadpool.set_num_threads(threads)
        try:
            for M in (300, 299):
                rng = np.random.default_rng(M)
                x = _from_f32(rng.standard_normal((M, K), dtype=np.float32), xdt)
                w = _from_f32(rng.standard_normal((N, K), dtype=np.float32), wdt)
                r = rng.standard_normal((M, N), dtype=np.float32)
                y = np.empty((M, N), _np_dtype(odt))
                lib["f"](x, w, r, y)
                ref = _as_f32(x, xdt).astype(np.float64) @ _as_f32(w, wdt).T.astype(np.float64) + r
                tol = _tol(xdt, wdt, odt)
                np.testing.assert_allclose(_as_f32(y, odt), ref, rtol=tol, atol=tol * np.sqrt(K))
        finally:
            threadpool.set_num_threads(old)


def test_single_output_column_with_broadcast_epilogue():
    """N = 1 (a scoring head): the epilogue's broadcasts read the accumulator at column 0
    rather than at the column iterator (numpy broadcasting of an extent-1 dim); the kernel
    still applies, GEMV and GEMM, with bias, residual and the gated form."""
    K = 37
    kernel, lib = _gated_linear(K, 1)
    assert kernel.startswith("linear/") == HOST_SIMD.usable
    for M in (1, 5, 30, 41):
        _check_gated(lib, M, 1, K)


def test_three_d_input_with_residual_and_gelu():
    K, N = 33, 18
    epi = ("add", ("gelu", ("linear", 0)), ("tensor", 1))
    f, _ = _linear_func(K, N, "float32", "float32", epi, extra=[("r", ("lead", "lead", N), "float32")],
                        lead=("b", "s"))
    kernel, lib = _build(f)
    rng = np.random.default_rng(3)
    for b, s in [(1, 1), (2, 3), (3, 5)]:
        x = rng.standard_normal((b, s, K), dtype=np.float32)
        w = rng.standard_normal((N, K), dtype=np.float32)
        r = rng.standard_normal((b, s, N), dtype=np.float32)
        y = np.empty((b, s, N), np.float32)
        lib["f"](x, w, r, y)
        from math import erf, sqrt
        h = x @ w.T
        gelu = 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))
        np.testing.assert_allclose(y, gelu + r, rtol=1e-4, atol=1e-4)


def test_zero_rows_and_zero_k():
    f, _ = _linear_func(5, 6, "float32", "float32", ("linear", 0))
    _, lib = _build(f)
    lib["f"](np.zeros((0, 5), np.float32), np.ones((6, 5), np.float32), np.zeros((0, 6), np.float32))
    f0, _ = _linear_func(0, 6, "float32", "float32", ("add", ("linear", 0), ("tensor", 1)),
                         extra=[("bias", (6,), "float32")])
    _, lib0 = _build(f0)
    for M in (2, 20):
        y = np.full((M, 6), 7.0, np.float32)
        b = np.arange(6, dtype=np.float32)
        lib0["f"](np.zeros((M, 0), np.float32), np.zeros((6, 0), np.float32), b, y)
        np.testing.assert_array_equal(y, np.broadcast_to(b, (M, 6)))


def test_shape_mismatch_is_an_error_not_a_crash():
    f, _ = _linear_func(8, 4, "float32", "float32", ("linear", 0))
    _, lib = _build(f)
    with pytest.raises(ValueError, match="expected"):
        lib["f"](np.zeros((2, 8), np.float32), np.zeros((4, 9), np.float32), np.zeros((2, 4), np.float32))


# ---------------------------------------------------------------------------------------------
# quantized weights


def _quant_case(M, N, K, bits, gs, zp, storage, sdt, xdt, seed=0, func=True, activation="none", row_tile=0):
    """A quantized linear kernel and its data: ``(func, out dtype, X, Q, S, reference)``; with
    ``row_tile`` the kernel reads Q and S in tiles of that many rows, and they are returned as
    row-major 2-D arrays (:func:`tile_rows` makes the kernel's input)."""
    per_word = {"uint32": 32, "uint16": 16, "uint8": 8, "int8": 8}[storage] // bits
    groups = -(-K // gs)
    words = groups * gs // per_word
    x = te.placeholder((te.var("b"), K), xdt, name="x")
    if row_tile:
        q = te.placeholder((N // row_tile, words, row_tile), storage, name="q")
        s = te.placeholder((N // row_tile, groups, row_tile), sdt, name="s")
    else:
        q = te.placeholder((N, words), storage, name="q")
        s = te.placeholder((N, groups), sdt, name="s")
    spec = []
    out = topi.linear_kernel(x, q, s, weights=[GroupWeight(1, 2, bits, gs, zp, K, activation, row_tile)],
                             spec=spec)
    f = te.create_prim_func([x, q, s, out])
    f.attrs[KERNEL_ATTR] = spec[0]
    rng = np.random.default_rng(seed)
    if storage == "int8":
        vals = rng.integers(-127, 128, size=(N, groups * gs))
        Q = vals.astype(np.int8)
    else:
        vals = rng.integers(0, 2 ** bits, size=(N, groups * gs)).astype(np.uint64)
        Q = np.zeros((N, words), np.uint64)
        for j in range(per_word):
            Q |= vals[:, j::per_word] << np.uint64(j * bits)
        Q = Q.astype(storage)
    S32 = rng.random((N, groups), dtype=np.float32) * np.float32(0.1)
    S = _from_f32(S32, sdt)
    X32 = rng.standard_normal((M, K), dtype=np.float32)
    X = _from_f32(X32, xdt)
    W = ((vals.astype(np.float32) - zp) * np.repeat(_as_f32(S, sdt), gs, axis=1))[:, :K]
    if activation == "int8":
        return f, out.dtype, X, Q, S, _int8_activation_reference(_as_f32(X, xdt), W, gs)
    return f, out.dtype, X, Q, S, _as_f32(X, xdt) @ W.T


def _int8_activation_reference(X: np.ndarray, W: np.ndarray, gs: int) -> np.ndarray:
    """``X @ W.T`` in float64 with X quantized as the int8-activation GEMV does: the columns of
    the whole 64-column steps inside whole groups get, per group, ``a = max|x|`` (float32),
    ``q = rint(float32(x * float32(127 / a)))`` and ``d = float32(a / 127)`` (a group of zeros
    stays zero); the remaining columns stay float."""
    M, K = X.shape
    kc = (K // gs) * gs // 64 * 64
    Wd = W.astype(np.float64)
    ref = X[:, kc:].astype(np.float64) @ Wd[:, kc:K].T
    Xg = X[:, :kc].reshape(M, -1, gs)
    a = np.abs(Xg).max(axis=2)
    inv = np.where(a > 0, np.float32(127) / np.where(a > 0, a, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.rint((Xg * inv[..., None]).astype(np.float32))
    d = (a / np.float32(127)).astype(np.float32)
    return ref + (q * d[..., None]).reshape(M, kc).astype(np.float64) @ Wd[:, :kc].T


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


def _group_weights(Q: np.ndarray, S: np.ndarray, storage: str, sdt: str, gs: int, K: int, bits: int = 4) -> np.ndarray:
    """Dequantized float32 ``W[n, k] = (q - zero_point) * scale`` of 4-bit (8-bit) words with the
    tests' zero points 7 (127)."""
    per_word = {"uint32": 32, "uint16": 16, "uint8": 8}[storage] // bits
    vals = np.stack([(Q.astype(np.uint64) >> np.uint64(bits * j)) & np.uint64(2 ** bits - 1) for j in range(per_word)],
                    axis=-1).reshape(Q.shape[0], -1)
    zp = 2 ** (bits - 1) - 1
    return ((vals.astype(np.float32) - zp) * np.repeat(_as_f32(S, sdt), gs, axis=1))[:, :K]


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


# ---------------------------------------------------------------------------------------------
# row-tiled 4-bit weights (builder/codegen/kernels/linear/tiles.py)


def _tiled(a: np.ndarray) -> np.ndarray:
    from builder.quant.packing import tile_rows

    return tile_rows(a, 16)


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="the row-tiled int8 kernel needs AVX2")
@pytest.mark.parametrize("K,gs,sdt,xdt", [
    (4192, 32, "float16", "float32"),    # 131 groups: a 32-column float tail
    (640, 64, "float32", "float32"),
    (640, 128, "bfloat16", "bfloat16"),  # groups span two 64-column steps
    (200, 16, "float32", "float16"),     # 4 groups per step, 8-column tail
    (72, 8, "float32", "float32"),
    (96, 32, "float32", "float32"),      # one step, 32 float columns
    (1280, 256, "float16", "float32"),
])
@pytest.mark.parametrize("vnni", [False, True])
@pytest.mark.parametrize("bits", [4, 8])
def test_row_tiled_int8_kernel(K, gs, sdt, xdt, vnni, bits, monkeypatch, target=None, label=True):
    """``row_tile=16`` 4- and 8-bit weights with int8 activations run the row-tiled kernel at
    every batch size (blocks of 4 / 8 input rows and their remainders, three tiles): the same
    float64 emulation of the quantization as the row-major int8 kernels (a group of zeros
    included; every byte value 0-255 of the 8-bit words), and really the int8 path (about 0.5%
    from the float result). ``vnni``: ``vpdpbusd`` (emulated where the host lacks it; without
    it 8-bit weights take its exact int16 emulation); ``target``: build for it instead of the
    host."""
    if vnni:
        monkeypatch.setenv("MB_SIMD_EMULATE", "vnni")
    lib = None
    N = 48
    for M in (1, 3, 8, 9, 17):
        f, odt, X, Q, S, _ = _quant_case(M, N, K, bits, gs, 2 ** (bits - 1) - 1, "uint32", sdt, xdt, seed=M + K,
                                         activation="int8", row_tile=16)
        if M >= 3:
            X[1, :gs] = 0
        if lib is None:
            kernel, lib = _build(f, target)
            if label:
                assert kernel == f"linear/{HOST_SIMD.name}" + ("+vnni" if vnni or HOST_SIMD.vnni else "") + "+tiles"
        y = np.empty((M, N), _np_dtype(odt))
        lib["f"](X, _tiled(Q), _tiled(S), y)
        xf = _as_f32(X, xdt)
        W = _group_weights(Q, S, "uint32", sdt, gs, K, bits)
        want = _int8_activation_reference(xf, W, gs)
        tol = _tol(odt) if odt != "float32" else 2e-5
        np.testing.assert_allclose(_as_f32(y, odt), want, rtol=tol, atol=tol * np.abs(want).max())
        exact = xf.astype(np.float64) @ W.T.astype(np.float64)
        rel = float(np.linalg.norm(_as_f32(y, odt) - exact) / np.linalg.norm(exact))
        if K >= 128:
            assert 1e-3 < rel < 2e-2, rel


@pytest.mark.skipif(not HOST_SIMD.int8_dot or "+fma" not in HOST.features, reason="needs AVX2")
@pytest.mark.parametrize("shape", ["avx2", "avx512"])
@pytest.mark.parametrize("vnni", [False, True])
@pytest.mark.parametrize("K,gs,sdt,xdt", [(640, 32, "float16", "float32"), (200, 16, "bfloat16", "bfloat16")])
@pytest.mark.parametrize("bits", [4, 8])
def test_row_tiled_int8_kernel_on_avx2(K, gs, sdt, xdt, vnni, shape, bits, monkeypatch):
    """The row-tiled kernel built for an AVX2 target without VNNI (4-bit weights: ``vpmaddubsw``
    pairs summed in int16 over 4 words, then ``vpmaddwd``; 8-bit ones: ``vpdpbusd``'s exact
    emulation; or ``vpdpbusd`` emulated): tiles as two vectors of 8 rows (``avx2``) or one
    16-lane vector split into 256-bit halves (``MB_SIMD_SHAPE=avx512``)."""
    if shape == "avx512":
        monkeypatch.setenv("MB_SIMD_SHAPE", "avx512")
    target = _x86_target("haswell", "+avx2,+fma,+f16c,+avx")
    simd = SimdInfo.from_target(target.triple, target.features)
    assert simd.int8_dot and not simd.vnni and not simd.int8_512
    test_row_tiled_int8_kernel(K, gs, sdt, xdt, vnni, bits, monkeypatch, target=target, label=False)


@pytest.mark.parametrize("K,gs,sdt,xdt", [
    (4192, 32, "float16", "float32"),
    (640, 128, "bfloat16", "bfloat16"),
    (200, 16, "float32", "float16"),
    (100, 32, "float32", "float32"),     # a partial last group (and word)
    (72, 8, "float16", "float32"),
])
@pytest.mark.parametrize("cap", [None, "no-permps", "avx2", "sse"])
@pytest.mark.parametrize("bits", [4, 8])
def test_row_tiled_float_kernel(K, gs, sdt, xdt, cap, bits, monkeypatch):
    """Row-tiled 4- and 8-bit weights with float activations: the float tiles up to
    ``tile_max_rows`` input rows (blocks and their remainders), the float GEMM on panels packed
    from the tiles above; exact float results against float64 (a partial last group included), on
    the host's vectors (on AVX-512 hosts with and without the ``vpermps`` decoding of 4-bit values,
    ``tile_permps``) and on 8 and 4 lanes (``MB_SIMD``; 2 and 4 vectors per tile). The zero point is
    the presets' ``max_int`` (7, 127)."""
    if bits == 8 and cap == "no-permps":
        pytest.skip("vpermps decodes 4-bit values only")
    if cap == "no-permps":
        monkeypatch.setitem(TUNING, "tile_permps", 0)
    elif cap is not None:
        monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
        monkeypatch.setenv("MB_SIMD", cap)
    host = Target.host()   # (the cap applies to the host's target: HOST was made under the run's own MB_SIMD)
    simd = SimdInfo.from_target(host.triple, host.features)
    lib = None
    N = 48
    for M in (1, 3, 8, 9, 16, 17, 40):
        f, odt, X, Q, S, ref = _quant_case(M, N, K, bits, gs, 2 ** (bits - 1) - 1, "uint32", sdt, xdt,
                                           seed=M + K, row_tile=16)
        if lib is None:
            kernel, lib = _build(f)
            assert kernel == (f"linear/{simd.name}+tiles" if simd.usable else kernel), kernel
        y = np.empty((M, N), _np_dtype(odt))
        lib["f"](X, _tiled(Q), _tiled(S), y)
        tol = _tol(odt, xdt)
        np.testing.assert_allclose(_as_f32(y, odt), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_row_tiled_float_kernel_decodes_with_vpermps_on_avx512(own_features):
    """On an AVX-512 target (any host: only the IR is built) the float tiles decode each column
    with one ``vpermps`` of the 16-entry table ``q - zero_point``; on an AVX2 one with a mask and
    a conversion."""
    from builder.codegen import emit_llvm_ir

    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    f, *_ = _quant_case(2, 32, 256, 4, 32, 7, "uint32", "float16", "float32", row_tile=16)
    for cpu, feats, want in (("znver4", "+avx512f,+avx512bw,+avx512vl,+avx2,+fma,+f16c", True),
                             ("haswell", "+avx2,+fma,+f16c,+avx", False)):
        text, meta = emit_llvm_ir({"f": f}, _x86_target(cpu, feats))
        assert meta["f"]["kernel"].endswith("+tiles")
        assert ("llvm.x86.avx512.permvar.sf.512" in text) == want, cpu


def test_row_tiled_int8_kernel_prefetches_weights_and_scales(monkeypatch, own_features):
    """The int8 tiles prefetch each 64-byte word of the weights (``prefetch_q``) and, once per group,
    the scales' stream (``prefetch_scales``): built for a Zen 4 target, the tile helper holds one
    prefetch more with the scales' on."""
    from builder.codegen import emit_llvm_ir

    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    target = _x86_target("znver4", "+avx512f,+avx512bw,+avx512vl,+avx512vnni,+avx2,+fma,+f16c")
    counts = []
    for dist in (0, 2048):
        monkeypatch.setitem(TUNING, "prefetch_scales", dist)
        f, *_ = _quant_case(2, 32, 256, 4, 32, 7, "uint32", "float16", "float32", activation="int8", row_tile=16)
        text, meta = emit_llvm_ir({"f": f}, target)
        assert meta["f"]["kernel"] == "linear/avx512+vnni+tiles"
        helper = text[text.index('define internal void @"mb.tile.'):]
        helper = helper[:helper.index("\n}")]
        counts.append(helper.count('call void @"llvm.prefetch'))
    assert counts[0] == 4 and counts[1] == 5, counts   # 4 words of 64 bytes per group of 32 columns


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="the row-tiled int8 kernel needs AVX2")
def test_row_tiled_int8_kernel_nan_and_block_size(monkeypatch):
    """A NaN in a row of x makes that row's outputs NaN and leaves the other rows exact; blocks of
    3 input rows (``tile_rows_x_i8``), tiles as two 8-lane vectors (``tile_lanes_i8``) and x
    quantized by every thread however small (``xprep_min_values``) give the same outputs as the
    defaults."""
    libs, outs = [], []
    for tune in ({}, {"tile_rows_x_i8": 3}, {"tile_lanes_i8": 8}, {"xprep_min_values": 1, "parallel_min_macs": 0}):
        for key, value in tune.items():
            monkeypatch.setitem(TUNING, key, value)
        f, odt, X, Q, S, ref = _quant_case(7, 32, 256, 4, 32, 7, "uint32", "float32", "float32", seed=3,
                                           activation="int8", row_tile=16)
        libs.append(_build(f)[1])
        outs.append(np.empty((7, 32), np.float32))
        libs[-1]["f"](X, _tiled(Q), _tiled(S), outs[-1])
    y = outs[0]
    for other in outs[1:]:
        np.testing.assert_allclose(other, y, rtol=1e-6, atol=1e-6 * np.abs(y).max())
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
    X[2, 100] = np.nan
    libs[0]["f"](X, _tiled(Q), _tiled(S), y)
    assert np.isnan(y[2]).all() and not np.isnan(np.delete(y, 2, axis=0)).any()


@pytest.mark.skipif(not HOST_SIMD.int8_dot, reason="the row-tiled int8 kernel needs AVX2")
@pytest.mark.parametrize("zp", [0, 8])
def test_row_tiled_int8_kernel_zero_points(zp):
    """Other zero points than q4's 7: none (the integer sums start at 0) and 8 (ORT's MatMulNBits
    default); the float64 emulation of the quantization with ``(q - zero_point) * scale``."""
    for M in (1, 9):
        f, odt, X, Q, S, ref = _quant_case(M, 32, 320, 4, 32, zp, "uint32", "float32", "float32", seed=M,
                                           activation="int8", row_tile=16)
        kernel, lib = _build(f)
        assert kernel.endswith("+tiles")
        y = np.empty((M, 32), np.float32)
        lib["f"](X, _tiled(Q), _tiled(S), y)
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.skipif(not HOST_SIMD.usable, reason="needs the vector kernels")
def test_row_tiled_8_bit_int8_activations_need_groups_of_8():
    """8-bit row tiles with ``activation_quantization=int8`` and groups of 4 (x's quantization
    reads 8 values at a time) run the float tiles: float results, no ``vnni`` variant."""
    from builder.codegen.kernels.linear import int8_gemv_supported

    assert int8_gemv_supported("uint32", 8, 32, 256, row_tile=16)
    assert not int8_gemv_supported("uint32", 8, 4, 256, row_tile=16)
    assert not int8_gemv_supported("uint32", 8, 32, 256)          # row-major 8-bit: float activations
    f, odt, X, Q, S, _ = _quant_case(3, 32, 72, 8, 4, 127, "uint32", "float32", "float32", activation="int8",
                                     row_tile=16)
    kernel, lib = _build(f)
    assert kernel == f"linear/{HOST_SIMD.name}+tiles", kernel
    y = np.empty((3, 32), np.float32)
    lib["f"](X, _tiled(Q), _tiled(S), y)
    W = _group_weights(Q, S, "uint32", "float32", 4, 72, 8)
    ref = X.astype(np.float64) @ W.T.astype(np.float64)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


def test_row_tiled_weights_of_one_kernel_share_the_zero_point():
    """Two row-tiled weights in one kernel (gate / up) share x's int32 table of ``-zero_point *
    sum q`` and one decoding: weights with different zero points or bits are left to the generic
    loops, with the reason."""
    from builder.codegen.kernels.linear import plan_linear

    x = te.placeholder((te.var("b"), 64), "float32", name="x")
    for (b0, z0), (b1, z1), ok in (((4, 7), (4, 7), True), ((4, 7), (4, 8), False), ((4, 7), (8, 7), False),
                                   ((8, 127), (8, 127), True)):
        ts = [te.placeholder(shape, dt, name=n) for n, shape, dt in (
            ("q0", (2, 64 * b0 // 32, 16), "uint32"), ("s0", (2, 2, 16), "float32"),
            ("q1", (2, 64 * b1 // 32, 16), "uint32"), ("s1", (2, 2, 16), "float32"))]
        spec = []
        out = topi.linear_kernel(x, *ts, weights=[GroupWeight(1, 2, b0, 32, z0, 64, "int8", 16),
                                                  GroupWeight(3, 4, b1, 32, z1, 64, "int8", 16)],
                                 epilogue=_epilogue(("multiply", ("linear", 0), ("linear", 1))), spec=spec)
        f = te.create_prim_func([x, *ts, out])
        f.attrs[KERNEL_ATTR] = spec[0]
        plan = plan_linear(f, SimdInfo("avx2", 8, 16, int8_dot=True))
        if ok:
            assert not isinstance(plan, str) and plan.variant == "tiles", plan
        else:
            assert plan == ("row-tiled weights with different bits, zero points, group sizes or activations in "
                            "one kernel")


@pytest.mark.parametrize("cap,kernel", [("avx", "linear/avx+tiles"), ("scalar", "loops (linear: no vector unit")])
def test_row_tiled_int8_weights_without_avx2(cap, kernel, monkeypatch):
    """Without AVX2 (``MB_SIMD=avx``) row-tiled weights with int8 activations run the float tiles
    (float activations, as every int8-activation weight there), without vectors the generic loops,
    which read the tiles too: exact float results, at batch sizes of both paths."""
    monkeypatch.delenv("MB_SIMD_SHAPE", raising=False)
    monkeypatch.setenv("MB_SIMD", cap)
    lib = None
    for M in (3, 20):
        f, odt, X, Q, S, _ = _quant_case(M, 32, 100, 4, 32, 7, "uint32", "float16", "float32", seed=9 + M,
                                         activation="int8", row_tile=16)
        if lib is None:
            label, lib = _build(f)
            assert label.startswith(kernel), label
        y = np.empty((M, 32), np.float32)
        lib["f"](X, _tiled(Q), _tiled(S), y)
        W = _group_weights(Q, S, "uint32", "float16", 32, 100)
        exact = _as_f32(X, "float32").astype(np.float64) @ W.T.astype(np.float64)
        np.testing.assert_allclose(y, exact, rtol=2e-5, atol=2e-5 * np.abs(exact).max())


# ---------------------------------------------------------------------------------------------
# ISA fallbacks


def _x86_target(cpu: str, features: str) -> Target:
    return Target(HOST.triple, cpu, features)


#: The environment's testing hooks of :class:`SimdInfo` (they cap or emulate the vector unit of every target).
SIMD_HOOKS = ("MB_SIMD_EMULATE", "MB_SIMD_SHAPE", "MB_SIMD", "MB_SIMD_OFF")


@pytest.fixture
def own_features(monkeypatch):
    """The targets' own features: the SIMD testing hooks unset (a test that builds for a named
    target, or asserts the host's vector width, runs the same under ``MB_SIMD=avx2``)."""
    for hook in SIMD_HOOKS:
        monkeypatch.delenv(hook, raising=False)


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


# ---------------------------------------------------------------------------------------------
# FuseOps, row fusion, parallel loops


def test_llama_mlp_recipe_fuses_and_matches_numpy():
    import builder

    m = builder.build(ROOT / "recipes" / "llama_mlp.yaml",
                      ["dtype=float32", "hidden_size=72", "intermediate_size=200"])
    names = set(m.exe.kernels)
    assert names == {"fused_matmul_silu_multiply", "matmul"}, names
    wg, wu, wd = (m.params[n] for n in m.param_names)
    for b in (1, 6, 19):
        x = np.random.default_rng(b).standard_normal((b, 72), dtype=np.float32)
        ref = (_silu(x @ wg.T) * (x @ wu.T)) @ wd.T
        np.testing.assert_allclose(m(x), ref, rtol=1e-4, atol=1e-6)


def test_fuse_ops_patterns():
    from builder import nn
    from builder.transform import FuseOps, LegalizeOps, SelectKernels, Sequential

    class Block(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(16, 24, bias=True)
            self.fc2 = nn.Linear(24, 16, bias=False)

        def forward(self, x, r):
            h = nn.op.relu(self.fc(x))
            y = self.fc2(h) + r
            z = nn.op.silu(y) * y          # y used twice: an elementwise pattern, not fused into fc2
            return z

    mod = Block()
    spec = {"forward": {"x": nn.spec.Tensor(["n", 16], "float32"), "r": nn.spec.Tensor(["n", 16], "float32")}}
    irmod, params = mod.export_tvm(spec=spec)
    fused = Sequential([SelectKernels(), FuseOps(), LegalizeOps()])(irmod)
    prims = [n for n, f in fused.functions.items() if hasattr(f, "params") and KERNEL_ATTR in getattr(f, "attrs", {})]
    assert len(prims) == 2, list(fused.functions)
    rng = np.random.default_rng(0)
    for _, p in mod.named_parameters():
        p.data = rng.standard_normal(p.shape, dtype=np.float32)
    jit = mod.jit(spec=spec)
    x = rng.standard_normal((3, 16), dtype=np.float32)
    r = rng.standard_normal((3, 16), dtype=np.float32)
    pw = dict(mod.named_parameters())
    h = np.maximum(x @ pw["fc.weight"].data.T + pw["fc.bias"].data, 0)
    y = h @ pw["fc2.weight"].data.T + r
    np.testing.assert_allclose(jit(x, r), _silu(y) * y, rtol=1e-4, atol=1e-5)


def test_elementwise_chain_is_one_kernel():
    from builder import nn
    from builder.transform import FuseOps

    class Chain(nn.Module):
        def forward(self, a, b):
            return nn.op.silu(a) * b + a

    spec = {"forward": {"a": nn.spec.Tensor(["n", 8], "float32"), "b": nn.spec.Tensor([8], "float32")}}
    irmod, _ = Chain().export_tvm(spec=spec)
    fused = FuseOps()(irmod)
    prims = [n for n, f in fused.functions.items() if n != "forward"]
    assert len(prims) == 1 and prims[0].startswith("fused_"), prims
    jit = Chain().jit(spec=spec)
    a = np.random.default_rng(0).standard_normal((5, 8), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal(8, dtype=np.float32)
    np.testing.assert_allclose(jit(a, b), _silu(a) * b + a, rtol=1e-5, atol=1e-6)


def test_norm_and_softmax_make_one_pass_per_row():
    n = te.var("n")
    x = te.placeholder((n, 300), "float32", name="x")
    w = te.placeholder((300,), "float32", name="w")
    f = te.create_prim_func([x, w, topi.rms_norm(x, w, -1, 1e-5)])
    text = lower(schedule(f)).script()
    assert text.count("for i0 in T.parallel(n)") == 1, text
    g = te.create_prim_func([x, topi.softmax(x, -1)])
    assert lower(schedule(g)).script().count("for i0 in T.parallel(n)") == 1


@pytest.mark.parametrize("shape,axes,dtype", [
    ((1, 37, 50), (0, 2, 1), "float32"),       # NWC -> NCW, tails of both tiles
    ((2, 3, 20, 17), (0, 2, 3, 1), "float32"),  # NCHW -> NHWC
    ((2, 5, 18, 33), (0, 3, 1, 2), "float16"),  # NHWC -> NCHW: a dim between the two tiled ones
    ((33, 18), (1, 0), "int64"),
    ((3, 16, 32), (2, 1, 0), "float32"),        # exact tiles
])
def test_transposes_walk_tiles_and_match_numpy(shape, axes, dtype):
    """A permute whose innermost dim differs on the two sides runs in 16 x 16 tiles (the source's tiles
    outermost and parallel, a predicate past the ends); the result is numpy's transpose for odd sizes,
    16-bit and integer dtypes, symbolic dims, on one thread and on all. A permute keeping the last dim is
    left as it was (its rows are contiguous copies)."""
    names = [te.var(f"d{i}") for i in range(len(shape))]
    x = te.placeholder(names, dtype, name="x")
    f = te.create_prim_func([x, topi.permute_dims(x, list(axes))])
    text = lower(schedule(f)).script()
    assert "_o in T.parallel(" in text and "16, 16):" in text and "_i < " in text, text   # tiles, masked ends
    keep = te.placeholder((te.var("a"), te.var("b"), 8), "float32", name="k")
    assert "_o in T.parallel(" not in lower(schedule(te.create_prim_func([keep, topi.permute_dims(keep, [1, 0, 2])]))).script()
    lib = build({"t": f}).load()
    rng = np.random.default_rng(1)
    X = (rng.standard_normal(shape) * 100).astype(dtype)
    old = threadpool.get_num_threads()
    try:
        for nt in sorted({1, threadpool.pool_size()}):
            threadpool.set_num_threads(nt)
            y = np.zeros(tuple(shape[a] for a in axes), dtype)
            lib["t"](X, y)
            np.testing.assert_array_equal(y, np.transpose(X, axes))
    finally:
        threadpool.set_num_threads(old)


def test_batch_and_row_loops_are_fused_into_one_parallel_loop():
    """A norm over (batch, rows, C) splits batch x rows over the threads (a batch of 1 gave one
    thread every row: Whisper's LayerNorm over 1 x 1500 x 384); an elementwise nest keeps its
    innermost loop (vectorized) and fuses the two above it, unless its rows are shorter than
    FUSE_MIN_ROW_WORK; the values match numpy for a batch of 1 and of 3, on one thread and on all."""
    b, s = te.var("b"), te.var("s")
    x = te.placeholder((b, s, 96), "float32", name="x")
    w = te.placeholder((96,), "float32", name="w")
    bias = te.placeholder((96,), "float32", name="bias")
    f = te.create_prim_func([x, w, bias, topi.layer_norm(x, w, bias, [-1], 1e-5)])
    g = te.create_prim_func([x, topi.gelu(x)])
    for fn in (f, g):
        text = lower(schedule(fn)).script()
        assert text.count("for i0_i1_fused in T.parallel(b * s)") == 1, text
        assert "for i2 in T.serial(96)" in text, text
    n = te.var("n")
    x2 = te.placeholder((n, 96), "float32", name="x2")   # one row loop: nothing to fuse
    assert "for i0 in T.parallel(n)" in lower(schedule(te.create_prim_func([x2, topi.gelu(x2)]))).script()
    x3 = te.placeholder((b, s, 2), "float32", name="x3")   # rows of 2: a division per row would cost more
    assert "for i0 in T.parallel(b)" in lower(schedule(te.create_prim_func([x3, topi.gelu(x3)]))).script()
    lib = build({"ln": f}).load()
    rng = np.random.default_rng(0)
    W, B = rng.standard_normal(96, dtype=np.float32), rng.standard_normal(96, dtype=np.float32)
    old = threadpool.get_num_threads()
    try:
        for nt in sorted({1, threadpool.pool_size()}):
            threadpool.set_num_threads(nt)
            for shape in [(1, 1500, 96), (3, 7, 96), (1, 0, 96)]:
                X = rng.standard_normal(shape, dtype=np.float32)
                y = np.full_like(X, np.nan)
                lib["ln"](X, W, B, y)
                x64 = X.astype(np.float64)
                mean = x64.mean(-1, keepdims=True)
                ref = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * W + B
                np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    finally:
        threadpool.set_num_threads(old)


@pytest.mark.parametrize("rows", [1, 3, 200])
def test_parallel_rows_match_numpy_with_any_thread_count(rows):
    n = te.var("n")
    x = te.placeholder((n, 4096), "float32", name="x")
    w = te.placeholder((4096,), "float32", name="w")
    lib = build({"rms": te.create_prim_func([x, w, topi.rms_norm(x, w, -1, 1e-5)]),
                 "sm": te.create_prim_func([x, topi.softmax(x, -1)])}).load()
    rng = np.random.default_rng(rows)
    X = rng.standard_normal((rows, 4096), dtype=np.float32) * 3
    W = rng.standard_normal(4096, dtype=np.float32)
    ref = X / np.sqrt((X.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5) * W
    e = np.exp(X - X.max(-1, keepdims=True))
    sref = e / e.sum(-1, keepdims=True)
    old = threadpool.get_num_threads()
    try:
        for nt in sorted({1, threadpool.pool_size()}):
            threadpool.set_num_threads(nt)
            y, s = np.empty_like(X), np.empty_like(X)
            lib["rms"](X, W, y)
            lib["sm"](X, s)
            np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5)
            np.testing.assert_allclose(s, sref, rtol=2e-5, atol=1e-8)
    finally:
        threadpool.set_num_threads(old)


def test_fused_loop_with_cross_row_reads_is_not_fused():
    # the second stage reads column sums at another row: fusing would be wrong
    x = te.placeholder((6, 5), "float32", name="x")
    k = te.reduce_axis((0, 6), name="k")
    colsum = te.compute((5,), lambda j: te.sum(x[k, j], axis=k), name="colsum")
    y = te.compute((6, 5), lambda i, j: x[i, j] / colsum[j], name="y")
    f = te.create_prim_func([x, y])
    lib = build({"f": f}).load()
    X = np.random.default_rng(0).random((6, 5), dtype=np.float32) + 0.5
    Y = np.empty_like(X)
    lib["f"](X, Y)
    np.testing.assert_allclose(Y, X / X.sum(0), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# thread pool and cache


def test_thread_pool_from_several_python_threads():
    """Kernels called concurrently from Python threads (regions then run serially on their
    callers) give the same results as one at a time."""
    f, _ = _linear_func(256, 300, "float32", "float32", ("linear", 0))
    _, lib = _build(f)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((300, 256), dtype=np.float32)
    xs = [rng.standard_normal((m, 256), dtype=np.float32) for m in (1, 4, 20, 33)]
    outs = [np.empty((x.shape[0], 300), np.float32) for x in xs]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                lib["f"](xs[i], w, outs[i])
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y, x @ w.T, rtol=1e-4, atol=1e-4)


def test_set_num_threads_bounds():
    size = threadpool.pool_size()
    old = threadpool.set_num_threads(1)
    try:
        assert threadpool.get_num_threads() == 1
        threadpool.set_num_threads(10_000)
        assert threadpool.get_num_threads() == size
        with pytest.raises(ValueError):
            threadpool.set_num_threads(0)
    finally:
        threadpool.set_num_threads(old)


def test_object_cache_hit_and_corrupt_entry(tmp_path, monkeypatch):
    from builder.codegen import cache

    monkeypatch.setenv("MB_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("MB_CACHE", raising=False)
    f, _ = _linear_func(12, 7, "float32", "float32", ("linear", 0))
    first = build({"f": f})
    assert not first.cached
    second = build({"f": f})
    assert second.cached and second.object_code == first.object_code
    entries = list((tmp_path / "c").glob("*.mbo"))
    assert len(entries) == 1
    entries[0].write_bytes(entries[0].read_bytes()[:-10] + b"corrupted!")
    third = build({"f": f})
    assert not third.cached                 # ignored, rebuilt and rewritten
    assert build({"f": f}).cached
    x = np.ones((2, 12), np.float32)
    y = np.empty((2, 7), np.float32)
    third.load()["f"](x, np.ones((7, 12), np.float32), y)
    np.testing.assert_array_equal(y, 12.0)
    monkeypatch.setenv("MB_CACHE", "0")
    assert not build({"f": f}).cached
    assert cache.cache_dir() == tmp_path / "c"


def test_pool_survives_fork():
    """After fork the child has no workers; parallel regions run on the caller."""
    code = (
        "import os, numpy as np\n"
        "from builder import te\nfrom builder.te import topi\nfrom builder.codegen import build\n"
        "x = te.placeholder((te.var('n'), 4096), 'float32', name='x')\n"
        "lib = build({'sm': te.create_prim_func([x, topi.softmax(x, -1)])}).load()\n"
        "X = np.ones((64, 4096), np.float32); Y = np.empty_like(X)\n"
        "lib['sm'](X, Y)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    lib['sm'](X, Y); os._exit(0 if abs(Y.sum() - 64) < 1e-3 else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('ok' if os.WEXITSTATUS(status) == 0 else 'bad')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_cli_bench_flag(capsys):
    from builder.cli import main

    rc = main([str(ROOT / "recipes" / "llama_mlp.yaml"), "dtype=float32", "hidden_size=64",
               "intermediate_size=96", "--no-ir", "--bench", "3", "--bench-dim", "batch_size=4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "bench forward(x: (4, 64) float32): median" in out and "over 3 runs" in out
    assert main([str(ROOT / "recipes" / "llama_mlp.yaml"), "--no-ir", "--bench", "2",
                 "--bench-dim", "batch_size"]) == 1
    capsys.readouterr()
    assert main([str(ROOT / "recipes" / "llama_mlp.yaml"), "hidden_size=64", "intermediate_size=96",
                 "--no-ir", "--bench", "2", "--bench-dim", "batchsize=4"]) == 1
    assert "--bench-dim batchsize: not a symbolic dim of forward's inputs (batch_size)" in capsys.readouterr().err


def _python(code: str) -> str:
    """Run ``code`` in a fresh interpreter at the repository root (the benchmark module changes
    OpenBLAS's environment when imported); returns its stdout, failing on a non-zero exit."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_benchmark_measures_the_compute_peak():
    """``benchmarks/bench_mlp.py`` measures the float32 FMA (and, with AVX2, vpmaddubsw) peak
    with JIT-compiled chains, and puts compute-bound rows that miss a target against it."""
    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import bench_mlp\n"
            "peak, desc = bench_mlp.compute_peak(0.02)\n"
            "row = dict(format='float16', batch=128, ratio=0.9, target=0.8, numpy_ms=100.0, ours_ms=90.0,\n"
            "           alone_ms=90.0, gflops=120.0, np_gflops=108.0)\n"
            "print(json.dumps(peak)); print(desc); print(bench_mlp.verdict(row, 30.0, peak))")
    out = _python(code)
    peak = json.loads(out.splitlines()[0])
    assert all(v > 1 for v in peak["fma_gflops"].values())   # GFLOP/s: any vector FPU does more
    assert ("maddubs_gops" in peak) == HOST_SIMD.int8_dot
    assert "% of the measured float32 FMA peak of" in out and "MISSED (> 0.8)" in out


def test_benchmark_peak_and_target_with_avx512bf16(own_features):
    """On a CPU with AVX512-BF16 / VNNI the benchmark also measures the ``vdpbf16ps`` /
    ``vpdpbusd`` peaks (their chain loops compile for a Zen 5 target here; they run only there)
    and holds bfloat16 batch 128 to the issue's 0.5 when the ``+bf16dot`` kernels ran."""
    if not HOST.triple.startswith("x86_64"):
        pytest.skip("x86-64 only")
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import bench_mlp, llvmlite.binding as llvm\n"
            "from builder.codegen import Target\nfrom builder.codegen.kernels import SimdInfo\n"
            "t = Target('x86_64-unknown-linux-gnu', 'znver5', "
            "'+avx512f,+avx512bw,+avx512vl,+avx512bf16,+avx512vnni,+avx2,+fma,+f16c')\n"
            "text, kernels = bench_mlp.peak_ir(SimdInfo.from_target(t.triple, t.features))\n"
            "mod = llvm.parse_assembly(text); mod.verify(); asm = t.target_machine().emit_assembly(mod)\n"
            "print(sorted(kernels), asm.count('vdpbf16ps'), asm.count('vpdpbusd'))\n"
            "print(bench_mlp.target_for('bfloat16', 128, ['linear/avx512+bf16dot']),\n"
            "      bench_mlp.target_for('bfloat16', 128, ['linear/avx512']),\n"
            "      bench_mlp.target_for('bfloat16', 1, ['linear/avx512+bf16dot']))")
    lines = _python(code).splitlines()
    assert lines[0] == "['dpbf16_gflops', 'dpbusd_gops', 'fma_gflops', 'maddubs_gops'] 12 12"   # one per chain
    assert lines[1] == "0.5 0.8 0.55"


def test_benchmark_cache_sweep_sizes_from_the_l3(tmp_path):
    """``runtime.target.host_cache_bytes`` (and ``benchmarks/host.l3_bytes``) read a cache level's size
    from Linux's cache directory (``480M``, ``32768K``), skipping the other levels and the L1
    instruction cache; 0 for a level it does not list (where ``sysconf`` does not know either);
    bench_mlp's "alone" runs sweep twice the L3, at most 1 GiB."""
    from runtime.target import host_cache_bytes

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import host
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for i, (level, kind, size) in enumerate((("1", "Instruction", "32K"), ("1", "Data", "48K"),
                                             ("2", "Unified", "2048K"), ("3", "Unified", "480M"))):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    assert host.l3_bytes(tmp_path) == 480 << 20
    assert host_cache_bytes(1, tmp_path) == 48 << 10 and host_cache_bytes(2, tmp_path) == 2 << 20
    (tmp_path / "index3" / "size").write_text("32768K\n")
    assert host.l3_bytes(tmp_path) == 32 << 20
    empty = tmp_path / "none"
    empty.mkdir()
    assert host_cache_bytes(4, empty) == 0


def test_runtime_benchmark_measures_the_issue_limits():
    """``benchmarks/bench_runtime.py`` measures the tiny-call cost, the RMSNorm on 1 vs all
    threads and the recipe's cold / cached build (it checks the kernels' results itself);
    only the report's shape is asserted here, never a time."""
    out = subprocess.run([sys.executable, "benchmarks/bench_runtime.py", "--quick", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.splitlines()[-1])
    assert 0 < res["call"]["min_us"] <= res["call"]["median_us"] and res["call"]["limit_us"] == 20.0
    assert [r["batch"] for r in res["rmsnorm"]] == [1, 8, 64]
    assert all(r["one_thread_us"] > 0 and r["all_threads_us"] > 0 for r in res["rmsnorm"])
    assert 0 < res["build"]["cold_export_s"] < res["build"]["cold_s"]
    assert res["build"]["cached_s"] > 0 and res["build"]["limit_s"] == 1.0
    assert "call overhead" in out.stdout and "RMSNorm 4096 wide" in out.stdout


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
