"""Correctness of the float linear kernels (never timed): dense GEMV / GEMM with float32, float16 and
bfloat16 weights and activations, every epilogue (gated MLP, bias, residual, GELU), row chunks through
every panel, shapes that are not multiples of the tile sizes, batch 1 and symbolic batch, zero rows
and zero K; a shape mismatch is an error, not a crash. Checked against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from builder.codegen.kernels.linear import TUNING
from runtime import threadpool

from helpers.linear_kernels import check_gated as _check_gated
from helpers.linear_kernels import linear_func as _linear_func
from helpers.linear_cases import HOST_SIMD
from helpers.linear_cases import as_f32 as _as_f32
from helpers.linear_cases import from_f32 as _from_f32
from helpers.linear_cases import np_dtype as _np_dtype
from helpers.linear_cases import tol as _tol
from helpers.linear_cases import build_kernel as _build

pytestmark = pytest.mark.usefixtures("private_object_cache")   # tests/helpers/fixtures.py


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
